// Package worker runs queries. The event log is the queue: a worker is a
// durable pull consumer on submitted events with a short AckWait that
// in-progress acks keep alive while the job runs, so a dead worker's job is
// redelivered within seconds and resumes from the query's own events.
package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	// MaxJobs bounds the jobs run at once.
	MaxJobs int
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

// Run consumes jobs until ctx ends, then lets running jobs finish for Grace,
// cancels the rest and hands them back for redelivery.
func (w *Worker) Run(ctx context.Context) error {
	cons, err := w.Store.Queries.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		FilterSubject: "ev." + events.AggregateQuery + ".*." + events.QuerySubmitted{}.EventName(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       w.AckWait,
		MaxAckPending: w.MaxJobs,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", ConsumerName, err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(min(w.MaxJobs, 256)))
	if err != nil {
		return fmt.Errorf("consume %s: %w", ConsumerName, err)
	}
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	go func() {
		<-ctx.Done()
		msgs.Stop()
	}()
	slots := make(chan struct{}, w.MaxJobs)
	var jobs sync.WaitGroup
	for {
		msg, err := msgs.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				break
			}
			w.Log.Warn().Err(err).Msg("worker: next message")
			continue
		}
		slots <- struct{}{}
		jobs.Go(func() {
			defer func() { <-slots }()
			w.handle(jobCtx, msg)
		})
	}
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

func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	id := events.AggregateID(msg.Subject())
	stop := keepAlive(msg, max(w.AckWait/3, 100*time.Millisecond))
	err := w.run(ctx, id, firstDelivery(msg))
	stop()
	switch {
	case err == nil:
		_ = msg.Ack()
	case errors.Is(err, errYield):
		w.Log.Info().Str("request_id", id).Msg("worker: another worker is running this query; handing it back")
		_ = msg.NakWithDelay(w.AckWait)
	case ctx.Err() != nil:
		// Shutting down: hand the job back at once.
		_ = msg.Nak()
	default:
		w.Log.Warn().Err(err).Str("request_id", id).Msg("worker: job interrupted; it will be redelivered")
		_ = msg.NakWithDelay(time.Second)
	}
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
// event, which saves the load.
func (w *Worker) run(ctx context.Context, id string, first *events.Record) error {
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
	terminal, err := w.decide(ctx, q, em)
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

// decide returns how the query ends: the ending a settlement recorded, or
// what its mode decides after running the steps not yet recorded.
func (w *Worker) decide(ctx context.Context, q *events.Query, em *emitter) (events.Event, error) {
	if q.Settled != nil {
		return q.Settled.Terminal(), nil
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
