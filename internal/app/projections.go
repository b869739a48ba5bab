package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// Retry delays of a projection whose run failed: the first delay, doubled
// after each failure up to the last. A run that lasted projectionSettle
// counts as started: the next failure waits the first delay again.
const (
	projectionRetryFirst = 500 * time.Millisecond
	projectionRetryMax   = 10 * time.Second
	projectionSettle     = time.Second
)

// projectionHealth records which projections of this process are down: a
// run failed and the next has not yet run for projectionSettle.
type projectionHealth struct {
	mu   sync.Mutex
	down map[string]error
}

func (h *projectionHealth) set(name string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.down, name)
		return
	}
	if h.down == nil {
		h.down = map[string]error{}
	}
	h.down[name] = err
}

// check returns an error naming every projection that is down; nil when
// none is.
func (h *projectionHealth) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.down) == 0 {
		return nil
	}
	names := make([]string, 0, len(h.down))
	for name := range h.down {
		names = append(names, name)
	}
	sort.Strings(names)
	return fmt.Errorf("projection %s not running", strings.Join(names, ", "))
}

// keepRunning runs run until ctx ends, again after each failure with a
// growing delay; the projection counts as down in h from a failure until a
// later run has lasted projectionSettle. A run that returns nil before ctx
// ends counts as a failure.
func keepRunning(ctx context.Context, name string, run func(context.Context) error, h *projectionHealth, log zerolog.Logger) {
	// A process that stops running the projection (it ends, or loses the
	// lease to another) no longer answers for it.
	defer h.set(name, nil)
	delay := projectionRetryFirst
	for ctx.Err() == nil {
		var mu sync.Mutex
		returned := false
		settled := time.AfterFunc(projectionSettle, func() {
			mu.Lock()
			defer mu.Unlock()
			if !returned {
				h.set(name, nil)
			}
		})
		start := time.Now()
		err := run(ctx)
		mu.Lock()
		returned = true
		mu.Unlock()
		settled.Stop()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("stopped")
		}
		if time.Since(start) >= projectionSettle {
			delay = projectionRetryFirst
		}
		h.set(name, err)
		log.Error().Err(err).Str("consumer", name).Dur("retry_in", delay).Msg("projection stopped: not ready until it runs again")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, projectionRetryMax)
	}
}

// projectionRunners returns the runners of the query-status and accounts
// projections, with the buckets each writes.
func (m *Main) projectionRunners() []*projections.Runner {
	status := &projections.QueryStatus{Store: m.Store, Every: projections.RunningDocEvery}
	balances := &projections.Balances{Store: m.Store, Every: projections.BalanceDocEvery}
	runners := []*projections.Runner{
		{Name: projections.ConsumerQueryStatus, Stream: m.Store.Queries, Filters: []string{"ev.query.>"}, HandleBatch: status.HandleBatch, Deferred: status,
			ReadModels: []*eventstore.Bucket{m.Store.QueryStatus, m.Store.QueryList}},
		{Name: projections.ConsumerAccounts, Stream: m.Store.Accounts, Filters: []string{"ev.account.>"},
			HandleBatch: projections.Accounts(&projections.Keys{Store: m.Store}, balances), Deferred: balances,
			ReadModels: []*eventstore.Bucket{m.Store.Keys, m.Store.Balances}},
	}
	for _, r := range runners {
		r.Log, r.Checkpoints = m.Log, m.Store.Projections
	}
	return runners
}

// checkReadModels rebuilds each projection of runners whose read models
// cannot resume from its checkpoint (projections.Runner.Check: the store
// lost writes in an unclean stop), before anything is appended. It returns
// the rebuilt ones, each with the last sequence of its stream.
func (m *Main) checkReadModels(ctx context.Context, runners []*projections.Runner) (map[*projections.Runner]uint64, error) {
	rebuilt := map[*projections.Runner]uint64{}
	for _, r := range runners {
		reason, err := r.Check(ctx)
		if err != nil {
			return nil, err
		}
		if reason == "" {
			continue
		}
		state, err := r.Stream.State(ctx)
		if err != nil {
			return nil, err
		}
		m.Log.Warn().Str("consumer", r.Name).Str("reason", reason).Uint64("events", state.LastSeq).
			Msg("projection: its read models do not match its stream (a store lost writes it had acknowledged); they are rebuilt from the stream")
		if err := r.Rebuild(ctx); err != nil {
			return nil, err
		}
		rebuilt[r] = state.LastSeq
	}
	return rebuilt, nil
}

// awaitRebuild waits, up to the start timeout, until the projection of r
// has applied the events up to seq.
func (m *Main) awaitRebuild(ctx context.Context, r *projections.Runner, seq uint64) {
	start := time.Now()
	deadline := start.Add(m.Config.StartTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if pos, err := projections.Checkpoint(ctx, r.Checkpoints, r.Name); err == nil && pos >= seq {
			m.Log.Info().Str("consumer", r.Name).Dur("took", time.Since(start)).Msg("projection: rebuilt")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.Log.Warn().Str("consumer", r.Name).Msg("projection: still rebuilding; serving meanwhile")
}

// runProjections runs runners, each restarted after a failure (see
// keepRunning). On the embedded server this process is the only one. On a
// shared JetStream every API process runs the projectors and a lease lets
// one at a time apply each projection.
func (m *Main) runProjections(ctx context.Context, runners []*projections.Runner) {
	host, _ := os.Hostname()
	for _, r := range runners {
		run := func(ctx context.Context) error {
			keepRunning(ctx, r.Name, r.Run, &m.projections, m.Log)
			return nil
		}
		if m.Config.NATSURL == "" {
			m.wg.Go(func() { _ = run(ctx) })
			continue
		}
		lease := &projections.Lease{KV: m.Store.Leases, Name: r.Name, TTL: eventstore.LeaseTTL, Log: m.Log,
			Holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), events.NewID())}
		m.wg.Go(func() { lease.Run(ctx, run) })
	}
}
