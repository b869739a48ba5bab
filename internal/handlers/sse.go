package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// Progress is the data of an SSE progress event.
type Progress = apiv1.Progress

// StreamError is the data of an SSE error event: the envelope plus the query.
type StreamError struct {
	ErrorBody
	RequestID string `json:"request_id"`
	Status    string `json:"status"`
}

// stream serves GET /v1/queries/{id}/stream: the query's history from its
// first event, then live, as progress events, then exactly one result or
// error event, and the connection closes. Each event's id is its stream
// sequence; Last-Event-ID resumes after it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if _, err := s.Queries.Get(r.Context(), caller(r), id); err != nil {
		s.writeError(w, r, err, "")
		return
	}
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "Last-Event-ID must be the id of an event this stream sent"), "")
			return
		}
		after = n
	}
	s.linkQueryTrace(r, id)
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.writeError(w, r, apperr.New(apperr.Internal, "streaming unsupported"), "")
		return
	}
	// The response starts at once, except for a resuming client: its stream
	// starts with the first event it has not seen, or with a heartbeat, or,
	// when it has seen the terminal event already, is 204 No Content, which
	// tells an EventSource to stop reconnecting. The retry advice opens the
	// first event's block, not a block of its own: some clients (httpx-sse)
	// yield an empty event for a block without data. Until that event,
	// heartbeats are comment lines inside the open block.
	started, open := false, false
	start := func() {
		if started {
			return
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "retry: 2000\n")
		open = true
		flusher.Flush()
	}
	if after == 0 {
		start()
	}

	recs, errc := s.Events.FollowQuery(r.Context(), id)
	beat := time.NewTicker(s.heartbeat())
	defer beat.Stop()
	doc := &projections.QueryDoc{}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-beat.C:
			if doc.Seq < after {
				// A resuming client hears nothing until the history it has
				// seen is replayed: it may end in the terminal event (204).
				continue
			}
			start()
			if open {
				fmt.Fprint(w, ": heartbeat\n")
			} else {
				fmt.Fprint(w, ": heartbeat\n\n")
			}
			flusher.Flush()
		case err := <-errc:
			s.followEnded(w, r, id, started, doc, err)
			return
		case rec, ok := <-recs:
			if !ok {
				// The follow ended before the terminal event; its error,
				// if any, was sent before the channel closed.
				var err error
				select {
				case err = <-errc:
				default:
				}
				s.followEnded(w, r, id, started, doc, err)
				return
			}
			doc.Apply(rec)
			terminal := doc.Result.Terminal()
			if rec.Seq > after {
				start()
				writeEvent(w, rec.Seq, s.sseEvent(rec, doc))
				open = false
				flusher.Flush()
			}
			if terminal {
				if !started {
					w.WriteHeader(http.StatusNoContent)
				}
				return
			}
		}
	}
}

// followEnded ends a stream whose follow of the query ended before the
// terminal event. A stream that has not started answers with the error
// envelope; one that has ends with an error event carrying it, the query's
// id and its status as far as the stream told it, so the client is not left
// waiting on a silent connection. The error is service_restarting when the
// follow failed on the store (or ended without saying why): the query goes
// on, and the client reconnects with Last-Event-ID.
func (s *Server) followEnded(w http.ResponseWriter, r *http.Request, id string, started bool, doc *projections.QueryDoc, err error) {
	if err == nil {
		err = apperr.New(apperr.ServiceRestarting, "the event stream of this query ended; reconnect with Last-Event-ID")
	}
	if !started {
		s.writeError(w, r, err, id)
		return
	}
	logger(r).Warn().Err(err).Str("request_id", id).Msg("stream: following the query failed; ended with an error event")
	e := apperr.From(err)
	if e.Code == apperr.ServiceRestarting && e.Message != "" && err != error(e) {
		// The store's failure: say what the client does about it.
		e = &apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: e.RetryAfter,
			Message: "following this query's events failed; the query goes on: reconnect with Last-Event-ID, or poll it"}
	}
	status := doc.Result.Status
	if status == "" {
		// The query exists (it was read before the stream started), so it
		// was accepted at least.
		status = "queued"
	}
	writeEvent(w, doc.Seq, sseEvent{"error", StreamError{ErrorBody: Envelope(e, id, s.DocsURL), RequestID: id, Status: status}})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

type sseEvent struct {
	name string
	data any
}

func (s *Server) sseEvent(rec events.Record, doc *projections.QueryDoc) sseEvent {
	res := &doc.Result
	switch e := rec.Event.(type) {
	case events.QueryCompleted:
		return sseEvent{"result", res}
	case events.QueryFailed:
		env := Envelope(&apperr.Error{Code: e.Code, Message: e.Message}, res.RequestID, s.DocsURL)
		return sseEvent{"error", StreamError{ErrorBody: env, RequestID: res.RequestID, Status: res.Status}}
	}
	return sseEvent{"progress", Progress{RequestID: res.RequestID, Stage: res.Stage, ProgressPercent: res.ProgressPercent, Message: projections.Describe(rec)}}
}

func writeEvent(w http.ResponseWriter, seq uint64, ev sseEvent) {
	data, _ := json.Marshal(ev.data)
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", seq, ev.name, data)
}

func (s *Server) heartbeat() time.Duration {
	if s.Heartbeat > 0 {
		return s.Heartbeat
	}
	return 15 * time.Second
}
