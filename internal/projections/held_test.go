package projections

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// With Every set, a query's document is stored when the query ends, by the
// batch that brings its end; before, its changes, the submission's
// included, are held until Flush finds them due (or is told to store
// everything), and Flush reports the oldest event held.
func TestRunningDocumentWaitsItsEndDoesNot(t *testing.T) {
	t.Parallel()
	store, p, m := heldStatus(t)
	ctx := context.Background()

	apply(t, p, []events.Record{submittedReq1(m)}, false)
	if got := storedDoc(t, store, "req_1").Seq; got != 0 {
		t.Fatalf("the submission was stored with its batch (document at %d); want it held", got)
	}
	apply(t, p, []events.Record{record(2, events.QueryStarted{}), record(3, events.ModelAnswered{Model: m, Answer: "A"})}, false)
	if got := storedDoc(t, store, "req_1").Seq; got != 0 {
		t.Fatalf("a running query's change was stored with its batch (document at %d); want it held", got)
	}
	held, due, err := p.Flush(ctx, false)
	if err != nil || held != 1 || time.Until(due) < 59*time.Minute {
		t.Fatalf("Flush before anything is due = %d, %v, %v; want 1 (the oldest held event), due in about an hour", held, due, err)
	}
	if got := storedDoc(t, store, "req_1").Seq; got != 0 {
		t.Fatalf("Flush stored a change not yet due (document at %d)", got)
	}
	if held, _, err := p.Flush(ctx, true); err != nil || held != 0 {
		t.Fatalf("Flush(all) = %d, %v; want nothing held", held, err)
	}
	if got := storedDoc(t, store, "req_1"); got.Seq != 3 || len(got.Result.Models) != 1 || got.Result.Models[0].Status != ModelAnswered {
		t.Fatalf("after Flush(all) the document is at %d with %+v; want 3 with the answer", got.Seq, got.Result.Models)
	}

	apply(t, p, []events.Record{record(4, events.ProgressReported{Stage: "synthesis", Percent: 80})}, false)
	apply(t, p, []events.Record{record(5, events.QueryCompleted{})}, false)
	// The end's batch writes the document (no Flush); until the write is
	// acknowledged, Flush counts it as held.
	storetest.WaitFor(t, 10*time.Second, "the ended query's document, written by its batch", func() bool {
		got := storedDoc(t, store, "req_1")
		return got.Seq == 5 && got.Result.Terminal()
	})
	flushedTo(t, p, 0)
}

// flushedTo waits until p's Flush, storing only what is due, reports held
// as the oldest event held: the last batch's writes acknowledged.
func flushedTo(t *testing.T, p *QueryStatus, held uint64) {
	t.Helper()
	var got uint64
	var err error
	storetest.WaitFor(t, 10*time.Second, "the oldest held event", func() bool {
		got, _, err = p.Flush(context.Background(), false)
		return err != nil || got == held
	})
	if err != nil || got != held {
		t.Fatalf("Flush = %d, %v; want %d", got, err, held)
	}
}

// runHeld starts the query-status projection over store with h as its
// handler and its store of held changes; stop ends the run with cause (nil:
// a plain stop) and waits for it.
func runHeld(t *testing.T, store *eventstore.Store, h interface {
	HandleBatch(context.Context, []events.Record) error
	Deferring
}) (stop func(cause error)) {
	t.Helper()
	return startRunner(t, &Runner{Name: ConsumerQueryStatus, Stream: store.Queries, Filters: []string{"ev.query.>"},
		HandleBatch: h.HandleBatch, Deferred: h, Checkpoints: store.Projections, Log: zerolog.Nop()})
}

// startRunner runs r until stop ends it with cause (nil: a plain stop) and
// waits for it.
func startRunner(t *testing.T, r *Runner) (stop func(cause error)) {
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func(cause error) {
		once.Do(func() {
			cancel(cause)
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	// A test that fails before it stops its runner still stops it: a
	// runner left catching up would hold the collector's target for the
	// tests after it.
	t.Cleanup(func() { stop(nil) })
	return stop
}

// A held change falls due after Every: the runner stores it without
// another event coming, and its checkpoint then reaches the last event.
func TestRunnerStoresAHeldChangeWhenItFallsDue(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	stop := runHeld(t, store, &QueryStatus{Store: store, Every: 100 * time.Millisecond})
	defer stop(nil)
	const id = "req_01M80000000000000000000051"
	m := events.ModelRef{Provider: "provider_a", ModelID: "a"}
	submitted := appendQuery(t, store, id, events.QuerySubmitted{RequestID: id, Mode: events.ModeUnify, Models: []events.ModelRef{m}})
	storetest.WaitFor(t, 10*time.Second, "the submission stored", func() bool { return storedDoc(t, store, id).Seq >= submitted })
	last := appendQuery(t, store, id, events.ModelAnswered{Model: m, Answer: "A"})
	storetest.WaitFor(t, 10*time.Second, "the held answer stored with no event after it", func() bool { return storedDoc(t, store, id).Seq == last })
	storetest.WaitFor(t, 10*time.Second, "the checkpoint of the last event", func() bool {
		pos, err := Checkpoint(context.Background(), store.Projections, ConsumerQueryStatus)
		return err == nil && pos == last
	})
}

// A process that dies with a query's changes held leaves its checkpoint
// before the first of them, so the next process applies them.
func TestCheckpointStaysBeforeAHeldChange(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	const id = "req_01M80000000000000000000052"
	m := events.ModelRef{Provider: "provider_a", ModelID: "a"}
	k := &watched{QueryStatus: &QueryStatus{Store: store, Every: time.Hour}, killed: true}
	stop := runHeld(t, store, k)
	submitted := appendQuery(t, store, id, events.QuerySubmitted{RequestID: id, Mode: events.ModeUnify, Models: []events.ModelRef{m}})
	storetest.WaitFor(t, 10*time.Second, "the runner holding the submission", func() bool { return k.lastHeld() == submitted })
	appendQuery(t, store, id, events.QueryStarted{})
	answered := appendQuery(t, store, id, events.ModelAnswered{Model: m, Answer: "A"})
	storetest.WaitFor(t, 10*time.Second, "the runner applying the later events", func() bool { return k.applied() == answered })
	stop(nil)
	if got := storedDoc(t, store, id).Seq; got != 0 {
		t.Fatalf("the killed process stored the document at %d; want it not stored", got)
	}
	pos, err := Checkpoint(context.Background(), store.Projections, ConsumerQueryStatus)
	if err != nil || pos >= submitted {
		t.Fatalf("checkpoint after the kill = %d, %v; want it before the held submission %d", pos, err, submitted)
	}

	// The next process applies the held events from the checkpoint.
	runQueryStatus(t, store, &QueryStatus{Store: store}, id, answered)
	got := storedDoc(t, store, id)
	if got.Seq != answered || len(got.Result.Models) != 1 || got.Result.Models[0].Status != ModelAnswered {
		t.Fatalf("after the next process the document is at %d with %+v; want %d with the answer", got.Seq, got.Result.Models, answered)
	}
}

var _ Deferring = (*QueryStatus)(nil)

// Changes held by an earlier run are not stored by a later one: another
// process may have run the projection in between (its documents are
// newer), and the later run applies the events again from its checkpoint.
func TestALaterRunDoesNotStoreAnEarlierRunsHeldChanges(t *testing.T) {
	t.Parallel()
	store, p, m := heldStatus(t)
	first := context.WithValue(context.Background(), runKey{}, new(byte))
	if err := p.HandleBatch(first, []events.Record{submittedReq1(m)}); err != nil {
		t.Fatal(err)
	}
	if err := p.HandleBatch(first, []events.Record{record(2, events.QueryStarted{})}); err != nil {
		t.Fatal(err)
	}
	later := context.WithValue(context.Background(), runKey{}, new(byte))
	held, _, err := p.Flush(later, true)
	if err != nil || held != 0 {
		t.Fatalf("a later run's Flush = %d, %v; want nothing held", held, err)
	}
	if got := storedDoc(t, store, "req_1").Seq; got != 0 {
		t.Fatalf("a later run stored the earlier run's held changes (document at %d); want it not stored", got)
	}
}

// watched passes every Flush through and reports what the runner was told
// is held; killed, it is a process that dies holding changes: its final
// Flush stores nothing.
type watched struct {
	*QueryStatus
	killed bool
	mu     sync.Mutex
	held   uint64
	last   uint64
}

func (w *watched) Flush(ctx context.Context, all bool) (uint64, time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if all && w.killed {
		return w.held, time.Now(), errors.New("killed")
	}
	held, due, err := w.QueryStatus.Flush(ctx, all)
	w.held = held
	return held, due, err
}

func (w *watched) HandleBatch(ctx context.Context, recs []events.Record) error {
	err := w.QueryStatus.HandleBatch(ctx, recs)
	if err == nil {
		w.mu.Lock()
		w.last = recs[len(recs)-1].Seq
		w.mu.Unlock()
	}
	return err
}

func (w *watched) lastHeld() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

// applied is the last event the runner handed the projection.
func (w *watched) applied() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// A runner stopped because its process lost the projection's lease to
// another stores none of the changes it holds: the other process may have
// stored newer documents already (a query it saw end); it applies the held
// events itself from the checkpoint.
func TestARunnerThatLostItsLeaseStoresNothingItHolds(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	const id = "req_01M80000000000000000000053"
	m := events.ModelRef{Provider: "provider_a", ModelID: "a"}
	w := &watched{QueryStatus: &QueryStatus{Store: store, Every: time.Hour}}
	stop := runHeld(t, store, w)
	submitted := appendQuery(t, store, id, events.QuerySubmitted{RequestID: id, Mode: events.ModeUnify, Models: []events.ModelRef{m}})
	started := appendQuery(t, store, id, events.QueryStarted{})
	storetest.WaitFor(t, 10*time.Second, "the runner holding the submission and the start", func() bool {
		return w.lastHeld() == submitted && w.applied() == started
	})
	stop(errLeaseLost)
	if got := storedDoc(t, store, id).Seq; got != 0 {
		t.Fatalf("a runner that lost its lease stored a held change (document at %d); want it not stored", got)
	}
}

// When the query holding the oldest held change ends (its document stored
// with its end), Flush reports the next oldest held event.
func TestFlushReportsTheNextOldestOnceTheOldestEnds(t *testing.T) {
	t.Parallel()
	_, p, m := heldStatus(t)
	ctx := context.Background()
	rec := func(seq uint64, id string, ev events.Event) events.Record {
		r := record(seq, ev)
		r.Envelope.Subject = "ev.query." + id + "." + ev.EventName()
		return r
	}
	for i, id := range []string{"req_1", "req_2"} {
		apply(t, p, []events.Record{rec(uint64(1+i), id, events.QuerySubmitted{RequestID: id, AccountID: "acct_1", Mode: events.ModeUnify, Models: []events.ModelRef{m}})}, false)
	}
	apply(t, p, []events.Record{rec(3, "req_1", events.QueryStarted{})}, false)
	apply(t, p, []events.Record{rec(4, "req_2", events.QueryStarted{})}, false)
	if held, _, err := p.Flush(ctx, false); err != nil || held != 1 {
		t.Fatalf("Flush = %d, %v; want 1 (req_1's submission)", held, err)
	}
	apply(t, p, []events.Record{rec(5, "req_1", events.QueryCompleted{})}, false)
	// req_2's submission, once req_1's document is stored.
	flushedTo(t, p, 2)
}

// A batch's documents are written while the next batch is applied: until
// their writes are acknowledged Flush counts them as held, and a document
// whose write failed is held again, due at once, with every change since:
// the next Flush stores it, and meanwhile the checkpoint stays before its
// first event.
func TestDocumentWhoseWriteFailedIsHeldAgain(t *testing.T) {
	t.Parallel()
	store, p, m := heldStatus(t)
	ctx := context.Background()
	apply(t, p, []events.Record{submittedReq1(m)}, false)
	apply(t, p, []events.Record{record(2, events.QueryStarted{}), record(3, events.ModelAnswered{Model: m, Answer: "A"})}, false)
	if err := storetest.JetStream(t, store).DeleteKeyValue(ctx, eventstore.BucketQueryStatus); err != nil {
		t.Fatal(err)
	}
	// The end: written by its batch, into no bucket.
	apply(t, p, []events.Record{record(4, events.QueryCompleted{})}, false)
	var held uint64
	var due time.Time
	var err error
	storetest.WaitFor(t, 10*time.Second, "the failed write held again", func() bool {
		held, due, err = p.Flush(ctx, false)
		return err != nil || time.Until(due) > settleAfter
	})
	if err == nil || held != 1 {
		t.Fatalf("Flush without the bucket = %d, %v; want 1 (the submission, held since the first batch) and the store's error", held, err)
	}
	if err := store.ResetQueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
	if held, _, err := p.Flush(ctx, false); err != nil || held != 0 {
		t.Fatalf("Flush with the bucket back = %d, %v; want the held document stored at once", held, err)
	}
	if got := storedDoc(t, store, "req_1"); got.Seq != 4 || !got.Result.Terminal() || len(got.Result.Models) != 1 || got.Result.Models[0].Status != ModelAnswered {
		t.Fatalf("stored document at %d (terminal %v, models %+v); want 4, ended, with the answer", got.Seq, got.Result.Terminal(), got.Result.Models)
	}
	if _, cached := p.cache["req_1"]; cached {
		t.Fatal("the ended query's document stayed cached after it was stored")
	}
}

// Until a batch's document writes are answered, Flush counts them as held
// from their first event: the checkpoint stays before it. Without their
// bucket, the writes take the client's retries (about half a second) to
// fail.
func TestUnansweredDocumentWriteHoldsTheCheckpoint(t *testing.T) {
	t.Parallel()
	store, p, m := heldStatus(t)
	ctx := context.Background()
	apply(t, p, []events.Record{submittedReq1(m)}, false)
	if held, _, err := p.Flush(ctx, true); err != nil || held != 0 {
		t.Fatalf("Flush(all) = %d, %v; want the submission stored", held, err)
	}
	if err := storetest.JetStream(t, store).DeleteKeyValue(ctx, eventstore.BucketQueryStatus); err != nil {
		t.Fatal(err)
	}
	apply(t, p, []events.Record{record(2, events.QueryFailed{Code: "provider_error", Message: "x"})}, false)
	if held, _, _ := p.Flush(ctx, false); held != 2 {
		t.Fatalf("Flush while the end's write is unanswered = %d; want 2, its event", held)
	}
}

// A later event of an ended query whose document write is not answered
// yet applies to the document in memory, not to what the bucket holds:
// here an emptied bucket, read before the write's retry could land.
func TestLaterEventOfAnEndedQueryAppliesToItsCachedDocument(t *testing.T) {
	t.Parallel()
	store, p, m := heldStatus(t)
	ctx := context.Background()
	apply(t, p, []events.Record{
		submittedReq1(m),
		record(2, events.QueryStarted{}), record(3, events.ModelAnswered{Model: m, Answer: "A"}),
	}, false)
	if err := storetest.JetStream(t, store).DeleteKeyValue(ctx, eventstore.BucketQueryStatus); err != nil {
		t.Fatal(err)
	}
	apply(t, p, []events.Record{record(4, events.QueryFailed{Code: "provider_error", Message: "x"})}, false)
	if err := store.ResetQueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
	apply(t, p, []events.Record{record(5, events.CreditsSettled{ChargedMicros: 2_000_000})}, false)
	flushedTo(t, p, 0)
	got := storedDoc(t, store, "req_1")
	if got.Seq != 5 || got.Result.Status != events.StatusFailed || len(got.Result.Models) != 1 || got.Result.Models[0].Status != ModelAnswered ||
		got.Result.Credits.Charged == nil || *got.Result.Credits.Charged != 2 {
		t.Fatalf("stored document at %d, status %s, models %+v, charged %v; want 5, failed, the answer, 2 credits", got.Seq, got.Result.Status, got.Result.Models, got.Result.Credits.Charged)
	}
}

// heldStatus opens a store, a query-status projection over it that holds
// running documents (for an hour), and a model for the queries' events.
func heldStatus(t *testing.T) (*eventstore.Store, *QueryStatus, events.ModelRef) {
	t.Helper()
	store := storetest.Open(t)
	return store, &QueryStatus{Store: store, Every: time.Hour}, events.ModelRef{Provider: "provider_a", ModelID: "a"}
}

// submittedReq1 is the submission of req_1, a unify query of m, at
// sequence 1.
func submittedReq1(m events.ModelRef) events.Record {
	return record(1, events.QuerySubmitted{RequestID: "req_1", AccountID: "acct_1", Mode: events.ModeUnify, Models: []events.ModelRef{m}})
}
