// Package telemetry sets up the process's OpenTelemetry traces: the W3C
// trace-context propagator always, and a tracer provider that exports over
// OTLP/HTTP only when the standard OTEL_* variables ask for it. With none of
// them set the global tracer stays the no-op one: spans cost next to nothing
// and nothing leaves the process.
//
// The exporter is OTLP/HTTP (otlptracehttp) alone, built from the OTEL_*
// variables here rather than by autoexport, which links the gRPC, metrics
// and logs exporters too: about a fifth of the binary's packages for a
// protocol every collector also serves over HTTP. OTEL_EXPORTER_OTLP_PROTOCOL
// grpc is refused at start with a message that says what to set.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
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
// batching tracer provider that exports to newExporter's exporter, with the
// resource of OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES and the
// sampler of OTEL_TRACES_SAMPLER; the spans of probes and scrapes (see
// probePaths) are not exported. The returned shutdown flushes the spans not
// yet exported; it is a no-op when nothing is exported. Setup fails on an
// exporter setting it does not take, saying which and what to set.
func Setup(ctx context.Context) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	none := func(context.Context) error { return nil }
	if !Exporting() {
		return none, nil
	}
	exp, err := newExporter(ctx)
	if err != nil || exp == nil {
		return none, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(skipProbes{sdktrace.NewBatchSpanProcessor(exp)}), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// newExporter returns the span exporter the OTEL_* variables name: OTLP
// over HTTP (OTEL_TRACES_EXPORTER otlp or unset; otlptracehttp reads the
// endpoint, headers, timeout, compression and certificates from the
// OTEL_EXPORTER_OTLP_* variables), the console (console), or nil (none).
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	switch e := os.Getenv("OTEL_TRACES_EXPORTER"); e {
	case "", "otlp":
	case "console":
		return stdouttrace.New()
	case "none":
		return nil, nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: crosscheck exports traces with otlp (over HTTP), console or none", e)
	}
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	protocol := os.Getenv(name)
	if protocol == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		protocol = os.Getenv(name)
	}
	if protocol != "" && protocol != "http/protobuf" {
		return nil, fmt.Errorf("%s=%q: crosscheck exports traces over OTLP/HTTP only; unset it or set http/protobuf (the default), and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318 by default)", name, protocol)
	}
	return otlptracehttp.New(ctx)
}

// probePaths are the paths of the probes and the scrapes, whose requests
// are not exported: each prober and Prometheus call them every few seconds.
var probePaths = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// skipProbes passes every ended span on to its processor but those of a
// request to one of probePaths.
type skipProbes struct{ sdktrace.SpanProcessor }

func (p skipProbes) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, a := range s.Attributes() {
		if (a.Key == "url.path" || a.Key == "http.route") && probePaths[a.Value.AsString()] {
			return
		}
	}
	p.SpanProcessor.OnEnd(s)
}
