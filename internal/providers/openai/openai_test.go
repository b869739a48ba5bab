package openai

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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

const testKey = "sk-test-0123456789abcdef"

// Fixture-only kinds, beyond the contract's.
const (
	kindFiltered = "content_filter" // status incomplete, reason content_filter
	kindFailed   = "failed"         // status failed; Message is the error, Text the code
)

// upstream is a fake Responses API.
type upstream struct {
	*contract.Script
	srv *httptest.Server
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(u)
	t.Cleanup(u.srv.Close)
	u.Script = contract.NewScript(t)
	return u
}

var _ contract.Fixture = (*upstream)(nil)

func (u *upstream) Provider(*testing.T) providers.Provider {
	return New(Config{APIKey: testKey, BaseURL: u.srv.URL + "/v1", HTTPClient: u.srv.Client()})
}

func (u *upstream) Supports(string) bool { return true }
func (u *upstream) Citations() bool      { return true }
func (u *upstream) Wire() string         { return contract.WireResponses }

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := u.Receive(r)

	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
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
			_, _ = w.Write([]byte(s.Body))
			return
		}
		openaitest.WriteError(w, s.Status, s.Message, s.RetryAfter)
	case contract.KindJSON:
		openaitest.WriteJSON(w, response("completed", nil, nil, messageItem(outputText(s.JSON, nil)), s.Usage))
	case contract.KindCut:
		text := s.Text
		if u.LastBody()["text"] != nil && s.JSON != "" {
			text = s.JSON
		}
		openaitest.WriteJSON(w, response("incomplete", map[string]any{"reason": "max_output_tokens"}, nil, messageItem(outputText(text, nil)), s.Usage))
	case contract.KindToolCall:
		if msg := missingTools(u.LastBody(), s); msg != "" {
			openaitest.WriteError(w, http.StatusBadRequest, msg, 0)
			return
		}
		var items []any
		for _, c := range s.ToolCalls {
			items = append(items, map[string]any{"type": "function_call", "id": "fc_" + c.ID, "call_id": c.ID, "name": c.Name, "arguments": c.Arguments, "status": "completed"})
		}
		openaitest.WriteJSON(w, response("completed", nil, nil, items, s.Usage))
	case contract.KindRefusal:
		openaitest.WriteJSON(w, response("completed", nil, nil, messageItem(map[string]any{"type": "refusal", "refusal": s.Text}), s.Usage))
	case kindFiltered:
		openaitest.WriteJSON(w, response("incomplete", map[string]any{"reason": "content_filter"}, nil, messageItem(outputText(s.Text, nil)), s.Usage))
	case kindFailed:
		openaitest.WriteJSON(w, response("failed", nil, map[string]any{"code": s.Text, "message": s.Message}, nil, s.Usage))
	default: // contract.KindAnswer
		var items []any
		if len(s.Citations) > 0 {
			items = append(items, map[string]any{"type": "web_search_call", "id": "ws_1", "status": "completed", "action": map[string]any{"type": "search", "query": "q"}})
		}
		if s.Text != "" {
			items = append(items, messageItem(outputText(s.Text, s.Citations))...)
		}
		res := response("completed", nil, nil, items, s.Usage)
		if s.NoUsage {
			res["usage"] = nil
		}
		openaitest.WriteJSON(w, res)
	}
}

// outputText is an output_text part; each citation cites the span equal to its
// Snippet when the text holds it, else the whole text.
func outputText(text string, cites []events.Citation) map[string]any {
	annotations := []any{}
	runes := []rune(text)
	for _, c := range cites {
		start, end := 0, len(runes)
		if i := strings.Index(text, c.Snippet); c.Snippet != "" && i >= 0 {
			start = len([]rune(text[:i]))
			end = start + len([]rune(c.Snippet))
		}
		annotations = append(annotations, map[string]any{"type": "url_citation", "url": c.URL, "title": c.Title, "start_index": start, "end_index": end})
	}
	return map[string]any{"type": "output_text", "text": text, "annotations": annotations, "logprobs": []any{}}
}

func messageItem(parts ...any) []any {
	return []any{map[string]any{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": parts}}
}

// response is a Responses API response object.
func response(status string, incomplete, failure map[string]any, output []any, usage events.Usage) map[string]any {
	if output == nil {
		output = []any{}
	}
	return map[string]any{
		"id": "resp_1", "object": "response", "created_at": 1741476542, "status": status,
		"error": failure, "incomplete_details": incomplete, "instructions": nil, "max_output_tokens": nil,
		"model": "gpt-4.1-2025-04-14", "output": output, "parallel_tool_calls": true,
		"previous_response_id": nil, "reasoning": map[string]any{"effort": nil, "summary": nil},
		"store": true, "temperature": 1.0, "text": map[string]any{"format": map[string]any{"type": "text"}},
		"tool_choice": "auto", "tools": []any{}, "top_p": 1.0, "truncation": "disabled",
		"usage": map[string]any{
			"input_tokens": usage.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": usage.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": usage.InputTokens + usage.OutputTokens,
		},
		"user": nil, "metadata": map[string]any{},
	}
}

func ask(text string) *providers.Request {
	return &providers.Request{Model: "gpt-test", Messages: []providers.Message{{Role: providers.RoleUser, Content: text}}}
}

func TestContract(t *testing.T) { contract.Run(t, newUpstream(t)) }

// jsonEqual reports whether got (decoded JSON) equals the JSON text want.
func jsonEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	return reflect.DeepEqual(got, w)
}

func TestCredentialsIgnoreEnvironment(t *testing.T) {
	var decoyHits int
	var decoyMu sync.Mutex
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		decoyMu.Lock()
		decoyHits++
		decoyMu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	}))
	defer decoy.Close()
	t.Setenv("OPENAI_API_KEY", "other")
	t.Setenv("OPENAI_BASE_URL", decoy.URL+"/v1")
	t.Setenv("OPENAI_ADMIN_KEY", "admin-other")
	t.Setenv("OPENAI_ORG_ID", "org-other")
	t.Setenv("OPENAI_PROJECT_ID", "proj-other")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Injected: yes\nAuthorization: Bearer injected")

	u := newUpstream(t)
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
	if got.Method != http.MethodPost || got.Path != "/v1/responses" {
		t.Errorf("request %s %s, want POST /v1/responses", got.Method, got.Path)
	}
	decoyMu.Lock()
	defer decoyMu.Unlock()
	if decoyHits != 0 {
		t.Errorf("OPENAI_BASE_URL received %d requests", decoyHits)
	}
}

func TestRequestShapeAndStructuredOutput(t *testing.T) {
	u := newUpstream(t)
	schema := `{"type":"object","required":["answer","conflicts"],"properties":{"answer":{"type":"string"},"conflicts":{"type":"array","items":{"type":"string"}}},"additionalProperties":false}`
	u.Play(contract.Scenario{Kind: contract.KindJSON, JSON: `{"answer":"42","conflicts":[]}`, Usage: events.Usage{InputTokens: 50, OutputTokens: 10}})
	req := providers.Request{
		Model: "gpt-test",
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
	if string(resp.JSON) != `{"answer":"42","conflicts":[]}` || resp.Text != string(resp.JSON) {
		t.Errorf("JSON %s text %q, want the upstream's object in both", resp.JSON, resp.Text)
	}
	if resp.Usage != (events.Usage{InputTokens: 50, OutputTokens: 10}) || resp.Latency <= 0 {
		t.Errorf("usage %+v latency %s", resp.Usage, resp.Latency)
	}
	b := u.Last(t).Body
	if b["store"] != false {
		t.Errorf("store %v: customer prompts must not be kept at the vendor", b["store"])
	}
	if b["model"] != "gpt-test" || b["instructions"] != "Be brief." || b["max_output_tokens"] != 256.0 {
		t.Errorf("model %v instructions %v max_output_tokens %v", b["model"], b["instructions"], b["max_output_tokens"])
	}
	if !jsonEqual(t, b["input"], `[{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"}]`) {
		t.Errorf("input %v", b["input"])
	}
	format, _ := b["text"].(map[string]any)["format"].(map[string]any)
	if format["type"] != "json_schema" || format["name"] != "synthesis" || format["strict"] != true {
		t.Errorf("text.format %v, want a strict json_schema named synthesis", format)
	}
	if !jsonEqual(t, format["schema"], schema) {
		t.Errorf("text.format.schema %v, want %s", format["schema"], schema)
	}
	if _, ok := b["tools"]; ok {
		t.Errorf("tools %v sent without web search", b["tools"])
	}
}

func TestSchemaKeepsPropertyOrder(t *testing.T) {
	params, err := buildParams(providers.Request{Model: "m", Messages: []providers.Message{{Role: "user", Content: "x"}},
		Schema: &providers.Schema{Name: "my schema!", JSON: json.RawMessage(`{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"string"}}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(params)
	if s := string(b); !strings.Contains(s, `"properties":{"zeta":{"type":"string"},"alpha":{"type":"string"}}`) || !strings.Contains(s, `"name":"my_schema_"`) {
		t.Errorf("body %s: want the properties in schema order and a valid name", s)
	}
}

func TestAttachmentsAreNative(t *testing.T) {
	u := newUpstream(t)
	u.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "seen", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	png := []byte("\x89PNG\r\n\x1a\nfake")
	pdf := []byte("%PDF-1.7 fake")
	req := providers.Request{
		Model: "gpt-test",
		Messages: []providers.Message{
			{Role: providers.RoleUser, Content: "first"},
			{Role: providers.RoleAssistant, Content: "ok"},
			{Role: providers.RoleUser, Content: "look at these"},
		},
		Attachments: []providers.Attachment{
			{Name: "chart.png", MediaType: "image/png", Data: png},
			{Name: "report.pdf", MediaType: "application/pdf", Data: pdf},
			{Name: "notes.txt", MediaType: "text/plain; charset=utf-8", Data: []byte("the notes")},
		},
	}
	if _, err := u.Provider(t).Complete(context.Background(), &req); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	input, _ := u.Last(t).Body["input"].([]any)
	if len(input) != 3 || input[0].(map[string]any)["content"] != "first" {
		t.Fatalf("input %v: want three messages, attachments only on the last user one", input)
	}
	parts, _ := input[2].(map[string]any)["content"].([]any)
	want := fmt.Sprintf(`[
		{"type":"input_image","image_url":"data:image/png;base64,%s","detail":"auto"},
		{"type":"input_file","file_data":"data:application/pdf;base64,%s","filename":"report.pdf"},
		{"type":"input_text","text":"File notes.txt:\nthe notes"},
		{"type":"input_text","text":"look at these"}]`,
		base64.StdEncoding.EncodeToString(png), base64.StdEncoding.EncodeToString(pdf))
	if !jsonEqual(t, parts, want) {
		got, _ := json.Marshal(parts)
		t.Errorf("last user content %s\nwant %s", got, want)
	}
}

func TestUnsupportedAttachmentIsNotSent(t *testing.T) {
	u := newUpstream(t)
	req := ask("x")
	req.Attachments = []providers.Attachment{{Name: "a.zip", MediaType: "application/zip", Data: []byte("PK")}}
	_, err := u.Provider(t).Complete(context.Background(), req)
	if e := providers.Classify(err); e.Class != providers.ClassHostError || e.Retriable() || u.Requests() != 0 {
		t.Fatalf("err %v after %d requests, want a final host_error and none sent", err, u.Requests())
	}
}

func TestWebSearchToolAndCitations(t *testing.T) {
	u := newUpstream(t)
	cites := []events.Citation{
		{URL: "https://example.org/everest", Title: "Everest", Snippet: "8,849 m"},
		{URL: "https://example.org/survey", Title: "Survey", Snippet: "2020 survey"},
	}
	u.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "Chomolungma – 8,849 m, per the 2020 survey.", Citations: cites, Usage: events.Usage{InputTokens: 5, OutputTokens: 7}})
	req := ask("How tall is Everest?")
	req.WebSearch = true
	resp, err := u.Provider(t).Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if !jsonEqual(t, u.Last(t).Body["tools"], `[{"type":"web_search"}]`) {
		t.Errorf("tools %v, want the web_search tool", u.Last(t).Body["tools"])
	}
	if !reflect.DeepEqual(resp.Citations, cites) {
		t.Errorf("citations %+v\nwant %+v", resp.Citations, cites)
	}
	if resp.Text != "Chomolungma – 8,849 m, per the 2020 survey." {
		t.Errorf("text %q", resp.Text)
	}
}

func TestErrorClasses(t *testing.T) {
	u := newUpstream(t)
	for _, c := range []struct {
		status     int
		retryAfter time.Duration
		class      string
	}{
		{401, 0, providers.ClassHostError},
		{403, 0, providers.ClassHostError},
		{404, 0, providers.ClassHostError},
		{408, 0, providers.ClassTimeout},
		{422, 0, providers.ClassHostError},
		{429, 1500 * time.Millisecond, providers.ClassRateLimited},
		{503, 2 * time.Second, providers.ClassHostError},
	} {
		// The upstream echoes the key, as a careless proxy might.
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

func TestContentFiltered(t *testing.T) {
	u := newUpstream(t)
	for _, s := range []contract.Scenario{
		{Kind: contract.KindRefusal, Text: "I can't help with that."},
		{Kind: kindFiltered, Text: "partial"},
	} {
		u.Play(s)
		_, err := u.Provider(t).Complete(context.Background(), ask("x"))
		if providers.Classify(err).Class != providers.ClassRefused {
			t.Errorf("%s: err %v, want content_filtered", s.Kind, err)
		}
	}
}

func TestFailedResponse(t *testing.T) {
	u := newUpstream(t)
	u.Play(contract.Scenario{Kind: kindFailed, Text: "rate_limit_exceeded", Message: "too many"})
	_, err := u.Provider(t).Complete(context.Background(), ask("x"))
	if e := providers.Classify(err); e.Class != providers.ClassRateLimited || !strings.Contains(e.Message, "too many") {
		t.Fatalf("err %v, want a rate_limited error with the upstream's message", err)
	}
}

func TestInvalidStructuredOutput(t *testing.T) {
	u := newUpstream(t)
	u.Play(contract.Scenario{Kind: contract.KindJSON, JSON: `{"answer":`, Usage: events.Usage{InputTokens: 3, OutputTokens: 4}})
	req := ask("x")
	req.Schema = &providers.Schema{Name: "s", JSON: json.RawMessage(`{"type":"object"}`)}
	resp, err := (&providers.Structured{Provider: u.Provider(t)}).Complete(context.Background(), req)
	if providers.Classify(err).Class != providers.ClassNotJSON || resp.Usage.OutputTokens != 8 {
		t.Fatalf("err %v usage %+v, want not_json with the usage of both calls still reported", err, resp.Usage)
	}
}

func TestDeadlineIsTimeout(t *testing.T) {
	u := newUpstream(t)
	u.Play(contract.Scenario{Kind: contract.KindStall})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := u.Provider(t).Complete(ctx, ask("x"))
	if !errors.Is(err, context.DeadlineExceeded) || providers.Classify(err).Class != providers.ClassTimeout || u.Requests() != 1 {
		t.Fatalf("err %v after %d requests, want the deadline after one", err, u.Requests())
	}
}

func TestConnectionFailureIsHostError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := New(Config{APIKey: testKey, BaseURL: url}).Complete(context.Background(), ask("x"))
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Class != providers.ClassHostError || !pe.Retriable() || strings.Contains(pe.Message, testKey) {
		t.Fatalf("err %v, want a host_error that is retried", err)
	}
}

// missingTools says what the request lacks of the Responses API's function
// tools for the calls s plays: each called tool with its parameters, and a
// tool choice; "" when nothing.
func missingTools(body map[string]any, s contract.Scenario) string {
	tools, _ := body["tools"].([]any)
	for _, c := range s.ToolCalls {
		found := false
		for _, t := range tools {
			m, _ := t.(map[string]any)
			params, _ := m["parameters"].(map[string]any)
			if m["type"] == "function" && m["name"] == c.Name && params["type"] == "object" {
				found = true
			}
		}
		if !found {
			return "the request does not offer the function tool " + c.Name
		}
	}
	if body["tool_choice"] == nil {
		return "the request has no tool_choice"
	}
	return ""
}
