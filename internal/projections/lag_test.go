package projections

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// A projection that cannot apply its events (its read model out of reach)
// reports the events stored since the last one it applied as its lag, and
// the lag grows with the stream while it is stuck: it is not left at what
// the last delivery said.
func TestLagGrowsWhileAProjectionIsStuck(t *testing.T) {
	store := storetest.Open(t)
	const name = "proj_lag_test"
	var failing atomic.Bool
	var last atomic.Uint64
	handle := func(_ context.Context, recs []events.Record) error {
		if failing.Load() {
			return errors.New("read model unavailable")
		}
		last.Store(recs[len(recs)-1].Seq)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{Name: name, Stream: store.Queries, Filters: []string{"ev.query.>"}, HandleBatch: handle,
		Checkpoints: store.Projections, Log: zerolog.Nop()}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	seq := appendProgress(t, store, 3)
	storetest.WaitFor(t, 30*time.Second, "the first events applied", func() bool { return last.Load() >= seq })
	lag := func() float64 { return testutil.ToFloat64(projectionLag.WithLabelValues(name)) }
	if got := lag(); got != 0 {
		t.Fatalf("lag %v with every event applied, want 0", got)
	}

	failing.Store(true)
	appendProgress(t, store, 40)
	storetest.WaitFor(t, 30*time.Second, "the lag of the stuck projection to reach 40", func() bool { return lag() >= 40 })
}
