package anthropic

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/contract"
)

const testKey = "sk-ant-test-0123456789abcdef"

// received is one request as the fake upstream saw it.
type received struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

func (r received) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("request body %s: %v", r.Body, err)
	}
	return m
}

// fixture is a fake Messages API that speaks Anthropic's wire format.
type fixture struct {
	srv *httptest.Server

	mu        sync.Mutex
	scenarios []contract.Scenario
	requests  []received
	// raw, when set, answers instead of the scenarios.
	raw func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) Provider(t *testing.T) providers.Provider {
	return New(Config{APIKey: testKey, BaseURL: f.srv.URL, HTTPClient: f.srv.Client()})
}

func (f *fixture) Play(scenarios ...contract.Scenario) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scenarios = scenarios
	f.raw = nil
}

func (f *fixture) answer(raw func(w http.ResponseWriter, r *http.Request, body map[string]any)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raw = raw
}

func (f *fixture) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fixture) last(t *testing.T) received {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("the upstream received no request")
	}
	return f.requests[len(f.requests)-1]
}

func (f *fixture) Supports(string) bool { return true }
func (f *fixture) Citations() bool      { return true }
func (f *fixture) Wire() string         { return contract.WireAnthropic }

func (f *fixture) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests = append(f.requests, received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	raw := f.raw
	var s contract.Scenario
	if len(f.scenarios) > 0 {
		s = f.scenarios[0]
		if len(f.scenarios) > 1 {
			f.scenarios = f.scenarios[1:]
		}
	}
	f.mu.Unlock()

	var req map[string]any
	_ = json.Unmarshal(body, &req)
	if raw != nil {
		raw(w, r, req)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		writeError(w, http.StatusNotFound, 0, "not_found_error", "no route "+r.URL.Path)
		return
	}
	model, _ := req["model"].(string)
	switch s.Kind {
	case contract.KindAnswer:
		var blocks []any
		if s.Text != "" {
			blocks = append(blocks, textBlock(s.Text, s.Citations))
		}
		if s.NoUsage {
			writeMessageWithout(w, model, "end_turn", "usage", blocks...)
			return
		}
		writeMessage(w, model, "end_turn", s.Usage, blocks...)
	case contract.KindCut:
		if tc, ok := req["tool_choice"].(map[string]any); ok && s.JSON != "" {
			// A forced tool's input cut at max_tokens reaches the client as
			// the part the model wrote, which is not an object.
			name, _ := tc["name"].(string)
			writeMessage(w, model, "max_tokens", s.Usage, map[string]any{"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": name, "input": map[string]any{}})
			return
		}
		writeMessage(w, model, "max_tokens", s.Usage, textBlock(s.Text, nil))
	case contract.KindRefusal:
		writeMessage(w, model, "refusal", s.Usage)
	case contract.KindJSON:
		name := "synthesis"
		if tc, ok := req["tool_choice"].(map[string]any); ok {
			name, _ = tc["name"].(string)
		}
		writeMessage(w, model, "tool_use", s.Usage, map[string]any{
			"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": name, "input": json.RawMessage(s.JSON),
		})
	case contract.KindToolCall:
		tools, _ := req["tools"].([]any)
		var blocks []any
		for _, c := range s.ToolCalls {
			found := false
			for _, t := range tools {
				m, _ := t.(map[string]any)
				schema, _ := m["input_schema"].(map[string]any)
				found = found || m["name"] == c.Name && schema["type"] == "object"
			}
			if !found || req["tool_choice"] == nil {
				writeError(w, http.StatusBadRequest, 0, "invalid_request_error", "the request does not offer the tool "+c.Name+" with a tool_choice")
				return
			}
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": json.RawMessage(c.Arguments)})
		}
		writeMessage(w, model, "tool_use", s.Usage, blocks...)
	case contract.KindStatus:
		if s.Body != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s.Status)
			_, _ = io.WriteString(w, s.Body)
			return
		}
		writeError(w, s.Status, s.RetryAfter, errorType(s.Status), s.Message)
	case contract.KindStall:
		<-r.Context().Done()
	case contract.KindHuge:
		contract.WriteHuge(w)
	default:
		writeError(w, http.StatusInternalServerError, 0, "api_error", "the fixture has no scenario")
	}
}

func textBlock(text string, cites []events.Citation) map[string]any {
	b := map[string]any{"type": "text", "text": text}
	if len(cites) > 0 {
		var cs []map[string]any
		for _, c := range cites {
			cs = append(cs, map[string]any{
				"type": "web_search_result_location", "url": c.URL, "title": c.Title,
				"cited_text": c.Snippet, "encrypted_index": "EpABCioIAhgBIiQ0NGFlNjc2Yy05NThmLTQ0",
			})
		}
		b["citations"] = cs
	}
	return b
}

func writeMessage(w http.ResponseWriter, model, stop string, u events.Usage, content ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy")
	_ = json.NewEncoder(w).Encode(message(model, stop, u, content...))
}

// writeMessageWithout writes a message with the key left out, as a host
// that imitates the API may.
func writeMessageWithout(w http.ResponseWriter, model, stop, key string, content ...any) {
	w.Header().Set("Content-Type", "application/json")
	m := message(model, stop, events.Usage{}, content...)
	delete(m, key)
	_ = json.NewEncoder(w).Encode(m)
}

func message(model, stop string, u events.Usage, content ...any) map[string]any {
	if content == nil {
		content = []any{}
	}
	return map[string]any{
		"id": "msg_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "service_tier": "standard",
		},
	}
}

func writeError(w http.ResponseWriter, status int, retryAfter time.Duration, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy")
	if retryAfter > 0 {
		w.Header().Set("retry-after", strconv.Itoa(int(retryAfter/time.Second)))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":       "error",
		"error":      map[string]any{"type": typ, "message": msg},
		"request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
	})
}

func errorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 408:
		return "timeout_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

func ask(text string) *providers.Request {
	return &providers.Request{Model: "claude-sonnet-4-5", Messages: []providers.Message{{Role: providers.RoleUser, Content: text}}}
}

func TestContract(t *testing.T) { contract.Run(t, newFixture(t)) }

func TestCredentialsIgnoreEnvironment(t *testing.T) {
	var decoyMu sync.Mutex
	decoyHits := 0
	decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		decoyMu.Lock()
		decoyHits++
		decoyMu.Unlock()
		writeError(w, 500, 0, "api_error", "decoy")
	}))
	defer decoy.Close()

	// The SDK reads ANTHROPIC_API_KEY first and stops there, so the bearer
	// token and the custom headers are each reached only with the variables
	// before them empty.
	for name, env := range map[string]map[string]string{
		"api key, auth token and base url": {"ANTHROPIC_API_KEY": "other", "ANTHROPIC_AUTH_TOKEN": "bearer-from-env", "ANTHROPIC_BASE_URL": decoy.URL},
		"auth token only":                  {"ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": "bearer-from-env", "ANTHROPIC_BASE_URL": decoy.URL},
		"custom headers":                   {"ANTHROPIC_API_KEY": "", "ANTHROPIC_AUTH_TOKEN": "", "ANTHROPIC_BASE_URL": decoy.URL, "ANTHROPIC_CUSTOM_HEADERS": "X-Injected: yes\nAuthorization: Bearer injected"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("ANTHROPIC_CONFIG_DIR", t.TempDir())
			for k, v := range env {
				t.Setenv(k, v)
			}
			f := newFixture(t)
			f.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "hi", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
			if _, err := f.Provider(t).Complete(context.Background(), ask("hello")); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			got := f.last(t)
			if got.Method != http.MethodPost || got.Path != "/v1/messages" {
				t.Fatalf("%s %s, want POST /v1/messages", got.Method, got.Path)
			}
			if k := got.Header.Values("X-Api-Key"); len(k) != 1 || k[0] != testKey {
				t.Fatalf("x-api-key %q, want the configured key only", k)
			}
			if a := got.Header.Values("Authorization"); len(a) != 0 {
				t.Fatalf("Authorization %q sent; want none", a)
			}
			if v := got.Header.Get("Anthropic-Version"); v == "" {
				t.Fatal("no anthropic-version header")
			}
			if v := got.Header.Get("X-Injected"); v != "" {
				t.Fatalf("ANTHROPIC_CUSTOM_HEADERS leaked into the request: X-Injected %q", v)
			}
			decoyMu.Lock()
			defer decoyMu.Unlock()
			if decoyHits != 0 {
				t.Fatalf("ANTHROPIC_BASE_URL received %d requests", decoyHits)
			}
		})
	}
}

func TestRequestShape(t *testing.T) {
	f := newFixture(t)
	f.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "ok", Usage: events.Usage{InputTokens: 3, OutputTokens: 4}})
	p := f.Provider(t)
	req := providers.Request{Model: "claude-opus-4-1", Messages: []providers.Message{
		{Role: providers.RoleSystem, Content: "Be brief."},
		{Role: providers.RoleUser, Content: "Q1"},
		{Role: providers.RoleAssistant, Content: "A1"},
		{Role: providers.RoleUser, Content: "Q2"},
	}}
	resp, err := p.Complete(context.Background(), &req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Text != "ok" || resp.Usage != (events.Usage{InputTokens: 3, OutputTokens: 4}) || resp.Latency <= 0 {
		t.Fatalf("response %+v", resp)
	}
	body := f.last(t).json(t)
	if body["model"] != "claude-opus-4-1" || body["max_tokens"] != float64(DefaultMaxOutputTokens) {
		t.Fatalf("model %v max_tokens %v", body["model"], body["max_tokens"])
	}
	sys, _ := json.Marshal(body["system"])
	if string(sys) != `[{"text":"Be brief.","type":"text"}]` {
		t.Fatalf("system %s", sys)
	}
	msgs, _ := json.Marshal(body["messages"])
	want := `[{"content":[{"text":"Q1","type":"text"}],"role":"user"},{"content":[{"text":"A1","type":"text"}],"role":"assistant"},{"content":[{"text":"Q2","type":"text"}],"role":"user"}]`
	if string(msgs) != want {
		t.Fatalf("messages %s\nwant %s", msgs, want)
	}
	if _, ok := body["tools"]; ok {
		t.Fatalf("tools sent without a schema or web search: %v", body["tools"])
	}

	// A large max_tokens goes out as it is: the SDK's client-side
	// "streaming is required" refusal must not stop it.
	req.MaxOutputTokens = 64000
	req.Model = "claude-opus-4-0"
	if _, err := p.Complete(context.Background(), &req); err != nil {
		t.Fatalf("Complete with max_tokens 64000: %v", err)
	}
	if body := f.last(t).json(t); body["max_tokens"] != float64(64000) {
		t.Fatalf("max_tokens %v, want 64000", body["max_tokens"])
	}
}

func TestStructuredOutputForcesTool(t *testing.T) {
	f := newFixture(t)
	f.Play(contract.Scenario{Kind: contract.KindJSON, JSON: `{ "answer": "yes",  "conflicts": [] }`, Usage: events.Usage{InputTokens: 9, OutputTokens: 8}})
	schema := `{"type":"object","required":["answer","conflicts"],"properties":{"answer":{"type":"string"},"conflicts":{"type":"array"}},"additionalProperties":false}`
	req := ask("x")
	req.Schema = &providers.Schema{Name: "verdict", JSON: json.RawMessage(schema)}
	resp, err := (&providers.Structured{Provider: f.Provider(t)}).Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if string(resp.JSON) != `{"answer":"yes","conflicts":[]}` || resp.Text != string(resp.JSON) {
		t.Fatalf("JSON %s text %q", resp.JSON, resp.Text)
	}
	if resp.Usage != (events.Usage{InputTokens: 9, OutputTokens: 8}) {
		t.Fatalf("usage %+v", resp.Usage)
	}
	body := f.last(t).json(t)
	tools, _ := body["tools"].([]any)
	if len(tools) != 1 {
		t.Fatalf("tools %v, want one", body["tools"])
	}
	tool := tools[0].(map[string]any)
	if tool["name"] != "verdict" {
		t.Fatalf("tool name %v", tool["name"])
	}
	gotSchema, _ := json.Marshal(tool["input_schema"])
	var a, b any
	_ = json.Unmarshal(gotSchema, &a)
	_ = json.Unmarshal([]byte(schema), &b)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("input_schema %s, want %s", gotSchema, schema)
	}
	tc, _ := body["tool_choice"].(map[string]any)
	if tc["type"] != "tool" || tc["name"] != "verdict" {
		t.Fatalf("tool_choice %v, want the schema's tool forced", body["tool_choice"])
	}
}

func TestStructuredOutputMissingIsNotJSON(t *testing.T) {
	f := newFixture(t)
	f.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "I would rather talk.", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	req := ask("x")
	req.Schema = &providers.Schema{Name: "verdict", JSON: json.RawMessage(`{"type":"object"}`)}
	_, err := (&providers.Structured{Provider: f.Provider(t)}).Complete(context.Background(), req)
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Class != providers.ClassNotJSON || f.Requests() != 2 {
		t.Fatalf("err %v after %d requests, want not_json after the repair", err, f.Requests())
	}
}

// TestContextWindowStop: an answer stopped because the prompt and the
// answer filled the model's context window (Claude's
// model_context_window_exceeded) is context_overflow.
func TestContextWindowStop(t *testing.T) {
	f := newFixture(t)
	f.answer(func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeMessage(w, "claude-sonnet-4-5", "model_context_window_exceeded", events.Usage{InputTokens: 199000, OutputTokens: 1000}, textBlock("a long", nil))
	})
	_, err := f.Provider(t).Complete(context.Background(), ask("x"))
	if e := providers.Classify(err); e.Class != providers.ClassContextOverflow || e.Retriable() {
		t.Fatalf("err %v, want context_overflow", err)
	}
}

func TestAttachmentsAreNativeBlocks(t *testing.T) {
	f := newFixture(t)
	f.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "seen", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00fake")
	pdf := []byte("%PDF-1.7\n%fake")
	req := providers.Request{Model: "claude-sonnet-4-5", Messages: []providers.Message{
		{Role: providers.RoleUser, Content: "first"},
		{Role: providers.RoleAssistant, Content: "ok"},
		{Role: providers.RoleUser, Content: "what is in these?"},
	}, Attachments: []providers.Attachment{
		{Name: "chart.png", MediaType: "image/png", Data: png},
		{Name: "report.pdf", MediaType: "application/pdf", Data: pdf},
		{Name: "notes.txt", MediaType: "text/plain; charset=utf-8", Data: []byte("line one")},
	}}
	if _, err := f.Provider(t).Complete(context.Background(), &req); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	var body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type   string `json:"type"`
				Text   string `json:"text"`
				Title  string `json:"title"`
				Source struct {
					Type      string `json:"type"`
					MediaType string `json:"media_type"`
					Data      string `json:"data"`
				} `json:"source"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f.last(t).Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Messages) != 3 || len(body.Messages[0].Content) != 1 {
		t.Fatalf("messages %+v: attachments must go with the last user message only", body.Messages)
	}
	c := body.Messages[2].Content
	if len(c) != 4 {
		t.Fatalf("last user message has %d blocks, want 4: %+v", len(c), c)
	}
	if c[0].Type != "image" || c[0].Source.Type != "base64" || c[0].Source.MediaType != "image/png" || c[0].Source.Data != base64.StdEncoding.EncodeToString(png) {
		t.Fatalf("image block %+v", c[0])
	}
	if c[1].Type != "document" || c[1].Source.Type != "base64" || c[1].Source.MediaType != "application/pdf" || c[1].Source.Data != base64.StdEncoding.EncodeToString(pdf) {
		t.Fatalf("document block %+v", c[1])
	}
	if c[2].Type != "text" || !strings.HasPrefix(c[2].Text, "File: notes.txt") || !strings.HasSuffix(c[2].Text, "line one") {
		t.Fatalf("text attachment %+v", c[2])
	}
	if c[3].Type != "text" || c[3].Text != "what is in these?" {
		t.Fatalf("prompt block %+v", c[3])
	}
}

func TestWebSearchToolAndCitations(t *testing.T) {
	f := newFixture(t)
	f.answer(func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeMessage(w, "claude-sonnet-4-5", "end_turn", events.Usage{InputTokens: 2100, OutputTokens: 120},
			map[string]any{"type": "text", "text": "I'll search for that."},
			map[string]any{"type": "server_tool_use", "id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "name": "web_search", "input": map[string]any{"query": "everest height"}},
			map[string]any{"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE", "content": []any{
				map[string]any{"type": "web_search_result", "url": "https://example.org/everest", "title": "Everest", "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1", "page_age": "April 30, 2025"},
				map[string]any{"type": "web_search_result", "url": "https://example.org/k2", "title": "K2", "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY2", "page_age": nil},
			}},
			map[string]any{"type": "text", "text": "Everest is "},
			map[string]any{"type": "text", "text": "8,849 m tall", "citations": []any{
				map[string]any{"type": "web_search_result_location", "url": "https://example.org/everest", "title": "Everest", "cited_text": "Mount Everest is 8,848.86 m high.", "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm"},
			}},
			map[string]any{"type": "text", "text": "."},
		)
	})
	req := ask("How tall is Everest?")
	req.WebSearch = true
	resp, err := f.Provider(t).Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	body := f.last(t).json(t)
	tools, _ := body["tools"].([]any)
	if len(tools) != 1 {
		t.Fatalf("tools %v, want the web search server tool", body["tools"])
	}
	if tool := tools[0].(map[string]any); tool["type"] != "web_search_20250305" || tool["name"] != "web_search" {
		t.Fatalf("tool %v", tool)
	}
	if resp.Text != "I'll search for that.Everest is 8,849 m tall." {
		t.Fatalf("text %q", resp.Text)
	}
	want := []events.Citation{{URL: "https://example.org/everest", Title: "Everest", Snippet: "Mount Everest is 8,848.86 m high."}}
	if fmt.Sprint(resp.Citations) != fmt.Sprint(want) {
		t.Fatalf("citations %+v, want %+v", resp.Citations, want)
	}
	if resp.Usage != (events.Usage{InputTokens: 2100, OutputTokens: 120}) {
		t.Fatalf("usage %+v", resp.Usage)
	}

	// Searched but cited nothing inline: the results are the sources.
	f.answer(func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeMessage(w, "claude-sonnet-4-5", "end_turn", events.Usage{InputTokens: 1, OutputTokens: 1},
			map[string]any{"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []any{
				map[string]any{"type": "web_search_result", "url": "https://example.org/k2", "title": "K2", "encrypted_content": "x", "page_age": nil},
			}},
			map[string]any{"type": "text", "text": "K2 is 8,611 m."},
		)
	})
	resp, err = f.Provider(t).Complete(context.Background(), req)
	if err != nil || len(resp.Citations) != 1 || resp.Citations[0].URL != "https://example.org/k2" || resp.Citations[0].Title != "K2" {
		t.Fatalf("citations %+v, err %v", resp.Citations, err)
	}
}

func TestErrorClasses(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		status int
		class  string
	}{
		{429, providers.ClassRateLimited},
		{500, providers.ClassHostError},
		{503, providers.ClassHostError},
		{529, providers.ClassHostError},
		{408, providers.ClassTimeout},
		{401, providers.ClassHostError},
		{403, providers.ClassHostError},
		{400, providers.ClassHostError},
		{404, providers.ClassHostError},
		{413, providers.ClassHostError},
	} {
		f.Play(contract.Scenario{Kind: contract.KindStatus, Status: c.status, Message: "upstream says " + strconv.Itoa(c.status)})
		before := f.Requests()
		_, err := f.Provider(t).Complete(context.Background(), ask("x"))
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != c.class || pe.Status != c.status {
			t.Fatalf("%d: err %v, want %s", c.status, err, c.class)
		}
		if !strings.Contains(pe.Message, "upstream says "+strconv.Itoa(c.status)) || !strings.Contains(pe.Message, errorType(c.status)) {
			t.Fatalf("%d: message %q, want the upstream's type and message", c.status, pe.Message)
		}
		if n := f.Requests() - before; n != 1 {
			t.Fatalf("%d: %d requests, want 1 (no SDK retries)", c.status, n)
		}
	}
}

func TestRetryAfterHeaders(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name    string
		headers map[string]string
		min     time.Duration
		max     time.Duration
	}{
		{"ms wins", map[string]string{"retry-after-ms": "1500", "retry-after": "9"}, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"seconds", map[string]string{"retry-after": "12"}, 12 * time.Second, 12 * time.Second},
		{"http date", map[string]string{"retry-after": time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)}, 25 * time.Second, 31 * time.Second},
		{"none", nil, 0, 0},
	} {
		f.answer(func(w http.ResponseWriter, r *http.Request, body map[string]any) {
			for k, v := range c.headers {
				w.Header().Set(k, v)
			}
			writeError(w, 529, 0, "overloaded_error", "Overloaded")
		})
		_, err := f.Provider(t).Complete(context.Background(), ask("x"))
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != providers.ClassHostError || pe.Status != 529 || !pe.Retriable() {
			t.Fatalf("%s: err %v", c.name, err)
		}
		if pe.RetryAfter < c.min || pe.RetryAfter > c.max {
			t.Fatalf("%s: RetryAfter %s, want in [%s, %s]", c.name, pe.RetryAfter, c.min, c.max)
		}
	}
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	f := newFixture(t)
	f.answer(func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		writeError(w, 401, 0, "authentication_error", "invalid x-api-key: "+r.Header.Get("X-Api-Key"))
	})
	_, err := f.Provider(t).Complete(context.Background(), ask("x"))
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Class != providers.ClassHostError || pe.Status != 401 {
		t.Fatalf("err %v, want a host_error with status 401", err)
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(pe.Message, testKey) {
		t.Fatalf("error carries the API key: %v", err)
	}
	if !strings.Contains(pe.Message, "invalid x-api-key") {
		t.Fatalf("message %q lost the upstream's words", pe.Message)
	}
}

func TestRefusalIsRefused(t *testing.T) {
	f := newFixture(t)
	f.answer(func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":"refusal","stop_details":{"type":"refusal","category":"cyber","explanation":"policy"},"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":0}}`)
	})
	_, err := f.Provider(t).Complete(context.Background(), ask("x"))
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Class != providers.ClassRefused || pe.Retriable() {
		t.Fatalf("err %v, want refused", err)
	}
}

func TestDeadlineIsTimeout(t *testing.T) {
	f := newFixture(t)
	f.Play(contract.Scenario{Kind: contract.KindStall})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Provider(t).Complete(ctx, ask("x"))
	if !errors.Is(err, context.DeadlineExceeded) || providers.Classify(err).Class != providers.ClassTimeout {
		t.Fatalf("err %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
	if n := f.Requests(); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestBadInputIsNotSent(t *testing.T) {
	f := newFixture(t)
	p := f.Provider(t)
	for name, req := range map[string]providers.Request{
		"role":       {Model: "m", Messages: []providers.Message{{Role: "tool", Content: "x"}}},
		"schema":     {Model: "m", Messages: []providers.Message{{Role: providers.RoleUser, Content: "x"}}, Schema: &providers.Schema{Name: "s", JSON: json.RawMessage(`{`)}},
		"attachment": {Model: "m", Messages: []providers.Message{{Role: providers.RoleUser, Content: "x"}}, Attachments: []providers.Attachment{{Name: "a.zip", MediaType: "application/zip", Data: []byte{0xff, 0xfe, 0x00}}}},
	} {
		_, err := p.Complete(context.Background(), &req)
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != providers.ClassHostError || pe.Retriable() {
			t.Fatalf("%s: err %v, want a final host_error", name, err)
		}
	}
	if n := f.Requests(); n != 0 {
		t.Fatalf("%d requests sent for bad input", n)
	}
}
