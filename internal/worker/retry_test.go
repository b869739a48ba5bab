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
	if _, _, err := store.Append(context.Background(), env, nil); err != nil {
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
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		q, recs, err := store.LoadQuery(context.Background(), id)
		if err == nil && q.Terminal() {
			count := map[string]int{}
			for _, r := range recs {
				count[r.Envelope.Type]++
			}
			return q, count
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("query %s did not end", id)
	return nil, nil
}

func newTestWorker(store *eventstore.Store, mode Mode, led *fakeLedger) *Worker {
	return &Worker{Store: store, Log: zerolog.Nop(), Now: time.Now, Ledger: led, Modes: map[string]Mode{"unify": mode},
		AckWait: time.Second, MaxJobs: 4, Grace: time.Second, MaxDeliver: 3, Backoff: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}}
}

// A job that fails on every delivery is retried after its backoff and, on
// its last delivery, ends as failed: settled, released, ended once, and
// not delivered again.
func TestFailingJobEndsAfterMaxDeliver(t *testing.T) {
	store := storetest.Open(t)
	var (
		mu sync.Mutex
		at []time.Time
	)
	mode := &scripted{script: func(int64, context.Context) (events.Event, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		return nil, errors.New("the event store is unavailable")
	}}
	led := &fakeLedger{debits: map[string]int{}}
	id := "req_01M80000000000000000000003"
	submitJob(t, store, id)
	runWorker(t, newTestWorker(store, mode, led))
	q, count := ended(t, store, id)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.Internal {
		t.Fatalf("status %s code %s; want failed internal_error", q.Status, q.FailureCode)
	}
	if count["query.credits_settled"] != 1 || count["query.failed"] != 1 {
		t.Fatalf("events %v; want one settlement and one terminal event", count)
	}
	if n := mode.runs.Load(); n != 3 {
		t.Fatalf("the mode ran %d times, want MaxDeliver = 3", n)
	}
	mu.Lock()
	defer mu.Unlock()
	// The backoff is a lower bound on the gap between deliveries.
	if at[1].Sub(at[0]) < 20*time.Millisecond || at[2].Sub(at[1]) < 40*time.Millisecond {
		t.Fatalf("deliveries %v apart and %v apart; want at least 20ms and 40ms", at[1].Sub(at[0]), at[2].Sub(at[1]))
	}
	led.mu.Lock()
	released := led.released
	led.mu.Unlock()
	if released != 1 {
		t.Fatalf("%d releases, want 1", released)
	}
	cons, err := store.Queries.Consumer(context.Background(), ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil || info.NumAckPending != 0 || info.NumPending != 0 || info.Config.MaxDeliver != 3 {
		t.Fatalf("consumer after the job: %+v %v; want nothing pending and MaxDeliver 3", info, err)
	}
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

// A job whose worker dies on every delivery is ended by another worker when
// JetStream gives up on it (its max-deliveries advisory).
func TestJobWhoseWorkersDieEndsAsFailed(t *testing.T) {
	stores := storetest.OpenMany(t, 4)
	id := "req_01M80000000000000000000005"
	led := &fakeLedger{debits: map[string]int{}}
	// Three workers share the job queue; each delivery's worker dies with
	// it (no ack, no hand-back) until JetStream gives up after two.
	got := make(chan int, 8)
	var runs atomic.Int64
	stop := make([]func(), 3)
	for i := range 3 {
		hang := &scripted{script: func(_ int64, ctx context.Context) (events.Event, error) {
			runs.Add(1)
			got <- i
			<-ctx.Done()
			return nil, ctx.Err()
		}}
		w := newTestWorker(stores[i], hang, led)
		w.MaxDeliver = 2
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(ctx) }()
		stop[i] = func() {
			stores[i].NC.Close()
			cancel()
			<-done
		}
	}
	submitJob(t, stores[3], id)
	for range 2 {
		select {
		case i := <-got:
			stop[i]()
			stop[i] = func() {}
		case <-time.After(30 * time.Second):
			t.Fatal("a delivery never came")
		}
	}
	q, count := ended(t, stores[3], id)
	if q.Status != events.StatusFailed || q.FailureCode != apperr.Internal || count["query.failed"] != 1 {
		t.Fatalf("status %s code %s events %v; want one internal_error failure", q.Status, q.FailureCode, count)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the job ran %d times, want 2", n)
	}
	for _, s := range stop {
		s()
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
	deadline := time.Now().Add(30 * time.Second)
	for total.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if total.Load() < 4 {
		t.Fatalf("%d jobs started; want 4 (two workers × MaxJobs 2)", total.Load())
	}
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
