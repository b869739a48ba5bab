package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/pricing"
)

// process is one process's ledger on a shared store: its own account cache.
func process(store *eventstore.Store) *ledger.Service {
	return &ledger.Service{
		Accounts:  &accounts.Service{Store: store, Now: time.Now},
		Estimator: &pricing.Estimator{Catalog: catalog.Simulated()},
		Now:       time.Now,
	}
}

var model = events.ModelRef{Provider: catalog.ProviderA, ModelID: "sim-alpha-standard"}

// completed is the ending of a query that completes.
var completed = events.EndingOf(events.QueryCompleted{})

// call is a model call of cost micros as the query records it.
func call(id string, cost int64) events.Call {
	return events.Call{ID: id, Step: "model_answered", Model: model, Usage: events.Usage{InputTokens: 1, OutputTokens: 1}, CostMicros: cost}
}

// ledgerOf reads acct's whole ledger as any process would see it.
func ledgerOf(t *testing.T, store *eventstore.Store, acct string) ([]events.Record, *events.Account) {
	t.Helper()
	recs, err := store.Load(context.Background(), store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
	if err != nil {
		t.Fatal(err)
	}
	a := &events.Account{}
	for _, r := range recs {
		a.Apply(r)
		if a.Ledger.BalanceMicros < 0 || a.Ledger.ReservedMicros < 0 {
			t.Fatalf("seq %d: balance %d reserved %d: below zero", r.Seq, a.Ledger.BalanceMicros, a.Ledger.ReservedMicros)
		}
	}
	return recs, a
}

func count(recs []events.Record, typ string) int {
	n := 0
	for _, r := range recs {
		if r.Envelope.Type == typ {
			n++
		}
	}
	return n
}

// Many goroutines in several processes reserve, and settle at a cost above
// their reservation, on one small balance: the balance never goes below
// zero, a refused submission leaves no reservation, every admitted query is
// settled once, and keys change meanwhile without failing any of it.
func TestManyProcessesOnOneSmallBalance(t *testing.T) {
	const procs, perProc = 3, 8
	stores := storetest.OpenMany(t, procs)
	ctx := context.Background()
	first := process(stores[0])
	view, err := first.Accounts.CreateAccount(ctx, "small", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	if _, err := first.Adjust(ctx, acct, 5*events.MicrosPerCredit, "a small balance"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	admitted := map[string]bool{}
	var wg sync.WaitGroup
	for p := range procs {
		l := process(stores[p])
		for g := range perProc {
			wg.Go(func() {
				id := fmt.Sprintf("req_%026d", p*100+g)
				err := l.Reserve(ctx, acct, id, events.MicrosPerCredit, false)
				if apperr.Code(err) == apperr.InsufficientCredits {
					return
				}
				if err != nil {
					t.Errorf("reserve %s: %v", id, err)
					return
				}
				mu.Lock()
				admitted[id] = true
				mu.Unlock()
				// Each query costs more than it reserved: the rest comes from the balance.
				if _, err := l.Settle(ctx, acct, id, []events.Call{call(id+"a", 700_000), call(id+"b", 700_000)}, completed); err != nil {
					t.Errorf("settle %s: %v", id, err)
				}
			})
		}
		// A key change in each process while billing runs.
		wg.Go(func() {
			fp := fmt.Sprintf("key%05d", p)
			err := l.Accounts.Update(ctx, acct, nil, func(a *events.Account) ([]events.Event, error) {
				if a.Keys[fp] != nil {
					return nil, nil
				}
				return []events.Event{events.KeyCreated{Fingerprint: fp, Name: "key", SecretHash: "x"}}, nil
			})
			if err != nil {
				t.Errorf("create key: %v", err)
			}
		})
	}
	wg.Wait()
	recs, a := ledgerOf(t, stores[0], acct)
	settled := map[string]int{}
	for _, r := range recs {
		switch e := r.Event.(type) {
		case events.ChargesSettled:
			settled[e.RequestID]++
		case events.CreditsReserved:
			if !admitted[e.RequestID] {
				t.Errorf("a refused submission %s holds a reservation", e.RequestID)
			}
		}
	}
	if len(admitted) == 0 || len(admitted) == procs*perProc {
		t.Fatalf("%d of %d admitted; want the small balance to admit some and refuse others", len(admitted), procs*perProc)
	}
	for id := range admitted {
		if settled[id] != 1 {
			t.Errorf("query %s settled %d times, want 1", id, settled[id])
		}
	}
	if a.Ledger.ReservedMicros != 0 || len(a.Ledger.Open) != 0 || len(a.Keys) != procs {
		t.Fatalf("reserved %d, %d open, %d keys; want nothing held and %d keys", a.Ledger.ReservedMicros, len(a.Ledger.Open), len(a.Keys), procs)
	}
}

// A settlement replayed (the same command again, from another process that
// had not seen the first) has one effect and answers the same charge; the
// stored settlement applied twice to a fold changes nothing the second time.
func TestSettlementReplayedHasOneEffect(t *testing.T) {
	stores := storetest.OpenMany(t, 2)
	ctx := context.Background()
	one, two := process(stores[0]), process(stores[1])
	view, err := one.Accounts.CreateAccount(ctx, "replay", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct, id := view.ID, "req_01M80000000000000000000009"
	if err := one.Reserve(ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	// The second process reads the account before the settlement.
	if _, err := two.Accounts.Account(ctx, acct); err != nil {
		t.Fatal(err)
	}
	calls := []events.Call{call("c1", 300_000), call("c2", 200_000)}
	s1, err := one.Settle(ctx, acct, id, calls, completed)
	if err != nil {
		t.Fatal(err)
	}
	// The second decides another ending (a run resumed after a cancel):
	// the first settlement's charge and ending stand.
	s2, err := two.Settle(ctx, acct, id, append(calls, call("c3", 100_000)), events.EndingOf(events.Cancelled()))
	if err != nil {
		t.Fatal(err)
	}
	recs, a := ledgerOf(t, stores[0], acct)
	if n := count(recs, "account.charges_settled"); n != 1 || s1.ChargedMicros != 500_000 || s2.ChargedMicros != s1.ChargedMicros ||
		s1.Ending == nil || *s1.Ending != *completed || s2.Ending == nil || *s2.Ending != *completed {
		t.Fatalf("%d settlements, charged %d (%+v) then %d (%+v); want one settlement of 500000, completed", n, s1.ChargedMicros, s1.Ending, s2.ChargedMicros, s2.Ending)
	}
	want := a.Ledger
	if want.BalanceMicros != 50*events.MicrosPerCredit-500_000 || want.SpentMonthMicros != 500_000 {
		t.Fatalf("balance %d spent %d after the settlement", want.BalanceMicros, want.SpentMonthMicros)
	}
	last := recs[len(recs)-1]
	a.Apply(last)
	if a.Ledger.BalanceMicros != want.BalanceMicros || a.Ledger.ReservedMicros != want.ReservedMicros || a.Ledger.SpentMonthMicros != want.SpentMonthMicros {
		t.Fatalf("the settlement applied again moved the money: %+v, want %+v", a.Ledger, want)
	}
}

// Key changes and billing are separate aggregates: an append of a key
// event decided on a stale account still succeeds after ledger events, and
// a ledger append after key events.
func TestKeysAndLedgerDoNotContend(t *testing.T) {
	stores := storetest.OpenMany(t, 2)
	ctx := context.Background()
	one, two := process(stores[0]), process(stores[1])
	view, err := one.Accounts.CreateAccount(ctx, "apart", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	if _, err := two.Accounts.Account(ctx, acct); err != nil {
		t.Fatal(err)
	}
	if err := one.Reserve(ctx, acct, "req_01M8000000000000000000000A", events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	// Process two's account is stale on the ledger; its key append does not
	// expect the ledger's sequence.
	env, _ := events.Wrap(events.AggregateAccount, acct, events.KeyCreated{Fingerprint: "abcdefgh", Name: "k", SecretHash: "x"}, time.Now())
	a, err := stores[1].LoadAccount(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	stale := &eventstore.Expect{Filter: events.OwnFilter(acct), Seq: a.OwnSeq}
	if _, err := two.Accounts.Store.Append(ctx, env, stale); err != nil {
		t.Fatalf("a key event after a reservation: %v", err)
	}
	// And a ledger append that expects the ledger's last event succeeds
	// after the key event.
	if _, err := one.Settle(ctx, acct, "req_01M8000000000000000000000A", nil, completed); err != nil {
		t.Fatal(err)
	}
	env, _ = events.WrapLedger(acct, events.MonthlyCapSet{}, time.Now())
	if _, err := stores[0].Append(ctx, env, &eventstore.Expect{Filter: events.LedgerFilter(acct), Seq: a.LedgerSeq}); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("a ledger append on a stale ledger sequence: %v, want a conflict", err)
	}
}

// A process's key change lands after another process's reservation it has
// not read (the two aggregates expect different sequences): its next ledger
// command still decides on that reservation and refuses what the balance
// cannot hold.
func TestKeyChangeDoesNotHideAReservation(t *testing.T) {
	stores := storetest.OpenMany(t, 2)
	ctx := context.Background()
	one, two := process(stores[0]), process(stores[1])
	view, err := one.Accounts.CreateAccount(ctx, "hidden", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	if _, err := one.Adjust(ctx, acct, 3*events.MicrosPerCredit, "three credits"); err != nil {
		t.Fatal(err)
	}
	if _, err := two.Accounts.Account(ctx, acct); err != nil {
		t.Fatal(err)
	}
	if err := one.Reserve(ctx, acct, "req_01M8000000000000000000000B", events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	// Process two appends a key event without reading the reservation.
	err = two.Accounts.Update(ctx, acct, nil, func(a *events.Account) ([]events.Event, error) {
		if a.Keys["key00001"] != nil {
			return nil, nil
		}
		return []events.Event{events.KeyCreated{Fingerprint: "key00001", Name: "k", SecretHash: "x"}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := one.Reserve(ctx, acct, "req_01M8000000000000000000000C", events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	// One credit is left: two credits must be refused.
	err = two.Reserve(ctx, acct, "req_01M8000000000000000000000D", 2*events.MicrosPerCredit, false)
	if apperr.Code(err) != apperr.InsufficientCredits {
		t.Fatalf("reserving 2 credits of 1 left: %v, want insufficient_credits", err)
	}
	_, a := ledgerOf(t, stores[0], acct)
	if a.Ledger.BalanceMicros != events.MicrosPerCredit {
		t.Fatalf("balance %d, want one credit", a.Ledger.BalanceMicros)
	}
}

// A settlement whose query lost calls is reversed once and the query is
// open again (Settlement says none), so that its next settlement charges
// what it records; a query the ledger lost gets a reservation of nothing
// back and is charged from the balance; neither reverses nor restores what
// is consistent.
func TestReverseAndRestore(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	l := process(store)
	view, err := l.Accounts.CreateAccount(ctx, "recovering", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	if _, err := l.Adjust(ctx, acct, 10*events.MicrosPerCredit, "credits"); err != nil {
		t.Fatal(err)
	}
	id := "req_01M80000000000000000000001"
	if err := l.Reserve(ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Settle(ctx, acct, id, []events.Call{call("01M8000000000000000000000A", 500_000), call("01M8000000000000000000000B", 500_000)}, completed); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Reverse(ctx, acct, id, map[string]bool{"01M8000000000000000000000A": true, "01M8000000000000000000000B": true}); err != nil || ok {
		t.Fatalf("a settlement whose calls are all recorded is reversed: %v %v", ok, err)
	}
	if ok, err := l.Restore(ctx, acct, id); err != nil || ok {
		t.Fatalf("a settled query is restored: %v %v", ok, err)
	}
	// The query lost call B; the run records C instead.
	if ok, err := l.Reverse(ctx, acct, id, map[string]bool{"01M8000000000000000000000A": true}); err != nil || !ok {
		t.Fatalf("reverse: %v %v", ok, err)
	}
	if ok, err := process(store).Reverse(ctx, acct, id, map[string]bool{}); err != nil || ok {
		t.Fatalf("reversed twice: %v %v", ok, err)
	}
	if s, err := process(store).Settlement(ctx, acct, id); err != nil || s != nil {
		t.Fatalf("the settlement of a reversed query still stands: %+v %v", s, err)
	}
	s, err := l.Settle(ctx, acct, id, []events.Call{call("01M8000000000000000000000A", 500_000), call("01M8000000000000000000000C", 300_000)}, completed)
	if err != nil || s.ChargedMicros != 800_000 {
		t.Fatalf("settled again: %+v %v", s, err)
	}
	// A query whose reservation the ledger lost.
	lost := "req_01M80000000000000000000002"
	if ok, err := l.Restore(ctx, acct, lost); err != nil || !ok {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if ok, err := l.Restore(ctx, acct, lost); err != nil || ok {
		t.Fatalf("restored twice: %v %v", ok, err)
	}
	if s, err := l.Settle(ctx, acct, lost, []events.Call{call("01M8000000000000000000000D", 200_000)}, completed); err != nil || s.ChargedMicros != 200_000 {
		t.Fatalf("a restored query settled: %+v %v", s, err)
	}
	recs, a := ledgerOf(t, store, acct)
	if got := count(recs, "account.charges_reversed"); got != 1 {
		t.Fatalf("%d reversals, want 1", got)
	}
	if want := int64(10*events.MicrosPerCredit - 800_000 - 200_000); a.Ledger.BalanceMicros != want || a.Ledger.ReservedMicros != 0 || len(a.Ledger.Open) != 0 {
		t.Fatalf("balance %d reserved %d open %v, want %d, 0, none", a.Ledger.BalanceMicros, a.Ledger.ReservedMicros, a.Ledger.Open, want)
	}
}

// However many queries an account settles, its ledger appends expect the
// last sequence of one literal subject, and the account's subjects do not
// grow in number: the server's check of an append's expectation looks up
// one subject, whatever the account's history (a wildcard over one subject
// per settled query walked them all, on the stream's one goroutine).
func TestLedgerAppendsExpectOneSubject(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	led := process(store)
	view, err := led.Accounts.CreateAccount(ctx, "many queries", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	acct := view.ID
	if _, err := led.Adjust(ctx, acct, 100*events.MicrosPerCredit, "credits"); err != nil {
		t.Fatal(err)
	}
	js := storetest.JetStream(t, store)
	stream, err := js.Stream(ctx, eventstore.StreamAccounts)
	if err != nil {
		t.Fatal(err)
	}
	subjects := func() map[string]uint64 {
		t.Helper()
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(events.Filter(events.AggregateAccount, acct)))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects
	}
	settle := func(n int) {
		t.Helper()
		for range n {
			id := "req_" + events.NewID()
			if err := led.Reserve(ctx, acct, id, events.MicrosPerCredit, false); err != nil {
				t.Fatal(err)
			}
			if _, err := led.Settle(ctx, acct, id, []events.Call{call("c"+id, 100_000)}, completed); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle(3)
	few := subjects()
	settle(20)
	if many := subjects(); len(many) != len(few) {
		t.Fatalf("the account's subjects grew from %d to %d with 20 more settled queries: %v", len(few), len(many), many)
	}
	recs, _ := ledgerOf(t, store, acct)
	for _, r := range recs {
		if _, ledger := events.PrevHashOf(r.Event); !ledger {
			continue
		}
		msg, err := stream.GetMsg(ctx, r.Seq)
		if err != nil {
			t.Fatal(err)
		}
		expect := msg.Header.Get("Nats-Expected-Last-Subject-Sequence-Subject")
		if expect == "" || strings.ContainsAny(expect, "*>") || expect != r.Envelope.Subject {
			t.Fatalf("seq %d (%s) on %s expected the last sequence of %q; want its own subject, a literal one", r.Seq, r.Envelope.Type, r.Envelope.Subject, expect)
		}
	}
}

// A settlement is read back, and a second settlement of its query changes
// nothing, however many ledger events came after it (here more than the
// first window of the search back from the ledger's newest event), in
// another process than the one that settled it.
func TestSettlementReadBackBehindManyEvents(t *testing.T) {
	stores := storetest.OpenMany(t, 2)
	ctx := context.Background()
	one, two := process(stores[0]), process(stores[1])
	view, err := one.Accounts.CreateAccount(ctx, "read back", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	acct, id := view.ID, "req_01M8000000000000000000000R"
	if _, err := one.Adjust(ctx, acct, 1000*events.MicrosPerCredit, "credits"); err != nil {
		t.Fatal(err)
	}
	if err := one.Reserve(ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	first, err := one.Settle(ctx, acct, id, []events.Call{call("c1", 300_000)}, completed)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 600 {
		other := fmt.Sprintf("req_01M8000000000000000000%04d", i)
		if err := one.Reserve(ctx, acct, other, events.MicrosPerCredit, false); err != nil {
			t.Fatal(err)
		}
		if _, err := one.Settle(ctx, acct, other, []events.Call{call("c"+other, 1000)}, completed); err != nil {
			t.Fatal(err)
		}
	}
	got, err := two.Settlement(ctx, acct, id)
	if err != nil || got == nil || got.ChargedMicros != first.ChargedMicros || got.Ending == nil || *got.Ending != *completed {
		t.Fatalf("read back behind 1,200 events: %+v, %v; want the settlement of %d", got, err, first.ChargedMicros)
	}
	again, err := two.Settle(ctx, acct, id, []events.Call{call("c1", 300_000), call("c2", 100_000)}, events.EndingOf(events.Cancelled()))
	if err != nil || again.ChargedMicros != first.ChargedMicros || again.Ending == nil || *again.Ending != *completed {
		t.Fatalf("settled again: %+v, %v; want the first settlement back", again, err)
	}
	if none, err := two.Settlement(ctx, acct, "req_01M8000000000000000000000N"); err != nil || none != nil {
		t.Fatalf("the settlement of a query never reserved: %+v, %v; want none", none, err)
	}
	recs, _ := ledgerOf(t, stores[0], acct)
	if n := count(recs, "account.charges_settled"); n != 601 {
		t.Fatalf("%d settlements, want 601", n)
	}
}
