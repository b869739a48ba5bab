package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// fakeLedger records the calls charged by call id and the settlements; a
// query is settled once, as the ledger settles it.
type fakeLedger struct {
	mu       sync.Mutex
	debits   map[string]int
	released int
	settled  *events.ChargesSettled
}

func (l *fakeLedger) Settle(_ context.Context, _, _ string, calls []events.Call, ending *events.QueryEnding) (events.ChargesSettled, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.settled == nil {
		for _, c := range calls {
			if l.debits[c.ID] == 0 {
				l.debits[c.ID]++
			}
		}
		l.released++
		l.settled = &events.ChargesSettled{ChargedMicros: int64(len(l.debits)), Ending: ending}
	}
	return *l.settled, nil
}

func (l *fakeLedger) Settlement(context.Context, string, string) (*events.ChargesSettled, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settled, nil
}

type counted struct {
	inner providers.Provider
	n     atomic.Int64
}

func (c *counted) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	c.n.Add(1)
	return c.inner.Complete(ctx, req)
}

// Two workers running the same job at once (a job redelivered while its
// first worker still runs): the query is recorded, charged and ended once.
func TestTwoWorkersOnOneJob(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	set, calls := providers.Set{}, map[string]*counted{}
	for _, k := range []string{"provider_a", "provider_b", "provider_c", "provider_d"} {
		calls[k] = &counted{inner: simulated.New(k, 30*time.Millisecond)}
		set[k] = calls[k]
	}
	led := &fakeLedger{debits: map[string]int{}}
	newWorker := func() *Worker {
		return &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led,
			Modes: map[string]Mode{"unify": &modes.Unify{Models: modes.Models{Providers: set}}}}
	}
	id := "req_01M80000000000000000000001"
	var models []events.ModelRef
	for k := range calls {
		models = append(models, events.ModelRef{Provider: k, ModelID: "m"})
	}
	env, _ := events.Wrap(events.AggregateQuery, id, events.QuerySubmitted{RequestID: id, AccountID: "acct_x", KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "twice?", Models: models}, time.Now())
	if _, err := store.Append(ctx, env, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, w := range []*Worker{newWorker(), newWorker()} {
		wg.Go(func() { errs[i] = w.run(ctx, id, nil, "", &attempt{}) })
	}
	wg.Wait()
	// The one that yielded finishes nothing; a redelivery would find the
	// query ended. Run it once more as the redelivery would.
	if err := newWorker().run(ctx, id, nil, "", &attempt{}); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	q, recs, err := store.LoadQuery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	count := countTypes(recs)
	if count["query.model_answered"] != 4 || count["query.synthesized"] != 1 || count["query.credits_settled"] != 0 || count["query.completed"] != 1 || q.Status != events.StatusCompleted {
		t.Fatalf("events %v (errs %v); want each step once", count, errs)
	}
	if len(led.debits) != 5 {
		t.Fatalf("%d distinct calls charged, want 5", len(led.debits))
	}
	for _, c := range q.Calls {
		if led.debits[c.ID] != 1 {
			t.Fatalf("recorded call %s charged %d times", c.ID, led.debits[c.ID])
		}
	}
}

// A job resumed after its settlement (the worker died between the
// settlement and the terminal event) appends the ending the settlement
// recorded, with its charge, and calls no model: not even the synthesis
// that failed, which a run that decided again would call.
func TestResumeAfterSettlementRunsNothing(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	c := &counted{inner: simulated.New("provider_a", 0)}
	failed := events.QueryFailed{Code: "aggregation_failed", Message: "the synthesis failed"}
	led := &fakeLedger{debits: map[string]int{}, released: 1, settled: &events.ChargesSettled{ChargedMicros: 7, Ending: events.EndingOf(failed)}}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led,
		Modes: map[string]Mode{"unify": &modes.Unify{Models: modes.Models{Providers: providers.Set{"provider_a": c, "provider_b": c}}}}}
	id := "req_01M80000000000000000000004"
	models := []events.ModelRef{{Provider: "provider_a", ModelID: "m"}, {Provider: "provider_b", ModelID: "m"}}
	for _, ev := range []events.Event{
		events.QuerySubmitted{RequestID: id, AccountID: "acct_x", Mode: "unify", Prompt: "p", Models: models},
		events.QueryStarted{},
		events.ModelAnswered{Model: models[0], Answer: "a"},
		events.ModelAnswered{Model: models[1], Answer: "b"},
	} {
		env, _ := events.Wrap(events.AggregateQuery, id, ev, time.Now())
		if _, err := store.Append(ctx, env, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.run(ctx, id, nil, "", &attempt{}); err != nil {
		t.Fatal(err)
	}
	q, recs, _ := store.LoadQuery(ctx, id)
	if q.Status != events.StatusFailed || q.FailureCode != "aggregation_failed" || c.n.Load() != 0 || led.released != 1 ||
		q.ChargedMicros == nil || *q.ChargedMicros != 7 || len(recs) != 5 {
		t.Fatalf("status %s code %s charged %v, %d model calls, %d releases, %d events; want the settled failure charged 7, no call, one release, the terminal event alone added",
			q.Status, q.FailureCode, q.ChargedMicros, c.n.Load(), led.released, len(recs))
	}
}

// A job resumed after an older build recorded its settlement on the query
// (credits_settled) appends the ending and the charge that recorded, and
// calls no model.
func TestResumeAfterAnOlderBuildsSettlementRunsNothing(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	c := &counted{inner: simulated.New("provider_a", 0)}
	led := &fakeLedger{debits: map[string]int{}}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led,
		Modes: map[string]Mode{"unify": &modes.Unify{Models: modes.Models{Providers: providers.Set{"provider_a": c}}}}}
	id := "req_01M80000000000000000000002"
	failed := events.Failure{Code: "aggregation_failed", Message: "the synthesis failed"}
	for _, ev := range []events.Event{
		events.QuerySubmitted{RequestID: id, AccountID: "acct_x", Mode: "unify", Prompt: "p", Models: []events.ModelRef{{Provider: "provider_a", ModelID: "m"}}},
		events.QueryStarted{},
		events.CreditsSettled{ChargedMicros: 5, Failed: &failed},
	} {
		env, _ := events.Wrap(events.AggregateQuery, id, ev, time.Now())
		if _, err := store.Append(ctx, env, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.run(ctx, id, nil, "", &attempt{}); err != nil {
		t.Fatal(err)
	}
	q, _, _ := store.LoadQuery(ctx, id)
	// The earlier build's ledger may have charged per call, leaving no
	// settlement to read the charge from: the query's own record of it
	// stands.
	if q.Status != events.StatusFailed || q.FailureCode != "aggregation_failed" || c.n.Load() != 0 || led.released != 1 || q.ChargedMicros == nil || *q.ChargedMicros != 5 {
		t.Fatalf("status %s code %s charged %v, %d model calls, %d releases; want the recorded failure charged 5, no call, one release", q.Status, q.FailureCode, q.ChargedMicros, c.n.Load(), led.released)
	}
}
