package projections

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// appendAccount appends an account event (a ledger event on the ledger's
// subjects) and returns its sequence.
func appendAccount(t *testing.T, store *eventstore.Store, acct string, ev events.Event) uint64 {
	t.Helper()
	env, err := events.Wrap(events.AggregateAccount, acct, ev, time.Now())
	if _, ledger := events.PrevHashOf(ev); ledger {
		env, err = events.WrapLedger(acct, ev, time.Now())
	}
	if err != nil {
		t.Fatal(err)
	}
	app, err := store.Append(context.Background(), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	return app.Seq
}

// storedBalance reads the stored balance document of acct; a zero one when
// none is stored.
func storedBalance(t *testing.T, store *eventstore.Store, acct string) BalanceDoc {
	t.Helper()
	var d BalanceDoc
	raw, err := store.Balances.GetLatest(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	if raw != nil {
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// foldBalance is the balance document of acct folded from its events.
func foldBalance(t *testing.T, store *eventstore.Store, acct string) BalanceDoc {
	t.Helper()
	recs, err := store.Load(context.Background(), store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
	if err != nil {
		t.Fatal(err)
	}
	a := &events.Account{}
	for _, r := range recs {
		a.Apply(r)
	}
	return BalanceDoc{Seq: a.LastSeq, AccountID: a.ID, Plan: a.Plan, Ledger: LedgerDocOf(a.Ledger)}
}

// runBalances runs the accounts projection with p as its balances handler
// and store of held changes; applied says the last event it applied; stop
// ends the run with cause (nil: a plain stop, errLeaseLost: a process that
// lost the lease) and waits for it.
func runBalances(t *testing.T, store *eventstore.Store, p *Balances) (applied func() uint64, stop func(cause error)) {
	t.Helper()
	handle := Accounts(&Keys{Store: store}, p)
	var last atomic.Uint64
	return last.Load, startRunner(t, &Runner{Name: ConsumerAccounts, Stream: store.Accounts, Filters: []string{"ev.account.>"}, Deferred: p, Checkpoints: store.Projections, Log: zerolog.Nop(),
		HandleBatch: func(ctx context.Context, recs []events.Record) error {
			err := handle(ctx, recs)
			if err == nil {
				last.Store(recs[len(recs)-1].Seq)
			}
			return err
		}})
}

// With Every set, an account's balance document is stored when the account
// is created; its later changes are held, stored when the runner stops, and
// the stored document is the fold of the account's events. A process that
// dies (here: loses the lease) with changes held stores nothing it holds
// and leaves its checkpoint before them: the next process applies them.
func TestBalanceChangesAreHeldAndNeverLost(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	const acct = "acct_01M80000000000000000000071"
	applied, stop := runBalances(t, store, &Balances{Store: store, Every: time.Hour})
	created := appendAccount(t, store, acct, events.AccountCreated{AccountID: acct, Name: "held", Plan: events.PlanFree})
	storetest.WaitFor(t, 10*time.Second, "the new account stored", func() bool { return storedBalance(t, store, acct).Seq == created })
	granted := appendAccount(t, store, acct, events.CreditsGranted{AmountMicros: 50 * events.MicrosPerCredit, Reason: "plan free"})
	reserved := appendAccount(t, store, acct, events.CreditsReserved{RequestID: "req_01M80000000000000000000071", AmountMicros: events.MicrosPerCredit})
	storetest.WaitFor(t, 10*time.Second, "the reservation applied", func() bool { return applied() == reserved })
	if got := storedBalance(t, store, acct).Seq; got != created {
		t.Fatalf("the balance was stored at %d with its batch; want it held at the creation (%d)", got, created)
	}
	stop(errLeaseLost)
	if got := storedBalance(t, store, acct).Seq; got != created {
		t.Fatalf("a process that lost the lease stored the balance at %d; want it left at %d", got, created)
	}
	if pos, err := Checkpoint(context.Background(), store.Projections, ConsumerAccounts); err != nil || pos >= granted {
		t.Fatalf("checkpoint after the lost lease = %d, %v; want it before the held event %d", pos, err, granted)
	}

	// The next process applies the held events from the checkpoint, holds
	// them and more, and stores them when it stops.
	applied, stop = runBalances(t, store, &Balances{Store: store, Every: time.Hour})
	settled := appendAccount(t, store, acct, events.ChargesSettled{RequestID: "req_01M80000000000000000000071", Calls: []events.SettledCall{},
		ChargedMicros: 0, ReleasedMicros: events.MicrosPerCredit, Reason: "settled", Ending: &events.QueryEnding{Status: events.StatusCompleted}})
	storetest.WaitFor(t, 10*time.Second, "the settlement applied", func() bool { return applied() == settled })
	if got := storedBalance(t, store, acct).Seq; got != created {
		t.Fatalf("the next process stored the balance at %d with its batch; want it held at %d", got, created)
	}
	stop(nil)
	want, got := foldBalance(t, store, acct), storedBalance(t, store, acct)
	wantJSON, _ := json.Marshal(want)
	gotJSON, _ := json.Marshal(got)
	if got.Seq != settled || string(wantJSON) != string(gotJSON) || reserved >= settled {
		t.Fatalf("after a plain stop the balance is %s; want the fold %s", gotJSON, wantJSON)
	}
}

// A held balance is stored when it falls due, with no later event.
func TestHeldBalanceStoredWhenDue(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	const acct = "acct_01M80000000000000000000072"
	_, stop := runBalances(t, store, &Balances{Store: store, Every: 200 * time.Millisecond})
	defer stop(nil)
	created := appendAccount(t, store, acct, events.AccountCreated{AccountID: acct, Name: "due", Plan: events.PlanFree})
	storetest.WaitFor(t, 10*time.Second, "the new account stored", func() bool { return storedBalance(t, store, acct).Seq == created })
	granted := appendAccount(t, store, acct, events.CreditsGranted{AmountMicros: 50 * events.MicrosPerCredit, Reason: "plan free"})
	storetest.WaitFor(t, 10*time.Second, "the held grant stored when due", func() bool { return storedBalance(t, store, acct).Seq == granted })
	storetest.WaitFor(t, 10*time.Second, "the checkpoint past the grant", func() bool {
		pos, err := Checkpoint(context.Background(), store.Projections, ConsumerAccounts)
		return err == nil && pos == granted
	})
}

var _ Deferring = (*Balances)(nil)
