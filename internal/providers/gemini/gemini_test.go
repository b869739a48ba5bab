package gemini

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/contract"
)

const testKey = "test-key-4f1c9b"

// received is one request the fake upstream got.
type received struct {
	Method string
	Path   string
	Header http.Header
	Body   map[string]any
}

// reply answers one request.
type reply func(w http.ResponseWriter, r *http.Request)

// fixture is a fake Gemini API speaking its JSON over HTTP.
type fixture struct {
	srv  *httptest.Server
	done chan struct{}

	mu       sync.Mutex
	replies  []reply
	received []received
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{done: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.done)
		f.srv.Close()
	})
	return f
}

func (f *fixture) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	f.mu.Lock()
	f.received = append(f.received, received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	var next reply
	if len(f.replies) > 0 {
		next = f.replies[0]
		if len(f.replies) > 1 {
			f.replies = f.replies[1:]
		}
	}
	f.mu.Unlock()

	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1beta/models/") || !strings.HasSuffix(r.URL.Path, ":generateContent") {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "no such method "+r.Method+" "+r.URL.Path, 0)
		return
	}
	if r.Header.Get("x-goog-api-key") != testKey {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", 0)
		return
	}
	if next == nil {
		writeError(w, http.StatusInternalServerError, "INTERNAL", "the fixture has nothing to play", 0)
		return
	}
	next(w, r)
}

// replyWith queues raw replies; the last one repeats.
func (f *fixture) replyWith(rs ...reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies = rs
}

// last is the last request received.
func (f *fixture) last(t *testing.T) received {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.received) == 0 {
		t.Fatal("the upstream received no request")
	}
	return f.received[len(f.received)-1]
}

func (f *fixture) Provider(t *testing.T) providers.Provider {
	return f.client(t)
}

func (f *fixture) client(t *testing.T) *Client {
	t.Helper()
	c, err := New(t.Context(), Config{APIKey: testKey, BaseURL: f.srv.URL, HTTPClient: f.srv.Client()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func (f *fixture) Play(scenarios ...contract.Scenario) {
	rs := make([]reply, len(scenarios))
	for i, s := range scenarios {
		rs[i] = f.scenario(s)
	}
	f.replyWith(rs...)
}

func (f *fixture) Requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.received)
}

func (f *fixture) Supports(string) bool { return true }
func (f *fixture) Citations() bool      { return true }
func (f *fixture) Wire() string         { return contract.WireGemini }

func (f *fixture) scenario(s contract.Scenario) reply {
	switch s.Kind {
	case contract.KindAnswer:
		if s.NoUsage {
			return finished(s.Text, "STOP", nil)
		}
		return answer(s.Text, s.Usage, s.Citations)
	case contract.KindJSON:
		return answer(s.JSON, s.Usage, nil)
	case contract.KindCut:
		return func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			body := f.received[len(f.received)-1].Body
			f.mu.Unlock()
			text := s.Text
			if gc, _ := body["generationConfig"].(map[string]any); gc["responseJsonSchema"] != nil && s.JSON != "" {
				text = s.JSON
			}
			finished(text, "MAX_TOKENS", &s.Usage)(w, r)
		}
	case contract.KindRefusal:
		return finished("", "SAFETY", &s.Usage)
	case contract.KindStatus:
		return func(w http.ResponseWriter, r *http.Request) {
			if s.Body != "" {
				w.Header().Set("Content-Type", "application/json; charset=UTF-8")
				w.WriteHeader(s.Status)
				_, _ = io.WriteString(w, s.Body)
				return
			}
			writeError(w, s.Status, rpcStatus(s.Status), s.Message, s.RetryAfter)
		}
	case contract.KindToolCall:
		return func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			body := f.received[len(f.received)-1].Body
			f.mu.Unlock()
			tools, _ := body["tools"].([]any)
			var decls []any
			for _, t := range tools {
				m, _ := t.(map[string]any)
				d, _ := m["functionDeclarations"].([]any)
				decls = append(decls, d...)
			}
			var parts []any
			for _, c := range s.ToolCalls {
				found := false
				for _, d := range decls {
					m, _ := d.(map[string]any)
					schema, _ := m["parametersJsonSchema"].(map[string]any)
					found = found || m["name"] == c.Name && schema["type"] == "object"
				}
				if !found || body["toolConfig"] == nil {
					writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "the request does not declare the function "+c.Name+" with a toolConfig", 0)
					return
				}
				parts = append(parts, map[string]any{"functionCall": map[string]any{"name": c.Name, "args": json.RawMessage(c.Arguments)}})
			}
			rawJSON(http.StatusOK, map[string]any{
				"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}},
				"usageMetadata": map[string]any{"promptTokenCount": s.Usage.InputTokens, "candidatesTokenCount": s.Usage.OutputTokens,
					"totalTokenCount": s.Usage.InputTokens + s.Usage.OutputTokens},
				"modelVersion": "gemini-2.5-flash", "responseId": "resp-1",
			})(w, r)
		}
	case contract.KindHuge:
		return func(w http.ResponseWriter, r *http.Request) { contract.WriteHuge(w) }
	case contract.KindStall:
		return func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-f.done:
			}
		}
	}
	panic("unknown scenario kind " + s.Kind)
}

// finished is a generateContent response with the finish reason given, and
// usage unless it is nil.
func finished(text, reason string, usage *events.Usage) reply {
	parts := []any{}
	if text != "" {
		parts = append(parts, map[string]any{"text": text})
	}
	body := map[string]any{
		"candidates":   []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": reason, "index": 0}},
		"modelVersion": "gemini-2.5-flash", "responseId": "resp-1",
	}
	if usage != nil {
		body["usageMetadata"] = map[string]any{"promptTokenCount": usage.InputTokens, "candidatesTokenCount": usage.OutputTokens,
			"totalTokenCount": usage.InputTokens + usage.OutputTokens}
	}
	return rawJSON(http.StatusOK, body)
}

// answer is a generateContent response as the Gemini API sends it.
func answer(text string, usage events.Usage, cites []events.Citation) reply {
	cand := map[string]any{
		"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"text": text}}},
		"finishReason": "STOP",
		"index":        0,
	}
	if len(cites) > 0 {
		var chunks, supports []any
		for i, c := range cites {
			chunks = append(chunks, map[string]any{"web": map[string]any{"uri": c.URL, "title": c.Title}})
			if c.Snippet != "" {
				supports = append(supports, map[string]any{
					"segment":               map[string]any{"startIndex": 0, "endIndex": len(c.Snippet), "text": c.Snippet},
					"groundingChunkIndices": []int{i},
				})
			}
		}
		gm := map[string]any{"groundingChunks": chunks, "webSearchQueries": []string{"query"}}
		if len(supports) > 0 {
			gm["groundingSupports"] = supports
		}
		cand["groundingMetadata"] = gm
	}
	return rawJSON(http.StatusOK, map[string]any{
		"candidates": []any{cand},
		"usageMetadata": map[string]any{
			"promptTokenCount":     usage.InputTokens,
			"candidatesTokenCount": usage.OutputTokens,
			"totalTokenCount":      usage.InputTokens + usage.OutputTokens,
		},
		"modelVersion": "gemini-2.5-flash",
		"responseId":   "resp-1",
	})
}

func rawJSON(status int, v any) reply {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(status)
		w.Write(b)
	}
}

// writeError writes the Gemini API's error body; a retry delay goes in a
// google.rpc.RetryInfo detail, as Gemini sends it with a 429.
func writeError(w http.ResponseWriter, status int, rpc, message string, retryAfter time.Duration) {
	e := map[string]any{"code": status, "message": message, "status": rpc}
	if retryAfter > 0 {
		e["details"] = []any{
			map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{map[string]any{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests"}}},
			map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": strconv.FormatFloat(retryAfter.Seconds(), 'f', -1, 64) + "s"},
		}
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	w.Write(b)
}

func rpcStatus(status int) string {
	switch status {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

func TestContract(t *testing.T) { contract.Run(t, newFixture(t)) }

func ask(text string) *providers.Request {
	return &providers.Request{Model: "gemini-2.5-flash", Messages: []providers.Message{{Role: providers.RoleUser, Content: text}}}
}

// get walks a decoded JSON value: keys for objects, ints for arrays.
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: %T is not an object (path %v)", k, v, path)
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				t.Fatalf("at [%d]: %v is not an array that long (path %v)", k, v, path)
			}
			v = a[k]
		}
	}
	return v
}

func TestCredentialsAndBackendArePinned(t *testing.T) {
	f := newFixture(t)
	t.Setenv("GOOGLE_API_KEY", "other")
	t.Setenv("GEMINI_API_KEY", "another")
	t.Setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
	t.Setenv("GOOGLE_GENAI_USE_ENTERPRISE", "true")
	t.Setenv("GOOGLE_CLOUD_PROJECT", "some-project")
	t.Setenv("GOOGLE_CLOUD_LOCATION", "us-central1")
	t.Setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:1/")
	t.Setenv("GOOGLE_VERTEX_BASE_URL", "http://127.0.0.1:1/")
	f.Play(contract.Scenario{Kind: contract.KindAnswer, Text: "hi", Usage: events.Usage{InputTokens: 1, OutputTokens: 1}})

	resp, err := f.client(t).Complete(t.Context(), ask("hello"))
	if err != nil || resp.Text != "hi" {
		t.Fatalf("Complete: %q, %v", resp.Text, err)
	}
	got := f.last(t)
	if k := got.Header.Values("x-goog-api-key"); len(k) != 1 || k[0] != testKey {
		t.Fatalf("x-goog-api-key %q, want the configured key only", k)
	}
	if a := got.Header.Get("Authorization"); a != "" {
		t.Fatalf("Authorization %q sent; want none", a)
	}
	if got.Method != http.MethodPost || got.Path != "/v1beta/models/gemini-2.5-flash:generateContent" {
		t.Fatalf("request %s %s, want the Gemini API's generateContent", got.Method, got.Path)
	}
}

// roundTripFunc answers requests without a network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestDefaultBaseURLIgnoresEnvironment(t *testing.T) {
	t.Setenv("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:1/")
	t.Setenv("GOOGLE_GENAI_USE_VERTEXAI", "1")
	var gotURL, gotKey string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		gotURL, gotKey = r.URL.String(), r.Header.Get("x-goog-api-key")
		body := `{"candidates":[{"content":{"role":"model","parts":[{"text":"ok"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":1,"totalTokenCount":2}}`
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	})}
	c, err := New(t.Context(), Config{APIKey: testKey, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(t.Context(), ask("x")); err != nil {
		t.Fatal(err)
	}
	if gotURL != "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent" || gotKey != testKey {
		t.Fatalf("sent to %q with key %q; want the Gemini API with the configured key", gotURL, gotKey)
	}
}

func TestNewNeedsAnAPIKeyWhateverTheEnvironment(t *testing.T) {
	t.Setenv("GOOGLE_API_KEY", "from-env")
	if _, err := New(t.Context(), Config{}); err == nil {
		t.Fatal("New without an API key succeeded; it would use GOOGLE_API_KEY")
	}
}

func TestRequestShape(t *testing.T) {
	f := newFixture(t)
	schema := `{"type":"object","required":["answer"],"properties":{"answer":{"type":"string"},"score":{"type":"number","minimum":0}},"additionalProperties":false}`
	f.replyWith(answer(`{"answer":"42","score":1}`, events.Usage{InputTokens: 7, OutputTokens: 3}, nil))
	png := []byte("\x89PNG\r\n\x1a\nfake-png")
	pdf := []byte("%PDF-1.7 fake")
	req := providers.Request{
		Model: "gemini-2.5-pro",
		Messages: []providers.Message{
			{Role: providers.RoleSystem, Content: "Be terse."},
			{Role: providers.RoleUser, Content: "first question"},
			{Role: providers.RoleAssistant, Content: "first answer"},
			{Role: providers.RoleUser, Content: "read these"},
		},
		Schema: &providers.Schema{Name: "out", JSON: json.RawMessage(schema)},
		Attachments: []providers.Attachment{
			{Name: "chart.png", MediaType: "image/png", Data: png},
			{Name: "paper.pdf", MediaType: "application/pdf", Data: pdf},
			{Name: "notes.txt", MediaType: "text/plain; charset=utf-8", Data: []byte("note body")},
		},
		MaxOutputTokens: 256,
	}
	resp, err := (&providers.Structured{Provider: f.client(t)}).Complete(t.Context(), &req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if string(resp.JSON) != `{"answer":"42","score":1}` || resp.Text != string(resp.JSON) {
		t.Fatalf("JSON %s text %q; want the upstream's object in both", resp.JSON, resp.Text)
	}
	if resp.Usage != (events.Usage{InputTokens: 7, OutputTokens: 3}) || resp.Latency <= 0 {
		t.Fatalf("usage %+v latency %s", resp.Usage, resp.Latency)
	}

	got := f.last(t)
	if got.Path != "/v1beta/models/gemini-2.5-pro:generateContent" {
		t.Fatalf("path %s", got.Path)
	}
	b := got.Body
	if s := get(t, b, "systemInstruction", "parts", 0, "text"); s != "Be terse." {
		t.Fatalf("systemInstruction %v", get(t, b, "systemInstruction"))
	}
	contents := get(t, b, "contents").([]any)
	if len(contents) != 3 {
		t.Fatalf("%d contents, want user, model, user (system goes to systemInstruction): %v", len(contents), contents)
	}
	for i, role := range []string{"user", "model", "user"} {
		if r := get(t, contents[i], "role"); r != role {
			t.Fatalf("contents[%d].role %v, want %s", i, r, role)
		}
	}
	if get(t, contents[1], "parts", 0, "text") != "first answer" || len(get(t, contents[0], "parts").([]any)) != 1 {
		t.Fatalf("earlier turns %v; attachments must go with the last user message only", contents[:2])
	}
	parts := get(t, contents[2], "parts").([]any)
	if len(parts) != 4 || get(t, parts[0], "text") != "read these" {
		t.Fatalf("last user parts %v; want its text and three attachments", parts)
	}
	for i, want := range []struct {
		mime string
		data []byte
	}{{"image/png", png}, {"application/pdf", pdf}} {
		p := parts[i+1]
		if get(t, p, "inlineData", "mimeType") != want.mime {
			t.Fatalf("part %d %v, want inline %s", i+1, p, want.mime)
		}
		data, err := base64.StdEncoding.DecodeString(get(t, p, "inlineData", "data").(string))
		if err != nil || !bytes.Equal(data, want.data) {
			t.Fatalf("part %d data %q (%v), want the attachment's bytes", i+1, data, err)
		}
	}
	if txt, _ := get(t, parts[3], "text").(string); !strings.Contains(txt, "notes.txt") || !strings.Contains(txt, "note body") || get(t, parts[3], "inlineData") != nil {
		t.Fatalf("text attachment part %v, want a text part with the file name and body", parts[3])
	}
	gc := get(t, b, "generationConfig")
	if get(t, gc, "responseMimeType") != "application/json" {
		t.Fatalf("responseMimeType %v", get(t, gc, "responseMimeType"))
	}
	var wantSchema any
	json.Unmarshal([]byte(schema), &wantSchema)
	if s := get(t, gc, "responseJsonSchema"); !reflect.DeepEqual(s, wantSchema) {
		t.Fatalf("responseJsonSchema %v, want %v", s, wantSchema)
	}
	if get(t, gc, "responseSchema") != nil {
		t.Fatal("responseSchema set too; Gemini takes one of the two")
	}
	if get(t, gc, "maxOutputTokens") != float64(256) {
		t.Fatalf("maxOutputTokens %v", get(t, gc, "maxOutputTokens"))
	}
	if get(t, b, "tools") != nil {
		t.Fatalf("tools %v without web search", get(t, b, "tools"))
	}
}

func TestPlainRequestHasNoExtras(t *testing.T) {
	f := newFixture(t)
	f.replyWith(answer("plain", events.Usage{InputTokens: 1, OutputTokens: 1}, nil))
	resp, err := f.client(t).Complete(t.Context(), ask("x"))
	if err != nil || resp.JSON != nil || resp.Text != "plain" {
		t.Fatalf("got %q %s %v", resp.Text, resp.JSON, err)
	}
	b := f.last(t).Body
	if b["systemInstruction"] != nil || b["tools"] != nil {
		t.Fatalf("body %v: no system instruction or tools were asked for", b)
	}
	if gc, ok := b["generationConfig"].(map[string]any); ok && (gc["responseMimeType"] != nil || gc["responseJsonSchema"] != nil || gc["maxOutputTokens"] != nil) {
		t.Fatalf("generationConfig %v; nothing was asked for", gc)
	}
}

func TestWebSearch(t *testing.T) {
	f := newFixture(t)
	cites := []events.Citation{
		{URL: "https://example.org/a", Title: "A", Snippet: "Everest is 8,849 m."},
		{URL: "https://example.org/b", Title: "B"},
		{URL: "https://example.org/a", Title: "A again"},
	}
	f.replyWith(answer("Everest is 8,849 m.", events.Usage{InputTokens: 3, OutputTokens: 4}, cites))
	req := ask("How tall is Everest?")
	req.WebSearch = true
	resp, err := f.client(t).Complete(t.Context(), req)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := []events.Citation{{URL: "https://example.org/a", Title: "A", Snippet: "Everest is 8,849 m."}, {URL: "https://example.org/b", Title: "B"}}
	if !reflect.DeepEqual(resp.Citations, want) {
		t.Fatalf("citations %+v, want %+v", resp.Citations, want)
	}
	tools, _ := get(t, f.last(t).Body, "tools").([]any)
	if len(tools) != 1 || get(t, tools[0], "googleSearch") == nil {
		t.Fatalf("tools %v, want the google search tool", tools)
	}
}

func TestUsageCountsThoughtsAndTextSkipsThem(t *testing.T) {
	f := newFixture(t)
	f.replyWith(rawJSON(200, map[string]any{
		"candidates": []any{map[string]any{
			"content": map[string]any{"role": "model", "parts": []any{
				map[string]any{"text": "thinking about it", "thought": true},
				map[string]any{"text": "the answer"},
			}},
			"finishReason": "STOP",
		}},
		"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 20, "totalTokenCount": 35},
	}))
	resp, err := f.client(t).Complete(t.Context(), ask("x"))
	if err != nil || resp.Text != "the answer" || resp.Usage != (events.Usage{InputTokens: 10, OutputTokens: 25}) {
		t.Fatalf("got %q %+v %v; want the answer without thoughts, output tokens with them", resp.Text, resp.Usage, err)
	}
}

func TestContentFiltered(t *testing.T) {
	for name, body := range map[string]map[string]any{
		"prompt blocked": {
			"promptFeedback": map[string]any{"blockReason": "SAFETY"},
			"usageMetadata":  map[string]any{"promptTokenCount": 4, "totalTokenCount": 4},
		},
		"answer stopped for safety": {
			"candidates":    []any{map[string]any{"content": map[string]any{"role": "model"}, "finishReason": "SAFETY"}},
			"usageMetadata": map[string]any{"promptTokenCount": 4, "totalTokenCount": 4},
		},
		"prohibited content": {
			"candidates": []any{map[string]any{"finishReason": "PROHIBITED_CONTENT"}},
		},
		"blocklist": {
			"candidates": []any{map[string]any{"finishReason": "BLOCKLIST"}},
		},
		"spii": {
			"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": "partial"}}}, "finishReason": "SPII"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.replyWith(rawJSON(200, body))
			_, err := f.client(t).Complete(t.Context(), ask("x"))
			var pe *providers.Error
			if !errors.As(err, &pe) || pe.Class != providers.ClassRefused {
				t.Fatalf("err %v, want refused", err)
			}
			if pe.Retriable() {
				t.Fatal("a content filter must not be retried")
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	for _, c := range []struct {
		status int
		rpc    string
		class  string
	}{
		{403, "PERMISSION_DENIED", providers.ClassHostError},
		{404, "NOT_FOUND", providers.ClassHostError},
		{408, "DEADLINE_EXCEEDED", providers.ClassTimeout},
		{503, "UNAVAILABLE", providers.ClassHostError},
		{504, "DEADLINE_EXCEEDED", providers.ClassTimeout},
		{429, "RESOURCE_EXHAUSTED", providers.ClassRateLimited},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			f := newFixture(t)
			f.replyWith(func(w http.ResponseWriter, r *http.Request) {
				writeError(w, c.status, c.rpc, "upstream says no to key "+testKey, 0)
			})
			_, err := f.client(t).Complete(t.Context(), ask("x"))
			var pe *providers.Error
			if !errors.As(err, &pe) || pe.Class != c.class || pe.Status != c.status {
				t.Fatalf("err %v, want %s with status %d", err, c.class, c.status)
			}
			if pe.RetryAfter != 0 {
				t.Fatalf("RetryAfter %s without a RetryInfo", pe.RetryAfter)
			}
			if strings.Contains(err.Error(), testKey) || !strings.Contains(err.Error(), "upstream says no") {
				t.Fatalf("error %q: want the upstream's message without the API key", err)
			}
			if f.Requests() != 1 {
				t.Fatalf("%d requests; the SDK must not retry", f.Requests())
			}
		})
	}
	t.Run("plain text 502", func(t *testing.T) {
		f := newFixture(t)
		f.replyWith(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad gateway", http.StatusBadGateway)
		})
		_, err := f.client(t).Complete(t.Context(), ask("x"))
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != providers.ClassHostError || pe.Status != 502 {
			t.Fatalf("err %v, want host_error 502", err)
		}
	})
	t.Run("fractional retry delay", func(t *testing.T) {
		f := newFixture(t)
		f.replyWith(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, 429, "RESOURCE_EXHAUSTED", "quota", 1500*time.Millisecond)
		})
		_, err := f.client(t).Complete(t.Context(), ask("x"))
		if pe := providers.Classify(err); pe.Class != providers.ClassRateLimited || pe.RetryAfter != 1500*time.Millisecond {
			t.Fatalf("err %v RetryAfter %s, want rate_limited after 1.5s", err, pe.RetryAfter)
		}
	})
}

func TestInvalidStructuredOutput(t *testing.T) {
	f := newFixture(t)
	f.replyWith(answer(`{"answer": "trunc`, events.Usage{InputTokens: 1, OutputTokens: 1}, nil))
	req := ask("x")
	req.Schema = &providers.Schema{Name: "s", JSON: json.RawMessage(`{"type":"object"}`)}
	_, err := (&providers.Structured{Provider: f.client(t)}).Complete(t.Context(), req)
	if pe := providers.Classify(err); pe.Class != providers.ClassNotJSON || f.Requests() != 2 {
		t.Fatalf("err %v after %d requests, want not_json after the repair", err, f.Requests())
	}
	req.Schema.JSON = json.RawMessage(`{not json`)
	before := f.Requests()
	_, err = f.client(t).Complete(t.Context(), req)
	if pe := providers.Classify(err); pe.Class != providers.ClassHostError || pe.Retriable() || f.Requests() != before {
		t.Fatalf("err %v after %d requests; an invalid schema is a bad request and is not sent", err, f.Requests()-before)
	}
}

func TestNoAutomaticContinuation(t *testing.T) {
	f := newFixture(t)
	f.replyWith(rawJSON(200, map[string]any{
		"candidates": []any{map[string]any{
			"content":           map[string]any{"role": "model", "parts": []any{map[string]any{"text": "part one"}}},
			"finishReason":      "CONTINUATION",
			"continuationToken": base64.StdEncoding.EncodeToString([]byte("tok")),
		}},
		"usageMetadata": map[string]any{"promptTokenCount": 2, "candidatesTokenCount": 2, "totalTokenCount": 4},
	}), answer("part two", events.Usage{InputTokens: 2, OutputTokens: 2}, nil))
	resp, err := f.client(t).Complete(t.Context(), ask("x"))
	if err != nil || resp.Text != "part one" {
		t.Fatalf("got %q %v", resp.Text, err)
	}
	if n := f.Requests(); n != 1 {
		t.Fatalf("%d requests; one Complete must be one upstream request", n)
	}
}

func TestDeadlineIsATimeout(t *testing.T) {
	f := newFixture(t)
	f.Play(contract.Scenario{Kind: contract.KindStall})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := f.client(t).Complete(ctx, ask("x"))
	if !errors.Is(err, context.DeadlineExceeded) || providers.Classify(err).Class != providers.ClassTimeout {
		t.Fatalf("err %v, want the context's deadline", err)
	}
}

func TestTransportErrorHidesKey(t *testing.T) {
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return nil, fmt.Errorf("dial failed for %s", r.Header.Get("x-goog-api-key"))
	})}
	c, err := New(t.Context(), Config{APIKey: testKey, BaseURL: "http://upstream.invalid/", HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(t.Context(), ask("x"))
	if err == nil || strings.Contains(err.Error(), testKey) || providers.Classify(err).Class != providers.ClassHostError {
		t.Fatalf("err %v; want a host_error without the key", err)
	}
}
