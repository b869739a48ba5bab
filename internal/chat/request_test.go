package chat

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

func TestDecode(t *testing.T) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfake"))
	for _, c := range []struct {
		name, body string
		code       string // empty: valid
		param      string
		check      func(t *testing.T, r Request)
	}{
		{name: "one user message is the prompt", body: `{"model":"svc-unify","messages":[{"role":"user","content":"hi"}],"unknown":1}`,
			check: func(t *testing.T, r Request) {
				if r.Mode != "unify" || r.Prompt != "hi" {
					t.Errorf("got mode %q prompt %q", r.Mode, r.Prompt)
				}
			}},
		{name: "conversation", body: `{"model":"svc-justify","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,
			"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Weather?"}]},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"12 C"}],
			"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],"tool_choice":"auto",
			"crosscheck":{"models":{"provider_a":"sim-alpha-standard"}}}`,
			check: func(t *testing.T, r Request) {
				for _, want := range []string{"Instructions:\nBe brief.", "User: Weather?", "get_weather", "call_1", "Continue from this tool result (call id call_1):\n12 C"} {
					if !strings.Contains(r.Prompt, want) {
						t.Errorf("prompt lacks %q:\n%s", want, r.Prompt)
					}
				}
				if !r.Stream || !r.IncludeUsage || r.MaxTokens != 5 || len(r.Tools) != 1 || r.ToolChoice != "auto" || r.Mode != "justify" {
					t.Errorf("got %+v", r)
				}
				var q map[string]any
				if err := json.Unmarshal(r.QueryBody(nil), &q); err != nil || q["models"] == nil || q["mode"] != "justify" {
					t.Errorf("query body %v %v", q, err)
				}
			}},
		{name: "files", body: `{"model":"svc-verify","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"file","file":{"file_id":"file_1"}},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png + `"}}]}]}`,
			check: func(t *testing.T, r Request) {
				if len(r.Files) != 1 || r.Files[0] != "file_1" || len(r.Inline) != 1 || r.Inline[0].Name != "image-1.png" {
					t.Errorf("files %v inline %+v", r.Files, r.Inline)
				}
			}},
		{name: "an image whose data URL names another image type", body: `{"model":"svc-unify","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + png + `"}}]}]}`,
			check: func(t *testing.T, r Request) {
				if len(r.Inline) != 1 || r.Inline[0].Name != "image-1.png" {
					t.Errorf("inline %+v, want the image named by its content", r.Inline)
				}
			}},
		{name: "an assistant's refusal part", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"refusal","refusal":"I cannot help with that."}]},{"role":"user","content":"b"}]}`,
			check: func(t *testing.T, r Request) {
				if !strings.Contains(r.Prompt, "I cannot help with that.") {
					t.Errorf("prompt %q", r.Prompt)
				}
			}},
		{name: "a file attached again in a later turn", body: `{"model":"svc-unify","messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"file","file":{"file_id":"file_1"}}]},{"role":"assistant","content":"seen"},{"role":"user","content":[{"type":"text","text":"again"},{"type":"file","file":{"file_id":"file_1"}}]}]}`,
			check: func(t *testing.T, r Request) {
				if len(r.Files) != 1 || r.Files[0] != "file_1" {
					t.Errorf("files %v, want file_1 once", r.Files)
				}
			}},
		{name: "unknown model", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, code: apperr.ModelNotFound, param: "model"},
		{name: "no model", body: `{"messages":[{"role":"user","content":"hi"}]}`, code: apperr.InvalidRequest, param: "model"},
		{name: "not an object", body: `[1]`, code: apperr.InvalidRequest},
		{name: "two objects", body: `{"model":"svc-unify"} {}`, code: apperr.InvalidRequest},
		{name: "no messages", body: `{"model":"svc-unify","messages":[]}`, code: apperr.InvalidRequest, param: "messages"},
		{name: "last from assistant", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, code: apperr.InvalidPrompt, param: "messages"},
		{name: "bad role", body: `{"model":"svc-unify","messages":[{"role":"robot","content":"a"}]}`, code: apperr.InvalidRequest, param: "messages[0].role"},
		{name: "web image", body: `{"model":"svc-unify","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`, code: apperr.InvalidRequest, param: "messages[0].content[0].image_url.url"},
		{name: "tool without id", body: `{"model":"svc-unify","messages":[{"role":"tool","content":"a"}]}`, code: apperr.InvalidRequest, param: "messages[0].tool_call_id"},
		{name: "bad tool", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, code: apperr.InvalidRequest, param: "tools[0].function.name"},
		{name: "choice of no tool", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"tool_choice":{"type":"function","function":{"name":"x"}}}`, code: apperr.InvalidRequest, param: "tool_choice"},
		{name: "temperature", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"temperature":3}`, code: apperr.InvalidRequest, param: "temperature"},
		{name: "the fields OpenAI's own shape allows", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"n":1,"logprobs":false,"top_logprobs":0,"response_format":{"type":"text"},"parallel_tool_calls":false,"stream":false,"stream_options":null}`,
			check: func(t *testing.T, r Request) {
				if !r.OneToolCall {
					t.Errorf("parallel_tool_calls false: got %+v", r)
				}
			}},
		{name: "n of two", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"n":2}`, code: apperr.InvalidRequest, param: "n"},
		{name: "logprobs", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"logprobs":true}`, code: apperr.InvalidRequest, param: "logprobs"},
		{name: "top logprobs", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"top_logprobs":3}`, code: apperr.InvalidRequest, param: "top_logprobs"},
		{name: "JSON mode", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_object"}}`, code: apperr.InvalidRequest, param: "response_format"},
		{name: "a JSON schema", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, code: apperr.InvalidRequest, param: "response_format"},
		{name: "stream options without a stream", body: `{"model":"svc-unify","messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":true}}`, code: apperr.InvalidRequest, param: "stream_options"},
		{name: "prompt too long", body: `{"model":"svc-unify","messages":[{"role":"user","content":"` + strings.Repeat("a", MaxPromptBytes+1) + `"}]}`, code: apperr.InvalidPrompt, param: "messages"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := Decode([]byte(c.body))
			if c.code == "" {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				c.check(t, r)
				return
			}
			var e *apperr.Error
			if !errors.As(err, &e) || e.Code != c.code || e.Param != c.param {
				t.Fatalf("got %v (param %q), want %s with param %q", err, paramOf(err), c.code, c.param)
			}
		})
	}
}

func paramOf(err error) string {
	var e *apperr.Error
	if errors.As(err, &e) {
		return e.Param
	}
	return ""
}

func TestPiecesJoinToTheText(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("word ", 40), strings.Repeat("é", 100), strings.Repeat("x", 200)} {
		ps := Pieces(s, 16)
		if strings.Join(ps, "") != s {
			t.Errorf("pieces of %q do not join to it", s)
		}
		for _, p := range ps {
			if !utf8.ValidString(p) {
				t.Errorf("piece %q is not valid UTF-8", p)
			}
		}
	}
}

// FuzzDecode: any body decodes to a valid request or to an application
// error with a code, and never panics; a valid request's prompt is within
// its bound and its query body is JSON.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"model":"svc-unify","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"svc-justify","stream":true,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"q"},{"type":"file","file":{"file_id":"file_1"}}]}]}`,
		`{"model":"svc-verify","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}]}`,
		`{"model":"svc-unify","messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
		`{"model":"x"}`, `[]`, `null`, `{"model":"svc-unify","messages":[{"role":"user","content":{"a":1}}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Decode(body)
		if err != nil {
			var e *apperr.Error
			if !errors.As(err, &e) || e.Code == "" || e.Code == apperr.Internal {
				t.Fatalf("error without an application code: %v", err)
			}
			return
		}
		if _, ok := ModeOf(r.Model); !ok || len(r.Prompt) > MaxPromptBytes || strings.TrimSpace(r.Prompt) == "" {
			t.Fatalf("accepted %q: model %q, prompt of %d bytes", body, r.Model, len(r.Prompt))
		}
		if !json.Valid(r.QueryBody(r.Files)) {
			t.Fatalf("query body is not JSON")
		}
	})
}

// TestOversizedPartsRefusedBeforeDecoding: a body whose tools, messages or
// content parts already break a bound by their size or count is refused
// before any of them is decoded: 128 tools of 60 KB took 2.41 s to refuse
// (they were decoded whole, schema by schema, then refused by the query's
// 64 KB bound), 100k messages 0.81 s. The work is measured here in
// allocations, which grow with what is decoded.
func TestOversizedPartsRefusedBeforeDecoding(t *testing.T) {
	schema := `{"type":"object","properties":{` + strings.Repeat(`"p":{"type":"string","description":"xxxxxxxxxxxxxxxx"},`, 1000) + `"q":{"type":"string"}}}`
	var tools []string
	for i := range MaxTools {
		tools = append(tools, `{"type":"function","function":{"name":"t`+strings.Repeat("x", i%7)+string(rune('a'+i%26))+`","parameters":`+schema+`}}`)
	}
	user := `{"role":"user","content":"hi"}`
	part := `{"type":"text","text":"a"}`
	for _, c := range []struct {
		name, body, param string
		maxAllocs         float64
	}{
		{"tools over their bytes", `{"model":"svc-unify","messages":[` + user + `],"tools":[` + strings.Join(tools, ",") + `]}`, "tools", 200},
		{"too many messages", `{"model":"svc-unify","messages":[` + strings.Repeat(user+",", 100000) + user + `]}`, "messages", 2000},
		{"too many parts", `{"model":"svc-unify","messages":[{"role":"user","content":[` + strings.Repeat(part+",", 100000) + part + `]}]}`, "messages[0].content", 2000},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(c.body)
			_, err := Decode(body)
			var ae *apperr.Error
			if !errors.As(err, &ae) || ae.Code != apperr.InvalidRequest || ae.Param != c.param {
				t.Fatalf("Decode of %d bytes: %v; want invalid_request on %s", len(body), err, c.param)
			}
			if allocs := testing.AllocsPerRun(2, func() { _, _ = Decode(body) }); allocs > c.maxAllocs {
				t.Fatalf("refusing %d bytes took %.0f allocations; want at most %.0f", len(body), allocs, c.maxAllocs)
			}
		})
	}
}
