package modes

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/metrics"
	"github.com/crosscheck/crosscheck/internal/providers"
)

var modelCredits = metrics.With().NewCounterVec(prometheus.CounterOpts{
	Name: "crosscheck_model_credits_charged_total",
	Help: "Credits the model calls cost, at the catalog's prices, by provider and model (a customer's own model costs none).",
}, []string{"provider", "model"})

// countCredits counts the credits a call of ref cost.
func countCredits(ref events.ModelRef, micros int64) {
	modelCredits.WithLabelValues(ref.Provider, providers.ModelLabel(ref.Provider, ref.ModelID)).Add(float64(micros) / 1e6)
}
