package eventstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// What a client sends beside its traceparent never fills the event log:
// with the process's propagators (trace context and baggage), an append
// carries the traceparent in its headers, no baggage, and a tracestate only
// within the 512 characters the W3C asks a vendor to carry.
func TestTraceHeadersCarryOnlyABoundedTraceContext(t *testing.T) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	store := storetest.Open(t)
	member, err := baggage.NewMember("user", strings.Repeat("a", 4000))
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	var long []string
	for i := range 32 {
		long = append(long, fmt.Sprintf("v%d=%s", i, strings.Repeat("x", 200)))
	}
	for _, tc := range []struct {
		state     string
		wantState bool
	}{{"vendor=value", true}, {strings.Join(long, ","), false}} {
		ts, err := trace.ParseTraceState(tc.state)
		if err != nil {
			t.Fatal(err)
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
			TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
		})
		ctx := baggage.ContextWithBaggage(trace.ContextWithRemoteSpanContext(context.Background(), sc), bag)
		id := "req_" + events.NewID()
		env, err := events.Wrap(events.AggregateQuery, id, events.QuerySubmitted{RequestID: id, Mode: events.ModeUnify, Prompt: "p"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		app, err := store.Append(ctx, env, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := storetest.JetStream(t, store).Stream(context.Background(), eventstore.StreamQueries)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := s.GetMsg(context.Background(), app.Seq)
		if err != nil {
			t.Fatal(err)
		}
		h := msg.Header
		if h.Get("traceparent") == "" {
			t.Fatalf("no traceparent: %v", h)
		}
		if v := h.Get("baggage"); v != "" {
			t.Fatalf("the client's baggage (%d bytes) is in the event's headers", len(v))
		}
		if got := h.Get("tracestate"); (got != "") != tc.wantState || len(got) > 512 {
			t.Fatalf("tracestate of %d characters written as %d characters, want it kept: %v", len(tc.state), len(got), tc.wantState)
		}
		if got := store.QueryTrace(context.Background(), id); got.TraceID() != sc.TraceID() {
			t.Fatalf("QueryTrace = %v, want %v", got.TraceID(), sc.TraceID())
		}
	}
}
