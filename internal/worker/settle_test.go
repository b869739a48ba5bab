package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/audit"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/projections"
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

// recordEvents appends evs to query id, one after another, and returns the
// query they make.
func recordEvents(t *testing.T, store *eventstore.Store, id string, evs ...events.Event) *events.Query {
	t.Helper()
	q := &events.Query{}
	for _, ev := range evs {
		q.Apply(storetest.AppendQuery(t, store, id, ev))
	}
	return q
}

// The models the settlement tests record answers of, and each answer's usage.
var (
	modelA      = events.ModelRef{Provider: catalog.ProviderA, ModelID: "sim-alpha-standard"}
	modelB      = events.ModelRef{Provider: catalog.ProviderB, ModelID: "sim-beta-standard"}
	answerUsage = events.Usage{InputTokens: 16, OutputTokens: 52}
)

// answered is m's recorded answer text, priced by led.
func answered(led *ledger.Service, m events.ModelRef, text string) events.ModelAnswered {
	return events.ModelAnswered{Model: m, Answer: text, Usage: answerUsage, CostMicros: led.Estimator.Cost(m, answerUsage)}
}

// bothAnswered records query id of account acct: submitted with prompt to
// modelA and modelB, started, answered by both, then more.
func bothAnswered(t *testing.T, store *eventstore.Store, led *ledger.Service, acct, id, prompt string, more ...events.Event) *events.Query {
	t.Helper()
	return recordEvents(t, store, id, append([]events.Event{
		events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: prompt, Models: []events.ModelRef{modelA, modelB}},
		events.QueryStarted{},
		answered(led, modelA, "one"),
		answered(led, modelB, "two"),
	}, more...)...)
}

// unifyOn is a worker's modes: unify on the providers of set.
func unifyOn(set providers.Set) map[string]Mode {
	return map[string]Mode{"unify": &modes.Unify{Models: modes.Models{Providers: set}}}
}

// settlementsOf returns the settlements recorded on account acct, and the
// account they leave.
func settlementsOf(t *testing.T, store *eventstore.Store, acct string) ([]events.ChargesSettled, *events.Account) {
	t.Helper()
	recs, err := store.Load(context.Background(), store.Accounts, events.Filter(events.AggregateAccount, acct), 1)
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
	return settlements, a
}

// A worker killed after its last model call was recorded and before the
// settlement: the redelivered job calls no model again, settles the query
// once with that call, and a further delivery changes nothing.
func TestKilledBeforeTheSettlementChargesOnce(t *testing.T) {
	const id = "req_01M8000000000000000000000K"
	store, led, acct := reserved(t, id)
	ctx := context.Background()
	answer := answered(led, modelA, "an answer")
	cost := answer.CostMicros
	// What the killed worker left: its one model call recorded, nothing settled.
	recordEvents(t, store, id,
		events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "killed?", Models: []events.ModelRef{modelA}},
		events.QueryStarted{},
		answer,
	)
	c := &counted{inner: simulated.New(catalog.ProviderA, 0)}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: unifyOn(providers.Set{catalog.ProviderA: c})}
	for range 2 { // the redelivery, then one more
		if err := w.run(ctx, id, nil, "", &attempt{}); err != nil {
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
	settlements, a := settlementsOf(t, store, acct)
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
	q := bothAnswered(t, store, led, acct, id, "killed after?")
	ending := events.QueryFailed{Code: "aggregation_failed", Message: "the synthesis failed: provider_a: timeout"}
	settled, err := led.Settle(ctx, acct, id, q.Calls, events.EndingOf(ending))
	if err != nil {
		t.Fatal(err)
	}
	c := &counted{inner: simulated.New(catalog.ProviderA, 0)}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: unifyOn(providers.Set{catalog.ProviderA: c, catalog.ProviderB: c})}
	for range 2 { // the redelivery, then one more
		if err := w.run(ctx, id, nil, "", &attempt{}); err != nil {
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
	if settlements, _ := settlementsOf(t, store, acct); len(settlements) != 1 {
		t.Fatalf("%d settlements, want 1", len(settlements))
	}
}

// synthesisFails fails every synthesis call and answers the rest.
type synthesisFails struct{ inner providers.Provider }

func (p synthesisFails) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	if req.Purpose == events.StepSynthesis {
		return nil, &providers.Error{Class: providers.ClassHostError, Message: "upstream 500"}
	}
	return p.inner.Complete(ctx, req)
}

// synthesisWaits holds every synthesis call until release is closed.
type synthesisWaits struct {
	inner   providers.Provider
	calling chan struct{}
	release chan struct{}
}

func (p synthesisWaits) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	if req.Purpose == events.StepSynthesis {
		close(p.calling)
		<-p.release
	}
	return p.inner.Complete(ctx, req)
}

// settledThen runs after once the query is settled.
type settledThen struct {
	Ledger
	after func()
}

func (l settledThen) Settle(ctx context.Context, accountID, requestID string, calls []events.Call, ending *events.QueryEnding) (events.ChargesSettled, error) {
	s, err := l.Ledger.Settle(ctx, accountID, requestID, calls, ending)
	l.after()
	return s, err
}

// Two workers on one job (redelivered while its first worker still ran):
// the second one asks for the synthesis on the same events as the first,
// which ends the query without one and settles it — its synthesis fails,
// JetStream gave the job up, or its own limit of failures (lower than the
// second's) is reached — and the second one's synthesis comes back between that settlement and the first
// one's terminal event. Every call the query records is charged by its one
// settlement, and the audit finds nothing.
func TestSynthesisAfterAnotherWorkerSettledIsNotRecorded(t *testing.T) {
	run := func(ctx context.Context, first *Worker, id string) error {
		return first.run(ctx, id, nil, "", &attempt{})
	}
	for _, c := range []struct {
		name      string
		recorded  []events.Event
		configure func(first *Worker)
		end       func(ctx context.Context, first *Worker, id string) error
	}{
		{"its synthesis fails", nil, func(*Worker) {}, run},
		{"the job is given up", nil, func(*Worker) {}, func(ctx context.Context, first *Worker, id string) error {
			return first.exhausted(ctx, id, 30)
		}},
		{"its limit of failures is reached", []events.Event{events.AttemptFailed{Attempt: 3, Message: "boom", RetryInMS: 4000}},
			func(first *Worker) { first.MaxFailures = 3 }, run},
	} {
		t.Run(c.name, func(t *testing.T) { synthesisAfterSettlement(t, c.recorded, c.configure, c.end) })
	}
}

func synthesisAfterSettlement(t *testing.T, recorded []events.Event, configure func(first *Worker), end func(ctx context.Context, first *Worker, id string) error) {
	const id = "req_01M8000000000000000000000S"
	store, led, acct := reserved(t, id)
	ctx := context.Background()
	bothAnswered(t, store, led, acct, id, "who settles?", recorded...)
	unify := func(p providers.Provider) map[string]Mode {
		return unifyOn(providers.Set{catalog.ProviderA: p, catalog.ProviderB: simulated.New(catalog.ProviderB, 0)})
	}
	held := synthesisWaits{inner: simulated.New(catalog.ProviderA, 0), calling: make(chan struct{}), release: make(chan struct{})}
	second := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: unify(held)}
	secondDone := make(chan error, 1)
	go func() { secondDone <- second.run(ctx, id, nil, "", &attempt{}) }()
	<-held.calling // the second run has loaded the query and asks for the synthesis
	var secondErr error
	first := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Modes: unify(synthesisFails{simulated.New(catalog.ProviderA, 0)}),
		Ledger: settledThen{Ledger: led, after: func() {
			close(held.release)
			secondErr = <-secondDone
		}}}
	configure(first)
	firstErr := end(ctx, first, id)
	t.Logf("first run: %v; second run: %v", firstErr, secondErr)
	for _, err := range []error{firstErr, secondErr} {
		if err != nil && err != errYield {
			t.Fatal(err)
		}
	}
	// Whichever run was left to end it, the query ends.
	for _, w := range []*Worker{first, second} {
		if err := w.run(ctx, id, nil, "", &attempt{}); err != nil && err != errYield {
			t.Fatal(err)
		}
	}
	q, _, err := store.LoadQuery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	s, err := led.Settlement(ctx, acct, id)
	if err != nil || s == nil {
		t.Fatalf("settlement %v, %v", s, err)
	}
	settled := map[string]bool{}
	for _, c := range s.Calls {
		settled[c.CallID] = true
	}
	for _, c := range q.Calls {
		if !settled[c.ID] {
			t.Errorf("call %s (%s, step %s) is recorded on the query and not charged by its settlement", c.ID, c.Model.Key(), c.Step)
		}
	}
	if !q.Terminal() || q.ChargedMicros == nil || *q.ChargedMicros != s.ChargedMicros || (q.Synthesis != nil) != (q.Status == events.StatusCompleted) {
		t.Errorf("status %s, synthesis recorded %v, charged %v; want ended, completed exactly when a synthesis is recorded, charged the settlement's %d",
			q.Status, q.Synthesis != nil, q.ChargedMicros, s.ChargedMicros)
	}
	accountRecs, err := store.Load(ctx, store.Accounts, "ev.account.>", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&projections.Balances{Store: store}).HandleBatch(ctx, accountRecs); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Run(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("audit: %v", rep.Problems)
	}
}

// A job given up (its last attempt_failed recorded, retry_in_ms 0) whose
// worker died before the settlement: the next run calls no model and ends
// the query failed with internal_error, settled once, whatever its own
// limit of failures.
func TestRecordedGiveUpEndsTheQuery(t *testing.T) {
	const id = "req_01M8000000000000000000000G"
	store, led, acct := reserved(t, id)
	ctx := context.Background()
	recordEvents(t, store, id,
		events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "given up?", Models: []events.ModelRef{modelA, modelB}},
		events.QueryStarted{},
		answered(led, modelA, "one"),
		events.AttemptFailed{Attempt: 1, Message: "the service could not run this query (30 attempts); submit it again"},
	)
	c := &counted{inner: simulated.New(catalog.ProviderA, 0)}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, MaxFailures: 10,
		Modes: unifyOn(providers.Set{catalog.ProviderA: c, catalog.ProviderB: c})}
	if err := w.run(ctx, id, nil, "", &attempt{}); err != nil {
		t.Fatal(err)
	}
	q, _, err := store.LoadQuery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	s, err := led.Settlement(ctx, acct, id)
	if err != nil || s == nil || len(s.Calls) != 1 {
		t.Fatalf("settlement %+v, %v; want one charging the recorded answer", s, err)
	}
	if q.Status != events.StatusFailed || q.FailureCode != apperr.Internal || c.n.Load() != 0 || q.ChargedMicros == nil || *q.ChargedMicros != s.ChargedMicros {
		t.Fatalf("status %s %s, %d model calls, charged %v; want failed %s, no call, charged %d", q.Status, q.FailureCode, c.n.Load(), q.ChargedMicros, apperr.Internal, s.ChargedMicros)
	}
}

// failingSettle fails the first n settlements.
type failingSettle struct {
	Ledger
	n *atomic.Int64
}

func (l failingSettle) Settle(ctx context.Context, accountID, requestID string, calls []events.Call, ending *events.QueryEnding) (events.ChargesSettled, error) {
	if l.n.Add(-1) >= 0 {
		return events.ChargesSettled{}, errors.New("ledger unavailable")
	}
	return l.Ledger.Settle(ctx, accountID, requestID, calls, ending)
}

// The give-up of a job JetStream stopped delivering is recorded once, however
// often its advisory is handled again (here after settlements that failed),
// and the query ends as a give-up.
func TestExhaustedJobRecordsItsGiveUpOnce(t *testing.T) {
	const id = "req_01M8000000000000000000000X"
	store, led, acct := reserved(t, id)
	ctx := context.Background()
	recordEvents(t, store, id,
		events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "exhausted?", Models: []events.ModelRef{modelA}},
		events.QueryStarted{},
	)
	var failing atomic.Int64
	failing.Store(2)
	c := &counted{inner: simulated.New(catalog.ProviderA, 0)}
	w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: failingSettle{led, &failing}, Modes: unifyOn(providers.Set{catalog.ProviderA: c})}
	for i := range 3 {
		err := w.exhausted(ctx, id, 30)
		if (err == nil) != (i == 2) {
			t.Fatalf("handling %d: %v; want the settlement's error twice, then none", i+1, err)
		}
	}
	q, recs, err := store.LoadQuery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var giveUps int
	for _, r := range recs {
		if _, ok := r.Event.(events.AttemptFailed); ok {
			giveUps++
		}
	}
	if giveUps != 1 || q.Status != events.StatusFailed || q.FailureCode != apperr.Internal || c.n.Load() != 0 {
		t.Fatalf("%d attempt_failed, status %s %s, %d model calls; want one give-up recorded, failed %s, no call", giveUps, q.Status, q.FailureCode, c.n.Load(), apperr.Internal)
	}
}

// A give-up (JetStream stopped delivering the job) defers to the ending the
// recorded events decide: a recorded synthesis completes the query, a
// recorded failure of it fails the query aggregation_failed; nothing is
// recorded but the terminal event, and every recorded call is charged.
func TestGiveUpDefersToARecordedEnding(t *testing.T) {
	a := modelA
	for _, c := range []struct {
		name   string
		last   events.Event
		status string
		code   string
	}{
		{"synthesized", events.Synthesized{Model: a, Answer: events.Answer{Text: "one", Conflicts: []events.Conflict{}}, Usage: events.Usage{InputTokens: 9, OutputTokens: 9}}, events.StatusCompleted, ""},
		{"its failure", events.StepFailed{Step: events.StepSynthesis, Model: &a, Class: providers.ClassHostError, Message: "upstream 500"}, events.StatusFailed, apperr.AggregationFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			const id = "req_01M8000000000000000000000D"
			store, led, acct := reserved(t, id)
			ctx := context.Background()
			recorded := bothAnswered(t, store, led, acct, id, "decided?", c.last)
			cl := &counted{inner: simulated.New(catalog.ProviderA, 0)}
			w := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: unifyOn(providers.Set{catalog.ProviderA: cl, catalog.ProviderB: cl})}
			if err := w.exhausted(ctx, id, 30); err != nil {
				t.Fatal(err)
			}
			q, recs, err := store.LoadQuery(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			s, err := led.Settlement(ctx, acct, id)
			if err != nil || s == nil || len(s.Calls) != len(recorded.Calls) {
				t.Fatalf("settlement %+v, %v; want one charging the %d recorded calls", s, err, len(recorded.Calls))
			}
			if q.Status != c.status || q.FailureCode != c.code || q.GivenUp || len(recs) != 6 || cl.n.Load() != 0 {
				t.Fatalf("status %s %q, given up %v, %d events, %d model calls; want %s %q, the terminal event alone added, no call",
					q.Status, q.FailureCode, q.GivenUp, len(recs), cl.n.Load(), c.status, c.code)
			}
		})
	}
}

// A worker that does not run the query's mode (a rolling upgrade) fails its
// run, a failure retried: it records nothing and settles nothing, and a
// worker that runs the mode ends the query.
func TestWorkerWithoutTheModeLeavesTheQueryToOneWithIt(t *testing.T) {
	const id = "req_01M8000000000000000000000M"
	store, led, acct := reserved(t, id)
	ctx := context.Background()
	recordEvents(t, store, id,
		events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "which mode?", Models: []events.ModelRef{modelA}})
	older := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: map[string]Mode{}}
	err := older.run(ctx, id, nil, "", &attempt{})
	if err == nil || err == errYield {
		t.Fatalf("run of a worker without the mode: %v; want a failed run", err)
	}
	if s, _ := led.Settlement(ctx, acct, id); s != nil {
		t.Fatalf("settled by the worker without the mode: %+v", s)
	}
	newer := &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: unifyOn(providers.Set{catalog.ProviderA: simulated.New(catalog.ProviderA, 0)})}
	if err := newer.run(ctx, id, nil, "", &attempt{}); err != nil {
		t.Fatal(err)
	}
	q, _, err := store.LoadQuery(ctx, id)
	if err != nil || q.Status != events.StatusCompleted {
		t.Fatalf("status %s, %v; want completed", q.Status, err)
	}
}
