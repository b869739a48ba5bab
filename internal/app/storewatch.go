package app

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/embedded"
)

// How the embedded store is watched: its free space and its health every
// storeWatchEvery; a JetStream that failed a write restarted at most every
// storeRestartFirst at first, the pause doubling after each restart that
// does not hold, up to storeRestartMax.
const (
	storeWatchEvery   = time.Second
	storeRestartFirst = time.Second
	storeRestartMax   = 30 * time.Second
)

// storeRestartMinFree is the least free space a restart of JetStream waits
// for when no floor is set: a restart on a disk still full fails again.
const storeRestartMinFree = 1 << 20

// storeWatch watches the embedded store's disk and health. Below the floor
// it refuses admissions (CheckSpace); a JetStream that stopped taking
// writes (a stream that failed a write for want of space keeps refusing
// every write until the server restarts it) is logged with the server's
// reason and restarted in the process once the disk has the floor free
// again. /readyz fails meanwhile (Main.ready asks the server itself).
type storeWatch struct {
	srv *embedded.Server
	// floor is the free space below which admissions are refused, in
	// bytes; zero is no floor.
	floor uint64
	log   zerolog.Logger

	low  atomic.Bool
	free atomic.Uint64

	// Used by run's goroutine only.
	failing     error
	restarted   time.Time
	pause       time.Duration
	lowReported bool
}

func newStoreWatch(srv *embedded.Server, floorMB int, log zerolog.Logger) *storeWatch {
	w := &storeWatch{srv: srv, floor: uint64(floorMB) << 20, log: log, pause: storeRestartFirst}
	storeFloorBytes.Set(float64(w.floor))
	return w
}

// errLowOnSpace refuses an admission while the store is below its floor.
var errLowOnSpace = &apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: 30,
	Message: "the service is low on disk space for its event store and accepts no new queries or files until its operator frees some; retry later (a submission with the same Idempotency-Key)"}

// CheckSpace returns nil when the store's disk has at least the floor
// free, and otherwise the service_restarting error that says the service
// is low on disk space.
func (w *storeWatch) CheckSpace() error {
	if w.low.Load() {
		return errLowOnSpace
	}
	return nil
}

// run checks the store every storeWatchEvery until ctx ends.
func (w *storeWatch) run(ctx context.Context) {
	t := time.NewTicker(storeWatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.check()
	}
}

// check reads the free space and the health of the store once, and
// restarts JetStream when it cannot write and the disk has room again.
func (w *storeWatch) check() {
	free, err := w.srv.FreeBytes()
	if err != nil {
		w.log.Warn().Err(err).Msg("event store: the free space of its disk cannot be read")
	} else {
		w.free.Store(free)
		storeFreeBytes.Set(float64(free))
		low := free < w.floor
		w.low.Store(low)
		switch {
		case low && !w.lowReported:
			w.log.Error().Uint64("free_mib", free>>20).Uint64("floor_mib", w.floor>>20).
				Msg("event store: its disk is below the free-space floor (CROSSCHECK_STORE_MIN_FREE_MB): submissions and uploads are refused until space is freed")
		case !low && w.lowReported:
			w.log.Info().Uint64("free_mib", free>>20).Msg("event store: its disk is above the free-space floor again: submissions and uploads are admitted")
		}
		w.lowReported = low
	}
	health := w.srv.Health()
	if health == nil {
		storeUnwritable.Set(0)
		if w.failing != nil {
			w.log.Info().Msg("event store: JetStream takes writes again")
		}
		w.failing, w.pause = nil, storeRestartFirst
		return
	}
	if !errors.Is(health, embedded.ErrRefusesWrites) {
		// Not ready (Main.ready says why), but nothing a restart mends.
		w.failing = nil
		return
	}
	storeUnwritable.Set(1)
	// A restart needs the failure seen twice, a check apart.
	seen := w.failing != nil
	if !seen || w.failing.Error() != health.Error() {
		w.log.Error().Err(health).Uint64("free_mib", w.free.Load()>>20).
			Msg("event store: JetStream cannot take writes; it is restarted once its disk has the free-space floor (CROSSCHECK_STORE_MIN_FREE_MB) free")
	}
	w.failing = health
	if !seen || err != nil || w.free.Load() < max(w.floor, storeRestartMinFree) || time.Since(w.restarted) < w.pause {
		return
	}
	if !w.restarted.IsZero() {
		w.pause = min(2*w.pause, storeRestartMax)
	}
	w.restarted = time.Now()
	storeRestarts.Inc()
	if err := w.srv.RestartJetStream(); err != nil {
		w.log.Error().Err(err).Dur("retry_in", w.pause).Msg("event store: JetStream could not be restarted")
		return
	}
	if err := w.srv.Health(); err != nil {
		w.log.Error().Err(err).Dur("retry_in", w.pause).Msg("event store: JetStream restarted and still cannot take writes")
		return
	}
	w.log.Warn().Dur("took", time.Since(w.restarted)).Msg("event store: JetStream restarted on its store after failing writes; it takes writes again")
}
