package accounts

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/metrics"
)

// DefaultSnapshotEvery and DefaultSnapshotInterval are when a process
// writes an account's snapshot by default: once its copy of the account
// has applied that many events since the last snapshot, or at its first
// command that long after the last one when it applied any.
const (
	DefaultSnapshotEvery    = 250
	DefaultSnapshotInterval = time.Minute
)

var (
	snapshotLoads = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_account_snapshot_loads_total",
		Help: "Accounts a process read into memory, by how: used (from a snapshot and the events after it), none (no snapshot: every event), rejected (a snapshot the stream does not hold, or unreadable: every event).",
	}, []string{"outcome"})
	snapshotsWritten = metrics.With().NewCounterVec(prometheus.CounterOpts{
		Name: "crosscheck_account_snapshots_written_total",
		Help: "Account snapshots written, by outcome: ok, or failed (the account is read from its older snapshot, or from every event, until the next one).",
	}, []string{"outcome"})
	accountEventsRead = metrics.With().NewCounter(prometheus.CounterOpts{
		Name: "crosscheck_account_events_read_total",
		Help: "Account events read from the stream to load or catch up processes' copies of accounts.",
	})
)

// The series of every outcome exist from the start, at 0.
func init() {
	for _, outcome := range []string{"used", "none", "rejected"} {
		snapshotLoads.WithLabelValues(outcome)
	}
	snapshotsWritten.WithLabelValues("ok")
	snapshotsWritten.WithLabelValues("failed")
}

func (s *Service) snapshotEvery() uint64 {
	if s.SnapshotEvery > 0 {
		return uint64(s.SnapshotEvery)
	}
	return DefaultSnapshotEvery
}

func (s *Service) snapshotInterval() time.Duration {
	if s.SnapshotInterval > 0 {
		return s.SnapshotInterval
	}
	return DefaultSnapshotInterval
}

// read counts n account events read from the stream.
func (s *Service) read(n int) {
	s.eventsRead.Add(int64(n))
	accountEventsRead.Add(float64(n))
}

// load reads the account with id: its snapshot and the events after it, or
// every event of the account when there is no snapshot it can use. It
// returns the account and the Folded of the snapshot it started from (0:
// none).
func (s *Service) load(ctx context.Context, id string) (*events.Account, uint64, error) {
	a, outcome := s.fromSnapshot(ctx, id)
	snapshotLoads.WithLabelValues(outcome).Inc()
	if a == nil {
		a = &events.Account{}
	}
	snapped := a.Folded
	return a, snapped, s.catchUp(ctx, id, a)
}

// fromSnapshot returns the account its snapshot holds, and "used"; or nil
// and why not: "none" when it has none, "rejected" when the snapshot
// cannot be read or the stream does not hold what it folds: the event at
// its last sequence (the later of its last ledger event and its last own
// event) is not the one it hashed (a stream restored to an earlier state,
// or a snapshot written by another store). One event is enough: the
// stream deletes nothing (DenyDelete, DenyPurge), so one that holds the
// snapshot's last event as it was holds every event before it as it was.
// It is one read, of the block the events after the snapshot are read from
// next; the account's own last event is often in a block of its own, far
// back (its creation), which a cold process would load for nothing else.
func (s *Service) fromSnapshot(ctx context.Context, id string) (*events.Account, string) {
	entry, err := s.Store.Snapshots.Get(ctx, id)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, "none"
	}
	if err != nil {
		return nil, "rejected"
	}
	a, err := events.DecodeSnapshot(id, entry.Value)
	if err != nil {
		return nil, "rejected"
	}
	seq, hash := a.LedgerSeq, a.Ledger.Head
	if a.OwnSeq > seq {
		seq, hash = a.OwnSeq, a.OwnHash
	}
	if !s.holds(ctx, id, seq, hash) {
		return nil, "rejected"
	}
	return a, "used"
}

// holds reports whether the stream holds at seq an event of account id
// whose stored bytes hash to hash; true for seq 0 (nothing to hold).
func (s *Service) holds(ctx context.Context, id string, seq uint64, hash string) bool {
	if seq == 0 {
		return true
	}
	msg, err := s.Store.Accounts.Message(ctx, seq)
	return err == nil && events.AggregateID(msg.Subject) == id && events.HashStored(msg.Data) == hash
}

// snapshot writes the snapshot of c's account, without waiting for its
// acknowledgement, when c has applied SnapshotEvery events since the last
// one, or any since SnapshotInterval; not while the last one's write is
// unanswered. The copy's Read is moved up to its ledger's last event first
// (readOwn): its own appends do not move it, and a snapshot's Read is where
// a load reads on from. The caller holds c.mu.
func (s *Service) snapshot(ctx context.Context, id string, c *cached) {
	a := c.a
	if a == nil || !a.Exists() || a.Folded == c.snapped {
		return
	}
	if a.Folded-c.snapped < s.snapshotEvery() && s.Now().Sub(c.snappedAt) < s.snapshotInterval() {
		return
	}
	if c.pending != nil {
		done, err := c.pending.Done()
		if !done {
			return
		}
		countSnapshot(err)
		c.pending = nil
	}
	if err := s.readOwn(ctx, id, a); err != nil {
		return
	}
	raw, err := events.EncodeSnapshot(a)
	if err != nil {
		countSnapshot(err)
		return
	}
	puts, err := s.Store.Snapshots.PutAsync(ctx, []eventstore.Entry{{Key: id, Value: raw}})
	if err != nil {
		countSnapshot(err)
		return
	}
	c.pending, c.snapped, c.snappedAt = puts, a.Folded, s.Now()
}

// readOwn applies to a the account's own events (keys, customer-owned
// models) after a.Read, and then moves Read up to a's last ledger event:
// every event of the account up to there is applied, its own events by
// this read and its ledger events because each of a's ledger appends
// expected the one before it. It reads only the account's own events,
// usually none: a catch-up (catchUp) would read back every ledger event a
// appended since Read.
func (s *Service) readOwn(ctx context.Context, id string, a *events.Account) error {
	recs, _, err := s.Store.LoadNew(ctx, s.Store.Accounts, events.OwnFilter(id), a.Read+1, a.Applied)
	if err != nil {
		return err
	}
	s.read(len(recs))
	read := a.Read
	for _, r := range recs {
		a.CatchUp(r) // moves Read past ledger events this read does not see
	}
	a.Read = max(read, a.LedgerSeq)
	return nil
}

func countSnapshot(err error) {
	if err != nil {
		snapshotsWritten.WithLabelValues("failed").Inc()
		return
	}
	snapshotsWritten.WithLabelValues("ok").Inc()
}
