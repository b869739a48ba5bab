package app

import (
	"context"
	"encoding/base64"
	"errors"
	"image/png"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	oaoption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// countingTransport counts the requests a client sends, and lets a test
// act on each response before the client sees it.
type countingTransport struct {
	n      atomic.Int64
	onResp func(*http.Response)
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && c.onResp != nil {
		c.onResp(resp)
	}
	return resp, err
}

// openAIClient is the official OpenAI Go client pointed at the harness's
// server with key.
func (h *harness) openAIClient(key string, tr *countingTransport, opts ...oaoption.RequestOption) openai.Client {
	if tr == nil {
		tr = &countingTransport{}
	}
	base := []oaoption.RequestOption{
		oaoption.WithBaseURL(h.m.URL() + "/v1/"), oaoption.WithAPIKey(key),
		oaoption.WithHTTPClient(&http.Client{Transport: tr, Timeout: 60 * time.Second}),
	}
	return openai.NewClient(append(base, opts...)...)
}

func userMessage(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
}

// chargedUsage sums the tokens of every model call the query's events
// record: the numbers it is billed on.
func (h *harness) chargedUsage(id string) (input, output int) {
	h.t.Helper()
	for _, r := range h.streamRecords("QUERIES") {
		if !strings.HasPrefix(r.Envelope.Subject, "ev.query."+id+".") {
			continue
		}
		if _, u, _, ok := events.Charged(r.Event); ok {
			input += u.InputTokens
			output += u.OutputTokens
		}
	}
	return input, output
}

func TestChatCompletionInEachMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	client := h.openAIClient(key, nil)
	ctx := context.Background()
	for _, model := range []string{"svc-unify", "svc-justify", "svc-verify"} {
		t.Run(model, func(t *testing.T) {
			prompt := "What is the boiling point of water at sea level? (" + model + ")"
			params := userMessage(prompt)
			params.Model = model
			got, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			must(t, got.Object == "chat.completion" && got.Model == model && strings.HasPrefix(got.ID, "req_"), "completion: %s", got.RawJSON())
			q := h.wait(key, got.ID, 30*time.Second)
			answer, _ := jsonPath(q, "answer", "text").(string)
			must(t, q["status"] == "completed" && answer != "", "query: %v", q)
			must(t, len(got.Choices) == 1 && got.Choices[0].Message.Content == answer && got.Choices[0].FinishReason == "stop",
				"content %q, want the query's answer %q", got.Choices[0].Message.Content, answer)
			in, out := h.chargedUsage(got.ID)
			must(t, got.Usage.PromptTokens == int64(in) && got.Usage.CompletionTokens == int64(out) && got.Usage.TotalTokens == int64(in+out) && in > 0,
				"usage %+v, the query was billed on %d + %d tokens", got.Usage, in, out)
			must(t, h.countSettlements(got.ID) == 1, "the query was not settled once")
			ext := got.JSON.ExtraFields["crosscheck"].Raw()
			must(t, strings.Contains(ext, `"request_id":"`+got.ID+`"`) && strings.Contains(ext, `"models":[`), "crosscheck extension: %s", ext)
			if model == "svc-verify" {
				must(t, strings.Contains(ext, `"claims":[`), "verify block missing: %s", ext)
			}

			// The same work streamed: the same answer, billed the same.
			for _, include := range []bool{true, false} {
				sp := userMessage(prompt)
				sp.Model = model
				if include {
					sp.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				}
				stream := client.Chat.Completions.NewStreaming(ctx, sp)
				var acc openai.ChatCompletionAccumulator
				var chunks []openai.ChatCompletionChunk
				for stream.Next() {
					c := stream.Current()
					acc.AddChunk(c)
					chunks = append(chunks, c)
				}
				if err := stream.Err(); err != nil {
					t.Fatalf("stream: %v", err)
				}
				must(t, len(chunks) >= 3 && chunks[0].Choices[0].Delta.Role == "assistant", "first chunk: %s", chunks[0].RawJSON())
				must(t, acc.Choices[0].Message.Content == answer, "streamed content %q, want %q", acc.Choices[0].Message.Content, answer)
				id := chunks[0].ID
				sq := h.wait(key, id, 30*time.Second)
				must(t, jsonPath(sq, "credits", "charged") == jsonPath(q, "credits", "charged"), "streamed charged %v, non-streamed %v", jsonPath(sq, "credits", "charged"), jsonPath(q, "credits", "charged"))
				last := chunks[len(chunks)-1]
				if include {
					in, out := h.chargedUsage(id)
					must(t, len(last.Choices) == 0 && last.Usage.TotalTokens == int64(in+out) && last.Usage.PromptTokens == int64(in), "usage chunk: %s", last.RawJSON())
					for _, c := range chunks[:len(chunks)-1] {
						must(t, strings.Contains(c.RawJSON(), `"usage":null`), "a chunk before the usage chunk carries usage: %s", c.RawJSON())
					}
				} else {
					must(t, len(last.Choices) == 1 && last.Choices[0].FinishReason == "stop", "last chunk without include_usage: %s", last.RawJSON())
					for _, c := range chunks {
						must(t, strings.Contains(c.RawJSON(), `"usage":null`), "a chunk carries usage: %s", c.RawJSON())
					}
				}
			}
		})
	}
}

// The stream keeps the connection alive with comment lines carrying the
// stage, never with chunks; it ends with data: [DONE].
func TestChatStreamKeepsAliveWithStageComments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.SSEHeartbeat = 20 * time.Millisecond }),
		withProviders(func() providers.Set {
			set, _ := testProviders(func(_ string, p *testProvider) { p.inner = slowProvider{p.inner, 100 * time.Millisecond} })
			return set
		}))
	key := h.newKey()
	req, _ := http.NewRequest("POST", h.m.URL()+"/v1/chat/completions", strings.NewReader(`{"model":"svc-justify","stream":true,"messages":[{"role":"user","content":"Is Pluto a planet?"}]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	must(t, resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && strings.HasPrefix(resp.Header.Get("X-Request-Id"), "req_"),
		"%d %v", resp.StatusCode, resp.Header)
	text := string(raw)
	must(t, strings.HasPrefix(text, ": stage queued\n\n") && strings.Contains(text, ": stage deliberating"), "no stage comments: %s", text)
	must(t, strings.HasSuffix(text, "data: [DONE]\n\n"), "stream does not end with [DONE]: %s", text)
	first := strings.Index(text, "data: ")
	must(t, !strings.Contains(text[first:], "\n: "), "a comment after the first chunk: %s", text)
}

// slowProvider answers after a delay, so a query deliberates for a while.
type slowProvider struct {
	inner providers.Provider
	d     time.Duration
}

func (s slowProvider) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return &providers.Response{}, ctx.Err()
	}
	return s.inner.Complete(ctx, req)
}

func TestChatModelsAndErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	ctx := context.Background()
	client := h.openAIClient(key, nil)

	page, err := client.Models.List(ctx)
	if err != nil {
		t.Fatalf("list models: %v", err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
		must(t, m.Object == "model" && m.OwnedBy == "crosscheck" && m.Created > 0, "model: %s", m.RawJSON())
	}
	must(t, strings.Join(ids, ",") == "svc-unify,svc-justify,svc-verify", "models %v", ids)
	one, err := client.Models.Get(ctx, "svc-verify")
	must(t, err == nil && one.ID == "svc-verify", "get model: %v %+v", err, one)
	r := h.api("GET", "/v1/models", key, nil)
	must(t, r.json(t)["object"] == "list" && len(r.json(t)["groups"].([]any)) == 5, "catalog kept: %s", r.body)
	_, err = client.Models.Get(ctx, "gpt-4o")
	var apiErr *openai.Error
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == 404 && apiErr.Code == "model_not_found", "unknown model: %v", err)

	tr := &countingTransport{}
	client = h.openAIClient(key, tr)
	params := userMessage("hello")
	params.Model = "gpt-4o"
	_, err = client.Chat.Completions.New(ctx, params)
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == 404 && apiErr.Code == "model_not_found" && apiErr.Param == "model" && apiErr.Type == "invalid_request_error",
		"unknown model: %v", err)
	must(t, apiErr.Response.Header.Get("X-Request-Id") != "", "no x-request-id on an error")
	must(t, tr.n.Load() == 1, "an unknown model was sent %d times", tr.n.Load())

	bad := h.openAIClient("xchk_AAAAAAAA"+strings.Repeat("b", 32), nil)
	params.Model = "svc-unify"
	_, err = bad.Chat.Completions.New(ctx, params)
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == 401 && apiErr.Code == "invalid_api_key" && apiErr.Type == "authentication_error", "bad key: %v", err)

	// An Idempotency-Key used with another body: 409, not retried.
	idem := oaoption.WithHeader("Idempotency-Key", "chat-order-7")
	_, err = client.Chat.Completions.New(ctx, params, idem)
	must(t, err == nil, "first: %v", err)
	tr.n.Store(0)
	other := userMessage("another question")
	other.Model = "svc-unify"
	_, err = client.Chat.Completions.New(ctx, other, idem)
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == 409 && apiErr.Code == "idempotency_conflict", "conflict: %v", err)
	must(t, tr.n.Load() == 1, "the 409 was sent %d times: it must not be retried", tr.n.Load())
	must(t, apiErr.Response.Header.Get("X-Should-Retry") == "false", "409 without x-should-retry: false")
}

// A 429 is retried by the client after Retry-After, and the retry answers.
func TestChatRateLimitedIsRetried(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var calls atomic.Int64
	h := newHarness(t, withConfig(func(c *config.Config) { c.SSEMaxStreamsPerKey = 1 }),
		withProviders(func() providers.Set {
			set, _ := testProviders(func(_ string, p *testProvider) { p.hold, p.answers = hold, &calls })
			return set
		}))
	key := h.newKey()
	ctx := context.Background()
	params := userMessage("held question")
	params.Model = "svc-unify"
	firstDone := make(chan error, 1)
	first := h.openAIClient(key, nil)
	go func() {
		_, err := first.Chat.Completions.New(ctx, params)
		firstDone <- err
	}()
	eventually(t, 10*time.Second, "the first completion to be running", func() bool {
		return calls.Load() > 0
	})
	var limited atomic.Int64
	var once sync.Once
	tr := &countingTransport{onResp: func(resp *http.Response) {
		if resp.StatusCode != http.StatusTooManyRequests {
			return
		}
		limited.Add(1)
		must(t, resp.Header.Get("Retry-After") != "" && resp.Header.Get("Retry-After-Ms") != "", "429 without Retry-After: %v", resp.Header)
		// Free the slot before the client retries.
		once.Do(func() {
			close(hold)
			if err := <-firstDone; err != nil {
				t.Errorf("first completion: %v", err)
			}
		})
	}}
	second := userMessage("second question")
	second.Model = "svc-unify"
	client := h.openAIClient(key, tr, oaoption.WithMaxRetries(1))
	got, err := client.Chat.Completions.New(ctx, second)
	must(t, err == nil && got.Choices[0].Message.Content != "", "after the retry: %v", err)
	must(t, limited.Load() == 1 && tr.n.Load() == 2, "%d requests, %d limited", tr.n.Load(), limited.Load())
}

// A failure after the stream started is a data event with an error object,
// which the client reports as the stream's error.
func TestChatFailureMidStream(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) {
			p.fail = &providers.Error{Class: providers.ClassHostError, Status: 400, Message: "upstream refused"}
		})
		return set
	}))
	key := h.newKey()
	params := userMessage("doomed question")
	params.Model = "svc-unify"
	client := h.openAIClient(key, nil)
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	n := 0
	for stream.Next() {
		n++
	}
	err := stream.Err()
	var se *ssestream.StreamError
	must(t, errors.As(err, &se) && strings.Contains(string(se.Event.Data), `"code":"provider_error"`) && strings.Contains(string(se.Event.Data), `"type":`), "stream error: %v", err)
	must(t, n == 0, "%d chunks before the error", n)
	// Not streamed: the error is the response.
	// Not streamed: the error is the response, and the client does not
	// retry it on its own (a retry would be a new query).
	tr := &countingTransport{}
	once := h.openAIClient(key, tr)
	_, err = once.Chat.Completions.New(context.Background(), params)
	var apiErr *openai.Error
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == 502 && apiErr.Code == "provider_error" && apiErr.Type == "api_error", "not streamed: %v", err)
	must(t, tr.n.Load() == 1, "the failed query was sent %d times", tr.n.Load())
}

// A tool the models agree to call is the answer's tool call, in OpenAI's
// shape; the tool's result in the next request continues the conversation.
func TestChatToolCallAndContinuation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	client := h.openAIClient(key, nil)
	ctx := context.Background()
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("The weather in a city."),
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	})}
	ask := `What is the weather in Oslo? Please call get_weather {"city": "Oslo"}`
	for _, stream := range []bool{false, true} {
		params := openai.ChatCompletionNewParams{Model: "svc-justify", Tools: tools,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(ask)}}
		var msg openai.ChatCompletionMessage
		var id, finish string
		if stream {
			s := client.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			var toolChunks []openai.ChatCompletionChunk
			for s.Next() {
				c := s.Current()
				acc.AddChunk(c)
				if len(c.Choices) > 0 && len(c.Choices[0].Delta.ToolCalls) > 0 {
					toolChunks = append(toolChunks, c)
				}
			}
			must(t, s.Err() == nil, "stream: %v", s.Err())
			must(t, len(toolChunks) >= 2, "tool call in %d chunks, want its name then its arguments", len(toolChunks))
			first := toolChunks[0].Choices[0].Delta.ToolCalls[0]
			must(t, first.ID != "" && first.Type == "function" && first.Function.Name == "get_weather" && first.Index == 0, "first tool chunk: %s", toolChunks[0].RawJSON())
			for _, c := range toolChunks[1:] {
				d := c.Choices[0].Delta.ToolCalls[0]
				must(t, d.ID == "" && d.Function.Name == "" && d.Index == 0, "later tool chunk repeats the id or name: %s", c.RawJSON())
			}
			msg, id, finish = acc.Choices[0].Message, acc.ID, acc.Choices[0].FinishReason
		} else {
			got, err := client.Chat.Completions.New(ctx, params)
			must(t, err == nil, "create: %v", err)
			msg, id, finish = got.Choices[0].Message, got.ID, got.Choices[0].FinishReason
		}
		must(t, finish == "tool_calls" && len(msg.ToolCalls) == 1, "stream %v: finish %q, calls %+v", stream, finish, msg.ToolCalls)
		call := msg.ToolCalls[0]
		must(t, call.Function.Name == "get_weather" && call.Function.Arguments == `{"city":"Oslo"}` && call.Type == "function",
			"stream %v: call %+v", stream, call)
		// The query records every model's proposal and the agreed call. A
		// poll shows the query's end once the projection has applied it,
		// moments after the chat answer (and a running query's progress up
		// to 250 ms late): polled until then.
		q := h.wait(key, id, 30*time.Second)
		must(t, jsonPath(q, "tool_calls", 0, "id") == call.ID && jsonPath(q, "tool_calls", 0, "name") == "get_weather", "query's tool calls: %v", q)
		for i := range 4 {
			must(t, jsonPath(q, "models", i, "tool_calls", 0, "name") == "get_weather", "models[%d] proposal missing: %v", i, q)
		}

		// The continuation: the call and its result as messages.
		params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("12 degrees and clear", call.ID))
		var text string
		if stream {
			s := client.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			must(t, s.Err() == nil, "stream: %v", s.Err())
			text, id, finish = acc.Choices[0].Message.Content, acc.ID, acc.Choices[0].FinishReason
		} else {
			got, err := client.Chat.Completions.New(ctx, params)
			must(t, err == nil, "continue: %v", err)
			text, id, finish = got.Choices[0].Message.Content, got.ID, got.Choices[0].FinishReason
		}
		q = h.wait(key, id, 30*time.Second)
		must(t, finish == "stop" && text != "" && text == jsonPath(q, "answer", "text") && jsonPath(q, "tool_calls") == nil,
			"stream %v: continuation finish %q text %q, query %v", stream, finish, text, q["tool_calls"])
	}
}

// Content parts attach files: an upload's file_id, and files sent inline
// (an image_url data URL, file_data), which are uploaded for the query.
func TestChatContentPartsAttachFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	up := h.upload(key, "notes.py", []byte("# The kettle whistles at noon.\n"))
	must(t, up.status == 201, "upload: %d %s", up.status, up.body)
	uploaded := up.json(t)["file_id"].(string)
	img := base64.StdEncoding.EncodeToString(drawn(t, png.Encode))
	code := base64.StdEncoding.EncodeToString([]byte("# The ferry leaves at seven.\n"))
	body := `{"model":"svc-unify","messages":[{"role":"user","content":[
		{"type":"text","text":"When does the ferry leave?"},
		{"type":"file","file":{"file_id":"` + uploaded + `"}},
		{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `"}},
		{"type":"file","file":{"filename":"ferry.py","file_data":"` + code + `"}}]}]}`
	r := h.api("POST", "/v1/chat/completions", key, body)
	must(t, r.status == 200, "completion: %d %s", r.status, r.body)
	files, _ := jsonPath(r.json(t), "crosscheck", "files").([]any)
	must(t, len(files) == 3 && jsonPath(files[0], "file_id") == uploaded && jsonPath(files[1], "kind") == "image" && jsonPath(files[2], "name") == "ferry.py",
		"files: %v", files)
	r = h.api("POST", "/v1/chat/completions", key, `{"model":"svc-unify","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`)
	e, _ := r.json(t)["error"].(map[string]any)
	must(t, r.status == 400 && e["code"] == "invalid_request" && e["param"] == "messages[0].content[0].image_url.url" && e["type"] == "invalid_request_error", "web image: %d %s", r.status, r.body)
}

// A completion whose query its owner cancels answers the query's error
// cancelled as a 409 that OpenAI's clients do not retry, not as a server
// error: the service did not fail, the query was stopped on purpose.
func TestChatCompletionOfACancelledQuery(t *testing.T) {
	t.Parallel()
	probe := newCancelProbe(events.StepRevise)
	h := newHarness(t, withProviders(probe.set))
	t.Cleanup(probe.free)
	key := h.newKey()
	tr := &countingTransport{}
	client := h.openAIClient(key, tr)
	params := userMessage("cancel this completion: the Moon")
	params.Model = "svc-justify"
	errc := make(chan error, 1)
	go func() {
		_, err := client.Chat.Completions.New(context.Background(), params)
		errc <- err
	}()
	eventually(t, 30*time.Second, "the revisions to be called", func() bool { return probe.held.Load() > 0 })
	var id string
	eventually(t, 30*time.Second, "the completion's query to be listed", func() bool {
		r := h.api("GET", "/v1/queries", key, nil)
		if id, _ = jsonPath(r.json(t), "data", 0, "request_id").(string); id != "" {
			return true
		}
		return false
	})
	r := h.api("POST", "/v1/queries/"+id+"/cancel", key, nil)
	must(t, r.status == 202, "cancel: %d %s", r.status, r.body)
	probe.free()
	err := <-errc
	var apiErr *openai.Error
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict && apiErr.Code == "cancelled" && apiErr.Type == "conflict_error",
		"a cancelled completion: %v", err)
	must(t, tr.n.Load() == 1, "the cancelled completion was sent %d times", tr.n.Load())
}

// OpenAI's clients list and read models with GET /v1/models; a refused key
// there is an error in their shape too (type beside code), as on the chat
// completions.
func TestChatModelsRefusalInOpenAIShape(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bad := h.openAIClient("xchk_AAAAAAAA"+strings.Repeat("b", 32), nil)
	var apiErr *openai.Error
	_, err := bad.Models.List(context.Background())
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == 401 && apiErr.Code == "invalid_api_key" && apiErr.Type == "authentication_error", "list with a bad key: %v", err)
	_, err = bad.Models.Get(context.Background(), "svc-unify")
	must(t, errors.As(err, &apiErr) && apiErr.StatusCode == 401 && apiErr.Code == "invalid_api_key" && apiErr.Type == "authentication_error", "get with a bad key: %v", err)
}

// A completion that is refused stores none of its inline files: the client
// never learns their ids, and an OpenAI client retries a 429 on its own,
// so each attempt would leave another copy for 48 hours.
func TestChatRefusedCompletionStoresNoInlineFiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key, broke := h.newKey(), h.key(h.accountWith("free", 0))
	code := func(text string) string { return base64.StdEncoding.EncodeToString([]byte(text)) }
	for _, c := range []struct {
		name, key, extra, second string
		status                   int
	}{
		{"an unknown model in the selection", key, `,"crosscheck":{"models":{"provider_a":"no-such-model"}}`, "", 400},
		{"a second inline file refused", key, "", `,{"type":"file","file":{"filename":"tool.exe","file_data":"` + code("MZ") + `"}}`, 415},
		{"no credits", broke, "", "", 402},
	} {
		body := `{"model":"svc-unify"` + c.extra + `,"messages":[{"role":"user","content":[
			{"type":"text","text":"When does the ferry leave?"},
			{"type":"file","file":{"filename":"ferry.py","file_data":"` + code("# The ferry leaves at seven.\n") + `"}}` + c.second + `]}]}`
		r := h.api("POST", "/v1/chat/completions", c.key, body)
		must(t, r.status == c.status, "%s: %d %s, want %d", c.name, r.status, r.body, c.status)
		list := h.api("GET", "/v1/files", c.key, "")
		data, _ := list.json(t)["data"].([]any)
		must(t, list.status == 200 && len(data) == 0, "%s: the account holds files after the refusal: %s", c.name, list.body)
	}
}

// With parallel_tool_calls false an answer carries at most one tool call,
// as OpenAI promises; the others the models asked for come in later turns.
func TestChatOneToolCallAtATime(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},{"type":"function","function":{"name":"get_time"}}]`
	ask := `call get_weather {\"city\": \"Oslo\"} and call get_time`
	for _, c := range []struct {
		parallel string
		calls    int
	}{{"true", 2}, {"false", 1}} {
		r := h.api("POST", "/v1/chat/completions", key, `{"model":"svc-unify","tools":`+tools+`,"parallel_tool_calls":`+c.parallel+`,"messages":[{"role":"user","content":"`+ask+`"}]}`)
		must(t, r.status == 200, "parallel_tool_calls %s: %d %s", c.parallel, r.status, r.body)
		calls, _ := jsonPath(r.json(t), "choices", 0, "message", "tool_calls").([]any)
		must(t, len(calls) == c.calls, "parallel_tool_calls %s: %d tool calls, want %d: %s", c.parallel, len(calls), c.calls, r.body)
	}
}

// The router's own refusals on the chat door's paths are in OpenAI's
// shape too (its clients read error.type), and a 405 says which methods
// the path takes (Allow), on every path.
func TestRouteRefusalsOnTheChatDoor(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	for _, c := range []struct {
		method, path string
		status       int
		allow        string // for a 405
		chat         bool   // in OpenAI's shape
	}{
		{"GET", "/v1/chat/completions", 405, "POST", true},
		{"PUT", "/v1/chat/completions", 405, "POST", true},
		{"POST", "/v1/chat/completion", 404, "", true},
		{"DELETE", "/v1/models/svc-unify", 405, "GET", true},
		{"PUT", "/v1/queries/req_x", 405, "GET", false},
		{"GET", "/v1/estimate-cost", 405, "POST", false},
	} {
		r := h.api(c.method, c.path, key, nil)
		if c.chat {
			// Without a key too: the refusal is in the door's shape.
			u := h.api(c.method, c.path, "", nil)
			ue, _ := u.json(t)["error"].(map[string]any)
			_, hasType := ue["type"]
			must(t, u.status == 401 && hasType, "%s %s without a key: %d %s", c.method, c.path, u.status, u.body)
		}
		e, _ := r.json(t)["error"].(map[string]any)
		_, hasType := e["type"]
		_, hasParam := e["param"]
		must(t, r.status == c.status && e["code"] != nil, "%s %s: %d %s", c.method, c.path, r.status, r.body)
		must(t, hasType == c.chat && hasParam == c.chat, "%s %s: type and param present %v, want %v: %s", c.method, c.path, hasType, c.chat, r.body)
		must(t, r.header.Get("Allow") == c.allow, "%s %s: Allow %q, want %q", c.method, c.path, r.header.Get("Allow"), c.allow)
	}
}
