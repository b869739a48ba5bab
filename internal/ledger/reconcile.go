package ledger

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// Reconciliation after an unclean stop.
//
// A query writes to two streams in turn: its reservation to ACCOUNTS, its
// submission and its run to QUERIES, its settlement (the charge of every
// call it recorded) to ACCOUNTS, its terminal event to QUERIES. A store
// whose streams are synced each on its own timer (an fsync interval) can
// come back from a power cut with one stream older than the other, and the
// two disagree on the queries of the moments between: a settlement charging
// calls that QUERIES no longer records (the query then runs again), a query
// recorded in QUERIES whose reservation or settlement is gone (it would end
// free), a reservation or settlement of a query QUERIES lost entirely.
// Reconcile finds those queries and brings the ledger to what QUERIES
// records.

// reconcileMargin is how long before the end of one stream the other is
// read: more than an admission takes between its reservation and its
// submission (at most 30 s) and than a run takes between a settlement and
// its terminal event.
const reconcileMargin = time.Minute

// Reconciled says what Reconcile did, each by request id.
type Reconciled struct {
	// Checked are the queries the two streams disagreed on, or may have.
	Checked int
	// Restored got back the reservation the ledger lost; Settled were
	// settled as QUERIES records their end; Reversed had their settlement
	// reversed; Released were released as abandoned (gone from QUERIES).
	Restored, Settled, Reversed, Released []string
}

// Changed reports whether Reconcile appended anything.
func (r Reconciled) Changed() bool {
	return len(r.Restored)+len(r.Settled)+len(r.Reversed)+len(r.Released) > 0
}

// trail is what the streams' recent events say of one query.
type trail struct {
	account           string
	reserved, settled bool
	submitted, ended  bool
}

// Reconcile brings the ledger to what QUERIES records for every query the
// two streams may disagree on after an unclean stop: the queries with
// events in ACCOUNTS since shortly before the last event of QUERIES, and in
// QUERIES since shortly before the last event of ACCOUNTS. For each:
//   - recorded in QUERIES, neither reserved nor settled: its reservation is
//     restored (Restore), and an ended query is settled as it ended;
//   - ended in QUERIES with its reservation open: settled as it ended;
//   - not ended, settled with calls its events no longer record: its
//     settlement is reversed (Reverse), and its next run settles it;
//   - gone from QUERIES: its settlement reversed and its reservation
//     released as abandoned.
//
// It must run before anything else appends to the store (workers,
// admissions); nothing is charged twice, and what it appends is idempotent.
func (s *Service) Reconcile(ctx context.Context) (Reconciled, error) {
	var out Reconciled
	store := s.Accounts.Store
	trails, err := s.trails(ctx, store)
	if err != nil {
		return out, err
	}
	ids := make([]string, 0, len(trails))
	for id, t := range trails {
		if t.settled && !t.ended || t.ended && !t.settled || t.reserved && !t.submitted || t.submitted && !t.reserved {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out.Checked = len(ids)
	for _, id := range ids {
		if err := s.reconcile(ctx, id, trails[id].account, &out); err != nil {
			return out, fmt.Errorf("reconcile %s: %w", id, err)
		}
	}
	return out, nil
}

// trails reads both streams' recent events, by request id.
func (s *Service) trails(ctx context.Context, store *eventstore.Store) (map[string]*trail, error) {
	qs, err := store.Queries.State(ctx)
	if err != nil {
		return nil, err
	}
	as, err := store.Accounts.State(ctx)
	if err != nil {
		return nil, err
	}
	since := func(st eventstore.State) time.Time {
		if st.LastSeq == 0 {
			return time.Time{} // the other stream is read whole
		}
		return st.LastTime.Add(-reconcileMargin)
	}
	trails := map[string]*trail{}
	of := func(id string) *trail {
		t := trails[id]
		if t == nil {
			t = &trail{}
			trails[id] = t
		}
		return t
	}
	err = read(ctx, store, eventstore.StreamAccounts, "ev."+events.AggregateAccount+".>", since(qs), func(r events.Record) {
		switch e := r.Event.(type) {
		case events.CreditsReserved:
			t := of(e.RequestID)
			t.reserved, t.account = true, events.AggregateID(r.Envelope.Subject)
		case events.ChargesSettled:
			t := of(e.RequestID)
			t.settled, t.account = true, events.AggregateID(r.Envelope.Subject)
		case events.ChargesReversed:
			of(e.RequestID).settled = false
		}
	})
	if err != nil {
		return nil, err
	}
	for _, name := range []string{events.QuerySubmitted{}.EventName(), events.QueryCompleted{}.EventName(), events.QueryFailed{}.EventName()} {
		err := read(ctx, store, eventstore.StreamQueries, events.Subject(events.AggregateQuery, "*", name), since(as), func(r events.Record) {
			t := of(events.AggregateID(r.Envelope.Subject))
			if e, ok := r.Event.(events.QuerySubmitted); ok {
				t.submitted = true
				if t.account == "" {
					t.account = e.AccountID
				}
				return
			}
			t.ended = true
		})
		if err != nil {
			return nil, err
		}
	}
	return trails, nil
}

// read calls fn with every event of stream matching filter stored at or
// after since.
func read(ctx context.Context, store *eventstore.Store, stream, filter string, since time.Time, fn func(events.Record)) error {
	rd, err := store.OpenReader(ctx, stream, filter, eventstore.ReadFrom{Since: since})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	defer rd.Close()
	if n, ok := rd.OpenedPending(); ok && n == 0 {
		return nil
	}
	for {
		msgCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		msg, err := rd.Next(msgCtx)
		cancel()
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		rec, err := events.Decode(msg.Seq, msg.Data)
		if err != nil {
			return fmt.Errorf("read %s at %d: %w", stream, msg.Seq, err)
		}
		fn(rec)
		if msg.Pending == 0 {
			return nil
		}
	}
}

// abandonedLost is the reason of the release of a query QUERIES lost.
const abandonedLost = "abandoned: the store lost the query's events in an unclean stop"

// reconcile brings the ledger of one query to what QUERIES records of it.
func (s *Service) reconcile(ctx context.Context, id, account string, out *Reconciled) error {
	q, recs, err := s.Accounts.Store.LoadQuery(ctx, id)
	if err != nil {
		return err
	}
	if q.Submitted != nil {
		account = q.Submitted.AccountID
	}
	if account == "" {
		return nil
	}
	if q.Submitted == nil {
		// Gone from QUERIES: nothing it ran is charged.
		reversed, err := s.Reverse(ctx, account, id, map[string]bool{})
		if err != nil {
			return err
		}
		if reversed {
			out.Reversed = append(out.Reversed, id)
		}
		open, err := s.Open(ctx, account, id)
		if err != nil || !open {
			return err
		}
		if err := s.Release(ctx, account, id, abandonedLost); err != nil {
			return err
		}
		out.Released = append(out.Released, id)
		return nil
	}
	settled, err := s.Settlement(ctx, account, id)
	if err != nil {
		return err
	}
	if settled != nil {
		if q.Terminal() {
			return nil
		}
		recorded := make(map[string]bool, len(q.Calls))
		for _, c := range q.Calls {
			recorded[c.ID] = true
		}
		reversed, err := s.Reverse(ctx, account, id, recorded)
		if reversed {
			out.Reversed = append(out.Reversed, id)
		}
		return err
	}
	open, err := s.Open(ctx, account, id)
	if err != nil {
		return err
	}
	if !open {
		restored, err := s.Restore(ctx, account, id)
		if err != nil {
			return err
		}
		if !restored {
			return nil
		}
		out.Restored = append(out.Restored, id)
	}
	if !q.Terminal() {
		return nil // its run settles it
	}
	var ending *events.QueryEnding
	for _, r := range recs {
		if e := events.EndingOf(r.Event); e != nil {
			ending = e
		}
	}
	if _, err := s.Settle(ctx, account, id, q.Calls, ending); err != nil {
		return err
	}
	out.Settled = append(out.Settled, id)
	return nil
}
