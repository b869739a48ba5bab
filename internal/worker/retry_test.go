package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// scripted is a mode that does what its script says on each run.
type scripted struct {
	runs   atomic.Int64
	script func(run int64, ctx context.Context) (events.Event, error)
}

func (s *scripted) Run(ctx context.Context, _ *events.Query, _ modes.Emit) (events.Event, error) {
	return s.script(s.runs.Add(1), ctx)
}

func submitJob(t *testing.T, store *eventstore.Store, id string) {
	t.Helper()
	env, _ := events.Wrap(events.AggregateQuery, id, events.QuerySubmitted{RequestID: id, AccountID: "acct_x", KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "p",
		Models: []events.ModelRef{{Provider: "provider_a", ModelID: "m"}}}, time.Now())
	if _, err := store.Append(context.Background(), env, nil); err != nil {
		t.Fatal(err)
	}
}

// runWorker runs w until the test ends.
func runWorker(t *testing.T, w *Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

// ended waits until query id has its terminal event and returns it.
func ended(t *testing.T, store *eventstore.Store, id string) (*events.Query, map[string]int) {
	t.Helper()
	var q *events.Query
	var recs []events.Record
	storetest.WaitFor(t, 30*time.Second, "query "+id+" to end", func() bool {
		var err error
		q, recs, err = store.LoadQuery(context.Background(), id)
		return err == nil && q.Terminal()
	})
	return q, countTypes(recs)
}

// countTypes counts records by event type.
func countTypes(recs []events.Record) map[string]int {
	count := map[string]int{}
	for _, r := range recs {
		count[r.Envelope.Type]++
	}
	return count
}

func newTestWorker(store *eventstore.Store, mode Mode, led *fakeLedger) *Worker {
	return &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: map[string]Mode{"unify": mode},
		AckWait: time.Second, MaxJobs: 4, Grace: time.Second, MaxFailures: 3, Backoff: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}}
}

// A job that fails on every run is retried after its backoff, each failure
// recorded, and on its last allowed failure ends as failed: settled,
// released, ended once, and not delivered again.
func TestFailingJobEndsAfterMaxFailures(t *testing.T) {
	store := storetest.Open(t)
	var (
		mu sync.Mutex
		at []time.Time
	)
	mode := &scripted{script: func(int64, context.Context) (events.Event, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		return nil, errors.New("a step found the query in a state it cannot handle")
	}}
	led := &fakeLedger{debits: map[string]int{}}
	id := "req_01M80000000000000000000003"
	submitJob(t, store, id)
	runWorker(t, newTestWorker(store, mode, led))
	q, count := ended(t, store, id)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.Internal {
		t.Fatalf("status %s code %s; want failed internal_error", q.Status, q.FailureCode)
	}
	if count["query.attempt_failed"] != 3 || q.FailedAttempts != 3 || led.released != 1 || count["query.failed"] != 1 {
		t.Fatalf("events %v; want 3 failed attempts, one settlement and one terminal event", count)
	}
	if n := mode.runs.Load(); n != 3 {
		t.Fatalf("the mode ran %d times, want MaxFailures = 3", n)
	}
	mu.Lock()
	defer mu.Unlock()
	// The backoff is a lower bound on the gap between runs.
	if at[1].Sub(at[0]) < 20*time.Millisecond || at[2].Sub(at[1]) < 40*time.Millisecond {
		t.Fatalf("runs %v apart and %v apart; want at least 20ms and 40ms", at[1].Sub(at[0]), at[2].Sub(at[1]))
	}
	led.mu.Lock()
	released := led.released
	led.mu.Unlock()
	if released != 1 {
		t.Fatalf("%d releases, want 1", released)
	}
	cons, err := storetest.JetStream(t, store).Consumer(context.Background(), eventstore.StreamQueries, ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	// The job is terminated just after the query's terminal event is
	// appended, and the server applies the termination on its own time:
	// the consumer shows it moments after the test sees the end.
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := cons.Info(context.Background())
		if err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Config.MaxDeliver == 3+DefaultSpareDeliveries {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer after the job: %+v %v; want nothing pending and MaxDeliver %d", info, err, 3+DefaultSpareDeliveries)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A run that fails because the event store is unavailable is retried
// without counting: an outage does not fail queries.
func TestStoreOutagesAreNotFailures(t *testing.T) {
	store := storetest.Open(t)
	mode := &scripted{script: func(run int64, _ context.Context) (events.Event, error) {
		if run <= 3 {
			return nil, fmt.Errorf("append query.model_answered: %w", eventstore.ErrUnavailable)
		}
		return events.QueryCompleted{}, nil
	}}
	w := newTestWorker(store, mode, &fakeLedger{debits: map[string]int{}})
	w.MaxFailures = 1
	id := "req_01M80000000000000000000008"
	submitJob(t, store, id)
	runWorker(t, w)
	q, count := ended(t, store, id)
	if q.Status != events.StatusCompleted || count["query.attempt_failed"] != 0 || mode.runs.Load() != 4 {
		t.Fatalf("status %s, events %v after %d runs; want completed after 4 runs without a failed attempt", q.Status, count, mode.runs.Load())
	}
}

// A worker whose run failed after another worker took the job over (its
// keep-alive lapsed) records nothing: the failure is not the job's.
func TestFailureOfAWorkerThatLostTheJobIsNotRecorded(t *testing.T) {
	store := storetest.Open(t)
	id := "req_01M80000000000000000000009"
	submitJob(t, store, id)
	q, _, err := store.LoadQuery(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	// The other worker appends after the last event this one knew.
	env, _ := events.Wrap(events.AggregateQuery, id, events.QueryStarted{}, time.Now())
	if _, err := store.Append(context.Background(), env, nil); err != nil {
		t.Fatal(err)
	}
	w := newTestWorker(store, nil, &fakeLedger{debits: map[string]int{}})
	w.MaxFailures = 1
	jobs, err := store.Jobs(context.Background(), eventstore.JobsConfig{AckWait: time.Minute, MaxDeliver: 5})
	if err != nil {
		t.Fatal(err)
	}
	var msg *eventstore.Job
	if err := jobs.Fetch(context.Background(), 1, func(j *eventstore.Job) { msg = j }); err != nil || msg == nil {
		t.Fatalf("fetch the job: %v", err)
	}
	w.failed(context.Background(), msg, id, q.LastSeq, errors.New("a step failed"))
	after, recs, _ := store.LoadQuery(context.Background(), id)
	if after.FailedAttempts != 0 || after.Terminal() || len(recs) != 2 {
		t.Fatalf("%d failed attempts, terminal %v, %d events; want nothing recorded and the query left running", after.FailedAttempts, after.Terminal(), len(recs))
	}
}

// Jobs handed back by stopping workers are not failures: a job handed back
// twice with a limit of one failure still runs to its end.
func TestHandBacksAreNotFailures(t *testing.T) {
	stores := storetest.OpenMany(t, 3)
	id := "req_01M80000000000000000000006"
	submitJob(t, stores[2], id)
	for i := range 2 {
		started := make(chan struct{}, 1)
		hang := &scripted{script: func(_ int64, ctx context.Context) (events.Event, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}}
		w := newTestWorker(stores[i], hang, &fakeLedger{debits: map[string]int{}})
		w.MaxFailures, w.Grace = 1, 10*time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(ctx) }()
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d never came", i+1)
		}
		cancel() // SIGTERM: the job is handed back
		<-done
	}
	ok := &scripted{script: func(int64, context.Context) (events.Event, error) { return events.QueryCompleted{}, nil }}
	w := newTestWorker(stores[2], ok, &fakeLedger{debits: map[string]int{}})
	w.MaxFailures = 1
	runWorker(t, w)
	q, count := ended(t, stores[2], id)
	if q.Status != events.StatusCompleted || count["query.attempt_failed"] != 0 {
		t.Fatalf("status %s, events %v; want completed without a failed attempt", q.Status, count)
	}
}

// A panic on a model call's goroutine fails that run of the job, not the
// worker process: the job is retried and completes.
func TestPanicInAModelCallIsAFailedAttempt(t *testing.T) {
	store := storetest.Open(t)
	set := providers.Set{}
	for _, k := range []string{"provider_a", "provider_b"} {
		set[k] = &panicOnce{inner: simulated.New(k, 0)}
	}
	w := newTestWorker(store, &modes.Unify{Models: modes.Models{Providers: set}}, &fakeLedger{debits: map[string]int{}})
	id := "req_01M80000000000000000000007"
	env, _ := events.Wrap(events.AggregateQuery, id, events.QuerySubmitted{RequestID: id, AccountID: "acct_x", KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "p",
		Models: []events.ModelRef{{Provider: "provider_a", ModelID: "m"}, {Provider: "provider_b", ModelID: "m"}}}, time.Now())
	if _, err := store.Append(context.Background(), env, nil); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	q, count := ended(t, store, id)
	if q.Status != events.StatusCompleted || count["query.attempt_failed"] != 1 {
		t.Fatalf("status %s, events %v; want completed after one failed attempt", q.Status, count)
	}
}

// panicOnce panics on its first call and answers after.
type panicOnce struct {
	inner providers.Provider
	n     atomic.Int64
}

func (p *panicOnce) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	if p.n.Add(1) == 1 {
		panic("a bug in a provider")
	}
	return p.inner.Complete(ctx, req)
}

// A panic in a job fails that job alone: it is retried and completes.
func TestPanickingJobIsRetried(t *testing.T) {
	store := storetest.Open(t)
	mode := &scripted{script: func(run int64, _ context.Context) (events.Event, error) {
		if run == 1 {
			var m map[string]int
			m["boom"]++ // a nil map write: a real runtime panic
		}
		return events.QueryCompleted{}, nil
	}}
	id := "req_01M80000000000000000000004"
	submitJob(t, store, id)
	runWorker(t, newTestWorker(store, mode, &fakeLedger{debits: map[string]int{}}))
	q, _ := ended(t, store, id)
	if q.Status != events.StatusCompleted || mode.runs.Load() != 2 {
		t.Fatalf("status %s after %d runs; want completed after 2", q.Status, mode.runs.Load())
	}
}

// A job whose worker dies on every delivery is ended as failed once
// JetStream stops delivering it: the next worker to pull meets the job past
// its deliveries, and the advisory JetStream then records is that worker's
// to end.
func TestJobWhoseWorkersDieEndsAsFailed(t *testing.T) {
	stores := storetest.OpenMany(t, 4)
	id := "req_01M80000000000000000000005"
	led := &fakeLedger{debits: map[string]int{}}
	submitJob(t, stores[3], id)
	var runs atomic.Int64
	hang := &scripted{script: func(_ int64, ctx context.Context) (events.Event, error) {
		runs.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	// Two workers in turn take a delivery and die with it (no ack, no
	// hand-back); JetStream gives up after two deliveries.
	for i := range 2 {
		w := newTestWorker(stores[i], hang, led)
		w.MaxDeliver = 2
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(ctx) }()
		storetest.WaitFor(t, 30*time.Second, fmt.Sprintf("delivery %d", i+1), func() bool { return runs.Load() >= int64(i+1) })
		stores[i].Conn().Close()
		cancel()
		<-done
	}
	// The next worker's pull finds the job past its deliveries: JetStream
	// gives it up with an advisory, which that worker ends.
	w := newTestWorker(stores[2], hang, led)
	w.MaxDeliver = 2
	runWorker(t, w)
	q, count := ended(t, stores[3], id)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.Internal || count["query.failed"] != 1 {
		t.Fatalf("status %s code %s events %v; want one internal_error failure", q.Status, q.FailureCode, count)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the job ran %d times, want 2", n)
	}
}

// Workers sharing the queue each run at most their own MaxJobs at once and
// together run the sum: a worker pulls only what it has room for.
func TestWorkersShareTheQueueWithinTheirOwnLimits(t *testing.T) {
	stores := storetest.OpenMany(t, 3)
	release := make(chan struct{})
	var total atomic.Int64
	type gauge struct{ now, peak atomic.Int64 }
	gauges := []*gauge{{}, {}}
	for i, g := range gauges {
		mode := &scripted{script: func(_ int64, ctx context.Context) (events.Event, error) {
			n := g.now.Add(1)
			for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
			}
			total.Add(1)
			defer g.now.Add(-1)
			select {
			case <-release:
				return events.QueryCompleted{}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}}
		w := newTestWorker(stores[i], mode, &fakeLedger{debits: map[string]int{}})
		w.MaxJobs = 2
		runWorker(t, w)
	}
	var ids []string
	for i := range 8 {
		id := fmt.Sprintf("req_01M8000000000000000000001%d", i)
		submitJob(t, stores[2], id)
		ids = append(ids, id)
	}
	storetest.WaitFor(t, 30*time.Second, "4 jobs to start (two workers × MaxJobs 2)", func() bool { return total.Load() >= 4 })
	close(release)
	for _, id := range ids {
		if q, _ := ended(t, stores[2], id); q.Status != events.StatusCompleted {
			t.Fatalf("%s: %s", id, q.Status)
		}
	}
	for i, g := range gauges {
		if p := g.peak.Load(); p > 2 || p == 0 {
			t.Fatalf("worker %d ran %d jobs at once; want 1 or 2 (MaxJobs 2)", i, p)
		}
	}
}

// failingToSettle returns a test worker that gives a query up at its first
// failure and whose first n settlements fail (an error that is not an
// outage), and the count of settlements left to fail.
func failingToSettle(store *eventstore.Store, mode Mode, n int64) (*Worker, *atomic.Int64) {
	var failing atomic.Int64
	failing.Store(n)
	led := &fakeLedger{debits: map[string]int{}}
	w := newTestWorker(store, mode, led)
	w.MaxFailures, w.Ledger = 1, failingSettle{Ledger: led, n: &failing}
	return w, &failing
}

// A job given up on its last failure whose settlement then fails (a ledger
// error that is not an outage) is not failed again: nothing is recorded
// after its give-up, and a later run ends it.
func TestGivenUpJobThatFailsToSettleRecordsNoMoreFailures(t *testing.T) {
	store := storetest.Open(t)
	mode := &scripted{script: func(int64, context.Context) (events.Event, error) {
		return nil, errors.New("a step found the query in a state it cannot handle")
	}}
	w, _ := failingToSettle(store, mode, 2)
	id := "req_01M8000000000000000000000F"
	submitJob(t, store, id)
	runWorker(t, w)
	q, count := ended(t, store, id)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.Internal || count["query.attempt_failed"] != 1 || mode.runs.Load() != 1 {
		t.Fatalf("status %s %s, events %v, %d runs of the mode; want failed %s after one attempt_failed and one run", q.Status, q.FailureCode, count, mode.runs.Load(), apperr.Internal)
	}
}

// A run of a query whose ending the events decide (its answer recorded)
// that fails — the first delivery's run, which takes the submission for
// the query's only event, and then two settlements (a ledger error that is
// not an outage) — is not failed: no failure or give-up is recorded after
// that answer, and a later run ends the query completed.
func TestDecidedJobThatFailsToSettleRecordsNoFailure(t *testing.T) {
	store := storetest.Open(t)
	id := "req_01M8000000000000000000000E"
	a := events.ModelRef{Provider: "provider_a", ModelID: "m"}
	recordEvents(t, store, id,
		events.QuerySubmitted{RequestID: id, AccountID: "acct_x", KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: "p", Models: []events.ModelRef{a}},
		events.QueryStarted{},
		events.ModelAnswered{Model: a, Answer: "one"},
		events.Synthesized{Model: a, Answer: events.Answer{Text: "one", Conflicts: []events.Conflict{}}},
	)
	mode := &scripted{script: func(int64, context.Context) (events.Event, error) {
		return nil, errors.New("the mode ran on a query whose ending is decided")
	}}
	w, failing := failingToSettle(store, mode, 2)
	runWorker(t, w)
	q, count := ended(t, store, id)
	if q.Status != events.StatusCompleted || count["query.attempt_failed"] != 0 || mode.runs.Load() != 1 || failing.Load() >= 0 {
		t.Fatalf("status %s, events %v, %d runs of the mode, %d settlements to fail; want completed, no attempt_failed, the first delivery's run alone",
			q.Status, count, mode.runs.Load(), failing.Load())
	}
}
