package worker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/metrics"
	"github.com/crosscheck/crosscheck/internal/telemetry"
)

// codeCancelled is the failure code of a query its client cancelled.
const codeCancelled = "cancelled"

var (
	completed = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_queries_completed_total",
		Help: "Queries that ended completed, by mode.",
	}, []string{"mode"})
	failed = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_queries_failed_total",
		Help: "Queries that ended failed, by mode and error code (cancelled included).",
	}, []string{"mode", "code"})
	cancelled = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_queries_cancelled_total",
		Help: "Queries that ended cancelled (failed with code cancelled), by mode.",
	}, []string{"mode"})
	timeToTerminal = metrics.With().NewHistogramVec(prometheus.HistogramOpts{
		Name:    "crosscheck_query_time_to_terminal_seconds",
		Help:    "Time from a query's acceptance to its terminal event, by mode and status (completed, failed).",
		Buckets: metrics.Latency,
	}, []string{"mode", "status"})
	stageDuration = metrics.With().NewHistogramVec(prometheus.HistogramOpts{
		Name:    "crosscheck_query_stage_duration_seconds",
		Help:    "Time a run of a query spent in a stage (running_models, deliberating, researching, ...), by mode and stage.",
		Buckets: metrics.Latency,
	}, []string{"mode", "stage"})
	jobsRunning = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_worker_jobs_running",
		Help: "Jobs (queries) this worker process runs now: the queries in flight in the process.",
	})
	redeliveries = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_worker_redeliveries_total",
		Help: "Jobs delivered again (a worker died, handed one back or failed it), counted at each delivery after the first.",
	})
	handBacks = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_worker_handbacks_total",
		Help: "Jobs handed back for another run without a failure, by reason: yield (another worker runs it), shutdown.",
	}, []string{"reason"})
	attemptsFailed = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_worker_attempts_failed_total",
		Help: "Runs of a job that failed and will be retried, or end the query at the last attempt.",
	})
	exhaustedJobs = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_worker_exhausted_jobs_total",
		Help: "Jobs JetStream stopped delivering (max deliveries reached) that a worker ended as failed.",
	})
)

const tracerName = "github.com/crosscheck/crosscheck/internal/worker"

// stagesOf are the stages a run of each mode goes through.
var stagesOf = map[string][]string{
	events.ModeUnify:   {events.StageRunningModels, events.StageAggregating},
	events.ModeJustify: {events.StageRunningModels, events.StageDeliberating, events.StageAggregating},
	events.ModeVerify:  {events.StageResearching, events.StageExtractingClaims, events.StageCrossChecking, events.StageAggregating},
}

// The series of the modes, stages, statuses and reasons exist from the
// start, at 0, and those of the failure codes a run records most: a
// dashboard's rate of an absent series reads "No data".
func init() {
	for mode, stages := range stagesOf {
		completed.WithLabelValues(mode)
		cancelled.WithLabelValues(mode)
		for _, code := range []string{"provider_error", "aggregation_failed", "internal_error", codeCancelled} {
			failed.WithLabelValues(mode, code)
		}
		for _, status := range []string{events.StatusCompleted, events.StatusFailed} {
			timeToTerminal.WithLabelValues(mode, status)
		}
		for _, st := range stages {
			stageDuration.WithLabelValues(mode, st)
		}
	}
	handBacks.WithLabelValues("yield")
	handBacks.WithLabelValues("shutdown")
}

// startJob begins the run of a delivered job: its span continues the trace
// of the request that submitted the query (carried in the message headers,
// the same on every delivery), and the job counts as running until the
// returned end is called with the run's error.
func startJob(ctx context.Context, msg *eventstore.Job, id string) (context.Context, *attempt, func(error)) {
	delivered := msg.Delivered()
	if delivered > 1 {
		redeliveries.Inc()
	}
	jobsRunning.Inc()
	ctx = msg.TraceContext(ctx)
	span := telemetry.NoSpan
	if telemetry.Tracing() {
		ctx, span = otel.Tracer(tracerName).Start(ctx, "query.run", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				attribute.String("crosscheck.request_id", id),
				attribute.Int("messaging.message.delivery_count", delivered),
				attribute.String("messaging.system", "nats"),
			))
	}
	a := &attempt{submitted: msg.Stored(), delivered: delivered}
	return ctx, a, func(err error) {
		jobsRunning.Dec()
		a.endStage(time.Now())
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "the run failed")
		}
		span.End()
	}
}

// ended counts a query's terminal event, appended by this run.
func (a *attempt) ended(q *events.Query, terminal events.Event, now time.Time) {
	if q.Submitted == nil {
		return
	}
	mode, status := q.Submitted.Mode, events.StatusCompleted
	switch ev := terminal.(type) {
	case events.QueryCompleted:
		completed.WithLabelValues(mode).Inc()
	case events.QueryFailed:
		status = events.StatusFailed
		failed.WithLabelValues(mode, ev.Code).Inc()
		if ev.Code == codeCancelled {
			cancelled.WithLabelValues(mode).Inc()
		}
	default:
		return
	}
	if !a.submitted.IsZero() {
		timeToTerminal.WithLabelValues(mode, status).Observe(now.Sub(a.submitted).Seconds())
	}
}

// stage is the stage a run is in, and its span.
type stage struct {
	mode, name string
	since      time.Time
	span       trace.Span
}

// observeStage ends the stage the run was in when ev, applied to e.q,
// starts another one (started: the mode's first stage; a progress report:
// the stage it names; in unify, the last model's outcome: aggregating), and
// starts that one's span under ctx. The caller holds e.mu.
func (e *emitter) observeStage(ctx context.Context, ev events.Event) {
	if e.stage == nil {
		return
	}
	var next string
	switch p := ev.(type) {
	case events.QueryStarted:
		next = events.StageRunningModels
		if e.stage.mode == events.ModeVerify {
			next = events.StageResearching
		}
	case events.ProgressReported:
		next = p.Stage
	case events.ModelAnswered, events.ModelFailed:
		if e.q.Aggregating() {
			next = events.StageAggregating
		}
	}
	if next == "" || next == e.stage.name {
		return
	}
	now := time.Now()
	e.stage.end(now)
	span := telemetry.NoSpan
	if telemetry.Tracing() {
		_, span = otel.Tracer(tracerName).Start(ctx, "stage "+next, trace.WithAttributes(attribute.String("crosscheck.stage", next)))
	}
	e.stage.name, e.stage.since, e.stage.span = next, now, span
}

// stageSpan returns the span of the stage the run is in, nil between
// stages: the parent of the model calls made now (telemetry.InStage).
func (e *emitter) stageSpan() trace.Span {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stage == nil || e.stage.name == "" {
		return nil
	}
	return e.stage.span
}

// end records the time spent in the current stage, if any.
func (s *stage) end(now time.Time) {
	if s.name != "" {
		stageDuration.WithLabelValues(s.mode, s.name).Observe(now.Sub(s.since).Seconds())
		s.span.End()
		s.name = ""
	}
}

// endStage ends the stage the run was in when it returned.
func (a *attempt) endStage(now time.Time) {
	if a.em == nil || a.em.stage == nil {
		return
	}
	a.em.mu.Lock()
	defer a.em.mu.Unlock()
	a.em.stage.end(now)
}
