package byom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/metrics"
)

var (
	callsInFlight = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_byom_calls_in_flight",
		Help: "Calls to customer-owned models (BYOM) this process makes now, each holding a call slot.",
	})
	callWaits = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_byom_call_waits_total",
		Help: "Attempts of calls to customer-owned models that found every slot of their account or of the process taken, by outcome: served (a slot came free), refused (the attempt's time ran out: rate_limited).",
	}, []string{"outcome"})
)

// The series of both outcomes exist from the start, at 0.
func init() {
	callWaits.WithLabelValues("served")
	callWaits.WithLabelValues("refused")
}
