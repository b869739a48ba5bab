package eventstore

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/crosscheck/crosscheck/internal/events"
)

// headerCarrier carries the W3C trace context (traceparent, tracestate) in
// a NATS message's headers, under the lowercase names the W3C gives them:
// NATS header names are case-sensitive.
type headerCarrier nats.Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

// Get returns the first value of key.
func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys returns the header names.
func (c headerCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// traceContext is the propagator of the message headers: the W3C trace
// context only. Baggage, which a client may send with its request, is never
// written beside an event, nor read back from one.
var traceContext = propagation.TraceContext{}

// maxTraceState bounds the tracestate written beside an event: the 512
// characters the W3C asks a vendor to carry. A longer one (only a client
// sends one) is left out; the traceparent still travels.
const maxTraceState = 512

// injectTrace writes the trace context of ctx, when it has one, into h. It
// travels beside the event, never in it: the envelope, its hash chain and
// its schema stay as they are.
func injectTrace(ctx context.Context, h nats.Header) {
	if sc := trace.SpanContextFromContext(ctx); len(sc.TraceState().String()) > maxTraceState {
		ctx = trace.ContextWithSpanContext(ctx, sc.WithTraceState(trace.TraceState{}))
	}
	traceContext.Inject(ctx, headerCarrier(h))
}

// TraceContext returns ctx carrying the trace context the job's message
// was appended under (the span of the request that submitted the query),
// so the worker's spans continue that trace; ctx as it is when the message
// carries none or the job was released. A redelivered job carries the same headers, so every run of
// a query continues the same trace.
func (j *Job) TraceContext(ctx context.Context) context.Context {
	msg := j.message()
	if msg == nil {
		return ctx
	}
	h := msg.Headers()
	if len(h) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, headerCarrier(h))
}

// Stored is when JetStream stored the job's message: for a submitted event,
// when the query was accepted. The zero time when the delivery carries no
// metadata or the job was released.
func (j *Job) Stored() time.Time {
	msg := j.message()
	if msg == nil {
		return time.Time{}
	}
	meta, err := msg.Metadata()
	if err != nil {
		return time.Time{}
	}
	return meta.Timestamp
}

// QueryTrace returns the trace context a query was submitted under: the
// span of the request that submitted it, as its submitted event's headers
// carry it. It is invalid when the query is unknown, or was submitted
// without one.
func (s *Store) QueryTrace(ctx context.Context, requestID string) trace.SpanContext {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	msg, err := s.Queries.s.GetLastMsgForSubject(ctx, events.Subject(events.AggregateQuery, requestID, events.QuerySubmitted{}.EventName()))
	if err != nil || len(msg.Header) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), headerCarrier(msg.Header)))
}
