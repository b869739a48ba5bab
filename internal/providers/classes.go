package providers

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// HTTPClass classifies a host's error answer from its HTTP status, the
// vendor's error code or type (empty when it sent none) and its message:
//
//   - 429 is rate_limited, 408 and 504 timeout;
//   - a refusal of a prompt too long for the context window, in any
//     vendor's wording (ContextRefusal), is context_overflow whatever its
//     status;
//   - a code or type that names a content filter or policy is refused;
//   - anything else (other 4xx, 5xx) is host_error, with the status.
func HTTPClass(status int, code, message string) string {
	switch {
	case status == http.StatusTooManyRequests:
		return ClassRateLimited
	case status == http.StatusRequestTimeout || status == http.StatusGatewayTimeout:
		return ClassTimeout
	}
	if _, _, ok := ContextRefusal(code, message); ok {
		return ClassContextOverflow
	}
	c := strings.ToLower(code)
	if status < 500 && (strings.Contains(c, "content_filter") || strings.Contains(c, "_policy") || strings.Contains(c, "policy_violation") || strings.Contains(c, "safety")) {
		return ClassRefused
	}
	return ClassHostError
}

// contextCodes are the error codes and types hosts give a prompt that does
// not fit: OpenAI's (Chat Completions and Responses) and llama.cpp's server.
var contextCodes = []string{"context_length_exceeded", "exceed_context_size_error"}

// contextWordings are the messages hosts give a prompt that does not fit,
// each with the prompt's tokens and the window where it says them (the
// submatch names prompt and window):
var contextWordings = []*regexp.Regexp{
	// OpenAI's Chat Completions and vLLM: "This model's maximum context
	// length is 8192 tokens. However, your messages resulted in 8227
	// tokens." / "However, you requested 4120 tokens (3120 in the messages,
	// 1000 in the completion)." / "However, your request has 8 input
	// tokens".
	regexp.MustCompile(`(?i)maximum context length is (?P<window>\d+) tokens.*?(?P<prompt>\d+) in the messages`),
	regexp.MustCompile(`(?i)maximum context length is (?P<window>\d+) tokens.*?(?:resulted in (?P<prompt>\d+) tokens|has (?P<prompt>\d+) input tokens|requested (?P<prompt>\d+) tokens)`),
	regexp.MustCompile(`(?i)maximum context length is (?P<window>\d+) tokens`),
	// OpenAI's Responses API: "Your input exceeds the context window of
	// this model."
	regexp.MustCompile(`(?i)exceeds the context window`),
	// llama.cpp's server: "request (1321 tokens) exceeds the available
	// context size (1024 tokens)", and older builds' "the request exceeds
	// the available context size".
	regexp.MustCompile(`(?i)request \((?P<prompt>\d+) tokens\) exceeds the available context size \((?P<window>\d+) tokens\)`),
	regexp.MustCompile(`(?i)exceeds the available context size`),
	// Anthropic: "prompt is too long: 208656 tokens > 200000 maximum" and
	// "input length and `max_tokens` exceed context limit: 178959 + 64000 >
	// 200000".
	regexp.MustCompile(`(?i)prompt is too long: (?P<prompt>\d+) tokens > (?P<window>\d+) maximum`),
	regexp.MustCompile(`(?i)prompt is too long`),
	regexp.MustCompile("(?i)exceed context limit: (?P<prompt>\\d+) \\+ \\d+ > (?P<window>\\d+)"),
	// Gemini: "The input token count (3475108) exceeds the maximum number
	// of tokens allowed (1048576)."
	regexp.MustCompile(`(?i)input token count \((?P<prompt>\d+)\) exceeds the maximum number of tokens allowed \((?P<window>\d+)\)`),
	regexp.MustCompile(`(?i)input token count.*exceeds the maximum`),
	// Ollama and other local runners: "the input length exceeds the
	// context length".
	regexp.MustCompile(`(?i)exceeds the context length`),
}

// ContextRefusal reports whether a host's error, its code or type and its
// message, refuses a prompt too long for the model's context window, and
// the prompt's tokens and the window as the host counted them (0 when the
// message does not say).
func ContextRefusal(code, message string) (prompt, window int, ok bool) {
	c := strings.ToLower(code)
	for _, k := range contextCodes {
		if strings.Contains(c, k) {
			ok = true
		}
	}
	for _, re := range contextWordings {
		m := re.FindStringSubmatch(message)
		if m == nil {
			continue
		}
		ok = true
		for i, name := range re.SubexpNames() {
			n, err := strconv.Atoi(m[i])
			switch {
			case err != nil || n <= 0:
			case name == "prompt" && prompt == 0:
				prompt = n
			case name == "window" && window == 0:
				window = n
			}
		}
		if prompt > 0 && window > 0 {
			break
		}
	}
	return prompt, window, ok
}

// Finished classifies an answer a host returned, once its backend has read
// it into resp (Finish, Usage, Text, ToolCalls):
//
//   - cut because the context window filled: the host said so
//     (FinishContext), or it stopped at the output bound (FinishLength)
//     with the prompt and the output it reported at req.ContextWindow
//     (within 2 %): context_overflow, the prompt must be shorter;
//   - a structured call (req.Schema set): nil, the reply goes to
//     Structured, which parses or repairs it;
//   - no text and no tool call: output_limit when cut at the output
//     bound, else empty;
//   - otherwise nil: a text cut at the output bound is still an answer.
func Finished(req *Request, resp *Response) error {
	used := resp.Usage.InputTokens + resp.Usage.OutputTokens
	switch {
	case resp.Finish == FinishContext:
		return &Error{Class: ClassContextOverflow, Message: "the host stopped the answer when the prompt and the answer filled the model's context window"}
	case resp.Finish == FinishLength && req.ContextWindow > 0 && resp.Usage.InputTokens > 0 && used >= req.ContextWindow-req.ContextWindow/50:
		return &Error{Class: ClassContextOverflow, PromptTokens: resp.Usage.InputTokens, ContextWindow: req.ContextWindow,
			Message: fmt.Sprintf("the answer was cut when the prompt (%d tokens) and the answer (%d) filled the model's context window of %d tokens", resp.Usage.InputTokens, resp.Usage.OutputTokens, req.ContextWindow)}
	case req.Schema != nil:
		return nil
	case strings.TrimSpace(resp.Text) == "" && len(resp.ToolCalls) == 0 && resp.Finish == FinishLength:
		return &Error{Class: ClassOutputLimit, Message: "the answer hit the output token limit before any text"}
	case strings.TrimSpace(resp.Text) == "" && len(resp.ToolCalls) == 0:
		return &Error{Class: ClassEmpty, Message: "the answer is empty"}
	}
	return nil
}
