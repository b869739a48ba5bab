package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/audit"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/projections"
)

var model = events.ModelRef{Provider: catalog.ProviderA, ModelID: "sim-alpha-standard"}

type fixture struct {
	t     *testing.T
	ctx   context.Context
	store *eventstore.Store
	led   *ledger.Service
}

func newFixture(t *testing.T) *fixture {
	store := storetest.Open(t)
	return &fixture{t: t, ctx: context.Background(), store: store,
		led: &ledger.Service{Accounts: &accounts.Service{Store: store, Now: time.Now}, Estimator: &pricing.Estimator{Catalog: catalog.Simulated()}, Now: time.Now}}
}

// query appends events to query id's stream and returns its folded state.
func (f *fixture) query(id string, evs ...events.Event) *events.Query {
	f.t.Helper()
	for _, ev := range evs {
		env, _ := events.Wrap(events.AggregateQuery, id, ev, time.Now())
		if _, err := f.store.Append(f.ctx, env, nil); err != nil {
			f.t.Fatal(err)
		}
	}
	q, _, err := f.store.LoadQuery(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return q
}

// answered is a recorded model call of n output tokens.
func (f *fixture) answered(n int) events.ModelAnswered {
	u := events.Usage{InputTokens: 16, OutputTokens: n}
	return events.ModelAnswered{Model: model, Answer: "a", Usage: u, CostMicros: f.led.Estimator.Cost(model, u)}
}

// settle runs a query's settlement as the worker does: the ledger's, with
// the query's ending, then the query's terminal event with its charge.
func (f *fixture) settle(acct, id string, q *events.Query) {
	f.t.Helper()
	s, err := f.led.Settle(f.ctx, acct, id, q.Calls, events.EndingOf(events.QueryCompleted{}))
	if err != nil {
		f.t.Fatal(err)
	}
	f.query(id, events.WithCharge(events.QueryCompleted{}, s.ChargedMicros))
}

// audit projects the balances read model and audits the store.
func (f *fixture) audit() *audit.Report {
	f.t.Helper()
	recs, err := f.store.Load(f.ctx, f.store.Accounts, "ev.account.>", 1)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := (&projections.Balances{Store: f.store}).HandleBatch(f.ctx, recs); err != nil {
		f.t.Fatal(err)
	}
	rep, err := audit.Run(f.ctx, f.store)
	if err != nil {
		f.t.Fatal(err)
	}
	return rep
}

func (f *fixture) report(rep *audit.Report) string {
	var b strings.Builder
	rep.Print(&b)
	return b.String()
}

// A data dir written before the ledger had subjects of its own (money events
// on the account's subjects, one debit per model call) is read side by side
// with settlements: a query the older version ended, a query it left half
// debited that this version settles, and a new query. Balances and the audit
// agree.
func TestOldLayoutReadSideBySide(t *testing.T) {
	f := newFixture(t)
	acct := accounts.NewAccountID()
	head := ""
	// old appends an event as the older version did: on the account's own
	// subject, conditional on the account's last event, chained when it is a
	// ledger event.
	var last uint64
	old := func(ev events.Event) {
		t.Helper()
		linked, isLedger := events.Linked(ev, head)
		env, _ := events.Wrap(events.AggregateAccount, acct, linked, time.Now())
		app, err := f.store.Append(f.ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateAccount, acct), Seq: last})
		if err != nil {
			t.Fatal(err)
		}
		last = app.Seq
		if isLedger {
			head = events.HashStored(app.Data)
		}
	}
	old(events.AccountCreated{AccountID: acct, Name: "old", Plan: events.PlanFree})
	old(events.CreditsGranted{AmountMicros: 50 * events.MicrosPerCredit, Reason: "plan free: credits granted once at sign-up", Period: "signup"})
	debit := func(id string, c events.Call) {
		old(events.CreditsDebited{RequestID: id, CallID: c.ID, Model: c.Model, InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens, CostMicros: c.CostMicros, AmountMicros: c.CostMicros})
	}
	// A query the older version ran to its end.
	q0 := "req_01M80000000000000000000000"
	old(events.CreditsReserved{RequestID: q0, AmountMicros: events.MicrosPerCredit})
	q := f.query(q0, events.QuerySubmitted{RequestID: q0, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(40))
	debit(q0, q.Calls[0])
	f.query(q0, events.CreditsSettled{ChargedMicros: q.Calls[0].CostMicros})
	old(events.CreditsReleased{RequestID: q0, AmountMicros: events.MicrosPerCredit - q.Calls[0].CostMicros, ChargedMicros: q.Calls[0].CostMicros, Reason: "settled"})
	f.query(q0, events.QueryCompleted{})
	spent := q.Calls[0].CostMicros
	// A query it stopped in: two calls recorded, the first debited.
	q1 := "req_01M80000000000000000000001"
	old(events.CreditsReserved{RequestID: q1, AmountMicros: events.MicrosPerCredit})
	q = f.query(q1, events.QuerySubmitted{RequestID: q1, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(50), f.answered(60))
	debit(q1, q.Calls[0])

	// This version: the half-debited query settled, a new query run.
	f.settle(acct, q1, q)
	spent += q.Calls[0].CostMicros + q.Calls[1].CostMicros
	q2 := "req_01M80000000000000000000002"
	if err := f.led.Reserve(f.ctx, acct, q2, events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	q = f.query(q2, events.QuerySubmitted{RequestID: q2, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(70))
	f.settle(acct, q2, q)
	spent += q.Calls[0].CostMicros

	recs, err := f.store.Load(f.ctx, f.store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
	if err != nil {
		t.Fatal(err)
	}
	a := &events.Account{}
	for _, r := range recs {
		a.Apply(r)
	}
	if a.Ledger.BalanceMicros != 50*events.MicrosPerCredit-spent || a.Ledger.ReservedMicros != 0 || a.Ledger.SpentMonthMicros != spent {
		t.Fatalf("balance %d reserved %d spent %d; want %d, 0, %d", a.Ledger.BalanceMicros, a.Ledger.ReservedMicros, a.Ledger.SpentMonthMicros, 50*events.MicrosPerCredit-spent, spent)
	}
	for _, r := range recs {
		if s, ok := r.Event.(events.ChargesSettled); ok && s.RequestID == q1 && len(s.Calls) != 1 {
			t.Fatalf("the half-debited query's settlement charged %d calls, want only the one not debited", len(s.Calls))
		}
	}
	if rep := f.audit(); !rep.OK() {
		t.Fatalf("audit of the old layout beside the new:\n%s", f.report(rep))
	}
}

// A data dir whose ledger the layout before this one wrote (a subject per
// event type, a settlement on a subject of its own per query, each append
// conditional on the last of them all) is read side by side with this
// layout's one ledger subject: a query it settled and ended; a query it
// settled with an ending but did not end (its process died between the
// two), whose settlement a resumed run reads back and whose second
// settlement changes nothing; a query it reserved and this version settles
// (and reads back, its reservation in the layout before); a new query. The
// hash chain runs on across the layouts; balances and the audit agree.
func TestPerTypeLayoutReadSideBySide(t *testing.T) {
	f := newFixture(t)
	acct := accounts.NewAccountID()
	head := ""
	var own, ledger uint64
	// earlier appends an event as the layout before this one did.
	earlier := func(ev events.Event) {
		t.Helper()
		linked, isLedger := events.Linked(ev, head)
		env, _ := events.Wrap(events.AggregateAccount, acct, linked, time.Now())
		expect := &eventstore.Expect{Filter: events.OwnFilter(acct), Seq: own}
		if isLedger {
			env.Subject = "ev.account." + acct + ".ledger." + ev.EventName()
			if s, ok := ev.(events.ChargesSettled); ok {
				env.Subject = events.EarlierSettlementSubject(acct, s.RequestID)
			}
			expect = &eventstore.Expect{Filter: events.LedgerFilter(acct), Seq: ledger}
		}
		app, err := f.store.Append(f.ctx, env, expect)
		if err != nil {
			t.Fatal(err)
		}
		if isLedger {
			ledger, head = app.Seq, events.HashStored(app.Data)
		} else {
			own = app.Seq
		}
	}
	// settled is the settlement of the recorded calls of q, as the layout
	// before decided it, on the account as the events so far leave it.
	settled := func(id string, q *events.Query, ending *events.QueryEnding) events.ChargesSettled {
		t.Helper()
		recs, err := f.store.Load(f.ctx, f.store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
		if err != nil {
			t.Fatal(err)
		}
		a := &events.Account{}
		for _, r := range recs {
			a.Apply(r)
		}
		var items []events.SettledCall
		for _, c := range q.Calls {
			items = append(items, events.SettledCall{CallID: c.ID, Step: c.Step, Model: c.Model, InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens,
				InputPerMillion: 500, OutputPerMillion: 2000, CostMicros: c.CostMicros})
		}
		s := a.DecideSettle(id, items, "settled").(events.ChargesSettled)
		s.Ending = ending
		return s
	}
	submitted := func(id string) events.QuerySubmitted {
		return events.QuerySubmitted{RequestID: id, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}
	}
	completed := events.EndingOf(events.QueryCompleted{})
	earlier(events.AccountCreated{AccountID: acct, Name: "per type", Plan: events.PlanFree})
	earlier(events.CreditsGranted{AmountMicros: 50 * events.MicrosPerCredit, Reason: "plan free: credits granted once at sign-up", Period: "signup"})
	// Settled and ended in the layout before.
	ended, between, open := "req_01M80000000000000000000010", "req_01M80000000000000000000011", "req_01M80000000000000000000012"
	earlier(events.CreditsReserved{RequestID: ended, AmountMicros: events.MicrosPerCredit})
	q := f.query(ended, submitted(ended), f.answered(40))
	s := settled(ended, q, completed)
	earlier(s)
	f.query(ended, events.WithCharge(events.QueryCompleted{}, s.ChargedMicros))
	spent := s.ChargedMicros
	// Settled, not ended.
	earlier(events.CreditsReserved{RequestID: between, AmountMicros: events.MicrosPerCredit})
	q = f.query(between, submitted(between), f.answered(50))
	failed := &events.QueryEnding{Status: events.StatusFailed, Code: "aggregation_failed", Message: "the synthesis failed"}
	s = settled(between, q, failed)
	earlier(s)
	spent += s.ChargedMicros
	// Reserved, not settled.
	earlier(events.CreditsReserved{RequestID: open, AmountMicros: events.MicrosPerCredit})
	qOpen := f.query(open, submitted(open), f.answered(60))

	// This version: the query between its settlement and its end is read
	// back as settled, and settling it again changes nothing.
	got, err := f.led.Settlement(f.ctx, acct, between)
	if err != nil || got == nil || got.Ending == nil || *got.Ending != *failed || got.ChargedMicros != s.ChargedMicros {
		t.Fatalf("the settlement of the layout before read back: %+v, %v; want its ending and charge %d", got, err, s.ChargedMicros)
	}
	again, err := f.led.Settle(f.ctx, acct, between, append(q.Calls, events.Call{ID: "another", Step: "synthesized", Model: model, Usage: events.Usage{OutputTokens: 9}, CostMicros: 9}), completed)
	if err != nil || again.ChargedMicros != s.ChargedMicros || again.Ending == nil || *again.Ending != *failed {
		t.Fatalf("settled again: %+v, %v; want the first settlement back", again, err)
	}
	f.query(between, events.WithCharge(events.QueryFailed{Code: failed.Code, Message: failed.Message}, again.ChargedMicros))
	// The reservation of the layout before settled in this one, and read
	// back from the ledger's one subject.
	s, err = f.led.Settle(f.ctx, acct, open, qOpen.Calls, completed)
	if err != nil {
		t.Fatal(err)
	}
	spent += s.ChargedMicros
	got, err = f.led.Settlement(f.ctx, acct, open)
	if err != nil || got == nil || got.ChargedMicros != s.ChargedMicros || got.Ending == nil || *got.Ending != *completed {
		t.Fatalf("this layout's settlement of the layout before's reservation read back: %+v, %v", got, err)
	}
	f.query(open, events.WithCharge(events.QueryCompleted{}, s.ChargedMicros))
	// A new query.
	fresh := "req_01M80000000000000000000013"
	if err := f.led.Reserve(f.ctx, acct, fresh, events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	q = f.query(fresh, submitted(fresh), f.answered(70))
	f.settle(acct, fresh, q)
	spent += q.Calls[0].CostMicros

	recs, err := f.store.Load(f.ctx, f.store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
	if err != nil {
		t.Fatal(err)
	}
	a := &events.Account{}
	settlements := 0
	for _, r := range recs {
		a.Apply(r)
		if s, ok := r.Event.(events.ChargesSettled); ok {
			settlements++
			if (s.RequestID == open || s.RequestID == fresh) != (r.Envelope.Subject == events.LedgerSubject(acct)) {
				t.Fatalf("the settlement of %s is on %s", s.RequestID, r.Envelope.Subject)
			}
		}
	}
	if settlements != 4 || a.Ledger.BalanceMicros != 50*events.MicrosPerCredit-spent || a.Ledger.ReservedMicros != 0 {
		t.Fatalf("%d settlements, balance %d reserved %d; want 4, %d, 0", settlements, a.Ledger.BalanceMicros, a.Ledger.ReservedMicros, 50*events.MicrosPerCredit-spent)
	}
	if rep := f.audit(); !rep.OK() {
		t.Fatalf("audit of the layout before beside this one:\n%s", f.report(rep))
	}
}

// A settlement that disagrees with the calls the query recorded (a process
// that charged another cost): the audit names it.
func TestAuditCatchesATamperedSettlement(t *testing.T) {
	f := newFixture(t)
	view, err := f.led.Accounts.CreateAccount(f.ctx, "tampered", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	honest, forged := "req_01M8000000000000000000000H", "req_01M8000000000000000000000F"
	if err := f.led.Reserve(f.ctx, acct, honest, events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	q := f.query(honest, events.QuerySubmitted{RequestID: honest, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(40))
	f.settle(acct, honest, q)
	if rep := f.audit(); !rep.OK() {
		t.Fatalf("audit before the tampering:\n%s", f.report(rep))
	}
	if err := f.led.Reserve(f.ctx, acct, forged, events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	q = f.query(forged, events.QuerySubmitted{RequestID: forged, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(40))
	// Chained and appended like any settlement, but charging half the cost
	// the query recorded for its call.
	c := q.Calls[0]
	c.CostMicros /= 2
	var charged int64
	err = f.led.Accounts.Update(f.ctx, acct, nil, func(a *events.Account) ([]events.Event, error) {
		ev := a.DecideSettle(forged, []events.SettledCall{{CallID: c.ID, Step: c.Step, Model: c.Model, InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens, CostMicros: c.CostMicros}}, "settled")
		charged = ev.(events.ChargesSettled).ChargedMicros
		return []events.Event{ev}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.query(forged, events.WithCharge(events.QueryCompleted{}, charged))
	rep := f.audit()
	if out := f.report(rep); rep.OK() || !strings.Contains(out, forged+": debit of call "+c.ID+" does not match") || strings.Contains(out, honest) {
		t.Fatalf("the audit of a settlement that disagrees with its query:\n%s", out)
	}
}

// A query whose terminal event disagrees with its settlement, in its charge
// or in its ending (a process that appended another ending than it
// settled): the audit names each, and only those queries.
func TestAuditCatchesATerminalEventThatDisagreesWithItsSettlement(t *testing.T) {
	f := newFixture(t)
	view, err := f.led.Accounts.CreateAccount(f.ctx, "disagreeing", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	honest, overcharged, otherEnding := "req_01M8000000000000000000000H", "req_01M8000000000000000000000C", "req_01M8000000000000000000000E"
	for _, id := range []string{honest, overcharged, otherEnding} {
		if err := f.led.Reserve(f.ctx, acct, id, events.MicrosPerCredit, false); err != nil {
			t.Fatal(err)
		}
	}
	q := f.query(honest, events.QuerySubmitted{RequestID: honest, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(40))
	f.settle(acct, honest, q)
	q = f.query(overcharged, events.QuerySubmitted{RequestID: overcharged, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(40))
	s, err := f.led.Settle(f.ctx, acct, overcharged, q.Calls, events.EndingOf(events.QueryCompleted{}))
	if err != nil {
		t.Fatal(err)
	}
	f.query(overcharged, events.WithCharge(events.QueryCompleted{}, s.ChargedMicros+1))
	q = f.query(otherEnding, events.QuerySubmitted{RequestID: otherEnding, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(40))
	s, err = f.led.Settle(f.ctx, acct, otherEnding, q.Calls, events.EndingOf(events.Cancelled()))
	if err != nil {
		t.Fatal(err)
	}
	f.query(otherEnding, events.WithCharge(events.QueryCompleted{}, s.ChargedMicros))
	rep := f.audit()
	out := f.report(rep)
	if len(rep.Problems) != 2 || !strings.Contains(out, overcharged+": the query records a charge of") ||
		!strings.Contains(out, otherEnding+": ended completed , but its settlement records the ending failed cancelled") || strings.Contains(out, honest) {
		t.Fatalf("the audit of terminal events that disagree with their settlements:\n%s", out)
	}
}

// A balances document behind its account's events (a service that crashed
// holding changes) is no difference: it is counted and checked against the
// replay at its own sequence. A document that differs from the replay at
// its sequence is one.
func TestAuditChecksTheReadModelAtItsOwnSequence(t *testing.T) {
	f := newFixture(t)
	view, err := f.led.Accounts.CreateAccount(f.ctx, "behind", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	if rep := f.audit(); !rep.OK() || rep.Behind != 0 {
		t.Fatalf("audit of a caught-up read model:\n%s", f.report(rep))
	}
	// An event the read model does not apply: it stays where it was.
	if _, err := f.led.Adjust(f.ctx, acct, events.MicrosPerCredit, "a grant after"); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Run(f.ctx, f.store)
	if err != nil {
		t.Fatal(err)
	}
	if out := f.report(rep); !rep.OK() || rep.Behind != 1 || !strings.Contains(out, "1 accounts' balances read model is behind") {
		t.Fatalf("audit of a read model behind its events:\n%s", out)
	}
	// A document that says something else than the replay at its sequence.
	doc, err := projections.GetBalance(f.ctx, f.store.Balances, acct)
	if err != nil || doc == nil {
		t.Fatalf("balance document: %v %v", doc, err)
	}
	doc.Ledger.BalanceMicros += events.MicrosPerCredit
	raw, _ := json.Marshal(doc)
	if _, err := f.store.Balances.Put(f.ctx, acct, raw); err != nil {
		t.Fatal(err)
	}
	rep, err = audit.Run(f.ctx, f.store)
	if err != nil {
		t.Fatal(err)
	}
	if out := f.report(rep); rep.OK() || !strings.Contains(out, acct+": read model differs from the replay at its seq") {
		t.Fatalf("audit of a read model that differs at its sequence:\n%s", out)
	}
}

// A settlement reversed after its query lost calls, and the query settled
// again for the calls it records, passes; a reversal that refunds what was
// not charged, and a query that made calls with no ledger entry at all
// (its reservation and settlement lost), are differences.
func TestAuditFollowsReversalsAndFindsFreeQueries(t *testing.T) {
	f := newFixture(t)
	view, err := f.led.Accounts.CreateAccount(f.ctx, "a", events.PlanPro)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	id := "req_01M80000000000000000000001"
	if err := f.led.Reserve(f.ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	sub := events.QuerySubmitted{RequestID: id, AccountID: acct, Mode: events.ModeUnify, Prompt: "p", Models: []events.ModelRef{model}, EstimatedMicros: 2 * events.MicrosPerCredit}
	q := f.query(id, sub, events.QueryStarted{}, f.answered(10))
	lost := events.Call{ID: "01M8000000000000000000LOST", Step: "model_answered", Model: model, Usage: events.Usage{InputTokens: 16, OutputTokens: 20}, CostMicros: f.answered(20).CostMicros}
	if _, err := f.led.Settle(f.ctx, acct, id, append(q.Calls, lost), events.EndingOf(events.QueryCompleted{})); err != nil {
		t.Fatal(err)
	}
	// The query's record lost the call: the settlement is reversed and the
	// query, run again, records another call and is settled again.
	recorded := map[string]bool{q.Calls[0].ID: true}
	if ok, err := f.led.Reverse(f.ctx, acct, id, recorded); err != nil || !ok {
		t.Fatalf("reverse: %v %v", ok, err)
	}
	q = f.query(id, f.answered(30))
	f.settle(acct, id, q)
	if rep := f.audit(); !rep.OK() {
		t.Fatalf("a reversed and settled again query:\n%s", f.report(rep))
	}

	// A query that ran with no ledger entry: free.
	free := "req_01M80000000000000000000002"
	sub.RequestID = free
	f.query(free, sub, events.QueryStarted{}, f.answered(10), events.QueryCompleted{})
	if rep := f.report(f.audit()); !strings.Contains(rep, "query "+free+": made model calls costing") {
		t.Fatalf("a free query is not found:\n%s", rep)
	}
}

// A cancelled query's settlement carries its cancellation charge, which the
// audit recomputes from the reservation and the calls: an honest one
// passes; one that charges more than the policy makes, and one for a query
// whose cancel was never requested, are named, and only those.
func TestAuditRecomputesTheCancellationCharge(t *testing.T) {
	f := newFixture(t)
	f.led.CancelPercent = 10
	view, err := f.led.Accounts.CreateAccount(f.ctx, "cancelling", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	honest, overcharged, unasked := "req_01M8000000000000000000000H", "req_01M8000000000000000000000C", "req_01M8000000000000000000000U"
	submitted := func(id string) events.QuerySubmitted {
		if err := f.led.Reserve(f.ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
			t.Fatal(err)
		}
		return events.QuerySubmitted{RequestID: id, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}
	}
	end := func(id string, charged int64) {
		f.query(id, events.WithCharge(events.Cancelled(), charged))
	}
	q := f.query(honest, submitted(honest), events.QueryCancelRequested{KeyFingerprint: "abcdefgh"})
	s, err := f.led.Settle(f.ctx, acct, honest, q.Calls, events.EndingOf(events.Cancelled()))
	if err != nil {
		t.Fatal(err)
	}
	if s.Cancellation == nil || s.ChargedMicros != 200_000 || s.Cancellation.AmountMicros != 200_000 {
		t.Fatalf("the settlement of a query cancelled before its calls: %+v", s)
	}
	end(honest, s.ChargedMicros)
	if rep := f.audit(); !rep.OK() {
		t.Fatalf("audit of an honest cancellation charge:\n%s", f.report(rep))
	}

	f.query(overcharged, submitted(overcharged), events.QueryCancelRequested{KeyFingerprint: "abcdefgh"})
	var charged int64
	err = f.led.Accounts.Update(f.ctx, acct, nil, func(a *events.Account) ([]events.Event, error) {
		ev := a.DecideCancelledSettle(overcharged, nil, "settled", 10).(events.ChargesSettled)
		// Chained and appended like any settlement, but charging twice the
		// policy's minimum.
		ev.Cancellation.CostMicros *= 2
		ev.Cancellation.AmountMicros *= 2
		ev.ChargedMicros = ev.Cancellation.AmountMicros
		ev.ReleasedMicros = 2*events.MicrosPerCredit - ev.ChargedMicros
		ev.Ending = events.EndingOf(events.Cancelled())
		charged = ev.ChargedMicros
		return []events.Event{ev}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	end(overcharged, charged)

	q = f.query(unasked, submitted(unasked))
	s, err = f.led.Settle(f.ctx, acct, unasked, q.Calls, events.EndingOf(events.Cancelled()))
	if err != nil {
		t.Fatal(err)
	}
	end(unasked, s.ChargedMicros)

	rep := f.audit()
	out := f.report(rep)
	if len(rep.Problems) != 2 || !strings.Contains(out, overcharged+": cancellation charge of basis 2, minimum 0.2, cost 0.4") ||
		!strings.Contains(out, unasked+": charged for a cancel that was never requested") || strings.Contains(out, honest) {
		t.Fatalf("the audit of cancellation charges:\n%s", out)
	}
}

// An account's snapshot is checked against the replay of the events it
// folds: the service's own passes; one that says another balance, or
// another chain hash, is a difference named with its account.
func TestAuditChecksTheSnapshots(t *testing.T) {
	f := newFixture(t)
	f.led.Accounts.SnapshotEvery = 5
	view, err := f.led.Accounts.CreateAccount(f.ctx, "snapshotted", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	for i := range 4 {
		id := fmt.Sprintf("req_01M800000000000000000000S%d", i)
		if err := f.led.Reserve(f.ctx, acct, id, events.MicrosPerCredit, false); err != nil {
			t.Fatal(err)
		}
		f.settle(acct, id, f.query(id, events.QuerySubmitted{RequestID: id, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}, f.answered(40)))
	}
	var stored []byte
	storetest.WaitFor(t, 5*time.Second, "a snapshot of the account", func() bool {
		e, err := f.store.Snapshots.Get(f.ctx, acct)
		stored = e.Value
		return err == nil
	})
	if rep := f.audit(); !rep.OK() || rep.Snapshots != 1 {
		t.Fatalf("audit of the service's snapshot (%d checked):\n%s", rep.Snapshots, f.report(rep))
	}
	for name, change := range map[string]func(s *events.AccountSnapshot){
		"balance": func(s *events.AccountSnapshot) { s.Ledger.BalanceMicros += events.MicrosPerCredit },
		"chain":   func(s *events.AccountSnapshot) { s.Ledger.Head = events.HashStored([]byte("elsewhere")) },
		"open": func(s *events.AccountSnapshot) {
			s.Ledger.Open["req_01M8000000000000000000000X"] = &events.OpenQuery{Calls: map[string]bool{}}
		},
	} {
		var s events.AccountSnapshot
		if err := json.Unmarshal(stored, &s); err != nil {
			t.Fatal(err)
		}
		change(&s)
		raw, _ := json.Marshal(s)
		if _, err := f.store.Snapshots.Put(f.ctx, acct, raw); err != nil {
			t.Fatal(err)
		}
		rep, err := audit.Run(f.ctx, f.store)
		if err != nil {
			t.Fatal(err)
		}
		if out := f.report(rep); rep.OK() || len(rep.Problems) != 1 || !strings.Contains(out, acct+": snapshot differs from the replay") {
			t.Fatalf("audit of a snapshot with another %s:\n%s", name, out)
		}
	}
}

// A snapshot written after a reversal, a settlement again and a cancelled
// query's cancellation charge holds what the replay of its events holds:
// the audit's snapshot check passes.
func TestSnapshotFoldsReversalsAndCancellationCharges(t *testing.T) {
	f := newFixture(t)
	f.led.Accounts.SnapshotEvery = 1
	f.led.CancelPercent = 10
	view, err := f.led.Accounts.CreateAccount(f.ctx, "snapshotted", events.PlanPro)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	id := "req_01M80000000000000000000R01"
	if err := f.led.Reserve(f.ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	sub := events.QuerySubmitted{RequestID: id, AccountID: acct, Mode: events.ModeUnify, Prompt: "p", Models: []events.ModelRef{model}, EstimatedMicros: 2 * events.MicrosPerCredit}
	q := f.query(id, sub, events.QueryStarted{}, f.answered(10))
	lost := events.Call{ID: "01M8000000000000000000LOST", Step: "model_answered", Model: model, Usage: events.Usage{InputTokens: 16, OutputTokens: 20}, CostMicros: f.answered(20).CostMicros}
	if _, err := f.led.Settle(f.ctx, acct, id, append(q.Calls, lost), events.EndingOf(events.QueryCompleted{})); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.led.Reverse(f.ctx, acct, id, map[string]bool{q.Calls[0].ID: true}); err != nil || !ok {
		t.Fatalf("reverse: %v %v", ok, err)
	}
	f.settle(acct, id, f.query(id, f.answered(30)))

	cancelled := "req_01M80000000000000000000C01"
	if err := f.led.Reserve(f.ctx, acct, cancelled, 2*events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	sub.RequestID = cancelled
	q = f.query(cancelled, sub, events.QueryCancelRequested{KeyFingerprint: "abcdefgh"})
	s, err := f.led.Settle(f.ctx, acct, cancelled, q.Calls, events.EndingOf(events.Cancelled()))
	if err != nil || s.Cancellation == nil || s.Cancellation.AmountMicros == 0 {
		t.Fatalf("cancelled settlement %+v: %v; want a cancellation charge", s, err)
	}
	f.query(cancelled, events.WithCharge(events.Cancelled(), s.ChargedMicros))

	last, err := f.store.Last(f.ctx, f.store.Accounts, events.LedgerSubject(acct))
	if err != nil || last == nil {
		t.Fatalf("the ledger's last event: %v", err)
	}
	// A command after the last settlement brings the snapshot up to it.
	storetest.WaitFor(t, 10*time.Second, "a snapshot at the ledger's last event", func() bool {
		if _, err := f.led.Settlement(f.ctx, acct, cancelled); err != nil {
			t.Fatal(err)
		}
		e, err := f.store.Snapshots.Get(f.ctx, acct)
		if err != nil {
			return false
		}
		var snap events.AccountSnapshot
		return json.Unmarshal(e.Value, &snap) == nil && snap.LedgerSeq == last.Seq
	})
	if rep := f.audit(); !rep.OK() || rep.Snapshots != 1 {
		t.Fatalf("audit of a snapshot past a reversal and a cancellation charge (%d checked):\n%s", rep.Snapshots, f.report(rep))
	}
}

// TestAuditFindsCallsWithOutputChargedNothing: a call that returned output
// and records no usage was charged nothing (a host that sent no usage,
// before the service counted such calls): the audit names it; the same
// call with its usage estimated, and a synthesis no call wrote (the only
// answer is the answer), pass.
func TestAuditFindsCallsWithOutputChargedNothing(t *testing.T) {
	f := newFixture(t)
	view, err := f.led.Accounts.CreateAccount(f.ctx, "usage", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	free, counted := "req_01M8000000000000000000000Z", "req_01M8000000000000000000000E"
	for _, c := range []struct {
		id string
		ev []events.Event
	}{
		{free, []events.Event{events.ModelAnswered{Model: model, Answer: "an answer", UsageSource: events.UsageReported},
			events.Synthesized{Model: model, Answer: events.Answer{Text: "an answer"}}}},
		{counted, []events.Event{events.ModelAnswered{Model: model, Answer: "an answer", Usage: events.Usage{InputTokens: 9, OutputTokens: 3}, UsageSource: events.UsageEstimated,
			CostMicros: f.led.Estimator.Cost(model, events.Usage{InputTokens: 9, OutputTokens: 3})},
			events.Synthesized{Model: model, Answer: events.Answer{Text: "an answer"}}}},
	} {
		if err := f.led.Reserve(f.ctx, acct, c.id, events.MicrosPerCredit, false); err != nil {
			t.Fatal(err)
		}
		q := f.query(c.id, append([]events.Event{events.QuerySubmitted{RequestID: c.id, AccountID: acct, Mode: "unify", Prompt: "p", Models: []events.ModelRef{model}}}, c.ev...)...)
		f.settle(acct, c.id, q)
	}
	rep := f.audit()
	if out := f.report(rep); rep.OK() || !strings.Contains(out, free+": model call") || !strings.Contains(out, "charged nothing") || strings.Contains(out, counted) {
		t.Fatalf("the audit of a call with output and no usage:\n%s", out)
	}
}
