package handlers

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/internal/events"
)

// scriptedFollower sends its records after a pause in which the stream's
// heartbeats run, then ends.
type scriptedFollower struct {
	pause time.Duration
	recs  []events.Record
}

func (f scriptedFollower) FollowQuery(ctx context.Context, _ string) (<-chan events.Record, <-chan error) {
	out := make(chan events.Record)
	go func() {
		defer close(out)
		select {
		case <-time.After(f.pause):
		case <-ctx.Done():
			return
		}
		for _, r := range f.recs {
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, make(chan error)
}

// Every block of the stream that has a field has data: an SSE client that
// yields an event for each block with a field (httpx-sse does so for a block
// that holds only retry:) sees no empty event, at the connect nor at a
// heartbeat before the first event. The retry advice still opens the
// stream.
func TestStreamBlocksWithoutDataAreOnlyComments(t *testing.T) {
	const id = "req_01M80000000000000000000002"
	rec := func(seq uint64, e events.Event) events.Record {
		return events.Record{Seq: seq, Envelope: events.Envelope{Time: time.Now()}, Event: e}
	}
	s := &Server{Queries: foundQueries{}, Heartbeat: 5 * time.Millisecond, Events: scriptedFollower{pause: 50 * time.Millisecond, recs: []events.Record{
		rec(1, events.QuerySubmitted{RequestID: id, Mode: events.ModeUnify}),
		rec(2, events.QueryCompleted{}),
	}}}
	rctx := chi.NewRouteContext()
	rctx.URLParams.Add("id", id)
	for _, resume := range []string{"", "1"} {
		req := httptest.NewRequest("GET", "/v1/queries/"+id+"/stream", nil)
		if resume != "" {
			req.Header.Set("Last-Event-ID", resume)
		}
		req = req.WithContext(context.WithValue(context.Background(), chi.RouteCtxKey, rctx))
		w := httptest.NewRecorder()
		s.stream(w, req)
		raw := w.Body.String()
		if resume == "" && !strings.HasPrefix(raw, "retry: 2000\n") {
			t.Errorf("the stream does not open with the retry advice: %q", raw)
		}
		if resume == "" && !strings.Contains(raw, ": heartbeat") {
			t.Fatalf("no heartbeat before the first event, the test shows nothing: %q", raw)
		}
		events := 0
		for _, block := range strings.Split(raw, "\n\n") {
			fields := map[string]bool{}
			for _, line := range strings.Split(block, "\n") {
				if line == "" || strings.HasPrefix(line, ":") {
					continue
				}
				name, _, _ := strings.Cut(line, ":")
				fields[name] = true
			}
			if len(fields) > 0 && !fields["data"] {
				t.Errorf("Last-Event-ID %q: a block with fields but no data, an empty event to some clients: %q in\n%s", resume, block, raw)
			}
			if fields["data"] {
				events++
			}
		}
		if want := map[string]int{"": 2, "1": 1}[resume]; events != want {
			t.Errorf("Last-Event-ID %q: %d events, want %d:\n%s", resume, events, want, raw)
		}
	}
}
