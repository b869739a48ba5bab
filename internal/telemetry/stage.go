package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

type stageKey struct{}

// WithStage returns ctx carrying current, which returns the span of the
// stage a query's run is in now, or nil between stages. Spans started under
// InStage(ctx) become children of that span: a run's stages change while
// its context stays the same.
func WithStage(ctx context.Context, current func() trace.Span) context.Context {
	return context.WithValue(ctx, stageKey{}, current)
}

// InStage returns ctx with the span of the stage its run is in now as the
// parent of the spans started under it, or ctx itself when it carries no
// stage (WithStage) or the run is between stages.
func InStage(ctx context.Context) context.Context {
	current, _ := ctx.Value(stageKey{}).(func() trace.Span)
	if current == nil {
		return ctx
	}
	if span := current(); span != nil {
		return trace.ContextWithSpan(ctx, span)
	}
	return ctx
}
