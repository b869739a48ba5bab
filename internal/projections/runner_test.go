package projections

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// applied records what a runner's handler was given, batch by batch.
type applied struct {
	mu       sync.Mutex
	seqs     []uint64
	replayed map[uint64]bool
	failOnce bool
	failed   bool
}

func (a *applied) handle(_ context.Context, recs []events.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failOnce && len(a.seqs) > 0 { // the second batch fails, once
		a.failOnce, a.failed = false, true
		return errors.New("read model unavailable")
	}
	for _, r := range recs {
		a.seqs = append(a.seqs, r.Seq)
		a.replayed[r.Seq] = r.Replayed
	}
	return nil
}

func (a *applied) last() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seqs) == 0 {
		return 0
	}
	return a.seqs[len(a.seqs)-1]
}

func appendProgress(t *testing.T, store *eventstore.Store, n int) uint64 {
	t.Helper()
	var seq uint64
	for i := range n {
		env, err := events.Wrap(events.AggregateQuery, "req_runner", events.ProgressReported{Stage: "answering", Percent: i % 100}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		app, err := store.Append(context.Background(), env, nil)
		if err != nil {
			t.Fatal(err)
		}
		seq = app.Seq
	}
	return seq
}

// run starts a runner over QUERIES and returns a function that stops it and
// waits for it to return.
func run(t *testing.T, store *eventstore.Store, a *applied) (stop func()) {
	t.Helper()
	halt := startRunner(t, &Runner{Name: "proj_test", Stream: store.Queries, Filters: []string{"ev.query.>"}, HandleBatch: a.handle,
		Checkpoints: store.Projections, Batch: 7, Log: zerolog.Nop()})
	return func() { halt(nil) }
}

func waitApplied(t *testing.T, a *applied, seq uint64) {
	t.Helper()
	storetest.WaitFor(t, 30*time.Second, fmt.Sprintf("the runner to apply up to %d", seq), func() bool { return a.last() >= seq })
}

// wantSeqs checks that a saw exactly from..to, each once, in order.
func wantSeqs(t *testing.T, a *applied, from, to uint64) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if uint64(len(a.seqs)) != to-from+1 {
		t.Fatalf("applied %d events (%v), want %d..%d", len(a.seqs), a.seqs, from, to)
	}
	for i, s := range a.seqs {
		if s != from+uint64(i) {
			t.Fatalf("event %d applied is seq %d, want %d: %v", i, s, from+uint64(i), a.seqs)
		}
	}
}

// A runner applies every event once, in order, across restarts: it resumes
// after its checkpoint, a failing batch is retried in place, and a crash
// between a batch and its checkpoint replays that batch, in order, marked as
// replayed.
func TestRunnerResumesInOrderFromItsCheckpoint(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()

	first := appendProgress(t, store, 30)
	a := &applied{replayed: map[uint64]bool{}}
	stop := run(t, store, a)
	waitApplied(t, a, first)
	stop()
	wantSeqs(t, a, 1, first)
	if pos, err := Checkpoint(ctx, store.Projections, "proj_test"); err != nil || pos != first {
		t.Fatalf("checkpoint %d (%v), want %d", pos, err, first)
	}

	// Stopped: 20 more events. The next run starts after the checkpoint,
	// and its second batch fails once.
	stored := appendProgress(t, store, 20)
	b := &applied{replayed: map[uint64]bool{}, failOnce: true}
	stop = run(t, store, b)
	waitApplied(t, b, stored)
	live := appendProgress(t, store, 5)
	waitApplied(t, b, live)
	stop()
	wantSeqs(t, b, first+1, live)
	if !b.failed {
		t.Fatal("no batch failed: the retry in place was not exercised")
	}
	for seq, replayed := range b.replayed {
		if want := seq <= stored; replayed != want {
			t.Errorf("seq %d: replayed %v, want %v", seq, replayed, want)
		}
	}

	// A crash after applying events but before their checkpoint: the
	// checkpoint is behind, and those events come again, in order.
	if _, err := store.Projections.Put(ctx, "proj_test", []byte("10")); err != nil {
		t.Fatal(err)
	}
	c := &applied{replayed: map[uint64]bool{}}
	stop = run(t, store, c)
	waitApplied(t, c, live)
	stop()
	wantSeqs(t, c, 11, live)
	for seq, replayed := range c.replayed {
		if !replayed {
			t.Errorf("seq %d, stored before the run, is not marked replayed", seq)
		}
	}

	// A rewound projection starts over.
	if err := Rewind(ctx, store.Projections, "proj_test"); err != nil {
		t.Fatal(err)
	}
	d := &applied{replayed: map[uint64]bool{}}
	stop = run(t, store, d)
	waitApplied(t, d, live)
	stop()
	wantSeqs(t, d, 1, live)
}

// A batch that fails after folding into the cached documents is retried
// from the documents as they were: a justify round is not filled twice.
func TestQueryStatusRetryStartsFromTheCachedDocument(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	p := &QueryStatus{Store: store}
	a, b := events.ModelRef{Provider: "provider_a", ModelID: "a"}, events.ModelRef{Provider: "provider_b", ModelID: "b"}
	var seq uint64
	rec := func(ev events.Event) events.Record {
		seq++
		env, err := events.Wrap(events.AggregateQuery, "req_retry", ev, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return events.Record{Seq: seq, Envelope: env, Event: ev}
	}
	first := []events.Record{
		rec(events.QuerySubmitted{RequestID: "req_retry", Mode: events.ModeJustify, Models: []events.ModelRef{a, b}}),
		rec(events.QueryStarted{}), rec(events.ModelAnswered{Model: a, Answer: "A1"}), rec(events.ModelAnswered{Model: b, Answer: "B1"}),
	}
	if err := p.HandleBatch(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The batch also brings another query's submission, whose index entry
	// cannot be stored without its bucket.
	revised := []events.Record{rec(events.ModelRevised{Model: a, Round: 2, Answer: "A2"})}
	submitted := events.QuerySubmitted{RequestID: "req_other", AccountID: "acct_retry", Mode: events.ModeUnify, Models: []events.ModelRef{a}}
	env, err := events.Wrap(events.AggregateQuery, "req_other", submitted, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	revised = append(revised, events.Record{Seq: seq + 1, Envelope: env, Event: submitted})
	if err := storetest.JetStream(t, store).DeleteKeyValue(ctx, eventstore.BucketQueryList); err != nil {
		t.Fatal(err)
	}
	if err := p.HandleBatch(ctx, revised); err == nil {
		t.Fatal("the batch did not fail without the index's bucket")
	}
	if err := store.ResetQueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.HandleBatch(ctx, revised); err != nil {
		t.Fatal(err)
	}
	got := p.cache["req_retry"].Result.Justify.Rounds
	want := FoldQuery(append(first, revised[0])).Result.Justify.Rounds
	if len(got) != 2 || len(got[1].Answers) != 1 || len(want[1].Answers) != 1 {
		t.Fatalf("round 2 after one revision: %+v (a fresh fold: %+v)", got, want)
	}
	// The retried batch's change is stored, not taken for applied by the
	// failed try.
	if _, _, err := p.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	if doc := storedDoc(t, store, "req_retry"); doc.Seq != revised[0].Seq || len(doc.Result.Justify.Rounds) != 2 {
		t.Fatalf("stored document at %d with %d rounds; want %d with 2", doc.Seq, len(doc.Result.Justify.Rounds), revised[0].Seq)
	}
}

// gcTarget stands for the collector's target in a test (setGCPercent).
type gcTarget struct {
	mu   sync.Mutex
	now  int
	sets int
}

func (g *gcTarget) set(v int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.now
	g.now, g.sets = v, g.sets+1
	return prev
}

func (g *gcTarget) get() (now, sets int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now, g.sets
}

// observeGC stands g, its target at start, for the collector's for the
// rest of the test, with GOGC unset, once no runner of an earlier test is
// still catching up (one that has not returned yet would count in the
// process's catch-up and restore the target through g).
func observeGC(t *testing.T, start int) *gcTarget {
	t.Helper()
	storetest.WaitFor(t, 10*time.Second, "earlier tests' runners to end their catch-ups", func() bool {
		catchingUp.Lock()
		defer catchingUp.Unlock()
		return catchingUp.n == 0
	})
	t.Setenv("GOGC", "")
	g := &gcTarget{now: start}
	prev := setGCPercent
	t.Cleanup(func() { setGCPercent = prev })
	setGCPercent = g.set
	return g
}

// waitSets waits until g's target is want after sets changes (a raise and
// a restore are two).
func waitSets(t *testing.T, g *gcTarget, want, sets int, why string) {
	t.Helper()
	storetest.WaitFor(t, 10*time.Second, fmt.Sprintf("the collector's target back at %d after %d changes %s", want, sets, why), func() bool {
		now, n := g.get()
		return now == want && n == sets
	})
}

// behind observes the collector's target from start (see observeGC) and
// opens a store holding n events, more than a batch of the runners these
// tests start; it returns the last event's sequence.
func behind(t *testing.T, start, n int) (*gcTarget, *eventstore.Store, uint64) {
	t.Helper()
	g := observeGC(t, start)
	store := storetest.Open(t)
	return g, store, appendProgress(t, store, n)
}

// idleFor sets catchUpIdle to d for the rest of the test.
func idleFor(t *testing.T, d time.Duration) {
	prev := catchUpIdle
	catchUpIdle = d
	t.Cleanup(func() { catchUpIdle = prev })
}

// waitTarget waits until g's target is want.
func waitTarget(t *testing.T, g *gcTarget, want int, why string) {
	t.Helper()
	storetest.WaitFor(t, 10*time.Second, fmt.Sprintf("the collector's target at %d %s", want, why), func() bool {
		now, _ := g.get()
		return now == want
	})
}

// A runner stopped before it could start (its checkpoint not read, its
// consumer not created) has simply stopped: Run returns nil, as it does
// whenever its context ends, and the stop is not taken for a failure.
func TestRunnerStoppedWhileStartingReturnsNil(t *testing.T) {
	store := storetest.Open(t)
	appendProgress(t, store, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &Runner{Name: "proj_test", Stream: store.Queries, Filters: []string{"ev.query.>"},
		HandleBatch: func(context.Context, []events.Record) error { return nil }, Checkpoints: store.Projections, Log: zerolog.Nop()}
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run with its context ended returned %v, want nil", err)
	}
}

// A runner that starts more than a batch behind applies that backlog with
// the collector's target raised and restores it once it has applied every
// event stored when it started; a runner within a batch of the end, or
// under an operator's GOGC, leaves the target alone.
func TestRunnerCatchesUpWithTheCollectorsTargetRaised(t *testing.T) {
	g := observeGC(t, 100)
	// Here the backlog's end ends the catch-up: on a loaded machine the
	// deliveries may pause for longer than a catch-up may stay idle.
	idleFor(t, time.Minute)
	store := storetest.Open(t)

	// seen is the target each applied event saw, last the last one applied.
	var mu sync.Mutex
	seen := map[uint64]int{}
	var last uint64
	handle := func(_ context.Context, recs []events.Record) error {
		now, _ := g.get()
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			seen[r.Seq] = now
		}
		last = recs[len(recs)-1].Seq
		return nil
	}
	waitFor := func(seq uint64) {
		storetest.WaitFor(t, 30*time.Second, fmt.Sprintf("the runner to apply up to %d", seq), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return last >= seq
		})
	}
	start := func() (stop func()) {
		mu.Lock()
		last = 0
		mu.Unlock()
		halt := startRunner(t, &Runner{Name: "proj_test", Stream: store.Queries, Filters: []string{"ev.query.>"}, HandleBatch: handle,
			Checkpoints: store.Projections, Batch: 7, Log: zerolog.Nop()})
		return func() { halt(nil) }
	}
	target := func(seq uint64) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[seq]
	}

	backlog := appendProgress(t, store, 30)
	stop := start()
	waitFor(backlog)
	for seq := uint64(1); seq <= backlog; seq++ {
		if got := target(seq); got != catchUpGCPercent {
			t.Errorf("event %d of the backlog applied with the target at %d, want %d", seq, got, catchUpGCPercent)
		}
	}
	waitTarget(t, g, 100, "after the catch-up")
	live := appendProgress(t, store, 3)
	waitFor(live)
	stop()
	if got := target(live); got != 100 {
		t.Errorf("a live event applied with the target at %d, want it restored to 100", got)
	}
	_, sets := g.get()

	// Within a batch of the end: nothing to catch up.
	near := appendProgress(t, store, 5)
	stop = start()
	waitFor(near)
	stop()
	if _, n := g.get(); n != sets {
		t.Errorf("a runner 5 events behind set the target %d times", n-sets)
	}

	// An operator's GOGC is theirs, however far behind the runner starts.
	t.Setenv("GOGC", "50")
	if err := Rewind(context.Background(), store.Projections, "proj_test"); err != nil {
		t.Fatal(err)
	}
	stop = start()
	waitFor(near)
	stop()
	if _, n := g.get(); n != sets {
		t.Errorf("under GOGC=50 a rebuild set the target %d times", n-sets)
	}
}

// However a catch-up ends, the collector's target comes back: the stream's
// last events deleted (the run never reaches the sequence it started
// behind), the runner stopped while its batches fail, the runner halted at
// an event it cannot decode. Runners that overlap restore the target the
// first one found, and each catch-up ends once (a later one raises again).
func TestRunnerEndsItsCatchUpHoweverItEnds(t *testing.T) {
	ctx := context.Background()
	runner := func(t *testing.T, store *eventstore.Store, name string, handle BatchHandler) (stop func()) {
		halt := startRunner(t, &Runner{Name: name, Stream: store.Queries, Filters: []string{"ev.query.>"}, HandleBatch: handle,
			Checkpoints: store.Projections, Batch: 7, Log: zerolog.Nop()})
		return func() { halt(nil) }
	}
	ok := func(context.Context, []events.Record) error { return nil }

	t.Run("the stream's last events deleted", func(t *testing.T) {
		g, store, last := behind(t, 100, 30)
		stream, err := storetest.JetStream(t, store).Stream(ctx, store.Queries.Name())
		if err != nil {
			t.Fatal(err)
		}
		for seq := last - 4; seq <= last; seq++ {
			if err := stream.DeleteMsg(ctx, seq); err != nil {
				t.Fatal(err)
			}
		}
		stop := runner(t, store, "proj_tail", ok)
		defer stop()
		waitSets(t, g, 100, 2, "once every stored event is applied")
	})

	t.Run("stopped while its batches fail", func(t *testing.T) {
		g, store, _ := behind(t, 100, 30)
		stop := runner(t, store, "proj_failing", func(context.Context, []events.Record) error {
			return errors.New("read model unavailable")
		})
		waitTarget(t, g, catchUpGCPercent, "while catching up")
		stop()
		if now, _ := g.get(); now != 100 {
			t.Errorf("the target is %d after the runner stopped, want 100", now)
		}
	})

	t.Run("halted at an event it cannot decode", func(t *testing.T) {
		g := observeGC(t, 100)
		store := storetest.Open(t)
		appendProgress(t, store, 10)
		if _, err := storetest.JetStream(t, store).Publish(ctx, "ev.query.req_runner.bogus", []byte("not an event")); err != nil {
			t.Fatal(err)
		}
		appendProgress(t, store, 20)
		stop := runner(t, store, "proj_stuck", ok)
		defer stop()
		waitSets(t, g, 100, 2, "at the event it cannot decode")
	})

	t.Run("its deliveries stopped for good", func(t *testing.T) {
		g, store, _ := behind(t, 100, 30)
		idleFor(t, 300*time.Millisecond)
		// The connection closes under the runner during its first batch:
		// nothing more is delivered, events are left.
		var cut sync.Once
		stop := runner(t, store, "proj_cut", func(context.Context, []events.Record) error {
			cut.Do(store.Conn().Close)
			return nil
		})
		defer stop()
		waitSets(t, g, 100, 2, "once nothing more came")
	})

	t.Run("overlapping runners, then another catch-up", func(t *testing.T) {
		g, store, _ := behind(t, 150, 30)
		release := make(chan struct{})
		stopA := runner(t, store, "proj_a", func(ctx context.Context, _ []events.Record) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		waitTarget(t, g, catchUpGCPercent, "while A catches up")
		stopB := runner(t, store, "proj_b", ok)
		storetest.WaitFor(t, 10*time.Second, "B caught up", func() bool {
			pos, err := Checkpoint(ctx, store.Projections, "proj_b")
			return err == nil && pos == 30
		})
		stopB()
		if now, _ := g.get(); now != catchUpGCPercent {
			t.Errorf("the target is %d while A still catches up, want %d", now, catchUpGCPercent)
		}
		close(release)
		waitTarget(t, g, 150, "once both caught up")
		stopA()
		if now, _ := g.get(); now != 150 {
			t.Errorf("the target is %d after A stopped, want the 150 it found", now)
		}
		// A later catch-up in the same process raises it again.
		if err := Rewind(ctx, store.Projections, "proj_b"); err != nil {
			t.Fatal(err)
		}
		stopB = runner(t, store, "proj_b", ok)
		waitSets(t, g, 150, 4, "after another catch-up")
		stopB()
	})
}
