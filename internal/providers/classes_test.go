package providers

import (
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
)

func TestHTTPClass(t *testing.T) {
	for _, c := range []struct {
		status        int
		code, message string
		want          string
		retried       bool
	}{
		{429, "", "slow down", ClassRateLimited, true},
		{408, "", "", ClassTimeout, true},
		{504, "", "", ClassTimeout, true},
		{500, "", "boom", ClassHostError, true},
		{503, "", "", ClassHostError, true},
		{529, "overloaded_error", "Overloaded", ClassHostError, true},
		{400, "", "bad", ClassHostError, false},
		{401, "invalid_api_key", "no", ClassHostError, false},
		{404, "", "model not found", ClassHostError, false},
		{400, "content_filter", "flagged", ClassRefused, false},
		{400, "content_policy_violation", "flagged", ClassRefused, false},
		{400, "context_length_exceeded", "Your input exceeds the context window of this model.", ClassContextOverflow, false},
		{400, "exceed_context_size_error", "request (1321 tokens) exceeds the available context size (1024 tokens)", ClassContextOverflow, false},
		{413, "", "prompt is too long: 208656 tokens > 200000 maximum", ClassContextOverflow, false},
		{500, "", "the input length exceeds the context length", ClassContextOverflow, false},
	} {
		got := HTTPClass(c.status, c.code, c.message)
		e := &Error{Class: got, Status: c.status}
		if got != c.want || e.Retriable() != c.retried {
			t.Errorf("HTTPClass(%d, %q, %q) = %s (retried %v), want %s (retried %v)", c.status, c.code, c.message, got, e.Retriable(), c.want, c.retried)
		}
	}
}

func TestContextRefusalNumbers(t *testing.T) {
	for _, c := range []struct {
		code, message  string
		prompt, window int
	}{
		{"context_length_exceeded", "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.", 8227, 8192},
		{"", "This model's maximum context length is 4097 tokens, however you requested 4116 tokens (3860 in your prompt; 256 for the completion).", 4116, 4097},
		{"", "This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in the messages, 10000 in the completion).", 112946, 16384},
		{"", "This model's maximum context length is 2048 tokens. However, your request has 8 input tokens plus 2045 'max_tokens'.", 8, 2048},
		{"exceed_context_size_error", "request (4476 tokens) exceeds the available context size (4096 tokens)", 4476, 4096},
		{"invalid_request_error", "prompt is too long: 208656 tokens > 200000 maximum", 208656, 200000},
		{"invalid_request_error", "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again", 199759, 200000},
		{"INVALID_ARGUMENT", "The input token count (3475108) exceeds the maximum number of tokens allowed (1048576).", 3475108, 1048576},
		{"context_length_exceeded", "Your input exceeds the context window of this model. Please adjust your input and try again.", 0, 0},
	} {
		prompt, window, ok := ContextRefusal(c.code, c.message)
		if !ok || prompt != c.prompt || window != c.window {
			t.Errorf("ContextRefusal(%q): %d, %d, %v; want %d, %d", c.message, prompt, window, ok, c.prompt, c.window)
		}
	}
	for _, m := range []string{"Invalid model: x", "quota exceeded", "max_tokens must be at least 1"} {
		if _, _, ok := ContextRefusal("invalid_request_error", m); ok {
			t.Errorf("ContextRefusal(%q) is a context refusal", m)
		}
	}
}

func TestFinished(t *testing.T) {
	usage := func(in, out int) events.Usage { return events.Usage{InputTokens: in, OutputTokens: out} }
	for _, c := range []struct {
		name   string
		req    Request
		resp   Response
		class  string
		prompt int
	}{
		{"an answer", Request{}, Response{Text: "a", Finish: FinishStop}, "", 0},
		{"a cut answer keeps its text", Request{ContextWindow: 1024}, Response{Text: "a", Finish: FinishLength, Usage: usage(100, 96)}, "", 0},
		{"cut at the window", Request{ContextWindow: 1024}, Response{Text: "a", Finish: FinishLength, Usage: usage(1000, 24)}, ClassContextOverflow, 1000},
		{"cut near the window", Request{ContextWindow: 1024}, Response{Text: "a", Finish: FinishLength, Usage: usage(990, 15)}, ClassContextOverflow, 990},
		{"the host says the window filled", Request{}, Response{Text: "a", Finish: FinishContext}, ClassContextOverflow, 0},
		{"a window unknown", Request{}, Response{Text: "a", Finish: FinishLength, Usage: usage(1000, 24)}, "", 0},
		{"cut with no text", Request{}, Response{Finish: FinishLength}, ClassOutputLimit, 0},
		{"no text", Request{}, Response{Text: " ", Finish: FinishStop}, ClassEmpty, 0},
		{"tool calls only", Request{}, Response{ToolCalls: []events.ToolCall{{Name: "f"}}}, "", 0},
		{"a structured reply goes to the repair layer", Request{Schema: testSchema}, Response{Finish: FinishLength}, "", 0},
	} {
		err := Finished(&c.req, &c.resp)
		switch {
		case c.class == "" && err != nil:
			t.Errorf("%s: %v, want none", c.name, err)
		case c.class != "" && (Classify(err).Class != c.class || Classify(err).PromptTokens != c.prompt):
			t.Errorf("%s: %v, want %s with prompt %d", c.name, err, c.class, c.prompt)
		}
	}
}

// FuzzContextRefusal: any host message is read without a panic, and the
// numbers it gives are positive.
func FuzzContextRefusal(f *testing.F) {
	f.Add("exceed_context_size_error", "request (1321 tokens) exceeds the available context size (1024 tokens)")
	f.Add("", "This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in the messages, 10000 in the completion).")
	f.Add("", "prompt is too long: 99999999999999999999999 tokens > 1 maximum")
	f.Fuzz(func(t *testing.T, code, message string) {
		prompt, window, _ := ContextRefusal(code, message)
		if prompt < 0 || window < 0 {
			t.Fatalf("prompt %d window %d", prompt, window)
		}
	})
}
