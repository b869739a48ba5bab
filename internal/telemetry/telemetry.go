// Package telemetry sets up the process's OpenTelemetry traces: the W3C
// trace-context propagator always, and a tracer provider that exports over
// OTLP only when the standard OTEL_* variables ask for it. With none of them
// set the global tracer stays the no-op one: spans cost next to nothing and
// nothing leaves the process.
package telemetry

import (
	"context"
	"os"
	"strconv"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName is the service.name of the spans when OTEL_SERVICE_NAME is
// not set.
const ServiceName = "crosscheck"

// CaptureContentEnv is the standard variable that turns content capture on:
// with it "true", model-call spans carry the prompt and the answer
// (gen_ai.prompt, gen_ai.completion). Off by default: no prompt, answer or
// key is ever in a span otherwise.
const CaptureContentEnv = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

// CaptureContent reports whether the operator turned content capture on.
func CaptureContent() bool {
	on, _ := strconv.ParseBool(os.Getenv(CaptureContentEnv))
	return on
}

// Exporting reports whether the OTEL_* variables ask for traces to be
// exported: an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or an exporter named in
// OTEL_TRACES_EXPORTER other than "none".
func Exporting() bool {
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" {
		return e != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// untraced is the tracer provider of a process that installed none: spans
// of it are never recorded.
var untraced = otel.GetTracerProvider()

// NoSpan is the span a hot path uses instead of starting one while
// Tracing is false: it records nothing, ending it does nothing, and the
// trace context of the path's ctx goes on as it is.
var NoSpan = trace.SpanFromContext(context.Background())

// Tracing reports whether the process has installed a tracer provider
// (Setup, when exporting, or a test). While it is false no span is ever
// recorded, so a hot path may start none: the trace context of its ctx goes
// on to the calls it makes as it is.
func Tracing() bool {
	return otel.GetTracerProvider() != untraced
}

// Setup installs the W3C trace-context propagator and, when Exporting, a
// batching tracer provider whose exporter autoexport builds from the OTEL_*
// variables (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc, headers,
// timeouts), with the resource of OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. The returned shutdown flushes the spans not yet
// exported; it is a no-op when nothing is exported. Setup fails only on an
// exporter setting that autoexport refuses.
func Setup(ctx context.Context) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	none := func(context.Context) error { return nil }
	if !Exporting() {
		return none, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return none, err
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return none, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
