package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/metrics"
)

// The embedded store's disk and health (storeWatch); zero in a process on
// a shared NATS.
var (
	storeFreeBytes = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_store_disk_free_bytes",
		Help: "Bytes free on the file system of the embedded event store (CROSSCHECK_DATA_DIR), read every second; 0 on a shared NATS.",
	})
	storeFloorBytes = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_store_disk_floor_bytes",
		Help: "The free-space floor of the embedded event store (CROSSCHECK_STORE_MIN_FREE_MB) in bytes: below it submissions and uploads are refused; 0 on a shared NATS or without a floor.",
	})
	storeUnwritable = metrics.With().NewGauge(prometheus.GaugeOpts{
		Name: "crosscheck_store_unwritable",
		Help: "1 while the embedded JetStream refuses writes (a stream failed a write, as on a full disk, or JetStream is disabled), 0 otherwise.",
	})
	storeRestarts = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_store_restarts_total",
		Help: "Restarts of the embedded JetStream after it stopped taking writes.",
	})
)
