package providers

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/metrics"
	"github.com/crosscheck/crosscheck/internal/telemetry"
)

// CustomProvider is the provider key of the customers' own models (BYOM).
// Their model ids are the customers' own, so they are never a label value:
// their calls are counted under the model "custom", as customer-billed.
const CustomProvider = "custom"

// Outcomes of a model call, the outcome label of crosscheck_model_calls_total:
// ok, retried (an attempt that failed and is repeated, counted once per
// retry), or failed_<class> for a call that failed for good (the classes of
// Error, and failed_cancelled when the query's context ended).
const (
	OutcomeOK      = "ok"
	OutcomeRetried = "retried"
)

var (
	modelCalls = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_model_calls_total",
		Help: "Model calls by provider, model, purpose (the step) and outcome: ok, retried (once per retry), failed_<class>.",
	}, []string{"provider", "model", "purpose", "outcome"})
	modelCallDuration = metrics.With().NewHistogramVec(prometheus.HistogramOpts{
		Name:    "crosscheck_model_call_duration_seconds",
		Help:    "Time of a model call, retries included, by provider, model and purpose.",
		Buckets: metrics.Latency,
	}, []string{"provider", "model", "purpose"})
	modelTokens = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_model_tokens_total",
		Help: "Tokens the model calls reported, by provider, model and direction (input, output).",
	}, []string{"provider", "model", "direction"})
	customerBilled = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_model_calls_customer_billed_total",
		Help: "Model calls billed to the customer's own provider account (BYOM), by outcome; they cost no credits.",
	}, []string{"outcome"})
	usageEstimated = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_model_usage_estimated_total",
		Help: "Model calls whose host reported no usage, counted with the service's tokenizer instead, by provider and model.",
	}, []string{"provider", "model"})
	tokensUnbilled = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_model_tokens_unbilled_total",
		Help: "Tokens (input and output) of model calls that failed after the host answered them: what a vendor may bill the service and the customer is not charged, by provider and model.",
	}, []string{"provider", "model"})
)

// ModelLabel is the model label value of a call: the catalog model id,
// or "custom" for a customer's own model, whose id is not bounded.
func ModelLabel(provider, model string) string {
	if provider == CustomProvider {
		return CustomProvider
	}
	return model
}

// Metered counts and traces every call of Provider, served under the
// provider key Name: the call's span (a child of the span of the call's
// context, the query's run, beside the stage spans; with the GenAI
// semantic-convention attributes), its outcome, latency and tokens. The
// prompt and the answer go into the span only when CaptureContent is set.
type Metered struct {
	Provider Provider
	Name     string
	// CaptureContent puts the messages and the answer in the span.
	CaptureContent bool
}

var _ Provider = (*Metered)(nil)

// The customer-billed calls' series of their success exists from the start,
// at 0.
func init() { customerBilled.WithLabelValues(OutcomeOK) }

const tracerName = "github.com/crosscheck/crosscheck/internal/providers"

// Complete runs req on the provider, within a span of its own. The span's
// attributes are built only when the span is recorded.
func (m *Metered) Complete(ctx context.Context, req *Request) (*Response, error) {
	// The call waits in m.Provider.Complete for as long as the model takes,
	// holding this frame: the span's and the metrics' work is in start and
	// finish, so the frame (and the stack of every goroutine waiting on a
	// model) stays small.
	model := ModelLabel(m.Name, req.Model)
	ctx, span := m.start(ctx, model, req)
	began := time.Now()
	resp, err := m.Provider.Complete(ctx, req)
	m.finish(ctx, span, model, req.Purpose, resp, err, time.Since(began))
	return resp, err
}

// start opens the call's span and puts an observer of its retries in ctx.
// While the process traces nothing (telemetry.Tracing), the call gets a
// span that records nothing and costs nothing, and ctx keeps the trace
// context it had.
//
//go:noinline
func (m *Metered) start(ctx context.Context, model string, req *Request) (context.Context, trace.Span) {
	span := telemetry.NoSpan
	if telemetry.Tracing() {
		// A call of a query's run is a child of the stage it runs in.
		ctx, span = otel.Tracer(tracerName).Start(telemetry.InStage(ctx), "chat "+model, trace.WithSpanKind(trace.SpanKindClient))
	}
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.system", m.Name),
			attribute.String("gen_ai.request.model", model),
			attribute.String("crosscheck.purpose", req.Purpose),
		)
		if m.CaptureContent {
			span.SetAttributes(attribute.String("gen_ai.prompt", promptText(req)))
		}
	}
	purpose := req.Purpose
	ctx = WithAttemptObserver(ctx, chainObserver(ctx, func(attempt int, failure *Error, wait time.Duration) {
		modelCalls.WithLabelValues(m.Name, model, purpose, OutcomeRetried).Inc()
		if recording {
			span.AddEvent("retry", trace.WithAttributes(attribute.Int("attempt", attempt), attribute.String("error.type", failure.Class),
				attribute.Int64("retry_in_ms", wait.Milliseconds())))
		}
	}))
	return ctx, span
}

// finish counts the call's outcome, latency and tokens and ends its span.
//
//go:noinline
func (m *Metered) finish(ctx context.Context, span trace.Span, model, purpose string, resp *Response, err error, took time.Duration) {
	defer span.End()
	recording := span.IsRecording()
	modelCallDuration.WithLabelValues(m.Name, model, purpose).Observe(took.Seconds())
	outcome := OutcomeOK
	if err != nil {
		class := Classify(err).Class
		if ctx.Err() != nil && class != ClassTimeout {
			class = "cancelled"
		}
		outcome = "failed_" + class
		if resp != nil && resp.Usage != (events.Usage{}) {
			// A failed call is never charged; what its host processed is
			// the service's, and its failure records it.
			tokensUnbilled.WithLabelValues(m.Name, model).Add(float64(resp.Usage.InputTokens + resp.Usage.OutputTokens))
			if e, ok := Classified(err); ok {
				e.Usage, e.UsageSource = resp.Usage, SourceOf(resp)
			}
		}
		span.SetStatus(codes.Error, class)
		if recording {
			span.SetAttributes(attribute.String("error.type", class))
		}
	} else {
		modelTokens.WithLabelValues(m.Name, model, "input").Add(float64(resp.Usage.InputTokens))
		modelTokens.WithLabelValues(m.Name, model, "output").Add(float64(resp.Usage.OutputTokens))
		if recording {
			span.SetAttributes(
				attribute.String("gen_ai.response.model", model),
				attribute.Int("gen_ai.usage.input_tokens", resp.Usage.InputTokens),
				attribute.Int("gen_ai.usage.output_tokens", resp.Usage.OutputTokens),
			)
			if m.CaptureContent {
				answer := resp.Text
				if answer == "" {
					answer = string(resp.JSON)
				}
				span.SetAttributes(attribute.String("gen_ai.completion", answer))
			}
		}
	}
	if recording {
		span.SetAttributes(attribute.String("crosscheck.outcome", outcome))
	}
	modelCalls.WithLabelValues(m.Name, model, purpose, outcome).Inc()
	if m.Name == CustomProvider {
		customerBilled.WithLabelValues(outcome).Inc()
	}
}

// chainObserver returns observe followed by the observer ctx carried
// already, if any.
func chainObserver(ctx context.Context, observe AttemptObserver) AttemptObserver {
	prev, ok := ctx.Value(observerKey{}).(AttemptObserver)
	if !ok {
		return observe
	}
	return func(attempt int, failure *Error, wait time.Duration) {
		observe(attempt, failure, wait)
		prev(attempt, failure, wait)
	}
}

// promptText is the messages of req as one text, for a span that captures
// content.
func promptText(req *Request) string {
	var b strings.Builder
	for _, msg := range req.Messages {
		b.WriteString(msg.Role)
		b.WriteString(": ")
		b.WriteString(msg.Content)
		b.WriteString("\n")
	}
	return b.String()
}
