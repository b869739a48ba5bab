package handlers

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/events"
)

// foundQueries answers every read of a query as found.
type foundQueries struct{ Queries }

func (foundQueries) Get(context.Context, accounts.Caller, string) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}

// endedFollower ends its stream of events at once, without an error and
// without the query's terminal event, and never closes its error channel.
type endedFollower struct{}

func (endedFollower) FollowQuery(context.Context, string) (<-chan events.Record, <-chan error) {
	recs := make(chan events.Record)
	close(recs)
	return recs, make(chan error)
}

// A stream whose events end (the store's follow closed its channel) ends
// the response, so the client reconnects with Last-Event-ID: the handler
// does not read the closed channel over and over until the client leaves.
func TestStreamEndsWhenTheFollowEnds(t *testing.T) {
	s := &Server{Queries: foundQueries{}, Events: endedFollower{}, Heartbeat: time.Hour}
	rctx := chi.NewRouteContext()
	rctx.URLParams.Add("id", "req_01M80000000000000000000001")
	req := httptest.NewRequest("GET", "/v1/queries/req_01M80000000000000000000001/stream", nil)
	req = req.WithContext(context.WithValue(context.Background(), chi.RouteCtxKey, rctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.stream(httptest.NewRecorder(), req)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream handler still runs 10 s after its follow ended")
	}
}
