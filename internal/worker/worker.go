// Package worker runs queries. The event log is the queue: workers share a
// durable pull consumer on submitted events with a short AckWait that
// in-progress acks keep alive while the job runs, so a dead worker's job is
// redelivered within seconds and resumes from the query's own events. A run
// that fails is recorded (attempt_failed) and retried with a growing delay;
// after MaxFailures the query ends failed with its reservation released. A
// query whose runs end with their worker (its process killed while running
// it) MaxCrashes times in a row is not run again: it ends failed with
// query_crashed; a job JetStream stops delivering is ended too. A query
// runs for QueryTimeout at most, then ends failed with query_timeout.
// A query whose owner cancelled it (cancel_requested, appended by any API
// process) has its run's model calls ended and ends failed with code
// cancelled, charged for the calls it recorded.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/telemetry"
)

// ConsumerName is the workers' durable consumer. It is persistent state:
// never rename it.
const ConsumerName = eventstore.ConsumerJobs

// Mode runs one query from its recorded events to its end and returns the
// terminal event for the worker to append.
type Mode interface {
	Run(ctx context.Context, q *events.Query, emit modes.Emit) (events.Event, error)
}

// Ledger settles a query's credits: one settlement that charges its model
// calls, releases the rest of its reservation and records how the query
// ends, idempotent by query (an earlier settlement is returned as it is).
type Ledger interface {
	Settle(ctx context.Context, accountID, requestID string, calls []events.Call, ending *events.QueryEnding) (events.ChargesSettled, error)
	// Settlement returns the query's settlement; nil when it has none.
	Settlement(ctx context.Context, accountID, requestID string) (*events.ChargesSettled, error)
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
	// MaxFailures is how many failed runs of a job (each an attempt_failed)
	// end it as failed (zero: DefaultMaxFailures). Hand-backs on shutdown
	// and yields to another worker are not failures.
	MaxFailures int
	// MaxDeliver is how many deliveries of a job JetStream makes before it
	// gives up on it, the bound on the deliveries no failure was recorded
	// for: a worker dying with the job, a hand-back, a failure that could not
	// be recorded (zero: MaxFailures + DefaultSpareDeliveries).
	MaxDeliver int
	// Backoff is the delay before a failed job runs again, by the number of
	// its failures so far (the last entry repeats; nil: DefaultBackoff).
	Backoff []time.Duration
	// Grace is how long Run lets running jobs finish after ctx ends before it
	// cancels them and hands them back.
	Grace time.Duration
	// Finished, when set, is called once a query's ending is decided,
	// beside its settlement and before its terminal event is appended, with
	// the id of the account that submitted it: the query's in-flight slot
	// is freed.
	Finished func(ctx context.Context, accountID, requestID string) error
	// Ledger, when set, settles each query before its terminal event,
	// charging every model call the query recorded.
	Ledger Ledger
	// MaxCrashes is how many runs of a query in a row may end with their
	// worker (events.Query.CrashedRuns) before the query is not run again
	// and ends failed with query_crashed (zero: DefaultMaxCrashes).
	MaxCrashes int
	// QueryTimeout bounds the time of one query from its start (its
	// started event), across runs: past it the query's model calls are
	// ended and it ends failed with query_timeout (zero: no bound).
	QueryTimeout time.Duration

	running running
}

// DefaultMaxFailures and DefaultBackoff give a failing job about four
// minutes to succeed: long enough for a JetStream leader election or a
// rolling restart, short enough that a client is not left waiting on a job
// that cannot run.
const DefaultMaxFailures = 10

// DefaultMaxCrashes is how many runs in a row may end with their worker: a
// query whose runs kill the process (an answer that exhausts its memory)
// takes it down that often, and no more.
const DefaultMaxCrashes = 3

// DefaultSpareDeliveries are the deliveries allowed beyond the failures:
// hand-backs in rolling restarts, yields, and workers dying with the job.
const DefaultSpareDeliveries = 20

// DefaultBackoff doubles from 1 s up to a minute.
var DefaultBackoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute}

// fetchBatch bounds one pull request: a batch is delivered at once and its
// channels are sized by it.
const fetchBatch = 256

func (w *Worker) maxFailures() int {
	if w.MaxFailures > 0 {
		return w.MaxFailures
	}
	return DefaultMaxFailures
}

func (w *Worker) maxCrashes() int {
	if w.MaxCrashes > 0 {
		return w.MaxCrashes
	}
	return DefaultMaxCrashes
}

func (w *Worker) maxDeliver() int {
	if w.MaxDeliver > 0 {
		return w.MaxDeliver
	}
	return w.maxFailures() + DefaultSpareDeliveries
}

// backoff is the delay before the next run of a job that failed n times.
func (w *Worker) backoff(n int) time.Duration {
	b := w.Backoff
	if len(b) == 0 {
		b = DefaultBackoff
	}
	return b[min(max(n, 1), len(b))-1]
}

// Run consumes jobs until ctx ends, then lets running jobs finish for Grace,
// cancels the rest and hands them back for redelivery.
func (w *Worker) Run(ctx context.Context) error {
	// The backoff is applied by negative acks with a delay rather than the
	// consumer's BackOff, which would replace AckWait by delivery and break
	// the in-progress keep-alive. MaxAckPending is left to the workers: each
	// pulls only what it has room for, so any number of them share the
	// consumer and every one is bounded by its own MaxJobs.
	jobCtx, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()
	var (
		cons      *eventstore.Jobs
		exhausted *eventstore.Consumption
		cancels   *eventstore.Consumption
	)
	// A consumer that cannot be created yet (a request lost on a cluster
	// electing its leaders, say) is asked for again until it can be: a
	// worker that gave up would stay up and take no job.
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		var err error
		if cons == nil {
			cons, err = w.Store.Jobs(ctx, eventstore.JobsConfig{AckWait: w.AckWait, MaxDeliver: w.maxDeliver()})
		}
		if err == nil && exhausted == nil {
			exhausted, err = w.watchExhausted(ctx, jobCtx)
		}
		if err == nil {
			if cancels, err = w.watchCancels(ctx); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		w.Log.Warn().Err(err).Dur("retry_in", delay).Msg("worker: cannot consume the job queue yet")
		sleep(ctx, delay)
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
		err := cons.Fetch(ctx, room, func(job *eventstore.Job) {
			if ctx.Err() != nil {
				// Came in as the worker stops: hand it back at once.
				job.Nak()
				return
			}
			room--
			jobs.Go(func() {
				defer func() { <-slots }()
				w.handle(jobCtx, job)
			})
		})
		release(slots, room)
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			w.Log.Warn().Err(err).Msg("worker: fetch")
			sleep(ctx, time.Second)
		}
	}
	exhausted.Stop()
	// The cancel watch goes on while the running jobs finish.
	defer cancels.Stop()
	done := make(chan struct{})
	go func() {
		jobs.Wait()
		<-exhausted.Closed() // a running advisory handler ends too
		close(done)
	}()
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

func (w *Worker) handle(ctx context.Context, msg *eventstore.Job) {
	id := events.AggregateID(msg.Message().Subject)
	first := firstDelivery(msg)
	stop := keepAlive(msg, max(w.AckWait/3, 100*time.Millisecond))
	defer stop()
	ctx, a, end := startJob(ctx, msg, id)
	// What the run needs of the message is read: the job holds on to it
	// only to acknowledge it, not to its data and headers for as long as
	// the query runs.
	msg.Release()
	// A cancel request ends runCtx (watchCancels); registered before the
	// run loads the query, so no request falls between the two.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	defer w.running.add(id, cancelRun)()
	err := w.runSafely(runCtx, id, first, "", a)
	if err != nil && ctx.Err() == nil && (errors.Is(err, errYield) || errors.Is(context.Cause(runCtx), errCancelRequested)) {
		err = w.endIfCancelled(ctx, id, err, a)
	}
	defer end(err)
	switch {
	case err == nil:
		msg.Ack()
	case errors.Is(err, errYield):
		handBacks.WithLabelValues("yield").Inc()
		w.Log.Info().Str("request_id", id).Msg("worker: another worker is running this query; handing it back")
		msg.NakWithDelay(w.AckWait)
	case ctx.Err() != nil:
		// Shutting down: hand the job back at once, its run recorded as
		// stopped, not crashed.
		handBacks.WithLabelValues("shutdown").Inc()
		w.handedBack(id, a)
		msg.Nak()
	default:
		w.failed(ctx, msg, id, a.last(), err)
	}
}

// failed records a failed run of a job and retries it after its backoff or,
// at the limit of failures, ends the query as failed. known is the query's
// last event as the run knew it: the failure is recorded only if nothing
// came after it, so a worker that lost the job to another one does not
// count against it. What is not counted is retried: a failure of the event
// store (an outage does not fail queries), a run of a query whose
// credits_settled an earlier build recorded, a run that never loaded its
// query. (A run that fails after this build's settlement is counted; the
// next run ends the query as the settlement recorded, and so does one that
// gives up.)
func (w *Worker) failed(ctx context.Context, msg *eventstore.Job, id string, known uint64, err error) {
	log := w.Log.With().Str("request_id", id).Err(err).Logger()
	delivered := msg.Delivered()
	q, _, lerr := w.Store.LoadQuery(ctx, id)
	switch {
	case lerr == nil && q.Terminal():
		msg.Ack()
		return
	case lerr != nil || q.Submitted == nil || q.Settled != nil || known == 0 || unavailable(err):
		log.Warn().AnErr("load", lerr).Msg("worker: job failed; it will be redelivered")
		msg.NakWithDelay(w.backoff(delivered))
		return
	case q.GivenUp || decided(q):
		// The query's ending is recorded (a give-up, or what the events
		// decide) and the run failed to end it (at its settlement, say):
		// nothing more is recorded, and the next run ends the query.
		log.Warn().Msg("worker: the run of a query whose ending is recorded failed; it will be redelivered")
		msg.NakWithDelay(w.backoff(delivered))
		return
	}
	attemptsFailed.Inc()
	n := q.FailedAttempts + 1
	last := n >= w.maxFailures()
	ev := events.AttemptFailed{Attempt: n, Message: truncate(err.Error(), 500)}
	if !last {
		ev.RetryInMS = max(w.backoff(n).Milliseconds(), 1) // 0 says the last
	}
	env, werr := events.Wrap(events.AggregateQuery, id, ev, w.Now())
	if werr == nil {
		_, werr = w.Store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, id), Seq: known})
	}
	switch {
	case errors.Is(werr, eventstore.ErrConflict):
		log.Info().Msg("worker: job failed after another worker took it over; leaving it to that one")
		msg.NakWithDelay(w.AckWait)
	case werr != nil:
		log.Warn().AnErr("record", werr).Msg("worker: job failed and the failure could not be recorded; it will be redelivered")
		msg.NakWithDelay(w.backoff(delivered))
	case !last:
		log.Warn().Int("attempt", n).Dur("retry_in", w.backoff(n)).Msg("worker: job failed; it will be redelivered")
		msg.NakWithDelay(w.backoff(n))
	default:
		log.Error().Int("attempt", n).Msg("worker: job failed its last attempt; ending it as failed")
		if gerr := w.end(ctx, id); gerr != nil {
			// The next delivery finds the limit reached and ends it.
			log.Error().AnErr("end", gerr).Msg("worker: could not end the failed job; it will be redelivered")
			msg.NakWithDelay(w.backoff(n))
			return
		}
		msg.Term()
	}
}

// handedBack records that the run a, cut short as its worker stops, ended
// without a crash (attempt_handed_back), after the last event it knew, when
// it had loaded the query; best effort, for a few seconds: unrecorded, the
// run counts as one that ended with its worker.
func (w *Worker) handedBack(id string, a *attempt) {
	known := a.last()
	if known == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	env, err := events.Wrap(events.AggregateQuery, id, events.AttemptHandedBack{}, w.Now())
	if err == nil {
		_, err = w.Store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, id), Seq: known})
	}
	if err != nil && !errors.Is(err, eventstore.ErrConflict) {
		w.Log.Warn().Err(err).Str("request_id", id).Msg("worker: the hand-back of a stopped run was not recorded; it counts as a crashed run")
	}
}

// decided reports whether q's recorded events decide its ending.
func decided(q *events.Query) bool {
	_, ok := modes.Decided(q)
	return ok
}

// unavailable reports whether err is the event store (or the ledger's) not
// answering, which a later run may not meet.
func unavailable(err error) bool {
	return errors.Is(err, eventstore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || apperr.Code(err) == apperr.ServiceRestarting
}

// truncate cuts s to at most n bytes, on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}

// attempt is one run of a job, as far as its failure and its metrics need
// it: the emitter run made, read on the same goroutine once run has
// returned or panicked, and when the query was accepted (zero: unknown).
type attempt struct {
	em        *emitter
	submitted time.Time
	// delivered is the job's delivery count; 0 for a run that ends a query
	// without a delivery of its own (a give-up).
	delivered int
}

// last returns the query's last event as the run knew it; 0 if the run never
// loaded the query.
func (a *attempt) last() uint64 {
	if a.em == nil {
		return 0
	}
	a.em.mu.Lock()
	defer a.em.mu.Unlock()
	return a.em.q.LastSeq
}

// runSafely runs a job and turns a panic on its goroutine into an error, so
// one bad job fails alone and is retried like any other failure.
func (w *Worker) runSafely(ctx context.Context, id string, first *events.Record, giveUp string, a *attempt) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.Log.Error().Str("request_id", id).Str("stack", string(debug.Stack())).Msgf("worker: job panicked: %v", p)
			err = fmt.Errorf("job panicked: %v", p)
		}
	}()
	return w.run(ctx, id, first, giveUp, a)
}

// end runs a job whose last failed attempt is recorded: it ends the query
// as failed, settled (its recorded calls charged, its reservation
// released), unless it had settled already, in which case that ending
// stands.
func (w *Worker) end(ctx context.Context, id string) error {
	return w.runSafely(ctx, id, nil, "", &attempt{})
}

// exhausted ends a job JetStream stopped delivering after deliveries, like
// end, recording the give-up first (unless its events decide its ending).
func (w *Worker) exhausted(ctx context.Context, id string, deliveries int) error {
	return w.runSafely(ctx, id, nil, fmt.Sprintf("JetStream stopped delivering this job after %d deliveries", deliveries), &attempt{})
}

// cannotRun is the ending of a query given up.
func cannotRun() events.QueryFailed {
	return events.QueryFailed{Code: apperr.Internal, Message: "the service could not run this query; submit it again"}
}

// maxDeliveriesAdvisory is the part of JetStream's max-deliveries advisory
// the workers read.
type maxDeliveriesAdvisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// watchExhausted ends the jobs JetStream stopped delivering (their workers
// died on each delivery, say). The advisories are kept in their own stream,
// so none is lost while no worker runs, and one worker takes each; one that
// cannot be ended yet is tried again.
func (w *Worker) watchExhausted(ctx, jobCtx context.Context) (*eventstore.Consumption, error) {
	return w.Store.ConsumeExhausted(ctx, func(m *eventstore.Job) {
		var adv maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Message().Data, &adv); err != nil || adv.StreamSeq == 0 {
			m.Term()
			return
		}
		raw, err := w.Store.Queries.Message(jobCtx, adv.StreamSeq)
		if err != nil {
			w.Log.Error().Err(err).Uint64("seq", adv.StreamSeq).Msg("worker: an exhausted job could not be read")
			m.NakWithDelay(5 * time.Second)
			return
		}
		id := events.AggregateID(raw.Subject)
		w.Log.Error().Str("request_id", id).Int("deliveries", adv.Deliveries).Msg("worker: JetStream stopped delivering this job; ending it as failed")
		if err := w.exhausted(jobCtx, id, adv.Deliveries); err != nil {
			w.Log.Error().Err(err).Str("request_id", id).Msg("worker: could not end the exhausted job; trying again")
			m.NakWithDelay(5 * time.Second)
			return
		}
		exhaustedJobs.Inc()
		m.Ack()
	})
}

// keepAlive sends an in-progress ack every interval until stop is called,
// from a timer rather than a goroutine of its own: a worker holds many jobs.
func keepAlive(msg *eventstore.Job, interval time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(interval, func() {
		msg.InProgress()
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
func firstDelivery(msg *eventstore.Job) *events.Record {
	if msg.Delivered() != 1 {
		return nil
	}
	rec, err := msg.Message().Record()
	if err != nil {
		return nil
	}
	return &rec
}

// errYield says another worker appended to the job's query meanwhile: this
// one hands the job back and lets that one finish.
var errYield = errors.New("another worker is running this query")

// run loads the query and runs its mode to its end: settle the credits
// (which records the ending) while the query's slot is freed, then append
// the terminal event with the charge. first, when set, is the query's only
// event, which saves the load.
// giveUp, when set, is why the query is given up instead of run: it ends
// failed with internal_error, the give-up recorded first unless the query
// records one already (a settlement already recorded wins).
func (w *Worker) run(ctx context.Context, id string, first *events.Record, giveUp string, a *attempt) error {
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
	em := &emitter{store: w.Store, id: id, q: q.Clone(), now: w.Now, stage: &stage{mode: q.Submitted.Mode}}
	a.em = em
	ctx = telemetry.WithStage(ctx, em.stageSpan)
	terminal, err := w.decide(ctx, q, em, giveUp, first == nil, a)
	if err == nil {
		freed := w.free(ctx, q.Submitted.AccountID, id)
		q = em.query()
		terminal, err = w.settle(ctx, q, terminal)
		freed()
	}
	if err == nil {
		err = em.emit(ctx, terminal)
	}
	if err == nil {
		a.ended(q, terminal, time.Now())
	}
	if errors.Is(err, eventstore.ErrConflict) {
		return errYield
	}
	return err
}

// releaseWait bounds how long a run waits for its query's slot to be freed
// before it appends the terminal event: the release is best effort, and a
// slow or unavailable inflight bucket must not hold the query's end back.
const releaseWait = time.Second

// free frees the query's in-flight slot, on a goroutine of its own, once
// its ending is decided: the query does no more work (a later run ends it
// as the recorded events decide, without a model call). The slot is freed
// beside the settlement and before the terminal event, so a client that
// sees the query end (its SSE result, a poll) and submits its next query
// at once finds the slot free; freed after the terminal event, it was
// still held when such a submission came, and the key refused it until its
// slots next healed (at most once a second). The returned function waits
// for the release, at most releaseWait. Best effort: a full key heals a
// slot whose query has ended.
func (w *Worker) free(ctx context.Context, accountID, id string) (wait func()) {
	if w.Finished == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Finished(ctx, accountID, id); err != nil {
			w.Log.Warn().Err(err).Str("request_id", id).Msg("worker: the query's in-flight slot was not freed; it is freed when its key is next full")
		}
	}()
	return func() {
		select {
		case <-done: // usually freed while the settlement was written
			return
		default:
		}
		t := time.NewTimer(releaseWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			w.Log.Warn().Str("request_id", id).Msg("worker: the query's in-flight slot is not freed yet; its end is appended meanwhile")
		}
	}
}

// decide returns how the query ends: the ending a settlement recorded, the
// failure of a job given up, query_crashed when its last MaxCrashes runs
// ended with their worker, query_timeout when its QueryTimeout has passed
// (before the run, or while the mode runs: its calls are ended), or what
// its mode decides after running the steps not yet recorded. A run of a
// query that has started before records attempt_started before it decides
// either of the first two. The ending the recorded events decide stands
// (modes.Decided; a query no worker has run yet decides nothing); a
// give-up, which no recorded event decides, is recorded first, so that the
// query is settled only on events that decide its ending. A run that is
// not the query's first (resumed) looks for the settlement first: a run
// that settled the query may have died before its terminal event, and what
// is settled is not run again.
func (w *Worker) decide(ctx context.Context, q *events.Query, em *emitter, giveUp string, resumed bool, a *attempt) (events.Event, error) {
	if q.Settled != nil {
		return q.Settled.Terminal(), nil
	}
	if resumed && w.Ledger != nil {
		s, err := w.Ledger.Settlement(ctx, q.Submitted.AccountID, q.Submitted.RequestID)
		if err != nil {
			return nil, err
		}
		if s != nil && s.Ending != nil {
			return s.Ending.Terminal(), nil
		}
	}
	if q.CancelRequested {
		return events.Cancelled(), nil
	}
	if resumed {
		if ending, ok := modes.Decided(q); ok {
			return ending, nil
		}
	}
	if giveUp == "" && q.FailedAttempts >= w.maxFailures() {
		// This worker's limit, which the worker that recorded the last
		// failure may not have had.
		giveUp = fmt.Sprintf("the limit of %d failed attempts is reached", w.maxFailures())
	}
	if q.GivenUp {
		return cannotRun(), nil
	}
	if giveUp != "" {
		// The give-up, as the query's last attempt_failed (retry_in_ms 0),
		// conditional on the query's last event: a worker still running the
		// job (one stuck past its ack wait) records nothing after it,
		// nothing the settlement would not charge.
		if err := em.emit(ctx, events.AttemptFailed{Attempt: q.FailedAttempts + 1, Message: giveUp}); err != nil {
			return nil, err
		}
		return cannotRun(), nil
	}
	mode, ok := w.Modes[q.Submitted.Mode]
	if !ok {
		// A failed run, retried: in a rolling upgrade, a worker that runs
		// the mode may take it.
		return nil, fmt.Errorf("this server does not run mode %s", q.Submitted.Mode)
	}
	left := w.QueryTimeout // the query's time left
	if q.Started {
		left -= w.Now().Sub(q.StartedAt)
		// The runs before this one that ended with their worker.
		n := q.CrashedRuns()
		// Recorded before anything is decided, the run's start fences the
		// job: a worker still running it (stalled past its ack wait)
		// records nothing after it, so an ending decided here is settled on
		// every call recorded. A run that dies after it counts as one more
		// crash, so the next run decides the same.
		if err := em.emit(ctx, events.AttemptStarted{Delivery: a.delivered}); err != nil {
			return nil, err
		}
		if n >= w.maxCrashes() {
			return crashed(n), nil
		}
		if w.QueryTimeout > 0 && left <= 0 {
			return timedOut(w.QueryTimeout), nil
		}
	}
	if w.QueryTimeout <= 0 {
		return mode.Run(ctx, q, em.emit)
	}
	mctx, cancel := context.WithTimeoutCause(ctx, left, errQueryTimeout)
	defer cancel()
	terminal, err := mode.Run(mctx, q, em.emit)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(mctx), errQueryTimeout) {
		// The calls the deadline cut short are not recorded; what was
		// recorded decides the ending when it can.
		if ending, ok := modes.Decided(em.query()); ok {
			return ending, nil
		}
		return timedOut(w.QueryTimeout), nil
	}
	return terminal, err
}

// errQueryTimeout is the cause of a run's end at its query's time bound.
var errQueryTimeout = errors.New("the query's time is up")

// crashed is the ending of a query whose last n runs ended with their worker.
func crashed(n int) events.QueryFailed {
	return events.QueryFailed{Code: apperr.QueryCrashed, Message: fmt.Sprintf("the service stopped running this query: "+
		"its last %d runs ended with the worker that ran them (the process died or was killed) before any step was recorded, "+
		"so running it again would likely end the same way. If it uses a customer-owned model, check what that host answers", n)}
}

// timedOut is the ending of a query that ran longer than d.
func timedOut(d time.Duration) events.QueryFailed {
	return events.QueryFailed{Code: apperr.QueryTimeout, Message: fmt.Sprintf("the query ran for %s, the most one query may run "+
		"(CROSSCHECK_QUERY_TIMEOUT): the calls still running were ended; the answers that came back are in the result, and charged", d)}
}

// settle settles the query's credits on its account: every recorded call
// charged, the rest of the reservation released and the ending recorded, in
// one ledger event. It returns the terminal event to append, carrying the
// charge: the ending of the query's settlement, which an earlier run may
// have made (its ending stands), or terminal when the settlement records
// none (a query without a reservation, a settlement of an older build).
func (w *Worker) settle(ctx context.Context, q *events.Query, terminal events.Event) (events.Event, error) {
	if w.Ledger == nil {
		return events.WithCharge(terminal, 0), nil
	}
	s, err := w.Ledger.Settle(ctx, q.Submitted.AccountID, q.Submitted.RequestID, q.Calls, events.EndingOf(terminal))
	if err != nil {
		return nil, err
	}
	switch {
	case q.Settled != nil:
		// An earlier build recorded the charge on the query: it stands (its
		// ledger may have charged per call, with no settlement to read).
		return events.WithCharge(terminal, q.Settled.ChargedMicros), nil
	case s.Ending != nil:
		terminal = s.Ending.Terminal()
	}
	return events.WithCharge(terminal, s.ChargedMicros), nil
}

// emitter appends a query's events, one at a time, each only if no other
// event of the query came after the last one this worker knows. That fences a
// job: a second worker running the same job (redelivered while the first
// still runs) conflicts on its next append, reloads, and goes on from the
// first's events — no model is recorded, charged or ended twice.
type emitter struct {
	store *eventstore.Store
	id    string
	now   func() time.Time

	mu sync.Mutex
	// q is the query as the emitter knows it: as loaded, and every event
	// it appended since.
	q     *events.Query
	stage *stage
}

// query returns the query with the events this emitter appended.
func (e *emitter) query() *events.Query {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.q
}

// append appends env after the last event the emitter knows.
func (e *emitter) append(ctx context.Context, env events.Envelope, ev events.Event) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	app, err := e.store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, e.id), Seq: e.q.LastSeq})
	if err == nil {
		e.q.Apply(events.Record{Seq: app.Seq, Envelope: env, Event: ev})
		e.observeStage(ctx, ev)
	}
	return err
}

func (e *emitter) emit(ctx context.Context, ev events.Event) error {
	env, err := events.Wrap(events.AggregateQuery, e.id, ev, e.now())
	if err != nil {
		return err
	}
	return e.append(ctx, env, ev)
}
