package telemetry

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
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

// collector is an OTLP/HTTP trace receiver: it keeps the url.path (or the
// name) of every span exported to it.
type collector struct {
	mu    sync.Mutex
	paths []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				path := s.Name
				for _, a := range s.Attributes {
					if a.Key == "url.path" {
						path = a.Value.GetStringValue()
					}
				}
				c.paths = append(c.paths, path)
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(nil)
}

// Probes and scrapes (/metrics, /healthz, /readyz) are not traced: one
// every few seconds from each prober would bury the requests' traces.
func TestProbesAreNotExported(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	defer otel.SetTracerProvider(untraced)
	shutdown, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	h := otelhttp.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), "http")
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/v1/models"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Equal(c.paths, []string{"/v1/models"}) {
		t.Fatalf("exported the spans of %v; want /v1/models alone", c.paths)
	}
}

// Traces are exported over OTLP/HTTP only: gRPC is refused at start with a
// message that says what to set, not taken and failed later.
func TestGRPCProtocolRefused(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	defer otel.SetTracerProvider(untraced)
	for _, v := range []struct{ name, value string }{{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"}, {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, {"OTEL_TRACES_EXPORTER", "zipkin"}} {
		t.Run(v.name+"="+v.value, func(t *testing.T) {
			t.Setenv(v.name, v.value)
			_, err := Setup(t.Context())
			if err == nil || !strings.Contains(err.Error(), v.name) || !strings.Contains(err.Error(), "http/protobuf") && !strings.Contains(err.Error(), "otlp") {
				t.Fatalf("%s=%s: %v", v.name, v.value, err)
			}
		})
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	shutdown, err := Setup(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = shutdown(t.Context())
}
