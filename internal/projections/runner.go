package projections

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// Projection names are persistent state (each names its checkpoint): never
// rename them.
const (
	ConsumerQueryStatus = "proj_query_status"
	// ConsumerAccounts feeds the keys and balances projections from one
	// delivery of each account event.
	ConsumerAccounts = "proj_accounts"
)

// BatchHandler applies events in stream order. It must be idempotent by
// sequence: after a crash the events since the last checkpoint come again.
type BatchHandler func(ctx context.Context, recs []events.Record) error

// Deferring is a handler that holds some applied changes in memory and
// stores them later (see QueryStatus.Every). The runner asks it to store
// what is due after each batch and when the next change falls due, to store
// everything when it stops (unless its process lost the projection's lease
// to another), and never writes its checkpoint past an event whose change
// is still held: a crash replays that event.
type Deferring interface {
	// Flush stores the held changes that are due (all of them when all is
	// set). It returns the sequence of the oldest event whose change is
	// still held and when the next held change falls due: 0 and the zero
	// time when nothing is held, also after an error.
	Flush(ctx context.Context, all bool) (held uint64, due time.Time, err error)
}

// Runner feeds a handler every event of a stream in stream order, every
// event already delivered (up to Batch) at once. Its position is a
// checkpoint in the projections bucket, written after an applied batch at
// most every checkpointEvery, when the stream goes idle for checkpointEvery,
// and when the runner stops; a runner starts after its checkpoint.
//
// Events come from an ordered consumer, so an event is never skipped or
// reordered. (A durable consumer with acknowledgements is not enough: after a
// restart it redelivers unacknowledged events only when their ack wait
// ends, after newer ones.) A failing batch is retried in place. A runner
// that starts more than a batch behind catches up with the collector's
// target raised (catchUpGCPercent).
type Runner struct {
	Name        string
	Stream      *eventstore.Stream
	Filters     []string
	HandleBatch BatchHandler
	// Checkpoints is the projections bucket.
	Checkpoints *eventstore.Bucket
	// Batch bounds a batch; zero means defaultBatch.
	Batch int
	// Deferred, when set, is the handler's store of held changes.
	Deferred Deferring
	// ReadModels are the buckets the handler writes: where each ends is
	// recorded with every checkpoint, and Check reads their documents
	// (JSON objects whose "seq" is the stream sequence of the last event
	// they reflect; other values are not read).
	ReadModels []*eventstore.Bucket
	Log        zerolog.Logger
}

// defaultBatch is the largest batch a runner hands its handler by default.
// It matters only when events wait (a rebuild, a projection catching up):
// then larger batches write each document fewer times. Rebuilding the query
// read model went from ~130,000 to ~175,000 events/s from 1,024 to 4,096
// (BenchmarkReplay, docs/BENCHMARKS.md).
const defaultBatch = 4096

// catchUpGCPercent is the collector's target (GOGC) while a runner catches
// up on a backlog of more than one batch: the heap may grow to three times
// what is live between collections instead of twice, so the collector runs
// half as often. Catching up allocates fast and keeps little (a rebuild
// allocates ~5.6 KB per event, nearly all of it garbage within its batch):
// rebuilding `make bench`'s load data took ~8 % less CPU and ran ~7 %
// faster at 200 (docs/BENCHMARKS.md). Once the runner has applied every
// event stored when it started, or nothing is left to deliver (or stops,
// or halts at an event it cannot decode, or its deliveries stop for
// catchUpIdle after its first batch), the target is restored,
// so a service that has caught up runs with the collector's own default.
const catchUpGCPercent = 200

// setGCPercent is debug.SetGCPercent; tests observe it.
var setGCPercent = debug.SetGCPercent

// catchingUp counts the process's runners that are catching up: the first
// raises the collector's target, the last restores it.
var catchingUp struct {
	sync.Mutex
	n    int
	prev int
}

// catchUp raises the collector's target to catchUpGCPercent for a runner
// that catches up and returns the function that ends its catch-up (only its
// first call counts). An operator's GOGC is left as it is, and so is a
// target already higher or off.
func catchUp() (caughtUp func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	catchingUp.Lock()
	defer catchingUp.Unlock()
	if catchingUp.n == 0 {
		catchingUp.prev = setGCPercent(catchUpGCPercent)
		if catchingUp.prev < 0 || catchingUp.prev > catchUpGCPercent {
			setGCPercent(catchingUp.prev)
		}
	}
	catchingUp.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			catchingUp.Lock()
			defer catchingUp.Unlock()
			if catchingUp.n--; catchingUp.n == 0 {
				setGCPercent(catchingUp.prev)
			}
		})
	}
}

// checkpointEvery bounds how often a runner writes its checkpoint, and is
// how long the stream stays idle before the last one is written.
const checkpointEvery = 200 * time.Millisecond

// catchUpIdle is how long deliveries may stop after a catch-up's first
// batch, with events still to come, before the catch-up counts as ended:
// a runner whose consumer cannot go on (its connection lost for good) does
// not keep the collector's target raised. It is longer than an ordered
// consumer that stopped receiving takes to be recreated (about 2 s, see
// eventstore.Stream.Ordered), so such a pause does not end a catch-up. A
// var: tests shorten or lengthen it.
var catchUpIdle = 3 * time.Second

// runKey carries the identity of one Run in the context of its batches.
type runKey struct{}

// runOf returns the run a batch's context belongs to: a new value for every
// Run, nil outside a runner. A handler that keeps state across batches drops
// it when the run changes, since another process may have applied events in
// between (it held the projection's lease meanwhile).
func runOf(ctx context.Context) any { return ctx.Value(runKey{}) }

// Run consumes until ctx ends, and then returns nil, also when ctx ends
// while it starts; an error says why it could not start.
func (r *Runner) Run(ctx context.Context) (err error) {
	defer func() {
		if ctx.Err() != nil {
			err = nil
		}
	}()
	ctx = context.WithValue(ctx, runKey{}, new(byte))
	pos, err := Checkpoint(ctx, r.Checkpoints, r.Name)
	if err != nil {
		return err
	}
	// Earlier builds fed the projection from a durable consumer of the
	// same name; it is dropped (the projection starts over once, without a
	// checkpoint, and ignores what it applied by sequence).
	if err := r.Stream.DeleteConsumer(ctx, r.Name); err != nil {
		r.Log.Warn().Err(err).Str("consumer", r.Name).Msg("projection: the legacy durable consumer could not be deleted")
	}
	// Events stored before this run may have been applied by an earlier one
	// (after the checkpoint, before a crash); newer ones are new.
	state, err := r.Stream.State(ctx)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", r.Name, err)
	}
	before := state.LastSeq
	size := r.Batch
	if size <= 0 {
		size = defaultBatch
	}
	// A backlog of more than a batch (a rebuild, a process that starts far
	// behind) is caught up with the collector's target raised; catching
	// says the catch-up has not ended yet.
	caughtUp, catching := func() {}, false
	if before > pos && before-pos > uint64(size) {
		caughtUp, catching = catchUp(), true
	}
	defer func() { caughtUp() }()
	// Events are decoded on the consumer's delivery goroutine, so decoding
	// and applying run side by side.
	in := make(chan delivered, 2*size)
	cc, err := r.Stream.Ordered(ctx, r.Filters, pos, size, func(msg eventstore.Message) {
		d := r.decode(msg, before)
		select {
		case in <- d:
		case <-ctx.Done():
		}
	}, func(err error) {
		r.Log.Debug().Err(err).Str("consumer", r.Name).Msg("projection: consumer restarted")
	})
	if err != nil {
		return fmt.Errorf("consume %s: %w", r.Name, err)
	}
	defer cc.Stop()
	// The checkpoint is written at most every checkpointEvery, once the
	// stream is idle, and when the runner stops: a checkpoint that lags only
	// replays a few events the projections ignore by sequence.
	var saved, applied uint64 = pos, pos
	var savedAt time.Time
	// held is the oldest event whose change the handler holds unstored,
	// due when the next held change must be stored (see Deferring).
	var held uint64
	var due time.Time
	flush := func(ctx context.Context, all bool) {
		if r.Deferred == nil {
			return
		}
		h, d, err := r.Deferred.Flush(ctx, all)
		if err != nil {
			r.Log.Warn().Err(err).Str("consumer", r.Name).Msg("projection: held changes not stored; retrying")
			d = time.Now().Add(time.Second)
		}
		held, due = h, d
	}
	// mark is the checkpoint: the last event applied and stored.
	mark := func() uint64 {
		if held != 0 && held-1 < applied {
			return held - 1
		}
		return applied
	}
	var appliedSeq atomic.Uint64
	appliedSeq.Store(pos)
	lagDone := make(chan struct{})
	lagCtx, stopLag := context.WithCancel(ctx)
	go func() {
		defer close(lagDone)
		r.reportLag(lagCtx, &appliedSeq)
	}()
	defer func() { stopLag(); <-lagDone }()
	save := func(ctx context.Context) {
		at := mark()
		if at == saved {
			return
		}
		// Where the read models end now, written before the checkpoint:
		// every document of the events up to it is stored by now.
		if err := r.savePositions(ctx); err != nil {
			r.Log.Warn().Err(err).Str("consumer", r.Name).Msg("projection: checkpoint not written; it is written with the next batch")
			return
		}
		if _, err := r.Checkpoints.Put(ctx, r.Name, []byte(strconv.FormatUint(at, 10))); err != nil {
			r.Log.Warn().Err(err).Str("consumer", r.Name).Msg("projection: checkpoint not written; it is written with the next batch")
			return
		}
		saved, savedAt = at, time.Now()
	}
	defer func() {
		// A runner whose process lost the lease stores nothing it holds:
		// the new holder may have stored newer documents, and it applies
		// the held events itself from the checkpoint, which they precede.
		lost := errors.Is(context.Cause(ctx), errLeaseLost)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if !lost {
			flush(ctx, true)
		}
		save(ctx)
	}()
	idle := time.NewTimer(checkpointEvery)
	defer idle.Stop()
	deferred := time.NewTimer(time.Hour)
	defer deferred.Stop()
	recs := make([]events.Record, 0, size)
	var lastIn time.Time // when the last event was delivered
	for {
		recs = recs[:0]
		var stuck *delivered
		var pending uint64
		take := func(d delivered) bool {
			if !d.ok {
				// A copy, so that d itself stays off the heap.
				s := d
				stuck = &s
				return false
			}
			recs, pending = append(recs, d.rec), d.pending
			return true
		}
		// An applied batch whose checkpoint is not written yet is
		// written when no event comes for checkpointEvery, and a catch-up
		// that nothing more comes for after its first batch, for
		// catchUpIdle, has ended.
		var idleC, dueC <-chan time.Time
		if mark() != saved || catching && applied > pos {
			idle.Reset(checkpointEvery)
			idleC = idle.C
		}
		if held != 0 {
			deferred.Reset(time.Until(due))
			dueC = deferred.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-idleC:
			save(ctx)
			if catching && time.Since(lastIn) >= catchUpIdle {
				caughtUp()
				catching = false
			}
			continue
		case <-dueC:
			flush(ctx, false)
			continue
		case d := <-in:
			take(d)
			lastIn = time.Now()
		}
	drain:
		for len(recs) < size && stuck == nil {
			select {
			case d := <-in:
				if !take(d) {
					break drain
				}
			default:
				break drain
			}
		}
		if len(recs) > 0 {
			for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
				err := r.HandleBatch(ctx, recs)
				if err == nil {
					applied = recs[len(recs)-1].Seq
					appliedSeq.Store(applied)
					// Caught up: every event stored when the run began is
					// applied, or nothing is left to deliver (the stream's
					// last events may have been deleted).
					if applied >= before || pending == 0 {
						caughtUp()
						catching = false
					}
					flush(ctx, false)
					setLag(r.Name, pending)
					if time.Since(savedAt) >= checkpointEvery {
						save(ctx)
					}
					break
				}
				r.Log.Warn().Err(err).Str("consumer", r.Name).Uint64("seq", recs[0].Seq).Msg("projection: retrying events")
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(backoff):
				}
			}
		}
		if stuck != nil {
			// An event this build cannot read (a newer type, or corrupt
			// bytes) is never skipped: the read model would silently
			// diverge. The projection stops here until a build that reads
			// it runs.
			r.Log.Error().Str("consumer", r.Name).Str("subject", stuck.rec.Envelope.Subject).
				Msg("projection stopped at an event it cannot decode; run a build that knows it")
			caughtUp()
			<-ctx.Done()
			return nil
		}
	}
}

// lagEvery is how often a running projection compares the stream's last
// sequence with the last event it applied to report its lag.
const lagEvery = 5 * time.Second

// reportLag sets the projection's lag every lagEvery until ctx ends: the
// events the stream stored after the last one applied (its filters cover
// the whole stream). Between deliveries the lag comes from here, so it
// grows while the projection is stuck (a batch retried, an event it cannot
// decode) instead of staying at what the last delivery said. A failed read
// leaves the lag as it was.
func (r *Runner) reportLag(ctx context.Context, applied *atomic.Uint64) {
	t := time.NewTicker(lagEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		state, err := r.Stream.State(ctx)
		if err != nil {
			continue
		}
		var lag uint64
		if done := applied.Load(); state.LastSeq > done {
			lag = state.LastSeq - done
		}
		setLag(r.Name, lag)
	}
}

// ErrUnreadableCheckpoint is in the chain of Checkpoint's error when the
// stored checkpoint is not a sequence.
var ErrUnreadableCheckpoint = errors.New("not a sequence")

// Checkpoint returns the sequence of the last event the projection name
// applied; 0 when it has applied none.
func Checkpoint(ctx context.Context, kv *eventstore.Bucket, name string) (uint64, error) {
	e, err := kv.Get(ctx, name)
	if errors.Is(err, eventstore.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint %s: %w", name, err)
	}
	seq, err := strconv.ParseUint(string(e.Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("checkpoint %s: %q is %w", name, e.Value, ErrUnreadableCheckpoint)
	}
	return seq, nil
}

// Rewind forgets a projection's checkpoint so it starts over from the first
// event, as a rebuild needs.
func Rewind(ctx context.Context, kv *eventstore.Bucket, name string) error {
	for _, key := range []string{name, positionsKey(name)} {
		if err := kv.Delete(ctx, key, 0); err != nil {
			return fmt.Errorf("rewind %s: %w", name, err)
		}
	}
	return nil
}

// delivered is one message's event and the messages pending after it; ok
// is false for a message whose event could not be decoded, which is logged
// and left out (its rec then holds only the message's sequence and
// subject).
type delivered struct {
	rec     events.Record
	pending uint64
	ok      bool
}

func (r *Runner) decode(msg eventstore.Message, before uint64) delivered {
	rec, err := msg.Record()
	if err != nil {
		r.Log.Error().Err(err).Str("consumer", r.Name).Uint64("seq", msg.Seq).Msg("projection: undecodable event")
		return delivered{rec: events.Record{Seq: msg.Seq, Envelope: events.Envelope{Subject: msg.Subject}}, pending: msg.Pending}
	}
	rec.Replayed = rec.Seq <= before
	return delivered{rec: rec, pending: msg.Pending, ok: true}
}
