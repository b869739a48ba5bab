package queries

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/apperr"
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

// countSubmitted counts a query accepted in mode.
func countSubmitted(mode string) { submitted.WithLabelValues(mode).Inc() }

// countRefused counts a submission refused with err, under err's code
// (internal for an error without one).
func countRefused(err error) { refused.WithLabelValues(apperr.Code(err)).Inc() }
