package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A span started under InStage is a child of the stage the run is in at
// that moment, and of the run itself between stages or without a stage.
func TestInStageParentsToTheCurrentStage(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	ctx, run := tr.Start(context.Background(), "query.run")
	var current trace.Span
	ctx = WithStage(ctx, func() trace.Span { return current })

	_, before := tr.Start(InStage(ctx), "chat before")
	before.End()
	_, current = tr.Start(ctx, "stage running_models")
	_, during := tr.Start(InStage(ctx), "chat during")
	during.End()
	current.End()
	current = nil
	_, after := tr.Start(InStage(ctx), "chat after")
	after.End()
	_, plain := tr.Start(InStage(context.Background()), "chat without a run")
	plain.End()
	run.End()

	ids := map[trace.SpanID]string{}
	for _, s := range rec.Ended() {
		ids[s.SpanContext().SpanID()] = s.Name()
	}
	for _, s := range rec.Ended() {
		want := map[string]string{"chat before": "query.run", "chat during": "stage running_models", "chat after": "query.run", "chat without a run": ""}[s.Name()]
		if got := ids[s.Parent().SpanID()]; want != "" && got != want || s.Name() == "chat without a run" && s.Parent().IsValid() {
			t.Errorf("%s is a child of %q, want %q", s.Name(), got, want)
		}
	}
}
