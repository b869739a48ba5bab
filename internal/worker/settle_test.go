package worker

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// reserved opens a store and a ledger, and an account on the free plan
// whose reservation of 2 credits holds for query id.
func reserved(t *testing.T, id string) (*eventstore.Store, *ledger.Service, string) {
	t.Helper()
	store := storetest.Open(t)
	ctx := context.Background()
	led := &ledger.Service{Accounts: &accounts.Service{Store: store, Now: time.Now}, Estimator: &pricing.Estimator{Catalog: catalog.Simulated()}, Now: time.Now}
	view, err := led.Accounts.CreateAccount(ctx, "killed", events.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	if err := led.Reserve(ctx, view.ID, id, 2*events.MicrosPerCredit, false); err != nil {
		t.Fatal(err)
	}
	return store, led, view.ID
}

// A worker killed after its last model call was recorded and before the
// settlement: the redelivered job calls no model again, settles the query
// once with that call, and a further delivery changes nothing.
func TestKilledBeforeTheSettlementChargesOnce(t *testing.T) {
	const id = "req_01M8000000000000000000000K"
	store, led, acct := reserved(t, id)
	ctx := context.Background()
	model := events.ModelRef{Provider: catalog.ProviderA, ModelID: "sim-alpha-standard"}
	usage := events.Usage{InputTokens: 16, OutputTokens: 52}
	cost := led.Estimator.Cost(model, usage)
	// What the killed worker left: its one model call recorded, nothing settled.
	for _, ev := range []events.Event{
		events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "killed?", Models: []events.ModelRef{model}},
		events.QueryStarted{},
		events.ModelAnswered{Model: model, Answer: "an answer", Usage: usage, CostMicros: cost},
	} {
		env, _ := events.Wrap(events.AggregateQuery, id, ev, time.Now())
		if _, err := store.Append(ctx, env, nil); err != nil {
			t.Fatal(err)
		}
	}
	c := &counted{inner: simulated.New(catalog.ProviderA, 0)}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led,
		Modes: map[string]Mode{"unify": &modes.Unify{Models: modes.Models{Providers: providers.Set{catalog.ProviderA: c}}}}}
	for range 2 { // the redelivery, then one more
		if err := w.run(ctx, id, nil, nil, &attempt{}); err != nil {
			t.Fatal(err)
		}
	}
	q, _, err := store.LoadQuery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if q.Status != events.StatusCompleted || c.n.Load() != 0 || q.ChargedMicros == nil || *q.ChargedMicros != cost {
		t.Fatalf("status %s, %d model calls, charged %v; want completed, no call, charged %d", q.Status, c.n.Load(), q.ChargedMicros, cost)
	}
	recs, err := store.Load(ctx, store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
	if err != nil {
		t.Fatal(err)
	}
	a := &events.Account{}
	var settlements []events.ChargesSettled
	for _, r := range recs {
		a.Apply(r)
		if s, ok := r.Event.(events.ChargesSettled); ok {
			settlements = append(settlements, s)
		}
	}
	if len(settlements) != 1 || len(settlements[0].Calls) != 1 || settlements[0].Calls[0].CallID != q.Calls[0].ID || settlements[0].Calls[0].AmountMicros != cost ||
		settlements[0].Ending == nil || settlements[0].Ending.Status != events.StatusCompleted {
		t.Fatalf("settlements %+v; want one, charging the recorded call %d, ending completed", settlements, cost)
	}
	if a.Ledger.BalanceMicros != 50*events.MicrosPerCredit-cost || a.Ledger.ReservedMicros != 0 {
		t.Fatalf("balance %d reserved %d; want the grant less the call", a.Ledger.BalanceMicros, a.Ledger.ReservedMicros)
	}
}

// A worker killed after the settlement and before the terminal event, the
// settlement having recorded a failed synthesis: the redelivered job calls
// no model (the synthesis is not tried again, it would go uncharged),
// settles nothing again, and ends the query as the settlement recorded it,
// with its charge.
func TestKilledAfterTheSettlementEndsAsSettled(t *testing.T) {
	const id = "req_01M8000000000000000000000L"
	store, led, acct := reserved(t, id)
	ctx := context.Background()
	a, b := events.ModelRef{Provider: catalog.ProviderA, ModelID: "sim-alpha-standard"}, events.ModelRef{Provider: catalog.ProviderB, ModelID: "sim-beta-standard"}
	usage := events.Usage{InputTokens: 16, OutputTokens: 52}
	q := &events.Query{}
	for _, ev := range []events.Event{
		events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "killed after?", Models: []events.ModelRef{a, b}},
		events.QueryStarted{},
		events.ModelAnswered{Model: a, Answer: "one", Usage: usage, CostMicros: led.Estimator.Cost(a, usage)},
		events.ModelAnswered{Model: b, Answer: "two", Usage: usage, CostMicros: led.Estimator.Cost(b, usage)},
	} {
		env, _ := events.Wrap(events.AggregateQuery, id, ev, time.Now())
		app, err := store.Append(ctx, env, nil)
		if err != nil {
			t.Fatal(err)
		}
		q.Apply(events.Record{Seq: app.Seq, Envelope: env, Event: ev})
	}
	ending := events.QueryFailed{Code: "aggregation_failed", Message: "the synthesis failed: provider_a: timeout"}
	settled, err := led.Settle(ctx, acct, id, q.Calls, events.EndingOf(ending))
	if err != nil {
		t.Fatal(err)
	}
	c := &counted{inner: simulated.New(catalog.ProviderA, 0)}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led,
		Modes: map[string]Mode{"unify": &modes.Unify{Models: modes.Models{Providers: providers.Set{catalog.ProviderA: c, catalog.ProviderB: c}}}}}
	for range 2 { // the redelivery, then one more
		if err := w.run(ctx, id, nil, nil, &attempt{}); err != nil {
			t.Fatal(err)
		}
	}
	q, recs, err := store.LoadQuery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if q.Status != events.StatusFailed || q.FailureCode != ending.Code || c.n.Load() != 0 || q.ChargedMicros == nil || *q.ChargedMicros != settled.ChargedMicros ||
		settled.ChargedMicros == 0 || len(recs) != 5 {
		t.Fatalf("status %s %s, %d model calls, charged %v, %d events; want failed %s, no call, charged %d, the terminal event alone added",
			q.Status, q.FailureCode, c.n.Load(), q.ChargedMicros, len(recs), ending.Code, settled.ChargedMicros)
	}
	accountRecs, err := store.Load(ctx, store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range accountRecs {
		if _, ok := r.Event.(events.ChargesSettled); ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d settlements, want 1", n)
	}
}
