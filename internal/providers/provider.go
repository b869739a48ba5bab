// Package providers is the one interface every model call goes through, and the
// classified error its backends return. Each backend lives in a package of its
// own below this one.
package providers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Message roles.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one chat message.
type Message struct {
	Role    string
	Content string
}

// Schema asks for structured output: a JSON object valid against JSON.
type Schema struct {
	Name string
	JSON json.RawMessage
}

// Attachment is a file that travels with a call: each backend sends images
// and PDFs in its native form where the model reads them, and text otherwise.
type Attachment struct {
	Name      string
	MediaType string // e.g. image/png, application/pdf, text/plain
	Data      []byte
	// Text is the file's extracted text, "" when it has none. Vendor
	// backends send Data; a backend that plays a model (the simulated one)
	// reads Text instead.
	Text string
}

// Request is one model call.
type Request struct {
	// Model is the upstream model name.
	Model string
	// Purpose is the step the call serves (events.Step*). Vendor backends do
	// not send it; the simulated backend plays the step it names.
	Purpose  string
	Messages []Message
	// Schema, when set, asks for a JSON object in Response.JSON, in the
	// backend's native way (response format, forced tool use, response schema).
	Schema *Schema
	// Attachments go with the last user message.
	Attachments []Attachment
	// WebSearch asks for the vendor's own web search, where the backend has it;
	// its sources come back as Response.Citations.
	WebSearch bool
	// MaxOutputTokens bounds the answer; zero leaves the vendor's default.
	MaxOutputTokens int
	// ContextWindow is the model's context window in tokens, 0 when not
	// known: an answer cut when the prompt and the output filled it fails
	// as context_overflow (Finished).
	ContextWindow int
	// Tools are functions the model may propose to call (Response.ToolCalls),
	// sent in the vendor's native way; ToolChoice is auto (or empty), none,
	// required, or the name of one tool.
	Tools      []events.Tool
	ToolChoice string
}

// Response is what a model returned.
type Response struct {
	Text string
	// JSON is the structured output: the object a vendor returned natively
	// (a forced tool's input), then the object Structured took out of the
	// reply.
	JSON      json.RawMessage
	Citations []events.Citation
	Usage     events.Usage
	// UsageSource is UsageEstimated when the service counted the usage
	// itself because the host reported none (Estimated), else empty: the
	// host reported it.
	UsageSource string
	Latency     time.Duration
	// ToolCalls are the calls of Request.Tools the model proposes.
	ToolCalls []events.ToolCall
	// Finish is why the model stopped, as the host said: FinishStop,
	// FinishLength (the output bound), FinishContext (the context window
	// filled); empty when it did not say.
	Finish string
}

// Why a model stopped (Response.Finish).
const (
	FinishStop    = "stop"
	FinishLength  = "length"
	FinishContext = "context"
)

// UsageEstimated marks usage the service counted with its tokenizer.
const UsageEstimated = events.UsageEstimated

// Provider is a model backend.
//
// The request and the response travel by pointer: a call waits on the
// model with every decorator's frame on its goroutine's stack, and a
// request or response copied into each of them would keep that stack above
// the size the runtime starts it with.
type Provider interface {
	// Complete runs one call. It neither modifies *req nor keeps it once it
	// returns. The response is never nil when err is nil; when the call
	// failed it is nil or carries what the failed call reported (its
	// Latency, the Usage of a call that was answered). Its error is an
	// *Error when the failure is the upstream's, or the context's error when
	// ctx ended.
	Complete(ctx context.Context, req *Request) (*Response, error)
}

// Failure classes of a call: the events vocabulary (events.Class*), one
// for every backend and every wire format.
const (
	ClassOutputLimit     = events.ClassOutputLimit
	ClassContextOverflow = events.ClassContextOverflow
	ClassNotJSON         = events.ClassNotJSON
	ClassSchemaMismatch  = events.ClassSchemaMismatch
	ClassEmpty           = events.ClassEmpty
	ClassRefused         = events.ClassRefused
	ClassHostError       = events.ClassHostError
	ClassTimeout         = events.ClassTimeout
	ClassRateLimited     = events.ClassRateLimited
)

// Error is a classified failure of a call.
type Error struct {
	Class      string
	Status     int
	Message    string
	RetryAfter time.Duration
	// Final marks a failure a retry cannot mend, whatever its class: a call
	// the service cannot make as configured, a response too large to read.
	Final bool
	// PromptTokens and ContextWindow are what a host's refusal of a prompt
	// too long for its context window said (context_overflow): the prompt's
	// tokens and the window as it counted them, 0 when it did not say.
	PromptTokens, ContextWindow int
	// Usage is what the host processed for a failed call it answered (as
	// it reported it, or as the service counted it: UsageSource), zero
	// when it answered none; Metered sets it. It is never charged.
	Usage       events.Usage
	UsageSource string
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s (upstream status %d): %s", e.Class, e.Status, e.Message)
	}
	return e.Class + ": " + e.Message
}

// Classify returns the *Error in err's chain, or one of class timeout for a
// context deadline and host_error for anything else.
func Classify(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Class: ClassTimeout, Message: "the model call timed out"}
	}
	return &Error{Class: ClassHostError, Message: err.Error()}
}

// Unusable returns a final host_error: a call the service cannot make as
// configured (no backend, a request it cannot send), which reaches no host.
func Unusable(format string, args ...any) *Error {
	return &Error{Class: ClassHostError, Final: true, Message: fmt.Sprintf(format, args...)}
}

// Classified returns the *Error in err's chain: a failure the transport
// already classified (a response refused by LimitResponses) that a backend
// passes on as it is.
func Classified(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Set maps provider keys to the backends that serve them.
type Set map[string]Provider

// ProviderFunc adapts a function to Provider.
type ProviderFunc func(ctx context.Context, req *Request) (*Response, error)

// Complete calls f.
func (f ProviderFunc) Complete(ctx context.Context, req *Request) (*Response, error) {
	return f(ctx, req)
}

// Upstream sends each call under the vendor's name for its model: Names maps
// catalog model_ids to upstream names; ids it does not name pass unchanged.
type Upstream struct {
	Provider Provider
	Names    map[string]string
}

// Complete calls the provider with a copy of req under the upstream name
// of req.Model, or with req itself when the name is the same.
func (u *Upstream) Complete(ctx context.Context, req *Request) (*Response, error) {
	if name, ok := u.Names[req.Model]; ok && name != req.Model {
		return u.Provider.Complete(ctx, renamed(req, name))
	}
	return u.Provider.Complete(ctx, req)
}

// renamed is a copy of req for model name, on the heap: the call waiting
// on it does not hold it in its frame.
//
//go:noinline
func renamed(req *Request, name string) *Request {
	r := *req
	r.Model = name
	return &r
}
