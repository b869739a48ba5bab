package projections

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/metrics"
)

var (
	projectionLag = metrics.With().NewGaugeVec(prometheus.GaugeOpts{
		Name: "crosscheck_projection_lag_events",
		Help: "Events of the projection's stream stored after the last one it applied (at each delivery, and every 5 s from the stream's last sequence), by projection; only in the process that runs the projection.",
	}, []string{"projection"})
	leaseHeld = metrics.With().NewGaugeVec(prometheus.GaugeOpts{
		Name: "crosscheck_projection_lease_held",
		Help: "1 in the process that holds the projection's lease (applies it), 0 in the others, by projection.",
	}, []string{"projection"})
)

// setLag records that projection name has pending events left to apply.
func setLag(name string, pending uint64) { projectionLag.WithLabelValues(name).Set(float64(pending)) }

// holding marks this process as the holder of name's lease until the
// returned function is called.
func holding(name string) (released func()) {
	leaseHeld.WithLabelValues(name).Set(1)
	return func() {
		leaseHeld.WithLabelValues(name).Set(0)
		projectionLag.DeleteLabelValues(name)
	}
}
