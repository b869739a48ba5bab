package queries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// cancelAttempts bounds the load-decide-append rounds of a cancel that keep
// conflicting with the worker's appends.
const cancelAttempts = 20

// Cancel asks to stop caller's query id: it appends cancel_requested to the
// query (once: a second request while the first is pending appends nothing)
// and returns the query's result at that moment, folded from the events it
// decided on (the read model may hold a running query's progress back). The worker
// running the query, in whatever process, ends its model calls and the query
// ends failed with code cancelled. A query of another account, or an unknown
// id, is not_found; a query that has ended (or whose ending is being
// recorded) is query_ended.
func (s *Service) Cancel(ctx context.Context, caller accounts.Caller, id string) (json.RawMessage, error) {
	notFound := apperr.New(apperr.NotFound, "no query %q for this account", truncate(id))
	if !ValidRequestID(id) {
		return nil, notFound
	}
	for range cancelAttempts {
		q, recs, err := s.Store.LoadQuery(ctx, id)
		if err != nil {
			return nil, err
		}
		if q.Submitted == nil || q.Submitted.AccountID != caller.AccountID {
			return nil, notFound
		}
		ev, err := events.DecideCancel(q, caller.Fingerprint)
		if err != nil {
			return nil, err
		}
		if ev == nil {
			return json.Marshal(projections.FoldQuery(recs).Result)
		}
		env, err := events.Wrap(events.AggregateQuery, id, ev, s.Now())
		if err != nil {
			return nil, err
		}
		_, err = s.Store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, id), Seq: q.LastSeq})
		switch {
		case err == nil:
			return json.Marshal(projections.FoldQuery(recs).Result)
		case !errors.Is(err, eventstore.ErrConflict):
			return nil, fmt.Errorf("append cancel_requested: %w", err)
		}
	}
	return nil, &apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: 1, RequestID: id,
		Message: "the query changed too fast to record the cancel; retry the cancel"}
}
