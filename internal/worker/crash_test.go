package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/modes"
)

// hanging is a mode that starts the query, records an answer when answer
// is set (on its first run only), says so on started (when there is room),
// and then runs until its context ends, counting its runs.
type hanging struct {
	runs    atomic.Int64
	answer  bool
	started chan struct{}
}

func (h *hanging) Run(ctx context.Context, q *events.Query, emit modes.Emit) (events.Event, error) {
	run := h.runs.Add(1)
	if !q.Started {
		if err := emit(ctx, events.QueryStarted{}); err != nil {
			return nil, err
		}
	}
	if h.answer && run == 1 {
		if err := emit(ctx, events.ModelAnswered{Model: events.ModelRef{Provider: "provider_a", ModelID: "m"}, Answer: "an answer",
			Usage: events.Usage{InputTokens: 1, OutputTokens: 1}, CostMicros: 10}); err != nil {
			return nil, err
		}
	}
	select {
	case h.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// dieWith runs a worker on store until its job's run has recorded what it
// records and waits, then kills it: its connection is lost, nothing is
// acknowledged or recorded.
func dieWith(t *testing.T, store *eventstore.Store, mode *hanging, led *fakeLedger, delivery int) {
	t.Helper()
	w := newTestWorker(store, mode, led)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	select {
	case <-mode.started:
	case <-time.After(30 * time.Second):
		t.Fatalf("run %d never came", delivery)
	}
	store.Conn().Close()
	cancel()
	<-done
}

// A job whose runs kill their worker is not run again once
// DefaultMaxCrashes runs in a row ended so: the next delivery ends it
// failed with query_crashed, charged for what was recorded, without running
// it; before, it was delivered MaxFailures + 20 times.
func TestJobThatCrashesItsWorkersEndsQueryCrashed(t *testing.T) {
	stores := storetest.OpenMany(t, DefaultMaxCrashes+2)
	id := "req_01M80000000000000000000010"
	led := &fakeLedger{debits: map[string]int{}}
	submitJob(t, stores[len(stores)-1], id)
	mode := &hanging{answer: true, started: make(chan struct{}, 1)}
	// The first run records an answer, then dies: it moved the query on,
	// so it does not count. Then DefaultMaxCrashes runs die without a step.
	for i := range DefaultMaxCrashes + 1 {
		dieWith(t, stores[i], mode, led, i+1)
	}
	w := newTestWorker(stores[DefaultMaxCrashes+1], mode, led)
	runWorker(t, w)
	q, count := ended(t, stores[len(stores)-1], id)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.QueryCrashed || count["query.failed"] != 1 {
		t.Fatalf("status %s code %s events %v; want one failure query_crashed", q.Status, q.FailureCode, count)
	}
	if n := mode.runs.Load(); n != DefaultMaxCrashes+1 {
		t.Fatalf("the job ran %d times, want %d: the first, which recorded an answer, and %d that crashed", n, DefaultMaxCrashes+1, DefaultMaxCrashes)
	}
	if count["query.attempt_started"] != DefaultMaxCrashes+1 {
		t.Fatalf("events %v; want an attempt_started for each run after the first, and for the one that ended it", count)
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	if led.released != 1 || len(led.debits) != 1 || led.settled.Ending == nil || led.settled.Ending.Code != apperr.QueryCrashed {
		t.Fatalf("settlement %+v, debits %v; want one settlement charging the recorded answer, ending query_crashed", led.settled, led.debits)
	}
}

// Runs handed back by stopping workers are not crashes: a job handed back
// more often than DefaultMaxCrashes still runs to its end.
func TestHandBacksAreNotCrashes(t *testing.T) {
	stores := storetest.OpenMany(t, DefaultMaxCrashes+2)
	id := "req_01M80000000000000000000011"
	submitJob(t, stores[len(stores)-1], id)
	led := &fakeLedger{debits: map[string]int{}}
	for i := range DefaultMaxCrashes + 1 {
		mode := &hanging{started: make(chan struct{}, 1)}
		w := newTestWorker(stores[i], mode, led)
		w.Grace = 10 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(ctx) }()
		select {
		case <-mode.started:
		case <-time.After(30 * time.Second):
			t.Fatalf("delivery %d never came", i+1)
		}
		cancel() // SIGTERM: the run is cut after the grace and handed back
		<-done
	}
	ok := &scripted{script: func(int64, context.Context) (events.Event, error) { return events.QueryCompleted{}, nil }}
	runWorker(t, newTestWorker(stores[DefaultMaxCrashes+1], ok, led))
	q, count := ended(t, stores[len(stores)-1], id)
	if q.Status != events.StatusCompleted || count["query.attempt_handed_back"] != DefaultMaxCrashes+1 {
		t.Fatalf("status %s %s, events %v; want completed after %d recorded hand-backs", q.Status, q.FailureCode, count, DefaultMaxCrashes+1)
	}
}

// A query that runs past QueryTimeout has its calls ended and ends failed
// with query_timeout, charged for what it recorded; a query resumed past
// its time ends so at once, without running.
func TestQueryTimeout(t *testing.T) {
	store := storetest.Open(t)
	led := &fakeLedger{debits: map[string]int{}}
	mode := &hanging{answer: true, started: make(chan struct{}, 1)}
	w := newTestWorker(store, mode, led)
	w.QueryTimeout = 300 * time.Millisecond
	id := "req_01M80000000000000000000012"
	submitJob(t, store, id)
	start := time.Now()
	runWorker(t, w)
	q, count := ended(t, store, id)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.QueryTimeout || count["query.model_answered"] != 1 {
		t.Fatalf("status %s code %s events %v; want failed query_timeout with the answer recorded", q.Status, q.FailureCode, count)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the query ended after %s", took)
	}
	led.mu.Lock()
	if led.released != 1 || len(led.debits) != 1 {
		t.Fatalf("%d settlements, debits %v; want one charging the answer", led.released, led.debits)
	}
	led.mu.Unlock()

	// Resumed past its time (its worker died, the service was down): it
	// ends without a run.
	stores := storetest.OpenMany(t, 2)
	other := "req_01M80000000000000000000013"
	submitJob(t, stores[0], other)
	mode = &hanging{started: make(chan struct{}, 1)}
	dieWith(t, stores[0], mode, led, 1) // a worker without the bound
	time.Sleep(w.QueryTimeout)
	w = newTestWorker(stores[1], mode, &fakeLedger{debits: map[string]int{}})
	w.QueryTimeout = 300 * time.Millisecond
	runs := mode.runs.Load()
	runWorker(t, w)
	q, count = ended(t, stores[1], other)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.QueryTimeout || mode.runs.Load() != runs || count["query.attempt_started"] != 1 {
		t.Fatalf("status %s code %s events %v, %d runs; want query_timeout without a run", q.Status, q.FailureCode, count, mode.runs.Load()-runs)
	}
}
