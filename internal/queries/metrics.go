package queries

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/metrics"
)

var (
	submitted = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_queries_submitted_total",
		Help: "Queries accepted (their submitted event appended), by mode; a replay of an Idempotency-Key is not counted again.",
	}, []string{"mode"})
	refused = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_queries_refused_total",
		Help: "Submissions refused, by error code (invalid_request, rate_limited, insufficient_credits, monthly_cap_exceeded, ...).",
	}, []string{"code"})
)

// The series of every mode exist from the start, at 0: a dashboard's rate
// of an absent series reads "No data".
func init() {
	for _, mode := range []string{events.ModeUnify, events.ModeJustify, events.ModeVerify} {
		submitted.WithLabelValues(mode)
	}
}

// countSubmitted counts a query accepted in mode.
func countSubmitted(mode string) { submitted.WithLabelValues(mode).Inc() }

// countRefused counts a submission refused with err, under err's code
// (internal for an error without one).
func countRefused(err error) { refused.WithLabelValues(apperr.Code(err)).Inc() }
