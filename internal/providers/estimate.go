package providers

import (
	"context"
	"strings"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Estimated counts the usage of a call whose host answered without
// reporting any: the input the call sent (its messages, the text of its
// attachments, its tools and its schema) and the output it got (the text,
// or the structured reply, and the tool calls), each with Count, the
// service's tokenizer for the model. The response is marked
// UsageEstimated, the call counted in crosscheck_model_usage_estimated_total
// and logged as a warning, so that a host that sends no usage is charged
// for what it did rather than nothing, and an operator sees it. A call the
// host did not answer (an HTTP error, no connection) is left as it is: it
// has no usage to count.
type Estimated struct {
	Provider Provider
	// Name is the provider key the calls are served under.
	Name string
	// Count counts a text's tokens as the model's tokenizer would.
	Count func(model, text string) int
	Log   zerolog.Logger
}

var _ Provider = (*Estimated)(nil)

// Complete runs req and counts its usage when the host answered without
// reporting any.
func (e *Estimated) Complete(ctx context.Context, req *Request) (*Response, error) {
	// The call waits in e.Provider.Complete, holding this frame: the count
	// is in estimate, so the frame stays small.
	resp, err := e.Provider.Complete(ctx, req)
	if resp == nil || resp.Usage != (events.Usage{}) || !Answered(resp, err) {
		return resp, err
	}
	e.estimate(req, resp)
	return resp, err
}

// estimate fills resp's usage with the counts of what req sent and resp
// holds.
//
//go:noinline
func (e *Estimated) estimate(req *Request, resp *Response) {
	var in strings.Builder
	for _, m := range req.Messages {
		in.WriteString(m.Content)
		in.WriteByte('\n')
	}
	for _, a := range req.Attachments {
		in.WriteString(a.Text)
	}
	for _, t := range req.Tools {
		in.WriteString(t.Name + "\n" + t.Description + "\n" + t.Parameters + "\n")
	}
	if req.Schema != nil {
		in.Write(req.Schema.JSON)
	}
	out := resp.Text
	if out == "" {
		out = string(resp.JSON)
	}
	for _, c := range resp.ToolCalls {
		out += c.Name + c.Arguments
	}
	resp.Usage = events.Usage{InputTokens: e.Count(req.Model, in.String())}
	if out != "" {
		resp.Usage.OutputTokens = e.Count(req.Model, out)
	}
	resp.UsageSource = UsageEstimated
	model := ModelLabel(e.Name, req.Model)
	usageEstimated.WithLabelValues(e.Name, model).Inc()
	e.Log.Warn().Str("provider", e.Name).Str("model", model).Str("purpose", req.Purpose).
		Int("input_tokens", resp.Usage.InputTokens).Int("output_tokens", resp.Usage.OutputTokens).
		Msg("the host reported no usage: the call is counted with the service's tokenizer and charged by that count")
}

// SourceOf is the usage_source of resp's usage: UsageEstimated when the
// service counted it, else events.UsageReported.
func SourceOf(resp *Response) string {
	if resp.UsageSource == UsageEstimated {
		return UsageEstimated
	}
	return events.UsageReported
}

// Answered reports whether a call that returned resp and err was answered
// by its host, so that it was processed and may be billed: it succeeded, or
// it failed on what the host answered (HTTP 200: a reply cut, empty,
// refused, without a usable object, or cut when the context filled), not on
// an error status or a failed connection.
func Answered(resp *Response, err error) bool {
	if err == nil {
		return resp != nil
	}
	e, ok := Classified(err)
	if !ok || e.Status != 0 || resp == nil {
		return false
	}
	switch e.Class {
	case ClassOutputLimit, ClassContextOverflow, ClassNotJSON, ClassSchemaMismatch, ClassEmpty, ClassRefused:
		return true
	}
	return false
}
