package handlers

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

// FuzzCheckUTF8: a body passes exactly when it is valid UTF-8; a refusal is
// invalid_prompt only when the prompt's own bytes are invalid, and its
// message never carries the body.
func FuzzCheckUTF8(f *testing.F) {
	f.Add([]byte(`{"mode":"unify","prompt":"café"}`))
	f.Add([]byte("{\"mode\":\"unify\",\"prompt\":\"caf\xe9\"}"))
	f.Add([]byte("{\"mode\":\"\xff\",\"prompt\":\"ok\"}"))
	f.Add([]byte("\xed\xa0\x80"))
	f.Fuzz(func(t *testing.T, body []byte) {
		err := checkUTF8(body)
		if (err == nil) != utf8.Valid(body) {
			t.Fatalf("checkUTF8(%q) = %v; valid UTF-8: %v", body, err, utf8.Valid(body))
		}
		if err == nil {
			return
		}
		var v struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		inPrompt := json.Unmarshal(body, &v) == nil && !utf8.Valid(v.Prompt)
		if code := apperr.Code(err); (code == apperr.InvalidPrompt) != inPrompt || (code != apperr.InvalidPrompt && code != apperr.InvalidRequest) {
			t.Fatalf("checkUTF8(%q): code %s; invalid bytes in the prompt: %v", body, code, inPrompt)
		}
		if !utf8.ValidString(apperr.From(err).Message) {
			t.Fatalf("the message is not valid UTF-8: %q", apperr.From(err).Message)
		}
	})
}
