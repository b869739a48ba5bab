package ledger

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/pricing"
)

// Service runs the ledger commands on the account aggregate.
type Service struct {
	Accounts  *accounts.Service
	Estimator *pricing.Estimator
	Now       func() time.Time
	// CancelPercent is the share of its reservation, in percent, that a
	// cancelled query is charged at least (its calls, and a cancellation
	// charge for what they come short of it); 0 charges a cancelled query
	// its calls only.
	CancelPercent int
}

// Reserve holds amount for a new query, or refuses with insufficient_credits
// or monthly_cap_exceeded. Plan credits that are due are granted first.
// Reserving for a query that holds a reservation already succeeds.
func (s *Service) Reserve(ctx context.Context, accountID, requestID string, amount int64, resuming bool) error {
	steps := []accounts.Decide{s.Accounts.Rollover, s.healing(ctx, requestID, amount)}
	if resuming {
		// "Reserved already" must be true of the stream, not only of this
		// process's copy: another process may have released it since.
		steps = append([]accounts.Decide{s.Accounts.Refreshed(ctx, accountID)}, steps...)
	}
	err := s.Accounts.Update(ctx, accountID, nil, append(steps, func(a *events.Account) ([]events.Event, error) {
		ev, err := a.DecideReserve(requestID, amount, s.Now())
		if err != nil || ev == nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	})...)
	countReserve(amount, err)
	return err
}

// Check returns the refusal a reservation of amount for a new query of the
// account would meet now (insufficient_credits, monthly_cap_exceeded),
// decided as Reserve decides it, on the same state: plan credits that are
// due are granted first, and reservations abandoned long ago are released
// before a refusal. It reserves nothing; nil says Reserve may admit the
// query (another command may take the credits meanwhile).
func (s *Service) Check(ctx context.Context, accountID string, amount int64) error {
	const probe = "" // no query: DecideReserve decides as for a new one
	err := s.Accounts.Update(ctx, accountID, nil, s.Accounts.Rollover, s.healing(ctx, probe, amount), func(a *events.Account) ([]events.Event, error) {
		_, err := a.DecideReserve(probe, amount, s.Now())
		return nil, err
	})
	countRefusal(err)
	return err
}

// healing is the step that, when a reservation of amount for requestID
// would be refused, first releases the reservations abandoned long ago.
func (s *Service) healing(ctx context.Context, requestID string, amount int64) accounts.Decide {
	return func(a *events.Account) ([]events.Event, error) {
		if _, err := a.DecideReserve(requestID, amount, s.Now()); err == nil {
			return nil, nil
		}
		return s.abandoned(ctx, a)
	}
}

// abandonGrace is how old a reservation without a submitted query must be
// before it is released: younger, its submission may still be landing (an
// admission runs for at most 30 s).
const abandonGrace = 2 * time.Minute

// abandoned releases the reservations whose query was never recorded (the
// process died between reserving and appending the submission). The
// submissions of all the old reservations are looked up together: the
// caller holds the account's lock.
func (s *Service) abandoned(ctx context.Context, a *events.Account) ([]events.Event, error) {
	var subjects []string
	ids := map[string]string{} // submitted subject → request id
	for id, o := range a.Ledger.Open {
		if s.Now().Sub(o.At) < abandonGrace {
			continue
		}
		subj := events.Subject(events.AggregateQuery, id, events.QuerySubmitted{}.EventName())
		subjects, ids[subj] = append(subjects, subj), id
	}
	if len(subjects) == 0 {
		return nil, nil
	}
	slices.Sort(subjects) // the releases come in a stable order
	store := s.Accounts.Store
	stored, err := store.Stored(ctx, store.Queries, subjects)
	if err != nil {
		return nil, err
	}
	var evs []events.Event
	for _, subj := range subjects {
		if !stored[subj] {
			evs = append(evs, a.DecideRelease(ids[subj], "abandoned: the submission was never recorded"))
		}
	}
	return evs, nil
}

// Charge is one metered model call of a query.
type Charge struct {
	CallID string
	Model  events.ModelRef
	Usage  events.Usage
}

// Debit charges calls of a query, each once: a call charged before, or a
// query settled already, changes nothing. It returns what the query has been
// charged so far and whether its reservation is still open.
func (s *Service) Debit(ctx context.Context, accountID, requestID string, calls ...Charge) (charged int64, open bool, err error) {
	// One step per call: each decides on the state the previous one left.
	steps := make([]accounts.Decide, 0, len(calls)+1)
	steps = append(steps, s.knowing(ctx, accountID, requestID))
	for _, c := range calls {
		steps = append(steps, func(a *events.Account) ([]events.Event, error) {
			if ev := a.DecideDebit(requestID, c.CallID, c.Model, c.Usage.InputTokens, c.Usage.OutputTokens, s.Estimator.Cost(c.Model, c.Usage)); ev != nil {
				return []events.Event{ev}, nil
			}
			return nil, nil
		})
	}
	err = s.Accounts.Update(ctx, accountID, func(a *events.Account) {
		if o := a.Ledger.Open[requestID]; o != nil {
			charged, open = o.ChargedMicros, true
		}
	}, steps...)
	return charged, open, err
}

// knowing is a step that reads the account's latest events when this
// process's state does not hold requestID's reservation. Another process may
// have made it (an API process reserves, a worker debits and releases), and
// a decision that finds nothing to do appends nothing, so a stale state would
// never be corrected by a conflict.
func (s *Service) knowing(ctx context.Context, accountID, requestID string) accounts.Decide {
	refresh := s.Accounts.Refreshed(ctx, accountID)
	return func(a *events.Account) ([]events.Event, error) {
		if _, ok := a.Ledger.Open[requestID]; ok {
			return nil, nil
		}
		return refresh(a)
	}
}

// Settle settles a query in one ledger event (events.ChargesSettled): it
// charges every call of calls that was not charged before, each for the
// cost the query recorded for it at the model's price, returns the rest of
// the reservation to the balance, and records ending, how the query ends.
// A query that ends cancelled is charged at least CancelPercent % of its
// reservation (events.DecideCancelledSettle).
// It returns the query's settlement: this one, or the one made before — a
// query is settled once, and an earlier settlement's charge and ending
// stand. A query that holds no reservation (accepted before credits were
// charged) has no settlement: the zero value, a charge of 0.
func (s *Service) Settle(ctx context.Context, accountID, requestID string, calls []events.Call, ending *events.QueryEnding) (events.ChargesSettled, error) {
	items := make([]events.SettledCall, 0, len(calls))
	for _, c := range calls {
		item := events.SettledCall{CallID: c.ID, Step: c.Step, Model: c.Model, InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens, CostMicros: c.CostMicros}
		if s.Estimator != nil {
			p := s.Estimator.Price(c.Model)
			item.InputPerMillion, item.OutputPerMillion = p.InputPerMillion, p.OutputPerMillion
		}
		items = append(items, item)
	}
	var settled *events.ChargesSettled
	err := s.Accounts.Update(ctx, accountID, nil, s.knowing(ctx, accountID, requestID), func(a *events.Account) ([]events.Event, error) {
		settled = nil // decided again after a conflict
		percent := 0
		if ending != nil && ending.Status == events.StatusFailed && ending.Code == apperr.Cancelled {
			percent = s.CancelPercent
		}
		ev := a.DecideCancelledSettle(requestID, items, "settled", percent)
		if ev == nil {
			return nil, nil
		}
		e := ev.(events.ChargesSettled)
		e.Ending = ending
		settled = &e
		return []events.Event{e}, nil
	})
	if err != nil {
		return events.ChargesSettled{}, err
	}
	countSettled(settled)
	if settled != nil {
		return *settled, nil
	}
	prev, err := s.Settlement(ctx, accountID, requestID)
	if err != nil || prev == nil {
		return events.ChargesSettled{}, err
	}
	return *prev, nil
}

// Settlement returns the settlement of a query; nil when the query is not
// settled: its reservation is open (admitted, or open again after its
// settlement was reversed, Reverse), or was released without a settlement.
// It reads the account's latest events first: a query whose reservation is
// open has no settlement, and for one that has none open the settlement is
// looked for on the subject where the layout before this one put it, then
// on the ledger's subject from its newest event back, to the query's
// reservation at the most (eventstore.LastWhere): a settlement read back
// right after it was made, by a run resumed after it, costs one read
// whatever the account's history. A settlement found on the earlier
// layout's subject stands unless a later ledger event of the query, in
// either layout, reversed it, settled it again or released it: the ledger's
// events after it are searched too (this costs the account's ledger events
// since that settlement, and only queries settled by the earlier layout).
func (s *Service) Settlement(ctx context.Context, accountID, requestID string) (*events.ChargesSettled, error) {
	var open bool
	var chain, ledger uint64
	err := s.Accounts.Update(ctx, accountID, func(a *events.Account) {
		_, open = a.Ledger.Open[requestID]
		chain, ledger = a.ChainSeq, a.LedgerSeq
	}, s.Accounts.Refreshed(ctx, accountID))
	if err != nil || open {
		return nil, err
	}
	store := s.Accounts.Store
	earlier, err := store.Last(ctx, store.Accounts, events.EarlierSettlementSubject(accountID, requestID))
	if err != nil {
		return nil, err
	}
	// The query's events that count are past after, on subject up to until.
	var after uint64
	subject, until := events.LedgerSubject(accountID), chain
	if earlier != nil {
		after = earlier.Seq
		subject, until = events.LedgerFilter(accountID), ledger
	}
	prev := earlier
	if until > after {
		later, err := store.LastWhere(ctx, store.Accounts, subject, until, func(r events.Record) (found, stop bool) {
			if r.Seq <= after {
				return false, true
			}
			// The query's last event decides: a settlement, or none after
			// a reversal, a release or a reservation (its first event).
			switch e := r.Event.(type) {
			case events.ChargesSettled:
				return e.RequestID == requestID, false
			case events.ChargesReversed:
				return e.RequestID == requestID, false
			case events.CreditsReleased:
				return e.RequestID == requestID, false
			case events.CreditsReserved:
				return e.RequestID == requestID, false
			}
			return false, false
		})
		if err != nil {
			return nil, err
		}
		if later != nil {
			prev = later
		}
	}
	if prev == nil {
		return nil, nil
	}
	if e, ok := prev.Event.(events.ChargesSettled); ok {
		return &e, nil
	}
	return nil, nil
}

// open reports whether the query holds an open reservation, on the
// account's latest events.
func (s *Service) open(ctx context.Context, accountID, requestID string) (bool, error) {
	var open bool
	err := s.Accounts.Update(ctx, accountID, func(a *events.Account) { _, open = a.Ledger.Open[requestID] }, s.Accounts.Refreshed(ctx, accountID))
	return open, err
}

// Reverse reverses the settlement of a query whose events no longer record
// some of the calls it charged (recorded: the call ids the query records;
// the store lost the others in an unclean stop): every call it charged is
// refunded and the query is open again, without a reservation, for its run
// to settle it again. It reports whether it reversed anything: not for a
// query that is not settled, nor when the query records every call.
func (s *Service) Reverse(ctx context.Context, accountID, requestID string, recorded map[string]bool) (bool, error) {
	settled, err := s.Settlement(ctx, accountID, requestID)
	if err != nil || settled == nil {
		return false, err
	}
	var lost []string
	for _, c := range settled.Calls {
		if !recorded[c.CallID] {
			lost = append(lost, c.CallID)
		}
	}
	reason := fmt.Sprintf("the query's events no longer record %d of the %d calls its settlement charged", len(lost), len(settled.Calls))
	reversed := false
	err = s.Accounts.Update(ctx, accountID, nil, s.knowing(ctx, accountID, requestID), func(a *events.Account) ([]events.Event, error) {
		reversed = false
		if ev := a.DecideReverse(requestID, *settled, lost, reason); ev != nil {
			reversed = true
			return []events.Event{ev}, nil
		}
		return nil, nil
	})
	return reversed, err
}

// Restore gives a query whose reservation the store lost (recorded in
// QUERIES, neither reserved nor settled in the ledger: an unclean stop)
// a reservation of nothing, so that its settlement charges its calls, from
// the balance. It reports whether it restored one: not for a query that is
// open or settled.
func (s *Service) Restore(ctx context.Context, accountID, requestID string) (bool, error) {
	settled, err := s.Settlement(ctx, accountID, requestID)
	if err != nil || settled != nil {
		return false, err
	}
	restored := false
	err = s.Accounts.Update(ctx, accountID, nil, s.Accounts.Refreshed(ctx, accountID), func(a *events.Account) ([]events.Event, error) {
		restored = false
		if !a.Exists() {
			return nil, nil
		}
		if ev := a.DecideRestore(requestID); ev != nil {
			restored = true
			return []events.Event{ev}, nil
		}
		return nil, nil
	})
	return restored, err
}

// Open reports whether a query holds an open reservation (admitted, not
// settled, or open again after a reversal).
func (s *Service) Open(ctx context.Context, accountID, requestID string) (bool, error) {
	return s.open(ctx, accountID, requestID)
}

// Release settles a query: the unused part of its reservation returns to the
// balance. Releasing a settled query changes nothing.
func (s *Service) Release(ctx context.Context, accountID, requestID, reason string) error {
	return s.Accounts.Update(ctx, accountID, nil, s.knowing(ctx, accountID, requestID), func(a *events.Account) ([]events.Event, error) {
		if ev := a.DecideRelease(requestID, reason); ev != nil {
			return []events.Event{ev}, nil
		}
		return nil, nil
	})
}

// Adjust applies an administrator's grant (micros above zero) or correction
// in micro-credits. It refuses with invalid_request, appending nothing, an
// amount of zero, a correction that would take the balance below zero, and a
// grant that would take what the account holds above events.MaxCredits.
func (s *Service) Adjust(ctx context.Context, accountID string, micros int64, reason string) (*accounts.AccountView, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return nil, apperr.New(apperr.InvalidRequest, "reason is required")
	}
	if micros == 0 {
		return nil, apperr.New(apperr.InvalidRequest, "amount must not be zero")
	}
	if _, err := s.Accounts.Account(ctx, accountID); err != nil {
		return nil, err
	}
	var view accounts.AccountView
	err := s.Accounts.Update(ctx, accountID, func(a *events.Account) { view = accounts.ViewOf(a, s.Now()) }, s.Accounts.Rollover, func(a *events.Account) ([]events.Event, error) {
		decide := a.DecideAdjust
		if micros > 0 {
			decide = a.DecideGrant
		}
		ev, err := decide(micros, reason)
		if err != nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	})
	return &view, err
}

// SetCap sets the monthly cap in micro-credits, or removes it (nil). It
// refuses with invalid_request a cap below zero or above events.MaxCredits.
func (s *Service) SetCap(ctx context.Context, accountID string, capMicros *int64) (*accounts.AccountView, error) {
	if capMicros != nil && *capMicros < 0 {
		return nil, apperr.New(apperr.InvalidRequest, "credits must be a non-negative number or null")
	}
	if _, err := s.Accounts.Account(ctx, accountID); err != nil {
		return nil, err
	}
	var view accounts.AccountView
	err := s.Accounts.Update(ctx, accountID, func(a *events.Account) { view = accounts.ViewOf(a, s.Now()) }, func(a *events.Account) ([]events.Event, error) {
		ev, err := a.DecideCap(capMicros)
		if err != nil {
			return nil, err
		}
		return []events.Event{ev}, nil
	})
	return &view, err
}

// Entry is one ledger entry as the admin API lists it.
type Entry struct {
	Seq            uint64
	Time           time.Time
	Type           string
	AmountMicros   int64 // signed change of the available balance
	BalanceAfter   int64
	ReservedAfter  int64
	RequestID      string
	CallID         string
	Reason         string
	WrittenOff     int64
	MonthlyCapSet  bool
	CapAfterMicros *int64
}

// Entries returns up to limit ledger entries after sequence after, oldest
// first, with the balance after each; next is the after of the next page, 0
// at the end.
func (s *Service) Entries(ctx context.Context, accountID string, after uint64, limit int) (out []Entry, next uint64, err error) {
	if _, err := s.Accounts.Account(ctx, accountID); err != nil {
		return nil, 0, err
	}
	recs, err := s.Accounts.Store.Load(ctx, s.Accounts.Store.Accounts, events.Filter(events.AggregateAccount, accountID), 1)
	if err != nil {
		return nil, 0, err
	}
	a := &events.Account{}
	for _, r := range recs {
		before := a.Ledger
		a.Apply(r)
		e, ok := entryOf(r, before, a.Ledger)
		if !ok || r.Seq <= after {
			continue
		}
		if len(out) == limit {
			return out, out[len(out)-1].Seq, nil
		}
		out = append(out, e)
	}
	return out, 0, nil
}

func entryOf(r events.Record, before, after events.Ledger) (Entry, bool) {
	e := Entry{Seq: r.Seq, Time: r.Envelope.Time, Type: strings.TrimPrefix(r.Envelope.Type, events.AggregateAccount+"."),
		BalanceAfter: after.BalanceMicros, ReservedAfter: after.ReservedMicros}
	switch ev := r.Event.(type) {
	case events.CreditsGranted:
		e.AmountMicros, e.Reason = ev.AmountMicros, ev.Reason
	case events.CreditsAdjusted:
		e.AmountMicros, e.Reason = ev.AmountMicros, ev.Reason
	case events.CreditsReserved:
		e.AmountMicros, e.RequestID = -ev.AmountMicros, ev.RequestID
	case events.CreditsDebited:
		e.AmountMicros, e.RequestID, e.CallID, e.WrittenOff = -ev.AmountMicros, ev.RequestID, ev.CallID, ev.WrittenOffMicros
		e.Reason = fmt.Sprintf("%s/%s: %d input, %d output tokens", ev.Model.Key(), ev.Model.ModelID, ev.InputTokens, ev.OutputTokens)
	case events.CreditsReleased:
		e.AmountMicros, e.RequestID, e.Reason = ev.AmountMicros, ev.RequestID, ev.Reason
	case events.ChargesSettled:
		var charged, writtenOff int64
		for _, c := range ev.Calls {
			charged, writtenOff = charged+c.AmountMicros, writtenOff+c.WrittenOffMicros
		}
		// The change of the balance: what returns, less what the balance paid
		// beyond the reservation.
		e.AmountMicros = (after.BalanceMicros - before.BalanceMicros)
		e.RequestID, e.WrittenOff = ev.RequestID, writtenOff
		e.Reason = fmt.Sprintf("%s: %d model calls, %s credits charged", ev.Reason, len(ev.Calls), events.FormatCredits(charged))
		if c := ev.Cancellation; c != nil {
			e.WrittenOff += c.WrittenOffMicros
			e.Reason += fmt.Sprintf(", cancelled: %s credits more to reach %d %% of the reservation", events.FormatCredits(c.AmountMicros), c.Percent)
		}
	case events.ChargesReversed:
		e.AmountMicros, e.RequestID = after.BalanceMicros-before.BalanceMicros, ev.RequestID
		e.Reason = fmt.Sprintf("reversed: %s; %d calls, %s credits refunded", ev.Reason, len(ev.Calls), events.FormatCredits(ev.RefundedMicros))
	case events.MonthlyCapSet:
		e.MonthlyCapSet, e.CapAfterMicros = true, ev.CapMicros
	default:
		return Entry{}, false
	}
	return e, true
}
