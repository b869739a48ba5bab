package eventstore_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// The trace context of an append travels in the message headers: a job
// delivered from the submitted event continues it, on every delivery, and
// QueryTrace reads it back; the stored event is the same bytes with or
// without it.
func TestTraceContextTravelsInHeaders(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	store := storetest.Open(t)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:     trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	id := "req_" + events.NewID()
	env, err := events.Wrap(events.AggregateQuery, id, events.QuerySubmitted{RequestID: id, Mode: events.ModeUnify, Prompt: "p"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	app, err := store.Append(ctx, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := store.QueryTrace(context.Background(), id); got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() {
		t.Fatalf("QueryTrace = %v, want %v", got, sc)
	}
	if got := store.QueryTrace(context.Background(), "req_"+events.NewID()); got.IsValid() {
		t.Fatalf("QueryTrace of an unknown query = %v, want none", got)
	}
	stored, err := store.Queries.Message(context.Background(), app.Seq)
	if err != nil || string(stored.Data) != string(app.Data) {
		t.Fatalf("the stored event changed: %v", err)
	}
	jobs, err := store.Jobs(context.Background(), eventstore.JobsConfig{AckWait: 200 * time.Millisecond, MaxDeliver: 5})
	if err != nil {
		t.Fatal(err)
	}
	for delivery := 1; delivery <= 2; delivery++ {
		var got trace.SpanContext
		var n int
		for try := 0; n == 0 && try < 50; try++ {
			if err := jobs.Fetch(context.Background(), 1, func(j *eventstore.Job) {
				got, n = trace.SpanContextFromContext(j.TraceContext(context.Background())), j.Delivered()
				if j.Stored().IsZero() {
					t.Errorf("delivery %d: no stored time", delivery)
				}
				j.Nak()
			}); err != nil {
				t.Fatal(err)
			}
		}
		if got.TraceID() != sc.TraceID() || !got.IsRemote() || n != delivery {
			t.Fatalf("delivery %d (%d): trace %v, want %v carried over", delivery, n, got, sc)
		}
	}
}
