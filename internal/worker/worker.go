// Package worker runs queries. The event log is the queue: workers share a
// durable pull consumer on submitted events with a short AckWait that
// in-progress acks keep alive while the job runs, so a dead worker's job is
// redelivered within seconds and resumes from the query's own events. A job
// that keeps failing is retried with a growing delay and, after MaxDeliver
// deliveries, ends as failed with its reservation released.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/modes"
)

// ConsumerName is the workers' durable consumer. It is persistent state:
// never rename it.
const ConsumerName = "worker_queries"

// Mode runs one query from its recorded events to its end and returns the
// terminal event for the worker to append.
type Mode interface {
	Run(ctx context.Context, q *events.Query, emit modes.Emit) (events.Event, error)
}

// Ledger charges a query's model calls and settles its reservation.
type Ledger interface {
	Debit(ctx context.Context, accountID, requestID string, calls ...ledger.Charge) (charged int64, open bool, err error)
	Release(ctx context.Context, accountID, requestID, reason string) error
}

// Worker consumes submitted queries and runs them.
type Worker struct {
	Store *eventstore.Store
	Modes map[string]Mode
	Log   zerolog.Logger
	Now   func() time.Time
	// AckWait is how long a job may go without an in-progress ack before it
	// is redelivered to another worker.
	AckWait time.Duration
	// MaxJobs bounds the jobs this worker runs at once; it pulls no more
	// jobs than it has room for, so the others take the rest.
	MaxJobs int
	// MaxDeliver is how many times a job is delivered before it ends as
	// failed (zero: DefaultMaxDeliver).
	MaxDeliver int
	// Backoff is the delay before a failed job is delivered again, by the
	// number of deliveries so far (the last entry repeats; nil:
	// DefaultBackoff).
	Backoff []time.Duration
	// Grace is how long Run lets running jobs finish after ctx ends before it
	// cancels them and hands them back.
	Grace time.Duration
	// Finished, when set, is called once a query has reached its terminal
	// event, with the fingerprint of the key that submitted it.
	Finished func(ctx context.Context, fingerprint, requestID string) error
	// Ledger, when set, is charged for every model call and settles each
	// query before its terminal event.
	Ledger Ledger
}

// DefaultMaxDeliver and DefaultBackoff give a failing job about four
// minutes to succeed: long enough for a JetStream leader election or a
// rolling restart, short enough that a client is not left waiting on a job
// that cannot run.
const DefaultMaxDeliver = 10

// DefaultBackoff doubles from 1 s up to a minute.
var DefaultBackoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute}

// fetchBatch bounds one pull request: a batch is delivered at once and its
// channels are sized by it.
const fetchBatch = 256

func (w *Worker) maxDeliver() int {
	if w.MaxDeliver > 0 {
		return w.MaxDeliver
	}
	return DefaultMaxDeliver
}

// backoff is the delay before delivery n+1 of a job that failed n times.
func (w *Worker) backoff(n uint64) time.Duration {
	b := w.Backoff
	if len(b) == 0 {
		b = DefaultBackoff
	}
	return b[min(int(n), len(b))-1]
}

// Run consumes jobs until ctx ends, then lets running jobs finish for Grace,
// cancels the rest and hands them back for redelivery.
func (w *Worker) Run(ctx context.Context) error {
	// The backoff is applied by negative acks with a delay rather than the
	// consumer's BackOff, which would replace AckWait by delivery and break
	// the in-progress keep-alive. MaxAckPending is left to the workers: each
	// pulls only what it has room for, so any number of them share the
	// consumer and every one is bounded by its own MaxJobs.
	cons, err := w.Store.Queries.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		FilterSubject: "ev." + events.AggregateQuery + ".*." + events.QuerySubmitted{}.EventName(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.AckWait,
		MaxDeliver:    w.maxDeliver(),
		MaxAckPending: -1,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", ConsumerName, err)
	}
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	exhausted, err := w.watchExhausted(jobCtx)
	if err != nil {
		return err
	}

	var jobs sync.WaitGroup

	slots := make(chan struct{}, w.MaxJobs)
	for ctx.Err() == nil {
		// Wait for room, then ask for as many jobs as there is room for.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		room := 1 + take(slots, min(w.MaxJobs, fetchBatch)-1)
		batch, err := cons.Fetch(room, jetstream.FetchContext(ctx))
		if err != nil {
			release(slots, room)
			if ctx.Err() == nil {
				w.Log.Warn().Err(err).Msg("worker: fetch")
				sleep(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			if ctx.Err() != nil {
				// Came in as the worker stops: hand it back at once.
				_ = msg.Nak()
				continue
			}
			room--
			jobs.Go(func() {
				defer func() { <-slots }()
				w.handle(jobCtx, msg)
			})
		}
		release(slots, room)
		if err := batch.Error(); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			w.Log.Warn().Err(err).Msg("worker: fetch")
			sleep(ctx, time.Second)
		}
	}
	_ = exhausted.Unsubscribe()
	done := make(chan struct{})
	go func() { jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.Grace):
		cancelJobs()
		<-done
	}
	return nil
}

// take takes up to n more slots that are free now and says how many.
func take(slots chan struct{}, n int) int {
	for i := range n {
		select {
		case slots <- struct{}{}:
		default:
			return i
		}
	}
	return n
}

// release frees n slots.
func release(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	id := events.AggregateID(msg.Subject())
	meta, _ := msg.Metadata()
	delivered := uint64(1)
	if meta != nil {
		delivered = meta.NumDelivered
	}
	stop := keepAlive(msg, max(w.AckWait/3, 100*time.Millisecond))
	err := w.runSafely(ctx, id, firstDelivery(msg), nil)
	switch {
	case err == nil:
		stop()
		_ = msg.Ack()
	case errors.Is(err, errYield):
		stop()
		w.Log.Info().Str("request_id", id).Msg("worker: another worker is running this query; handing it back")
		_ = msg.NakWithDelay(w.AckWait)
	case ctx.Err() != nil:
		// Shutting down: hand the job back at once.
		stop()
		_ = msg.Nak()
	case delivered >= uint64(w.maxDeliver()):
		// The last delivery failed too: end the query as failed, still
		// under the keep-alive. If even that fails, the consumer's
		// max-deliveries advisory gives a worker one more try.
		w.Log.Error().Err(err).Str("request_id", id).Uint64("deliveries", delivered).Msg("worker: job failed on its last delivery; ending it as failed")
		gerr := w.giveUp(ctx, id, delivered)
		stop()
		if gerr != nil {
			w.Log.Error().Err(gerr).Str("request_id", id).Msg("worker: could not end the failed job")
			_ = msg.Nak()
			return
		}
		_ = msg.Term()
	default:
		stop()
		delay := w.backoff(delivered)
		w.Log.Warn().Err(err).Str("request_id", id).Uint64("deliveries", delivered).Dur("retry_in", delay).Msg("worker: job interrupted; it will be redelivered")
		_ = msg.NakWithDelay(delay)
	}
}

// runSafely runs a job and turns a panic on its goroutine into an error, so
// one bad job fails alone and is retried like any other failure.
func (w *Worker) runSafely(ctx context.Context, id string, first *events.Record, giveUp *events.QueryFailed) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.Log.Error().Str("request_id", id).Str("stack", string(debug.Stack())).Msgf("worker: job panicked: %v", p)
			err = fmt.Errorf("job panicked: %v", p)
		}
	}()
	return w.run(ctx, id, first, giveUp)
}

// giveUp ends a job that failed on each of its deliveries: it is settled as
// failed (its recorded calls charged, its reservation released) unless it
// had already settled, in which case that ending stands.
func (w *Worker) giveUp(ctx context.Context, id string, delivered uint64) error {
	failed := &events.QueryFailed{Code: apperr.Internal, Message: fmt.Sprintf("the service could not run this query (%d attempts); submit it again", delivered)}
	return w.runSafely(ctx, id, nil, failed)
}

// maxDeliveriesAdvisory is what JetStream publishes, on
// maxDeliveriesSubject, when it stops delivering a job that was delivered
// MaxDeliver times without an acknowledgement.
type maxDeliveriesAdvisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

const maxDeliveriesSubject = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + eventstore.StreamQueries + "." + ConsumerName

// watchExhausted ends the jobs whose last delivery ended without an answer
// (their worker died each time, say): one worker of the queue group takes
// each advisory and ends the job as failed. Advisories are not stored, so
// this is the second chance, after the worker of the last delivery's own.
func (w *Worker) watchExhausted(ctx context.Context) (*nats.Subscription, error) {
	sub, err := w.Store.NC.QueueSubscribe(maxDeliveriesSubject, "crosscheck-workers", func(m *nats.Msg) {
		var adv maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
			return
		}
		raw, err := w.Store.Queries.GetMsg(ctx, adv.StreamSeq)
		if err != nil {
			w.Log.Error().Err(err).Uint64("seq", adv.StreamSeq).Msg("worker: an exhausted job could not be read")
			return
		}
		id := events.AggregateID(raw.Subject)
		w.Log.Error().Str("request_id", id).Uint64("deliveries", adv.Deliveries).Msg("worker: job was delivered its last time without an answer; ending it as failed")
		if err := w.giveUp(ctx, id, adv.Deliveries); err != nil {
			w.Log.Error().Err(err).Str("request_id", id).Msg("worker: could not end the exhausted job")
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", maxDeliveriesSubject, err)
	}
	return sub, nil
}

// keepAlive sends an in-progress ack every interval until stop is called,
// from a timer rather than a goroutine of its own: a worker holds many jobs.
func keepAlive(msg jetstream.Msg, interval time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(interval, func() {
		_ = msg.InProgress()
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(interval)
		}
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// firstDelivery returns the record of a submitted event delivered for the
// first time, or nil. A job no worker has seen has no events but this one,
// so it needs no load; the first append of its run is conditional on that.
func firstDelivery(msg jetstream.Msg) *events.Record {
	meta, err := msg.Metadata()
	if err != nil || meta.NumDelivered != 1 {
		return nil
	}
	rec, err := events.Decode(meta.Sequence.Stream, msg.Data())
	if err != nil {
		return nil
	}
	return &rec
}

// errYield says another worker appended to the job's query meanwhile: this
// one hands the job back and lets that one finish.
var errYield = errors.New("another worker is running this query")

// run loads the query and runs its mode to its end: settle the credits,
// then append the terminal event. first, when set, is the query's only
// event, which saves the load. giveUp, when set, ends the query with that
// failure instead of running its mode (a settlement already recorded wins).
func (w *Worker) run(ctx context.Context, id string, first *events.Record, giveUp *events.QueryFailed) error {
	q := &events.Query{}
	var err error
	if first != nil {
		q.Apply(*first)
	} else if q, _, err = w.Store.LoadQuery(ctx, id); err != nil {
		return err
	}
	if q.Submitted == nil || q.Terminal() {
		return nil
	}
	em := &emitter{store: w.Store, id: id, last: q.LastSeq, now: w.Now}
	if w.Ledger != nil {
		// Each call is charged as soon as it is recorded, beside the
		// pipeline; settle waits for those charges and charges any that a
		// crash left out.
		acct := q.Submitted.AccountID
		em.onCall = func(ctx context.Context, c events.Call) {
			em.debits.Go(func() {
				_, _, _ = w.Ledger.Debit(ctx, acct, id, ledger.Charge{CallID: c.ID, Model: c.Model, Usage: c.Usage})
			})
		}
	}
	terminal, err := w.decide(ctx, q, em, giveUp)
	em.debits.Wait()
	if err == nil && q.Settled == nil {
		for _, r := range em.recorded() {
			q.Apply(r)
		}
		err = w.settle(ctx, q, em, terminal)
	}
	if err == nil && w.Ledger != nil {
		err = w.Ledger.Release(ctx, q.Submitted.AccountID, id, "settled")
	}
	if err == nil {
		err = em.emit(ctx, terminal)
	}
	if errors.Is(err, eventstore.ErrConflict) {
		return errYield
	}
	if err == nil && w.Finished != nil {
		// Best effort: a full key heals a slot whose query has ended.
		_ = w.Finished(ctx, q.Submitted.KeyFingerprint, id)
	}
	return err
}

// decide returns how the query ends: the ending a settlement recorded, the
// failure of a job given up, or what its mode decides after running the
// steps not yet recorded.
func (w *Worker) decide(ctx context.Context, q *events.Query, em *emitter, giveUp *events.QueryFailed) (events.Event, error) {
	if q.Settled != nil {
		return q.Settled.Terminal(), nil
	}
	if giveUp != nil {
		return *giveUp, nil
	}
	mode, ok := w.Modes[q.Submitted.Mode]
	if !ok {
		return events.QueryFailed{Code: apperr.InvalidMode, Message: "this server does not run mode " + q.Submitted.Mode}, nil
	}
	return mode.Run(ctx, q, em.emit)
}

// settle charges every call of q that is not charged yet and records what
// the query was charged and how it ends, before its reservation is released;
// each step is idempotent, so a redelivered job settles once.
func (w *Worker) settle(ctx context.Context, q *events.Query, em *emitter, terminal events.Event) error {
	settled := events.CreditsSettled{}
	if f, ok := terminal.(events.QueryFailed); ok {
		settled.Failed = &f
	}
	if w.Ledger != nil {
		charges := make([]ledger.Charge, 0, len(q.Calls))
		for _, c := range q.Calls {
			charges = append(charges, ledger.Charge{CallID: c.ID, Model: c.Model, Usage: c.Usage})
		}
		charged, _, err := w.Ledger.Debit(ctx, q.Submitted.AccountID, q.Submitted.RequestID, charges...)
		if err != nil {
			return err
		}
		settled.ChargedMicros = charged
	}
	return em.emit(ctx, settled)
}

// emitter appends a query's events, one at a time, each only if no other
// event of the query came after the last one this worker knows. That fences a
// job: a second worker running the same job (redelivered while the first
// still runs) conflicts on its next append, reloads, and goes on from the
// first's events — no model is recorded, charged or ended twice.
type emitter struct {
	store  *eventstore.Store
	id     string
	now    func() time.Time
	onCall func(context.Context, events.Call)

	mu     sync.Mutex
	last   uint64
	recs   []events.Record
	debits sync.WaitGroup
}

// recorded returns the records this emitter appended.
func (e *emitter) recorded() []events.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recs
}

func (e *emitter) emit(ctx context.Context, ev events.Event) error {
	env, err := events.Wrap(events.AggregateQuery, e.id, ev, e.now())
	if err != nil {
		return err
	}
	e.mu.Lock()
	seq, _, err := e.store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, e.id), Seq: e.last})
	if err == nil {
		e.last = seq
		e.recs = append(e.recs, events.Record{Seq: seq, Envelope: env, Event: ev})
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if model, usage, _, ok := events.Charged(ev); ok && e.onCall != nil {
		e.onCall(ctx, events.Call{ID: env.ID, Model: model, Usage: usage})
	}
	return nil
}
