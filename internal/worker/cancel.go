package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// errCancelRequested is the cause of a run's context ended because the
// query's owner cancelled it.
var errCancelRequested = errors.New("the query was cancelled")

// cancelFilter matches the cancel requests of every query.
var cancelFilter = events.Subject(events.AggregateQuery, "*", events.QueryCancelRequested{}.EventName())

// running holds the context of each run of this worker, by request id, so
// that a cancel request ends that run's model calls.
type running struct {
	mu   sync.Mutex
	next uint64
	runs map[string]map[uint64]context.CancelCauseFunc
}

// add registers the run of id with its cancel function; the function it
// returns removes it.
func (r *running) add(id string, cancel context.CancelCauseFunc) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]map[uint64]context.CancelCauseFunc{}
	}
	r.next++
	n := r.next
	if r.runs[id] == nil {
		r.runs[id] = map[uint64]context.CancelCauseFunc{}
	}
	r.runs[id][n] = cancel
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.runs[id], n)
		if len(r.runs[id]) == 0 {
			delete(r.runs, id)
		}
	}
}

// cancel ends the context of every run of id this worker holds.
func (r *running) cancel(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.runs[id] {
		c(errCancelRequested)
	}
}

// watchCancels follows the cancel requests appended from now on, by any
// process, and ends the contexts of the runs of this worker they concern.
// A request appended before the watch began, or one the watch misses, is
// found by the run itself: its next append conflicts with the request, and
// the run reloads the query (see endIfCancelled); a run that starts loads
// the query first.
func (w *Worker) watchCancels(ctx context.Context) (*eventstore.Consumption, error) {
	st, err := w.Store.Queries.State(ctx)
	if err != nil {
		return nil, err
	}
	return w.Store.Queries.Ordered(ctx, []string{cancelFilter}, st.LastSeq, 64, func(m eventstore.Message) {
		if id := events.AggregateID(m.Subject); id != "" {
			w.running.cancel(id)
		}
	}, nil)
}

// endIfCancelled ends a run that stopped with err (its context ended, or an
// append conflicted) when the reason is a cancel request: the query is
// loaded again and, if its cancel was requested, ended failed with code
// cancelled — its recorded calls charged, the rest of its reservation
// released. Otherwise err is returned as it is.
func (w *Worker) endIfCancelled(ctx context.Context, id string, err error, a *attempt) error {
	q, _, lerr := w.Store.LoadQuery(ctx, id)
	if lerr != nil || !q.CancelRequested || q.Terminal() {
		return err
	}
	w.Log.Info().Str("request_id", id).Msg("worker: the query was cancelled; ending it")
	return w.runSafely(ctx, id, nil, "", a)
}
