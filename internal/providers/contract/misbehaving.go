package contract

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// contextRefusal is how a host refuses a prompt too long for the model's
// context window: its status and exact error body, and the prompt's tokens
// and the window its message gives (0 when it gives none).
type contextRefusal struct {
	host           string
	status         int
	body           string
	prompt, window int
}

// contextRefusals are the refusals of each wire format's hosts, as they
// send them.
var contextRefusals = map[string][]contextRefusal{
	WireResponses: {
		{"OpenAI Responses", 400, `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`, 0, 0},
	},
	WireChat: {
		{"OpenAI Chat Completions", 400, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, 8227, 8192},
		{"llama.cpp server", 400, `{"error":{"code":400,"message":"request (1321 tokens) exceeds the available context size (1024 tokens)","type":"exceed_context_size_error","n_prompt_tokens":1321,"n_ctx":1024}}`, 1321, 1024},
		{"vLLM", 400, `{"object":"error","message":"This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, 112946, 16384},
		{"vLLM (newer)", 400, `{"error":{"message":"This model's maximum context length is 2048 tokens. However, your request has 3000 input tokens. Please reduce the length of the input messages. (parameter=input_tokens, value=3000)","type":"BadRequestError","param":"input_tokens","code":400}}`, 3000, 2048},
	},
	WireAnthropic: {
		{"Anthropic, prompt", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208656 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, 208656, 200000},
		{"Anthropic, prompt and max_tokens", 400, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again\"},\"request_id\":\"req_011CSHoEeqs5C35K2UUqR7Fy\"}", 178959, 200000},
	},
	WireGemini: {
		{"Gemini", 400, `{"error":{"code":400,"message":"The input token count (3475108) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, 3475108, 1048576},
	},
}

// structuredReply is a valid reply for schema.
const structuredReply = `{"answer":"one answer","conflicts":[]}`

// misbehaving runs the hosts that answer the way real ones do rather than
// the way the vendor documents: prose around the JSON, a fence inside the
// text, response_format ignored, an answer cut at the output bound or at
// the context window, no usage, no content, a safety refusal, a context
// refusal in each host's wording. A structured call goes through
// providers.Structured, the one repair layer every backend hands its raw
// reply to.
func misbehaving(t *testing.T, f Fixture) {
	structured := func(t *testing.T) (*providers.Response, error, int) {
		t.Helper()
		req := ask("Synthesise the answers.")
		req.Schema, req.Purpose = schema, events.StepSynthesis
		before := f.Requests()
		resp, err := (&providers.Structured{Provider: f.Provider(t)}).Complete(context.Background(), req)
		return resp, err, f.Requests() - before
	}
	wantObject := func(t *testing.T, resp *providers.Response, err error, n, calls int) {
		t.Helper()
		if err != nil {
			t.Fatalf("err %v after %d requests, want the object", err, n)
		}
		if n != calls {
			t.Fatalf("%d requests, want %d", n, calls)
		}
		var out struct{ Answer string }
		if json.Unmarshal(resp.JSON, &out) != nil || out.Answer != "one answer" {
			t.Fatalf("structured output %s, want %s", resp.JSON, structuredReply)
		}
	}
	wantClass := func(t *testing.T, err error, class string, n, calls int) *providers.Error {
		t.Helper()
		var pe *providers.Error
		if !errors.As(err, &pe) || pe.Class != class {
			t.Fatalf("err %v, want a %s *providers.Error", err, class)
		}
		if n != calls {
			t.Fatalf("%d requests, want %d", n, calls)
		}
		return pe
	}
	usage := events.Usage{InputTokens: 40, OutputTokens: 30}

	t.Run("prose around the JSON", func(t *testing.T) {
		f.Play(Scenario{Kind: KindAnswer, Text: "Here is the JSON you asked for:\n" + structuredReply + "\nI hope this helps, {and nothing more}.", Usage: usage})
		resp, err, n := structured(t)
		wantObject(t, resp, err, n, 1)
	})
	t.Run("a fence inside the text", func(t *testing.T) {
		f.Play(Scenario{Kind: KindAnswer, Text: "Sure. The object:\n\n```json\n" + structuredReply + "\n```\n\nAnything else?", Usage: usage})
		resp, err, n := structured(t)
		wantObject(t, resp, err, n, 1)
	})
	t.Run("response_format ignored, then the repair answers", func(t *testing.T) {
		f.Play(Scenario{Kind: KindAnswer, Text: "Once upon a time, a little fox found a box.", Usage: usage},
			Scenario{Kind: KindJSON, JSON: structuredReply, Usage: usage})
		resp, err, n := structured(t)
		wantObject(t, resp, err, n, 2)
		if resp.Usage != (events.Usage{InputTokens: 80, OutputTokens: 60}) {
			t.Fatalf("usage %+v, want both calls' together", resp.Usage)
		}
	})
	t.Run("response_format ignored twice is not_json", func(t *testing.T) {
		f.Play(Scenario{Kind: KindAnswer, Text: "Once upon a time, a little fox found a box.", Usage: usage})
		resp, err, n := structured(t)
		wantClass(t, err, providers.ClassNotJSON, n, 2)
		if resp == nil || resp.Usage != (events.Usage{InputTokens: 80, OutputTokens: 60}) {
			t.Fatalf("response %+v: a failed call keeps the usage of both calls", resp)
		}
	})
	t.Run("an object that does not match twice is schema_mismatch", func(t *testing.T) {
		f.Play(Scenario{Kind: KindJSON, JSON: `{"answer":1,"conflicts":[]}`, Usage: usage})
		_, err, n := structured(t)
		wantClass(t, err, providers.ClassSchemaMismatch, n, 2)
	})
	t.Run("a structured answer cut at the output bound is output_limit", func(t *testing.T) {
		f.Play(Scenario{Kind: KindCut, Text: `{"answer":"once upon a ti`, JSON: `{"answer":"once upon a ti`, Usage: usage})
		_, err, n := structured(t)
		wantClass(t, err, providers.ClassOutputLimit, n, 2)
	})
	t.Run("a text answer cut at the output bound keeps its text", func(t *testing.T) {
		f.Play(Scenario{Kind: KindCut, Text: "Mount Everest is 8,849 m tall and", Usage: usage})
		resp, err := f.Provider(t).Complete(context.Background(), ask("How tall is Everest?"))
		if err != nil || !strings.Contains(resp.Text, "8,849") || resp.Finish != providers.FinishLength {
			t.Fatalf("resp %+v, err %v: want the cut text with finish length", resp, err)
		}
	})
	t.Run("a host that cuts at the context window is context_overflow", func(t *testing.T) {
		f.Play(Scenario{Kind: KindCut, Text: "story", JSON: `{"answer":"st`, Usage: events.Usage{InputTokens: 1000, OutputTokens: 24}})
		req := ask("A long prompt.")
		req.ContextWindow = 1024
		before := f.Requests()
		_, err := f.Provider(t).Complete(context.Background(), req)
		pe := wantClass(t, err, providers.ClassContextOverflow, f.Requests()-before, 1)
		if pe.PromptTokens != 1000 || pe.ContextWindow != 1024 {
			t.Fatalf("prompt %d window %d, want 1000 and 1024", pe.PromptTokens, pe.ContextWindow)
		}
		req.Schema = schema
		before = f.Requests()
		_, err = (&providers.Structured{Provider: f.Provider(t)}).Complete(context.Background(), req)
		wantClass(t, err, providers.ClassContextOverflow, f.Requests()-before, 1)
	})
	t.Run("no usage", func(t *testing.T) {
		f.Play(Scenario{Kind: KindAnswer, Text: "Mount Everest is 8,849 m tall.", NoUsage: true})
		resp, err := f.Provider(t).Complete(context.Background(), ask("How tall is Everest?"))
		if err != nil || !strings.Contains(resp.Text, "8,849") || resp.Usage != (events.Usage{}) {
			t.Fatalf("resp %+v, err %v: want the answer with no usage", resp, err)
		}
	})
	t.Run("empty content", func(t *testing.T) {
		f.Play(Scenario{Kind: KindAnswer, Text: "", Usage: usage})
		before := f.Requests()
		_, err := f.Provider(t).Complete(context.Background(), ask("How tall is Everest?"))
		wantClass(t, err, providers.ClassEmpty, f.Requests()-before, 1)
		f.Play(Scenario{Kind: KindAnswer, Text: "", Usage: usage}, Scenario{Kind: KindJSON, JSON: structuredReply, Usage: usage})
		resp, err, n := structured(t)
		wantObject(t, resp, err, n, 2)
	})
	t.Run("a safety refusal is refused and not repaired", func(t *testing.T) {
		f.Play(Scenario{Kind: KindRefusal, Text: "I can't help with that.", Usage: usage})
		before := f.Requests()
		_, err := f.Provider(t).Complete(context.Background(), ask("x"))
		wantClass(t, err, providers.ClassRefused, f.Requests()-before, 1)
		_, err, n := structured(t)
		wantClass(t, err, providers.ClassRefused, n, 1)
	})
	for _, c := range contextRefusals[f.Wire()] {
		t.Run("context refusal: "+c.host, func(t *testing.T) {
			f.Play(Scenario{Kind: KindStatus, Status: c.status, Body: c.body})
			before := f.Requests()
			r := &providers.Retry{Provider: f.Provider(t), Delays: DefaultTestDelays}
			_, err := r.Complete(context.Background(), ask("x"))
			pe := wantClass(t, err, providers.ClassContextOverflow, f.Requests()-before, 1)
			if pe.Status != c.status || pe.PromptTokens != c.prompt || pe.ContextWindow != c.window {
				t.Fatalf("status %d prompt %d window %d, want %d, %d and %d", pe.Status, pe.PromptTokens, pe.ContextWindow, c.status, c.prompt, c.window)
			}
		})
	}
}

// DefaultTestDelays are retry delays short enough for a test: a failure
// that is retried shows as a second request at once.
var DefaultTestDelays = []time.Duration{time.Millisecond, time.Millisecond}
