package eventstore

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The trace headers of a message come from whoever published it: any value
// yields either no trace context or a valid one that is written back the
// same way.
func FuzzTraceHeaders(f *testing.F) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	f.Add("00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01", "")
	f.Add("00-0102030405060708090a0b0c0d0e0f10-0102030405060708-00", "vendor=value")
	f.Add("ff-00000000000000000000000000000000-0000000000000000-01", "a=b,c=d")
	f.Add("00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01-extra", "=")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, parent, state string) {
		h := nats.Header{"traceparent": {parent}, "tracestate": {state}}
		sc := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(context.Background(), headerCarrier(h)))
		if !sc.IsValid() {
			return
		}
		out := nats.Header{}
		injectTrace(trace.ContextWithRemoteSpanContext(context.Background(), sc), out)
		back := trace.SpanContextFromContext(otel.GetTextMapPropagator().Extract(context.Background(), headerCarrier(out)))
		if back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || back.TraceFlags() != sc.TraceFlags() {
			t.Fatalf("%q: extracted %v, written back as %v", parent, sc, back)
		}
	})
}
