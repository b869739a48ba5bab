package providers

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/metrics"
)

// spansOf installs an in-memory tracer provider for the test.
func spansOf(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	return exp
}

// Metered counts a call that succeeds after a retry once as retried and once
// as ok, with its tokens and latency, and traces it with the GenAI attributes
// but without the prompt or the answer.
func TestMeteredCountsOutcomesAndTraces(t *testing.T) {
	exp := spansOf(t)
	synctest.Test(t, func(t *testing.T) {
		s := &script{errs: []error{&Error{Class: ClassHostError, Status: 503}}}
		usage := ProviderFunc(func(ctx context.Context, req *Request) (*Response, error) {
			resp, err := s.Complete(ctx, req)
			resp.Usage = events.Usage{InputTokens: 7, OutputTokens: 11}
			return resp, err
		})
		m := &Metered{Name: "prov_m", Provider: &Retry{Provider: usage, Delays: DefaultRetryDelays}}
		observed := 0
		ctx := WithAttemptObserver(t.Context(), func(int, *Error, time.Duration) { observed++ })
		req := Request{Model: "model-m", Purpose: events.StepAnswer, Messages: []Message{{Role: RoleUser, Content: "a secret prompt"}}}
		if _, err := m.Complete(ctx, &req); err != nil {
			t.Fatal(err)
		}
		if observed != 1 {
			t.Errorf("the caller's attempt observer saw %d retries, want 1", observed)
		}
	})
	for outcome, want := range map[string]float64{OutcomeOK: 1, OutcomeRetried: 1} {
		if got := testutil.ToFloat64(modelCalls.WithLabelValues("prov_m", "model-m", events.StepAnswer, outcome)); got != want {
			t.Errorf("calls with outcome %s: %v, want %v", outcome, got, want)
		}
	}
	if got := testutil.ToFloat64(modelTokens.WithLabelValues("prov_m", "model-m", "output")); got != 11 {
		t.Errorf("output tokens %v, want 11", got)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "chat model-m" {
		t.Fatalf("spans %v, want one named chat model-m", spans)
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"gen_ai.system": "prov_m", "gen_ai.request.model": "model-m", "gen_ai.usage.input_tokens": "7",
		"gen_ai.usage.output_tokens": "11", "crosscheck.outcome": OutcomeOK, "crosscheck.purpose": events.StepAnswer} {
		if attrs[k] != v {
			t.Errorf("span attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
	for k, v := range attrs {
		if strings.Contains(v, "secret prompt") || strings.Contains(v, "ok") && k == "gen_ai.completion" {
			t.Errorf("span attribute %s holds content without content capture", k)
		}
	}
	if len(spans[0].Events) != 1 || spans[0].Events[0].Name != "retry" {
		t.Errorf("span events %v, want one retry", spans[0].Events)
	}
}

// A customer's own model is counted under the model "custom", never its
// own id, as customer-billed; a failure counts as failed_<class>; content
// capture puts the prompt and the answer in the span.
func TestMeteredCustomModelsAndContentCapture(t *testing.T) {
	exp := spansOf(t)
	fail := ProviderFunc(func(context.Context, *Request) (*Response, error) {
		return &Response{}, &Error{Class: ClassHostError, Status: 401}
	})
	m := &Metered{Name: CustomProvider, Provider: fail}
	if _, err := m.Complete(t.Context(), &Request{Model: "acme-private-llm-v7", Purpose: events.StepAnswer}); err == nil {
		t.Fatal("the failure was lost")
	}
	if got := testutil.ToFloat64(modelCalls.WithLabelValues(CustomProvider, CustomProvider, events.StepAnswer, "failed_host_error")); got != 1 {
		t.Errorf("custom calls failed_host_error: %v, want 1", got)
	}
	if got := testutil.ToFloat64(customerBilled.WithLabelValues("failed_host_error")); got != 1 {
		t.Errorf("customer-billed calls: %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(metrics.Registry, "crosscheck_model_calls_total"); err != nil || n == 0 {
		t.Fatalf("the registry serves no model calls: %d %v", n, err)
	}
	ok := ProviderFunc(func(context.Context, *Request) (*Response, error) { return &Response{Text: "the answer"}, nil })
	captured := &Metered{Name: "prov_c", Provider: ok, CaptureContent: true}
	if _, err := captured.Complete(t.Context(), &Request{Model: "m", Messages: []Message{{Role: RoleUser, Content: "the question"}}}); err != nil {
		t.Fatal(err)
	}
	var prompt, completion bool
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), "acme-private-llm") {
				t.Errorf("span %s attribute %s holds a customer's model id", s.Name, kv.Key)
			}
			prompt = prompt || kv.Key == "gen_ai.prompt" && strings.Contains(kv.Value.AsString(), "the question")
			completion = completion || kv.Key == "gen_ai.completion" && kv.Value.AsString() == "the answer"
		}
	}
	if !prompt || !completion {
		t.Errorf("content capture: prompt %v, completion %v; want both in the span", prompt, completion)
	}
}

// BenchmarkMetered measures what counting and tracing add to a model call
// with no tracer provider installed (no OTEL_* setting): compare with
// BenchmarkUnmetered.
func BenchmarkMetered(b *testing.B) {
	p := ProviderFunc(func(context.Context, *Request) (*Response, error) { return &Response{Text: "a"}, nil })
	m := &Metered{Name: "prov_b", Provider: p}
	req := Request{Model: "model-b", Purpose: events.StepAnswer}
	for b.Loop() {
		_, _ = m.Complete(b.Context(), &req)
	}
}

func BenchmarkUnmetered(b *testing.B) {
	p := ProviderFunc(func(context.Context, *Request) (*Response, error) { return &Response{Text: "a"}, nil })
	req := Request{Model: "model-b", Purpose: events.StepAnswer}
	for b.Loop() {
		_, _ = p.Complete(b.Context(), &req)
	}
}
