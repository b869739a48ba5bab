package queries

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
)

var unifyOnly = map[string]bool{events.ModeUnify: true}

func TestDecodeHashIgnoresFormatting(t *testing.T) {
	cat := catalog.Simulated()
	a, err := Decode([]byte(`{"mode":"unify","prompt":"p","models":{"provider_b":"sim-beta-standard","provider_a":null}}`), cat, unifyOnly)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode([]byte("{ \"models\": {\"provider_a\": null, \"provider_b\": \"sim-beta-standard\"},\n \"prompt\": \"p\", \"mode\": \"unify\" }"), cat, unifyOnly)
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() {
		t.Fatal("the same request in another layout hashes differently")
	}
	c, _ := Decode([]byte(`{"mode":"unify","prompt":"p2","models":{"provider_b":"sim-beta-standard"}}`), cat, unifyOnly)
	if c.Hash() == a.Hash() {
		t.Fatal("different prompts hash the same")
	}
}

func TestDecodeModeAvailability(t *testing.T) {
	_, err := Decode([]byte(`{"mode":"verify","prompt":"p"}`), catalog.Simulated(), unifyOnly)
	if apperr.Code(err) != apperr.InvalidMode || !strings.Contains(err.Error(), "not available") {
		t.Fatalf("verify on a unify-only server: %v", err)
	}
}

func TestDecodePromptLimitIsBytes(t *testing.T) {
	cat := catalog.Simulated()
	exact := strings.Repeat("é", MaxPromptBytes/2) // 2 bytes each: exactly 32 KB
	if _, err := Decode([]byte(`{"mode":"unify","prompt":"`+exact+`"}`), cat, unifyOnly); err != nil {
		t.Fatalf("prompt of exactly %d bytes rejected: %v", MaxPromptBytes, err)
	}
	over := exact + "a"
	if _, err := Decode([]byte(`{"mode":"unify","prompt":"`+over+`"}`), cat, unifyOnly); apperr.Code(err) != apperr.InvalidPrompt {
		t.Fatalf("prompt of %d bytes: %v", len(over), err)
	}
}

var validCodes = map[string]bool{
	apperr.InvalidRequest: true, apperr.InvalidPrompt: true, apperr.InvalidMode: true,
	apperr.InvalidModels: true, apperr.InvalidModel: true,
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"mode":"unify","prompt":"hello"}`,
		`{"mode":"unify","prompt":"x","models":{"provider_a":"sim-alpha-pro","provider_b":null}}`,
		`{"mode":"justify","prompt":"x","custom_models":["byom_1"]}`,
		`{"mode":"unify","prompt":"x","models":{}}`,
		`{"mode":"unify","prompt":"x","tools":[{"name":"get_weather","description":"d","parameters":{"type":"object"}}],"tool_choice":"get_weather"}`,
		`{"mode":"unify","prompt":"x","tools":[{"name":"a"},{"name":"a"}],"tool_choice":"required"}`,
		`[]`, `null`, `{"mode":1}`, `{"prompt":"\u0000"}`, `{"mode":"unify","prompt":"x"} trailing`,
	} {
		f.Add([]byte(s))
	}
	cat := catalog.Simulated()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Decode(body, cat, unifyOnly)
		if err != nil {
			var ae *apperr.Error
			if !errors.As(err, &ae) || !validCodes[ae.Code] {
				t.Fatalf("error is not a validation error of the contract: %#v", err)
			}
			if ae.Message == "" || !utf8.ValidString(ae.Message) {
				t.Fatalf("error message empty or not UTF-8: %q", ae.Message)
			}
			return
		}
		if req.Mode != events.ModeUnify || strings.TrimSpace(req.Prompt) == "" || len(req.Prompt) > MaxPromptBytes {
			t.Fatalf("accepted an invalid request: mode %q, prompt %d bytes", req.Mode, len(req.Prompt))
		}
		if len(req.Selected) == 0 || len(req.Selected) > len(cat.Providers) {
			t.Fatalf("accepted %d selected models", len(req.Selected))
		}
		for _, m := range req.Selected {
			if _, ok := cat.Model(m.Provider, m.ModelID); !ok {
				t.Fatalf("accepted model %s/%s not in the catalog", m.Provider, m.ModelID)
			}
		}
		if req.Hash() == "" {
			t.Fatal("empty hash")
		}
	})
}
