package chat

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/apiv1"
)

// Usage is OpenAI's usage object: the tokens of every model call of the
// query, summed; the query is billed on the same numbers.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Add counts one model call's tokens.
func (u *Usage) Add(input, output int) {
	u.PromptTokens += input
	u.CompletionTokens += output
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
}

// Completion is a chat.completion object. Crosscheck is the whole query,
// as GET /v1/queries/{id} returns it.
type Completion struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	Choices           []Choice        `json:"choices"`
	Usage             Usage           `json:"usage"`
	SystemFingerprint *string         `json:"system_fingerprint"`
	Crosscheck        json.RawMessage `json:"crosscheck,omitempty"`
}

// Choice is the one choice of a completion.
type Choice struct {
	Index        int             `json:"index"`
	Message      Message         `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs"`
}

// Message is the assistant's message: its content, or the tools it calls.
type Message struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Chunk is a chat.completion.chunk object of a stream. Usage is null on
// every chunk but the usage chunk; Crosscheck, on the finishing chunk
// only, is the whole query.
type Chunk struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	Choices           []ChunkChoice   `json:"choices"`
	Usage             *Usage          `json:"usage"`
	SystemFingerprint *string         `json:"system_fingerprint"`
	Crosscheck        json.RawMessage `json:"crosscheck,omitempty"`
}

// ChunkChoice is the one choice of a chunk.
type ChunkChoice struct {
	Index        int             `json:"index"`
	Delta        Delta           `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs"`
}

// Delta is what a chunk adds to the message.
type Delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCallDelta is a piece of a tool call: its index always; its id, type
// and function name on its first piece only; its arguments in pieces.
type ToolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function FunctionCallDelta `json:"function"`
}

// FunctionCallDelta is a piece of a function call.
type FunctionCallDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Finish reasons.
const (
	FinishStop      = "stop"
	FinishToolCalls = "tool_calls"
)

// NewCompletion returns the completion of a query that answered text, or
// that called tools (then the message has the calls and no content, and
// finish_reason is tool_calls), with its usage and the whole query.
func NewCompletion(id, model string, created int64, text string, calls []ToolCall, usage Usage, query json.RawMessage) Completion {
	msg := Message{Role: "assistant"}
	finish := FinishStop
	if len(calls) > 0 {
		// The answer is the calls: OpenAI's clients run them and send
		// their results back; the query's text stays in crosscheck.
		msg.ToolCalls, finish = calls, FinishToolCalls
	} else {
		msg.Content = &text
	}
	return Completion{
		ID: id, Object: "chat.completion", Created: created, Model: model,
		Choices: []Choice{{Index: 0, Message: msg, FinishReason: finish, Logprobs: json.RawMessage("null")}},
		Usage:   usage, Crosscheck: query,
	}
}

// Chunks returns the chunks that stream an answer: the assistant's role,
// the text in pieces of about pieceBytes or, when the answer calls tools,
// each call's pieces (its index on each, its id, type and name on its
// first only), then the finishing chunk carrying the whole query; with
// includeUsage, the usage chunk last.
func Chunks(id, model string, created int64, text string, calls []ToolCall, usage Usage, query json.RawMessage, includeUsage bool) []Chunk {
	chunk := func(d Delta) Chunk {
		return Chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
			Choices: []ChunkChoice{{Delta: d, Logprobs: json.RawMessage("null")}}}
	}
	empty := ""
	out := []Chunk{chunk(Delta{Role: "assistant", Content: &empty})}
	if len(calls) == 0 {
		for _, p := range Pieces(text, pieceBytes) {
			out = append(out, chunk(Delta{Content: &p}))
		}
	}
	for i, c := range calls {
		out = append(out, chunk(Delta{ToolCalls: []ToolCallDelta{{Index: i, ID: c.ID, Type: "function", Function: FunctionCallDelta{Name: c.Function.Name}}}}))
		for _, a := range Pieces(c.Function.Arguments, pieceBytes) {
			out = append(out, chunk(Delta{ToolCalls: []ToolCallDelta{{Index: i, Function: FunctionCallDelta{Arguments: a}}}}))
		}
	}
	finish := FinishStop
	if len(calls) > 0 {
		finish = FinishToolCalls
	}
	last := chunk(Delta{})
	last.Choices[0].FinishReason = &finish
	last.Crosscheck = query
	out = append(out, last)
	if includeUsage {
		u := usage
		out = append(out, Chunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []ChunkChoice{}, Usage: &u})
	}
	return out
}

// pieceBytes is about the size of one content delta.
const pieceBytes = 48

// Pieces splits s into pieces of about n bytes, each ending after a space
// where one is near and never inside a UTF-8 sequence; joined they are s.
func Pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > n/2 && s[cut-1] != ' ' {
			cut--
		}
		if s[cut-1] != ' ' {
			cut = n
		}
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// ErrorBody is an error in the shape OpenAI's clients parse, with the
// crosscheck envelope's own fields beside OpenAI's.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the crosscheck envelope's detail plus OpenAI's type and
// param. Code is the crosscheck code, the same one OpenAI's clients read.
type ErrorDetail struct {
	apiv1.ErrorDetail
	Type  string  `json:"type"`
	Param *string `json:"param"`
}

// NewError returns the error body of envelope detail d answered with HTTP
// status; param names the parameter at fault, if any.
func NewError(d apiv1.ErrorDetail, status int, param string) ErrorBody {
	e := ErrorDetail{ErrorDetail: d, Type: ErrorType(status)}
	if param != "" {
		e.Param = &param
	}
	return ErrorBody{Error: e}
}

// ErrorType is OpenAI's error type for an HTTP status.
func ErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusPaymentRequired:
		return "insufficient_quota"
	case http.StatusConflict:
		return "conflict_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "service_unavailable_error"
	}
	return "api_error"
}
