package eventstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
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

// The series of every aggregate exist from the start, at 0.
func init() {
	for _, a := range []string{"query", "account", "file"} {
		appendDuration.WithLabelValues(a)
		appendConflicts.WithLabelValues(a)
		appendFailures.WithLabelValues(a)
	}
}

// sized are the stores observed (ObserveSizes), the last one last: a
// process has one, a test binary many, some closed.
var sized struct {
	sync.Mutex
	stores []*Store
}

// observed returns the last store observed whose connection is open; nil
// when there is none.
func observed() *Store {
	sized.Lock()
	defer sized.Unlock()
	sized.stores = slices.DeleteFunc(sized.stores, func(s *Store) bool { return s.nc.IsClosed() })
	if n := len(sized.stores); n > 0 {
		return sized.stores[n-1]
	}
	return nil
}

var (
	streamBytes = prometheus.NewDesc("crosscheck_stream_bytes",
		"Bytes a stream of the service holds, by stream: the event streams (QUERIES, ACCOUNTS, FILES, EXHAUSTED_JOBS) and the streams of the key-value buckets (KV_<bucket>) and of the object store (OBJ_files), read from JetStream at each scrape.",
		[]string{"stream"}, nil)
	streamMessages = prometheus.NewDesc("crosscheck_stream_messages",
		"Messages a stream of the service holds, by stream (a bucket's: its keys and its markers of deleted keys).",
		[]string{"stream"}, nil)
)

// sizeTimeout bounds the read of the streams' sizes at a scrape.
const sizeTimeout = 2 * time.Second

// sizes is the collector of the streams' sizes.
type sizes struct{}

func (sizes) Describe(ch chan<- *prometheus.Desc) {
	ch <- streamBytes
	ch <- streamMessages
}

// Collect reads the state of every stream of the store (one paged request
// to JetStream); a failure reports nothing.
func (sizes) Collect(ch chan<- prometheus.Metric) {
	s := observed()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), sizeTimeout)
	defer cancel()
	l := s.js.ListStreams(ctx)
	for info := range l.Info() {
		if !ours(info.Config.Name) {
			continue
		}
		ch <- prometheus.MustNewConstMetric(streamBytes, prometheus.GaugeValue, float64(info.State.Bytes), info.Config.Name)
		ch <- prometheus.MustNewConstMetric(streamMessages, prometheus.GaugeValue, float64(info.State.Msgs), info.Config.Name)
	}
}

// ours reports whether stream is one of the service's: a label value
// from a bounded set, whatever else shares the JetStream account.
func ours(stream string) bool {
	switch stream {
	case StreamQueries, StreamAccounts, StreamExhausted, StreamFiles, "OBJ_" + ObjectsFiles:
		return true
	}
	switch strings.TrimPrefix(stream, "KV_") {
	case BucketQueryStatus, BucketQueryList, BucketBalances, BucketKeys, BucketIdempotency, BucketInflight, BucketProjections, BucketLeases:
		return strings.HasPrefix(stream, "KV_")
	}
	return false
}

func init() { metrics.Registry.MustRegister(sizes{}) }

// ObserveSizes makes /metrics report the bytes and messages of the store's
// streams (crosscheck_stream_bytes, crosscheck_stream_messages), read at
// each scrape. Of several stores observed, the last one still connected is
// reported.
func (s *Store) ObserveSizes() {
	sized.Lock()
	defer sized.Unlock()
	sized.stores = append(sized.stores, s)
}

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
