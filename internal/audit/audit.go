// Package audit replays the ledger from the event streams and checks it: the
// per-account hash chain, every balance against the read model, every
// account snapshot against the replay of the events it folds, and every
// query's charge (its settlement's itemised calls, and the per-call debits
// of the older layout) against its recorded model calls.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// Report is what an audit found.
type Report struct {
	Accounts     int
	LedgerEvents int
	Queries      int
	Debits       int
	// Behind counts the accounts whose balances document is behind their
	// events (checked at its own sequence; see checkReadModel).
	Behind int
	// Snapshots counts the account snapshots checked (checkSnapshot).
	Snapshots int
	Problems  []string
}

// OK reports whether the audit found no difference.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// charge is one call as the ledger charged it: by a debit of the older
// layout or as an item of a settlement.
type charge struct {
	step                   string
	model                  events.ModelRef
	in, out                int
	cost, amount, writeOff int64
}

// settlement is how a query's reservation was closed, and the ending it
// recorded (nil when it recorded none).
type settlement struct {
	charged int64
	reason  string
	ending  *events.QueryEnding
	// cancellation is the settlement's cancellation charge, if any.
	cancellation *events.CancellationCharge
}

type queryMoney struct {
	account  string
	reserved bool
	settled  *settlement
	debits   map[string]charge
	sum      int64
}

// add records the charge of call, once.
func (m *queryMoney) add(rep *Report, req, call string, c charge) {
	if _, dup := m.debits[call]; dup {
		rep.problem("query %s: call %s debited twice", req, call)
	}
	m.debits[call] = c
	m.sum += c.amount
	if c.amount+c.writeOff != c.cost || c.amount < 0 {
		rep.problem("query %s, call %s: amount %d + written off %d ≠ cost %d", req, call, c.amount, c.writeOff, c.cost)
	}
}

// Run audits every account of the store.
func Run(ctx context.Context, store *eventstore.Store) (*Report, error) {
	rep := &Report{}
	recs, err := store.Load(ctx, store.Accounts, "ev.account.>", 1)
	if err != nil {
		return nil, fmt.Errorf("read ACCOUNTS: %w", err)
	}
	byAccount := map[string][]events.Record{}
	var ids []string
	for _, r := range recs {
		id := events.AggregateID(r.Envelope.Subject)
		if _, ok := byAccount[id]; !ok {
			ids = append(ids, id)
		}
		byAccount[id] = append(byAccount[id], r)
	}
	queries := map[string]*queryMoney{}
	var qids []string
	for _, id := range ids {
		rep.Accounts++
		doc, err := projections.GetBalance(ctx, store.Balances, id)
		if err != nil {
			rep.problem("account %s: read model: %v", id, err)
		}
		a := &events.Account{}
		// at is the replayed money state at the read model's sequence.
		var at *projections.LedgerDoc
		for _, r := range byAccount[id] {
			if prev, ledger := events.PrevHashOf(r.Event); ledger {
				rep.LedgerEvents++
				if prev != a.Ledger.Head {
					rep.problem("account %s, seq %d (%s): hash chain broken: prev_hash %s, but the previous ledger event hashes to %s (an event was altered, inserted or removed)",
						id, r.Seq, r.Envelope.Type, short(prev), short(a.Ledger.Head))
				}
			}
			// A settlement is decided on the state before it: its
			// cancellation charge is recomputed on that.
			var open *events.OpenQuery
			if e, ok := r.Event.(events.ChargesSettled); ok && a.Ledger.Open[e.RequestID] != nil {
				o := *a.Ledger.Open[e.RequestID]
				open = &o
			}
			a.Apply(r)
			if doc != nil && r.Seq == doc.Seq {
				l := projections.LedgerDocOf(a.Ledger)
				at = &l
			}
			if a.Ledger.BalanceMicros < 0 || a.Ledger.ReservedMicros < 0 {
				rep.problem("account %s, seq %d: balance %s, reserved %s: below zero", id, r.Seq,
					events.FormatCredits(a.Ledger.BalanceMicros), events.FormatCredits(a.Ledger.ReservedMicros))
			}
			q := func(req string) *queryMoney {
				m := queries[req]
				if m == nil {
					m = &queryMoney{account: id, debits: map[string]charge{}}
					queries[req] = m
					qids = append(qids, req)
				}
				return m
			}
			switch e := r.Event.(type) {
			case events.CreditsReserved:
				m := q(e.RequestID)
				m.reserved = true
				if m.settled != nil && strings.HasPrefix(m.settled.reason, "abandoned") {
					// A submission released as abandoned and finished
					// later by its client's retry: reserved again.
					m.settled = nil
				}
			case events.CreditsDebited:
				rep.Debits++
				q(e.RequestID).add(rep, e.RequestID, e.CallID, charge{model: e.Model, in: e.InputTokens, out: e.OutputTokens,
					cost: e.CostMicros, amount: e.AmountMicros, writeOff: e.WrittenOffMicros})
			case events.ChargesSettled:
				m := q(e.RequestID)
				if m.settled != nil {
					rep.problem("query %s: settled twice (seq %d)", e.RequestID, r.Seq)
					continue
				}
				for _, c := range e.Calls {
					rep.Debits++
					m.add(rep, e.RequestID, c.CallID, charge{step: c.Step, model: c.Model, in: c.InputTokens, out: c.OutputTokens,
						cost: c.CostMicros, amount: c.AmountMicros, writeOff: c.WrittenOffMicros})
					price := catalog.Pricing{InputPerMillion: c.InputPerMillion, OutputPerMillion: c.OutputPerMillion}
					if c.Model.CustomModel == "" && min(price.MicroCredits(c.InputTokens, c.OutputTokens), events.MaxMicros) != c.CostMicros {
						rep.problem("query %s, call %s: cost %d is not its tokens at its price", e.RequestID, c.CallID, c.CostMicros)
					}
				}
				if c := e.Cancellation; c != nil {
					checkCancellation(rep, e, open, m)
					m.sum += c.AmountMicros
				}
				m.settled = &settlement{charged: e.ChargedMicros, reason: e.Reason, ending: e.Ending, cancellation: e.Cancellation}
			case events.CreditsReleased:
				if m := q(e.RequestID); m.settled == nil {
					m.settled = &settlement{charged: e.ChargedMicros, reason: e.Reason}
				}
			case events.ChargesReversed:
				// The settlement's calls are no longer charged, and the query
				// is open again for a new settlement.
				m := q(e.RequestID)
				if m.settled == nil {
					rep.problem("query %s: a reversal (seq %d) of no settlement", e.RequestID, r.Seq)
					continue
				}
				var refunded int64
				for _, call := range e.Calls {
					c, ok := m.debits[call]
					if !ok {
						rep.problem("query %s: reversal of call %s, which no settlement charged", e.RequestID, call)
						continue
					}
					refunded += c.amount
					m.sum -= c.amount
					delete(m.debits, call)
				}
				if refunded != e.RefundedMicros {
					rep.problem("query %s: reversal refunds %s credits, but its calls were charged %s", e.RequestID, events.FormatCredits(e.RefundedMicros), events.FormatCredits(refunded))
				}
				m.settled = nil
			}
		}
		if err == nil {
			checkReadModel(rep, a, doc, at)
		}
		if err := checkSnapshot(ctx, store, rep, id, byAccount[id]); err != nil {
			return nil, err
		}
	}
	sort.Strings(qids)
	for _, req := range qids {
		checkQuery(ctx, store, rep, req, queries[req])
	}
	if err := checkUncharged(ctx, store, rep, queries); err != nil {
		return nil, err
	}
	return rep, nil
}

// checkCancellation recomputes the cancellation charge of settlement e
// from the query's open reservation before it (open) and the calls the
// settlement and the debits before it charged (m): its percent in range,
// its basis, minimum and cost as the policy makes them, its amount and
// write-off adding up to its cost, and an ending that says the query was
// cancelled.
func checkCancellation(rep *Report, e events.ChargesSettled, open *events.OpenQuery, m *queryMoney) {
	c := e.Cancellation
	if e.Ending == nil || e.Ending.Status != events.StatusFailed || e.Ending.Code != events.Cancelled().Code {
		rep.problem("query %s: a cancellation charge in a settlement whose ending is not a cancel", e.RequestID)
	}
	if c.Percent < 1 || c.Percent > 100 {
		rep.problem("query %s: cancellation charge of %d %%, outside 1–100", e.RequestID, c.Percent)
		return
	}
	if open == nil {
		return // no reservation: reported by checkQuery
	}
	want := events.CancellationDue(*open, m.sum, c.Percent)
	if c.BasisMicros != want.BasisMicros || c.MinimumMicros != want.MinimumMicros || c.CostMicros != want.CostMicros {
		rep.problem("query %s: cancellation charge of basis %s, minimum %s, cost %s; the reservation and the calls make basis %s, minimum %s, cost %s at %d %%",
			e.RequestID, events.FormatCredits(c.BasisMicros), events.FormatCredits(c.MinimumMicros), events.FormatCredits(c.CostMicros),
			events.FormatCredits(want.BasisMicros), events.FormatCredits(want.MinimumMicros), events.FormatCredits(want.CostMicros), c.Percent)
	}
	if c.AmountMicros < 0 || c.WrittenOffMicros < 0 || c.AmountMicros+c.WrittenOffMicros != c.CostMicros {
		rep.problem("query %s: cancellation charge: amount %d + written off %d ≠ cost %d", e.RequestID, c.AmountMicros, c.WrittenOffMicros, c.CostMicros)
	}
}

// checkUncharged finds the queries the ledger never heard of although they
// were admitted with an estimate (so their admission reserved it) and made
// model calls that cost something: queries that ran for free.
func checkUncharged(ctx context.Context, store *eventstore.Store, rep *Report, known map[string]*queryMoney) error {
	var unknown []string
	err := eachEvent(ctx, store, eventstore.StreamQueries, events.Subject(events.AggregateQuery, "*", events.QuerySubmitted{}.EventName()), func(r events.Record) {
		if e, ok := r.Event.(events.QuerySubmitted); ok && known[e.RequestID] == nil && e.EstimatedMicros > 0 {
			unknown = append(unknown, e.RequestID)
		}
	})
	if err != nil {
		return fmt.Errorf("read QUERIES: %w", err)
	}
	for _, id := range unknown {
		e := events.QuerySubmitted{RequestID: id}
		q, _, err := store.LoadQuery(ctx, e.RequestID)
		if err != nil {
			return err
		}
		var cost int64
		for _, c := range q.Calls {
			cost += c.CostMicros
		}
		if cost > 0 {
			rep.problem("query %s: made model calls costing %s credits, but the ledger has no reservation or charge of it", e.RequestID, events.FormatCredits(cost))
		}
	}
	return nil
}

// eachEvent calls fn with every event of stream matching filter, in order,
// read through one consumer (no bound on the whole read's time, each event
// within 10 s).
func eachEvent(ctx context.Context, store *eventstore.Store, stream, filter string, fn func(events.Record)) error {
	rd, err := store.OpenReader(ctx, stream, filter, eventstore.ReadFrom{})
	if err != nil {
		return err
	}
	defer rd.Close()
	if n, ok := rd.OpenedPending(); ok && n == 0 {
		return nil
	}
	for {
		next, cancel := context.WithTimeout(ctx, 10*time.Second)
		msg, err := rd.Next(next)
		cancel()
		if err != nil {
			return err
		}
		rec, err := events.Decode(msg.Seq, msg.Data)
		if err != nil {
			return fmt.Errorf("event %d: %w", msg.Seq, err)
		}
		fn(rec)
		if msg.Pending == 0 {
			return nil
		}
	}
}

func short(h string) string {
	if h == "" {
		return "(none)"
	}
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// checkReadModel compares an account's balances document with the money
// state replayed from its events at the document's own sequence (at). A
// document behind the stream is not a difference: its projection had not
// applied the last events when the service stopped (it holds a document's
// changes for up to projections.BalanceDocEvery, and a crash leaves them
// unstored until the next start applies them again); it is counted, and
// checked against the replay at its sequence.
func checkReadModel(rep *Report, a *events.Account, doc *projections.BalanceDoc, at *projections.LedgerDoc) {
	switch {
	case doc == nil:
		rep.problem("account %s: missing from the balances read model", a.ID)
		return
	case at == nil:
		rep.problem("account %s: read model at seq %d, which is no event of the account's (replay at seq %d)", a.ID, doc.Seq, a.LastSeq)
		return
	}
	if doc.Seq < a.LastSeq {
		rep.Behind++
	}
	want, _ := json.Marshal(at)
	got, _ := json.Marshal(doc.Ledger)
	if string(want) != string(got) || doc.AccountID != a.ID {
		rep.problem("account %s: read model differs from the replay at its seq %d: read model balance %s reserved %s; replay balance %s reserved %s",
			a.ID, doc.Seq, events.FormatCredits(doc.Ledger.BalanceMicros), events.FormatCredits(doc.Ledger.ReservedMicros),
			events.FormatCredits(at.BalanceMicros), events.FormatCredits(at.ReservedMicros))
	}
}

// checkSnapshot compares account id's stored snapshot, if it has one, with
// the replay of the events it folds (events.Account.Covers): a snapshot
// that says anything else than the replay, or folds events the stream does
// not hold, is a difference.
func checkSnapshot(ctx context.Context, store *eventstore.Store, rep *Report, id string, recs []events.Record) error {
	entry, err := store.Snapshots.Get(ctx, id)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the snapshot of %s: %w", id, err)
	}
	rep.Snapshots++
	snap, err := events.DecodeSnapshot(id, entry.Value)
	if err != nil {
		rep.problem("account %s: snapshot unreadable: %v", id, err)
		return nil
	}
	replay := &events.Account{}
	for _, r := range recs {
		if snap.Covers(r) {
			replay.Apply(r)
		}
	}
	replay.Read = snap.Read
	var stored events.AccountSnapshot
	_ = json.Unmarshal(entry.Value, &stored)
	want, _ := json.Marshal(events.SnapshotOf(replay))
	got, _ := json.Marshal(stored)
	if string(want) != string(got) {
		rep.problem("account %s: snapshot differs from the replay of the events it folds: snapshot %d events to seq %d, balance %s, reserved %s, chain %s; replay %d events to seq %d, balance %s, reserved %s, chain %s",
			id, snap.Folded, snap.LastSeq, events.FormatCredits(snap.Ledger.BalanceMicros), events.FormatCredits(snap.Ledger.ReservedMicros), short(snap.Ledger.Head),
			replay.Folded, replay.LastSeq, events.FormatCredits(replay.Ledger.BalanceMicros), events.FormatCredits(replay.Ledger.ReservedMicros), short(replay.Ledger.Head))
	}
	return nil
}

// checkQuery checks one query's money against its own events.
func checkQuery(ctx context.Context, store *eventstore.Store, rep *Report, req string, m *queryMoney) {
	rep.Queries++
	if !m.reserved {
		rep.problem("query %s: debited or released without a reservation", req)
	}
	if m.settled != nil && m.settled.charged != m.sum {
		rep.problem("query %s: settled with a charge of %s credits, but its debits sum to %s", req, events.FormatCredits(m.settled.charged), events.FormatCredits(m.sum))
	}
	q, _, err := store.LoadQuery(ctx, req)
	if err != nil {
		rep.problem("query %s: %v", req, err)
		return
	}
	if q.Submitted == nil {
		if m.settled == nil || !strings.HasPrefix(m.settled.reason, "abandoned") || len(m.debits) > 0 {
			rep.problem("query %s: has ledger entries but no events", req)
		}
		return
	}
	if q.Submitted.AccountID != m.account {
		rep.problem("query %s: charged to account %s but submitted by %s", req, m.account, q.Submitted.AccountID)
	}
	calls := map[string]events.Call{}
	for _, c := range q.Calls {
		calls[c.ID] = c
		d, ok := m.debits[c.ID]
		if !ok {
			if m.settled != nil {
				rep.problem("query %s: model call %s (%s) has no debit", req, c.ID, c.Model.Key())
			}
			continue
		}
		if d.in != c.Usage.InputTokens || d.out != c.Usage.OutputTokens || d.cost != c.CostMicros || d.model != c.Model || (d.step != "" && d.step != c.Step) {
			rep.problem("query %s: debit of call %s does not match the usage or the cost the query recorded for it", req, c.ID)
		}
	}
	for _, c := range q.Uncharged {
		rep.problem("query %s: model call %s (%s, %s) returned output but records no usage: it was charged nothing", req, c.ID, c.Model.Key(), c.Step)
	}
	for id := range m.debits {
		if _, ok := calls[id]; !ok {
			rep.problem("query %s: debit for call %s, which the query did not record", req, id)
		}
	}
	if q.ChargedMicros != nil && *q.ChargedMicros != m.sum {
		rep.problem("query %s: the query records a charge of %s credits, its debits sum to %s", req, events.FormatCredits(*q.ChargedMicros), events.FormatCredits(m.sum))
	}
	if m.settled != nil && m.settled.cancellation != nil && !q.CancelRequested {
		rep.problem("query %s: charged for a cancel that was never requested", req)
	}
	if m.settled != nil && m.settled.ending != nil && q.Terminal() {
		end := m.settled.ending
		if q.ChargedMicros == nil {
			rep.problem("query %s: ended without the charge of its settlement", req)
		}
		if q.Status != end.Status || q.FailureCode != end.Code {
			rep.problem("query %s: ended %s %s, but its settlement records the ending %s %s", req, q.Status, q.FailureCode, end.Status, end.Code)
		}
	}
	if q.Terminal() && m.settled == nil {
		rep.problem("query %s: ended but its reservation was never released", req)
	}
}

// Print writes the report.
func (r *Report) Print(w interface{ Write([]byte) (int, error) }) {
	fmt.Fprintf(w, "audit: %d accounts, %d ledger events, %d queries, %d debits replayed; %d account snapshots checked\n", r.Accounts, r.LedgerEvents, r.Queries, r.Debits, r.Snapshots)
	if r.Behind > 0 {
		fmt.Fprintf(w, "audit: %d accounts' balances read model is behind their events (the projection had not applied the last ones; start the service and it does): each checked at its own sequence\n", r.Behind)
	}
	if r.OK() {
		fmt.Fprintln(w, "audit: OK — every hash chain is unbroken, every balance matches the read model, every snapshot the replay, every charge matches its debits and calls")
		return
	}
	fmt.Fprintf(w, "audit: %d differences\n", len(r.Problems))
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  -", p)
	}
}
