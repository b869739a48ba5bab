package eventstore

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/metrics"
)

var (
	appendDuration = metrics.With().NewHistogramVec(prometheus.HistogramOpts{
		Name:    "crosscheck_eventstore_append_duration_seconds",
		Help:    "Time of an append to JetStream until its acknowledgement, by aggregate (query, account, file).",
		Buckets: metrics.Latency,
	}, []string{"aggregate"})
	appendConflicts = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_eventstore_append_conflicts_total",
		Help: "Appends refused because another event of the aggregate came first (optimistic concurrency), by aggregate.",
	}, []string{"aggregate"})
	appendFailures = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_eventstore_append_failures_total",
		Help: "Appends that JetStream did not take (unreachable, no quorum, timeout), by aggregate.",
	}, []string{"aggregate"})
)

// aggregateOf returns the aggregate of an event subject,
// ev.<aggregate>.<id>.<event>: a bounded label value (the stream's own
// subjects are fixed); "other" for anything else.
func aggregateOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, "ev.")
	if !ok {
		return "other"
	}
	agg, _, _ := strings.Cut(rest, ".")
	switch agg {
	case "query", "account", "file":
		return agg
	}
	return "other"
}

// observeAppend counts an append to subject that started at start and ended
// with err.
func observeAppend(subject string, start time.Time, err error) {
	agg := aggregateOf(subject)
	appendDuration.WithLabelValues(agg).Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
	case errors.Is(err, ErrConflict):
		appendConflicts.WithLabelValues(agg).Inc()
	default:
		appendFailures.WithLabelValues(agg).Inc()
	}
}
