package events

import "github.com/crosscheck/crosscheck/internal/apperr"

// QueryCancelRequested records that the query's owner asked to stop it. It
// is appended once, by the API process that took the request, conditional on
// the query's last event; the worker running the query (in any process) then
// ends its model calls and the query ends failed with code cancelled.
type QueryCancelRequested struct {
	// KeyFingerprint is the fingerprint of the API key that asked.
	KeyFingerprint string `json:"key_fingerprint"`
}

func (QueryCancelRequested) EventName() string { return "cancel_requested" }

func init() {
	register(AggregateQuery, func() Event { return &QueryCancelRequested{} })
}

// CancelledMessage is the message of a cancelled query's error.
const CancelledMessage = "the query was cancelled at its owner's request (POST /v1/queries/{id}/cancel); it was charged for the model calls that had finished, and at least the cancellation charge's share of its reservation when one is set"

// Cancelled is the ending of a query whose cancel was requested.
func Cancelled() QueryFailed {
	return QueryFailed{Code: apperr.Cancelled, Message: CancelledMessage}
}

// DecideCancel decides a cancel request on q by the key with fingerprint:
// the event to append, or nil when a cancel was requested already (a second
// request has no further effect). It returns not_found for a query with no
// events, and query_ended when the query has ended or its ending is decided
// already (its credits are settled).
func DecideCancel(q *Query, fingerprint string) (Event, error) {
	switch {
	case q.Submitted == nil:
		return nil, apperr.New(apperr.NotFound, "no such query")
	case q.Terminal():
		return nil, &apperr.Error{Code: apperr.QueryEnded, RequestID: q.Submitted.RequestID,
			Message: "the query has ended (" + q.Status + "); there is nothing to cancel: GET /v1/queries/{id} returns its result"}
	case q.Settled != nil:
		return nil, &apperr.Error{Code: apperr.QueryEnded, RequestID: q.Submitted.RequestID,
			Message: "the query's ending is being recorded; there is nothing to cancel: GET /v1/queries/{id} returns its result"}
	case q.CancelRequested:
		return nil, nil
	}
	return QueryCancelRequested{KeyFingerprint: fingerprint}, nil
}
