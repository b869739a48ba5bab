package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
)

// Types of the events of a query's stream.
const (
	EventProgress = "progress"
	EventResult   = "result"
	EventError    = "error"
)

// maxReconnects is how many times in a row Stream reopens a stream that
// dropped before it sent anything new.
const maxReconnects = 5

// Event is one event of a query's stream. Exactly one of Progress, Result
// and Error is set, as Type says.
type Event struct {
	// ID is the event's id, the position Last-Event-ID resumes after.
	ID       string
	Type     string
	Progress *apiv1.Progress
	Result   *apiv1.Query
	Error    *apiv1.StreamError
}

// Stream follows a query over its SSE stream, from its first event, and
// calls fn (when not nil) with each event in order. When the connection
// drops, or the stream ends without the query's end, it reopens the stream
// with Last-Event-ID, so fn sees every event once. It returns the query at
// its end: completed with a nil error, failed with an *Error carrying the
// query's code. It gives up after five reopenings in a row that brought
// nothing new, or when ctx ends.
func (c *Client) Stream(ctx context.Context, id string, fn func(Event)) (*apiv1.Query, error) {
	lastID := ""
	fails := 0
	for {
		q, done, progressed, retry, err := c.streamOnce(ctx, id, lastID, func(ev Event) {
			lastID = ev.ID
			if fn != nil {
				fn(ev)
			}
		})
		if done {
			return q, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if progressed {
			fails = 0
		}
		if fails++; fails > maxReconnects {
			return nil, fmt.Errorf("the stream of %s keeps dropping: %w", id, err)
		}
		delay := time.Second
		if c.ReconnectDelay > 0 {
			delay = c.ReconnectDelay
		} else if retry > 0 {
			delay = min(retry, 30*time.Second)
		}
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// streamOnce reads one connection of the stream. done is true when the
// query's end was seen (q and err are then Stream's result) or the stream
// cannot be opened at all (err says why); otherwise err is why the
// connection ended, progressed whether it brought an event, and retry the
// stream's advised reconnection delay.
func (c *Client) streamOnce(ctx context.Context, id, lastID string, emit func(Event)) (q *apiv1.Query, done, progressed bool, retry time.Duration, err error) {
	req := request{method: http.MethodGet, path: "/v1/queries/" + url.PathEscape(id) + "/stream",
		header: http.Header{"Accept": {"text/event-stream"}}}
	if lastID != "" {
		req.header.Set("Last-Event-ID", lastID)
	}
	// A silent connection is ended after StreamIdle and reopened.
	connCtx, drop := context.WithCancel(ctx)
	defer drop()
	resp, err := c.send(connCtx, req)
	if err != nil {
		return nil, true, false, 0, err
	}
	defer resp.Body.Close()
	body := io.Reader(resp.Body)
	if c.StreamIdle > 0 {
		idle := time.AfterFunc(c.StreamIdle, drop)
		defer idle.Stop()
		body = &idleReader{r: resp.Body, idle: idle, d: c.StreamIdle}
	}
	if resp.StatusCode == http.StatusNoContent {
		// The stream had already ended for us: read the query's end.
		q, err := c.Get(ctx, id)
		if err != nil {
			return nil, true, false, 0, err
		}
		return q, true, false, 0, queryError(q)
	}
	sr := newSSEReader(body)
	for {
		ev, err := sr.next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, false, progressed, sr.retry, fmt.Errorf("read the stream: %w", err)
		}
		out := Event{ID: ev.id, Type: ev.name}
		switch ev.name {
		case EventProgress:
			out.Progress = new(apiv1.Progress)
			err = json.Unmarshal([]byte(ev.data), out.Progress)
		case EventResult:
			out.Result = new(apiv1.Query)
			err = json.Unmarshal([]byte(ev.data), out.Result)
		case EventError:
			out.Error = new(apiv1.StreamError)
			err = json.Unmarshal([]byte(ev.data), out.Error)
		default:
			continue // a type this client does not know: skipped
		}
		if err != nil {
			return nil, true, progressed, 0, fmt.Errorf("decode the %s event %s: %w", ev.name, ev.id, err)
		}
		if ev.id != "" {
			progressed = true
			emit(out)
		}
		switch {
		case out.Result != nil:
			return out.Result, true, true, 0, queryError(out.Result)
		case out.Error != nil && out.Error.Status == StatusFailed:
			e := streamError(out.Error)
			q, gerr := c.Get(ctx, id)
			if gerr != nil {
				return nil, true, true, 0, e
			}
			if !Terminal(q.Status) {
				// The query's read model has not caught up with its
				// stream yet: the stream's end is the truth.
				q.Status, q.Error = StatusFailed, &apiv1.QueryError{Code: e.Code, Message: e.Message}
			}
			return q, true, true, 0, e
		case out.Error != nil:
			// The stream ended, the query did not: reopen it.
			return nil, false, progressed, sr.retry, streamError(out.Error)
		}
	}
}

func streamError(se *apiv1.StreamError) *Error {
	e := &Error{Code: se.Error.Code, Message: se.Error.Message, RequestID: se.RequestID, Retriable: se.Error.Retriable, DocsURL: se.Error.DocsURL}
	if se.Error.RetryAfterSeconds != nil {
		e.RetryAfter = time.Duration(*se.Error.RetryAfterSeconds) * time.Second
	}
	return e
}

// maxEventBytes bounds one event of a stream (a result event carries the
// whole query).
const maxEventBytes = maxBodyBytes

// sseEvent is one parsed server-sent event.
type sseEvent struct{ id, name, data string }

// sseReader parses the text/event-stream format: fields id, event, data
// (lines joined with a newline) and retry; comments skipped; an event ends
// at a blank line.
type sseReader struct {
	sc    *bufio.Scanner
	retry time.Duration
	id    string
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventBytes)
	return &sseReader{sc: sc}
}

// errEventTooLarge is returned for an event larger than maxEventBytes.
var errEventTooLarge = errors.New("a stream event is larger than the client accepts")

// next returns the next event with data. It returns io.EOF when the stream
// ends (an unfinished last event is dropped), errEventTooLarge for an event
// past the bound, or the reader's error.
func (r *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data strings.Builder
	hasData := false
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if hasData {
				ev.id, ev.data = r.id, data.String()
				if ev.name == "" {
					ev.name = "message"
				}
				return ev, nil
			}
			ev = sseEvent{}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.name = value
		case "data":
			if data.Len()+len(value) > maxEventBytes {
				return sseEvent{}, errEventTooLarge
			}
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			if !strings.ContainsRune(value, 0) {
				r.id = value
			}
		case "retry":
			if ms, err := strconv.Atoi(value); err == nil && ms >= 0 {
				r.retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return sseEvent{}, errEventTooLarge
		}
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}

// idleReader resets its idle timer on every read that returns data.
type idleReader struct {
	r    io.Reader
	idle *time.Timer
	d    time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.idle.Reset(r.d)
	}
	return n, err
}
