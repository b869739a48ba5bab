// Package metrics holds the process's Prometheus registry and its /metrics
// handler. Each package defines its own metrics, next to the code that
// counts them, and registers them here with With; this package adds the Go
// runtime and process collectors.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry holds every metric of the process: the packages' own and the Go
// runtime and process collectors. A process serves it on its admin address
// only.
var Registry = prometheus.NewRegistry()

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
}

// With returns the factory that registers a package's metrics in Registry.
// A metric name registered twice panics at start-up.
func With() promauto.Factory { return promauto.With(Registry) }

// Handler serves Registry in the Prometheus exposition formats (text, or
// OpenMetrics by content negotiation). It sets no bound of its own: its
// caller bounds the scrapes that run at once and their time.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{})
}

// Latency is the bucket layout of the latency histograms, in seconds: from
// 5 ms (an append to JetStream) to 10 minutes (a verify query).
var Latency = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
