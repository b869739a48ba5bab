package openaicompat

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/contract"
	"github.com/crosscheck/crosscheck/internal/providers/openai/openaitest"
)

const testKey = "gsk-test-0123456789abcdef"

// Fixture-only kinds, beyond the contract's.
const (
	kindFiltered = "content_filter" // finish_reason content_filter
	kindRaw      = "raw"            // Status with Text as the body, verbatim
)

// upstream is a fake Chat Completions host.
type upstream struct {
	*contract.Script
	srv *httptest.Server
	key string
}

func newUpstream(t *testing.T, key string) *upstream {
	u := &upstream{key: key}
	u.srv = httptest.NewServer(u)
	t.Cleanup(u.srv.Close)
	u.Script = contract.NewScript(t)
	return u
}

var _ contract.Fixture = (*upstream)(nil)

func (u *upstream) Provider(*testing.T) providers.Provider {
	return New(Config{APIKey: u.key, BaseURL: u.srv.URL + "/v1", HTTPClient: u.srv.Client()})
}

func (u *upstream) Supports(string) bool { return true }
func (u *upstream) Citations() bool      { return false }
func (u *upstream) Wire() string         { return contract.WireChat }

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := u.Receive(r)

	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		openaitest.WriteError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path, 0)
		return
	}
	switch s.Kind {
	case contract.KindHuge:
		contract.WriteHuge(w)
	case contract.KindStall:
		select {
		case <-r.Context().Done():
		case <-u.Done:
		}
	case contract.KindStatus:
		if s.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s.Status)
			_, _ = io.WriteString(w, s.Body)
			return
		}
		openaitest.WriteError(w, s.Status, s.Message, s.RetryAfter)
	case kindRaw:
		if strings.HasPrefix(s.Text, "{") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(s.Status)
		_, _ = io.WriteString(w, s.Text)
	case contract.KindJSON:
		openaitest.WriteJSON(w, completion(s.JSON, nil, "stop", s.Usage))
	case contract.KindCut:
		content := s.Text
		if u.LastBody()["response_format"] != nil && s.JSON != "" {
			content = s.JSON
		}
		openaitest.WriteJSON(w, completion(content, nil, "length", s.Usage))
	case contract.KindToolCall:
		body := u.LastBody()
		tools, _ := body["tools"].([]any)
		for _, c := range s.ToolCalls {
			found := false
			for _, t := range tools {
				m, _ := t.(map[string]any)
				fn, _ := m["function"].(map[string]any)
				params, _ := fn["parameters"].(map[string]any)
				found = found || m["type"] == "function" && fn["name"] == c.Name && params["type"] == "object"
			}
			if !found || body["tool_choice"] == nil {
				openaitest.WriteError(w, http.StatusBadRequest, "the request does not offer the function tool "+c.Name+" with a tool_choice", 0)
				return
			}
		}
		res := completion("", nil, "tool_calls", s.Usage)
		msg := res["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		msg["content"] = nil
		var calls []any
		for _, c := range s.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
		openaitest.WriteJSON(w, res)
	case kindFiltered:
		openaitest.WriteJSON(w, completion(s.Text, nil, "content_filter", s.Usage))
	case contract.KindRefusal:
		openaitest.WriteJSON(w, completion("", s.Text, "stop", s.Usage))
	default: // contract.KindAnswer
		res := completion(s.Text, nil, "stop", s.Usage)
		if s.NoUsage {
			delete(res, "usage")
		}
		openaitest.WriteJSON(w, res)
	}
}

// completion is a chat.completion object.
func completion(content string, refusal any, finish string, usage events.Usage) map[string]any {
	var c any = content
	if refusal != nil {
		c = nil
	}
	return map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1741569952, "model": "mistral-small-latest",
		"choices": []any{map[string]any{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": c, "refusal": refusal, "annotations": []any{}},
			"logprobs":      nil,
			"finish_reason": finish,
		}},
		"usage": map[string]any{
			"prompt_tokens": usage.InputTokens, "completion_tokens": usage.OutputTokens,
			"total_tokens":          usage.InputTokens + usage.OutputTokens,
			"prompt_tokens_details": map[string]any{"cached_tokens": 0},
		},
		"system_fingerprint": "fp_1",
	}
}

func ask(text string) *providers.Request {
	return &providers.Request{Model: "mistral-small-latest", Messages: []providers.Message{{Role: providers.RoleUser, Content: text}}}
}

func jsonEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	return reflect.DeepEqual(got, w)
}

func TestContract(t *testing.T) { contract.Run(t, newUpstream(t, testKey)) }

func setHostileEnvironment(t *testing.T) (decoyHits func() int) {
	var mu sync.Mutex
	var hits int
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(decoy.Close)
	t.Setenv("OPENAI_API_KEY", "other")
	t.Setenv("OPENAI_BASE_URL", decoy.URL+"/v1")
	t.Setenv("OPENAI_ADMIN_KEY", "admin-other")
	t.Setenv("OPENAI_ORG_ID", "org-other")
	t.Setenv("OPENAI_PROJECT_ID", "proj-other")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Injected: yes\nAuthorization: Bearer injected")
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return hits
	}
}

func TestCredentialsIgnoreEnvironment(t *testing.T) {
	decoyHits := setHostileEnvironment(t)
	u := newUpstream(t, testKey)
	u.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "hi", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	if _, err := u.Provider(t).Complete(context.Background(), ask("x")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := u.Last(t)
	if a := got.Header.Values("Authorization"); len(a) != 1 || a[0] != "Bearer "+testKey {
		t.Errorf("Authorization %q, want the configured key only", a)
	}
	for _, h := range []string{"OpenAI-Organization", "OpenAI-Project", "X-Injected"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("%s: %q leaked from the environment", h, v)
		}
	}
	if got.Method != http.MethodPost || got.Path != "/v1/chat/completions" {
		t.Errorf("request %s %s, want POST /v1/chat/completions", got.Method, got.Path)
	}
	if n := decoyHits(); n != 0 {
		t.Errorf("OPENAI_BASE_URL received %d requests", n)
	}
}

func TestEmptyKeySendsNoAuthorization(t *testing.T) {
	setHostileEnvironment(t)
	u := newUpstream(t, "")
	u.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "local answer", Usage: events.Usage{InputTokens: 2, OutputTokens: 3}})
	resp, err := u.Provider(t).Complete(context.Background(), ask("x"))
	if err != nil || resp.Text != "local answer" {
		t.Fatalf("Complete: %q, %v", resp.Text, err)
	}
	if a := u.Last(t).Header.Values("Authorization"); len(a) != 0 {
		t.Errorf("Authorization %q sent with an empty key", a)
	}
}

func TestMissingBaseURL(t *testing.T) {
	_, err := New(Config{APIKey: testKey}).Complete(context.Background(), ask("x"))
	if e := providers.Classify(err); e.Class != providers.ClassHostError || e.Retriable() {
		t.Fatalf("err %v, want a host_error that is not retried", err)
	}
}

func TestRequestShapeAndStructuredOutput(t *testing.T) {
	u := newUpstream(t, testKey)
	schema := `{"type":"object","required":["zeta","alpha"],"properties":{"zeta":{"type":"string"},"alpha":{"type":"array","items":{"type":"string"}}},"additionalProperties":false}`
	u.Play(contract.Scenario{Kind: contract.KindJSON, JSON: `{"zeta":"z","alpha":[]}`, Usage: events.Usage{InputTokens: 50, OutputTokens: 10}})
	req := providers.Request{
		Model: "mistral-small-latest",
		Messages: []providers.Message{
			{Role: providers.RoleSystem, Content: "Be brief."},
			{Role: providers.RoleUser, Content: "q1"},
			{Role: providers.RoleAssistant, Content: "a1"},
			{Role: providers.RoleUser, Content: "q2"},
		},
		Schema:          &providers.Schema{Name: "synthesis", JSON: json.RawMessage(schema)},
		MaxOutputTokens: 256,
	}
	resp, err := (&providers.Structured{Provider: u.Provider(t)}).Complete(context.Background(), &req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if string(resp.JSON) != `{"zeta":"z","alpha":[]}` || resp.Text != string(resp.JSON) {
		t.Errorf("JSON %s text %q, want the upstream's object in both", resp.JSON, resp.Text)
	}
	if resp.Usage != (events.Usage{InputTokens: 50, OutputTokens: 10}) || resp.Latency <= 0 {
		t.Errorf("usage %+v latency %s", resp.Usage, resp.Latency)
	}
	got := u.Last(t)
	b := got.Body
	if b["model"] != "mistral-small-latest" || b["max_tokens"] != 256.0 {
		t.Errorf("model %v max_tokens %v", b["model"], b["max_tokens"])
	}
	if !jsonEqual(t, b["messages"], `[{"role":"system","content":"Be brief."},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"}]`) {
		t.Errorf("messages %v", b["messages"])
	}
	want := `{"type":"json_schema","json_schema":{"name":"synthesis","strict":true,"schema":` + schema + `}}`
	if !jsonEqual(t, b["response_format"], want) {
		t.Errorf("response_format %v\nwant %s", b["response_format"], want)
	}
	if !strings.Contains(got.Raw, `"properties":{"zeta":{"type":"string"},"alpha":`) {
		t.Errorf("body %s: want the schema's properties in their order", got.Raw)
	}
}

func TestFencedJSONIsAccepted(t *testing.T) {
	u := newUpstream(t, "")
	u.Play(contract.Scenario{Kind: contract.KindJSON, JSON: "```json\n{\"answer\":\"a\"}\n```", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	req := ask("x")
	req.Schema = &providers.Schema{Name: "s", JSON: json.RawMessage(`{"type":"object"}`)}
	structured := &providers.Structured{Provider: u.Provider(t)}
	resp, err := structured.Complete(context.Background(), req)
	if err != nil || string(resp.JSON) != `{"answer":"a"}` {
		t.Fatalf("JSON %s err %v", resp.JSON, err)
	}
	u.Play(contract.Scenario{Kind: contract.KindJSON, JSON: `{"answer":`, Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	if _, err := structured.Complete(context.Background(), req); providers.Classify(err).Class != providers.ClassNotJSON {
		t.Fatalf("err %v, want not_json for broken JSON", err)
	}
}

func TestAttachments(t *testing.T) {
	u := newUpstream(t, testKey)
	u.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "seen", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	jpg := []byte("\xff\xd8\xff\xe0fake")
	pdf := []byte("%PDF-1.7 secret pdf bytes")
	req := providers.Request{
		Model: "pixtral-12b",
		Messages: []providers.Message{
			{Role: providers.RoleUser, Content: "first"},
			{Role: providers.RoleAssistant, Content: "ok"},
			{Role: providers.RoleUser, Content: "look at these"},
		},
		Attachments: []providers.Attachment{
			{Name: "photo.jpg", MediaType: "image/jpeg", Data: jpg},
			{Name: "report.pdf", MediaType: "application/pdf", Data: pdf},
			{Name: "notes.md", MediaType: "text/markdown", Data: []byte("# the notes")},
		},
	}
	if _, err := u.Provider(t).Complete(context.Background(), &req); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := u.Last(t)
	msgs, _ := got.Body["messages"].([]any)
	if len(msgs) != 3 || msgs[0].(map[string]any)["content"] != "first" {
		t.Fatalf("messages %v: want three, attachments only on the last user one", msgs)
	}
	parts, _ := msgs[2].(map[string]any)["content"].([]any)
	want := fmt.Sprintf(`[
		{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,%s"}},
		{"type":"text","text":"[A PDF named \"report.pdf\" was attached, but it could not be read natively here.]"},
		{"type":"text","text":"File notes.md:\n# the notes"},
		{"type":"text","text":"look at these"}]`, base64.StdEncoding.EncodeToString(jpg))
	if !jsonEqual(t, parts, want) {
		b, _ := json.Marshal(parts)
		t.Errorf("last user content %s\nwant %s", b, want)
	}
	if strings.Contains(got.Raw, base64.StdEncoding.EncodeToString(pdf)) {
		t.Error("the PDF's bytes were sent")
	}
}

func TestWebSearchIsIgnored(t *testing.T) {
	u := newUpstream(t, testKey)
	u.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "8,849 m", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	req := ask("How tall is Everest?")
	req.WebSearch = true
	resp, err := u.Provider(t).Complete(context.Background(), req)
	if err != nil || resp.Text != "8,849 m" || resp.Citations != nil {
		t.Fatalf("resp %+v err %v", resp, err)
	}
	b := u.Last(t).Body
	for _, k := range []string{"tools", "web_search_options"} {
		if _, ok := b[k]; ok {
			t.Errorf("%s sent: %v", k, b[k])
		}
	}
}

func TestErrorClasses(t *testing.T) {
	u := newUpstream(t, testKey)
	for _, c := range []struct {
		status     int
		retryAfter time.Duration
		class      string
	}{
		{401, 0, providers.ClassHostError},
		{403, 0, providers.ClassHostError},
		{408, 0, providers.ClassTimeout},
		{422, 0, providers.ClassHostError},
		{429, 1500 * time.Millisecond, providers.ClassRateLimited},
		{503, 2 * time.Second, providers.ClassHostError},
	} {
		u.Play(contract.Scenario{Kind: contract.KindStatus, Status: c.status, RetryAfter: c.retryAfter, Message: "key " + testKey + " rejected"})
		_, err := u.Provider(t).Complete(context.Background(), ask("x"))
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != c.class || pe.Status != c.status || pe.RetryAfter != c.retryAfter {
			t.Errorf("%d: err %#v, want class %s retry-after %s", c.status, err, c.class, c.retryAfter)
			continue
		}
		if strings.Contains(err.Error(), testKey) || !strings.Contains(pe.Message, "rejected") {
			t.Errorf("%d: message %q: want the upstream's message without the key", c.status, pe.Message)
		}
	}
}

// Compatible hosts do not all use OpenAI's error body; the status must still
// decide the class.
func TestForeignErrorBodies(t *testing.T) {
	u := newUpstream(t, testKey)
	for _, c := range []struct {
		name, body, class, msg string
		status                 int
	}{
		{"mistral", `{"object":"error","message":"Invalid model: x","type":"invalid_model","param":null,"code":"1500"}`, providers.ClassHostError, "Invalid model: x", 400},
		{"ollama", `{"error":"model \"x\" not found, try pulling it first"}`, providers.ClassHostError, "not found", 404},
		{"fastapi", `{"detail":"Unauthorized"}`, providers.ClassHostError, "Unauthorized", 401},
		{"plain text", `Bad Gateway`, providers.ClassHostError, "Bad Gateway", 502},
		{"empty", ``, providers.ClassRateLimited, "Too Many Requests", 429},
	} {
		u.Play(contract.Scenario{Kind: kindRaw, Status: c.status, Text: c.body})
		_, err := u.Provider(t).Complete(context.Background(), ask("x"))
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != c.class || pe.Status != c.status || !strings.Contains(pe.Message, c.msg) {
			t.Errorf("%s: err %v, want %s with status %d and message %q", c.name, err, c.class, c.status, c.msg)
		}
	}
}

func TestErrorInOKBody(t *testing.T) {
	u := newUpstream(t, testKey)
	u.Play(contract.Scenario{Kind: kindRaw, Status: 200, Text: `{"error":{"message":"Rate limit exceeded: free-models-per-day","code":429}}`})
	_, err := u.Provider(t).Complete(context.Background(), ask("x"))
	if e := providers.Classify(err); e.Class != providers.ClassRateLimited || !strings.Contains(e.Message, "free-models") {
		t.Fatalf("err %v, want rate_limited", err)
	}
}

func TestContentFiltered(t *testing.T) {
	u := newUpstream(t, testKey)
	for _, s := range []contract.Scenario{
		{Kind: kindFiltered, Text: "partial"},
		{Kind: contract.KindRefusal, Text: "I can't help with that."},
	} {
		u.Play(s)
		_, err := u.Provider(t).Complete(context.Background(), ask("x"))
		if providers.Classify(err).Class != providers.ClassRefused {
			t.Errorf("%s: err %v, want refused", s.Kind, err)
		}
	}
}

func TestDeadlineIsTimeout(t *testing.T) {
	u := newUpstream(t, testKey)
	u.Play(contract.Scenario{Kind: contract.KindStall})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := u.Provider(t).Complete(ctx, ask("x"))
	if !errors.Is(err, context.DeadlineExceeded) || providers.Classify(err).Class != providers.ClassTimeout || u.Requests() != 1 {
		t.Fatalf("err %v after %d requests, want the deadline after one", err, u.Requests())
	}
}
