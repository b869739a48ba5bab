package ledger

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/metrics"
)

var (
	reservations = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_ledger_reservations_total",
		Help: "Credits reserved for queries at admission (reservations made or found made).",
	})
	creditsReserved = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_ledger_credits_reserved_total",
		Help: "Credits reserved for queries at admission, at their estimate.",
	})
	balanceRefusals = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_ledger_balance_refusals_total",
		Help: "Queries refused by the balance check, by code (insufficient_credits, monthly_cap_exceeded).",
	}, []string{"code"})
	settlements = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_ledger_settlements_total",
		Help: "Queries settled: their calls charged and the rest of their reservation released, in one ledger event.",
	})
	creditsCharged = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_ledger_credits_charged_total",
		Help: "Credits charged to accounts by settlements.",
	})
	creditsReleased = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_ledger_credits_released_total",
		Help: "Credits of reservations returned to the balance by settlements.",
	})
)

// The series of both refusal codes exist from the start, at 0.
func init() {
	balanceRefusals.WithLabelValues(apperr.InsufficientCredits)
	balanceRefusals.WithLabelValues(apperr.MonthlyCapExceeded)
}

// countReserve counts a reservation of micros that ended with err.
func countReserve(micros int64, err error) {
	if err == nil {
		reservations.Inc()
		creditsReserved.Add(float64(micros) / 1e6)
	}
	countRefusal(err)
}

// countRefusal counts err when it is a refusal by the balance check.
func countRefusal(err error) {
	if code := apperr.Code(err); code == apperr.InsufficientCredits || code == apperr.MonthlyCapExceeded {
		balanceRefusals.WithLabelValues(code).Inc()
	}
}

// countSettled counts a settlement this process appended; nil counts none.
func countSettled(ev *events.ChargesSettled) {
	if ev == nil {
		return
	}
	settlements.Inc()
	creditsCharged.Add(float64(ev.ChargedMicros) / 1e6)
	creditsReleased.Add(float64(ev.ReleasedMicros) / 1e6)
}
