package telemetry

import (
	"slices"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// With no OTEL_* variable set nothing is exported: Setup installs the
// propagator and leaves the no-op tracer provider in place.
func TestNothingExportedWithoutSettings(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", CaptureContentEnv} {
		t.Setenv(v, "")
	}
	if Exporting() || CaptureContent() {
		t.Fatal("exporting or capturing content with no setting")
	}
	before := otel.GetTracerProvider()
	shutdown, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t.Context())
	if otel.GetTracerProvider() != before {
		t.Fatal("a tracer provider was installed with nothing to export to")
	}
	// A composite propagator lists its fields in no fixed order.
	if fields := otel.GetTextMapPropagator().Fields(); !slices.Contains(fields, "traceparent") {
		t.Fatalf("propagator fields %v, want traceparent among them", fields)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	if Exporting() {
		t.Fatal("OTEL_TRACES_EXPORTER=none exports")
	}
}

// An OTLP endpoint turns exporting on; content capture only with its own
// variable.
func TestExportingWithAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv(CaptureContentEnv, "")
	if !Exporting() || CaptureContent() {
		t.Fatalf("exporting %v, capture %v; want true, false", Exporting(), CaptureContent())
	}
	shutdown, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, sdk := otel.GetTracerProvider().(*sdktrace.TracerProvider); !sdk {
		t.Fatal("no tracer provider with an endpoint set")
	}
	_ = shutdown(t.Context())
	t.Setenv(CaptureContentEnv, "true")
	if !CaptureContent() {
		t.Fatal("content capture did not turn on")
	}
}

// Tracing is false while the process has the tracer provider it started
// with, and true once one is installed.
func TestTracingOnceAProviderIsInstalled(t *testing.T) {
	if started := otel.GetTracerProvider() == untraced; Tracing() == started {
		t.Fatalf("Tracing() = %v with the starting provider in place: %v", Tracing(), started)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(t.Context())
	otel.SetTracerProvider(tp)
	if !Tracing() {
		t.Fatal("Tracing() = false with a tracer provider installed")
	}
}
