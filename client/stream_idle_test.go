package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pipeTransport streams a handler's writes to the client as they happen,
// in-process, so that a synctest bubble sees a silent stream as durably
// blocked.
type pipeTransport struct {
	h func(w io.Writer, r *http.Request)
}

func (t pipeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	go func() {
		t.h(pw, r)
		pw.Close()
	}()
	go func() {
		<-r.Context().Done()
		pw.CloseWithError(r.Context().Err())
	}()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: pr, Request: r}, nil
}

func TestStreamReopensASilentConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		var opened []string
		c := bubbleClient(t, nil)
		c.HTTP = &http.Client{Transport: pipeTransport{func(w io.Writer, r *http.Request) {
			mu.Lock()
			opened = append(opened, fmt.Sprintf("%s after %q", time.Since(start), r.Header.Get("Last-Event-ID")))
			mu.Unlock()
			if r.Header.Get("Last-Event-ID") == "" {
				fmt.Fprint(w, "retry: 2000\n\nid: 1\nevent: progress\ndata: {\"stage\":\"running_models\",\"progress_percent\":5}\n\n")
				<-r.Context().Done() // then silence, no heartbeat
				return
			}
			fmt.Fprint(w, "id: 2\nevent: result\ndata: {\"request_id\":\"req_1\",\"status\":\"completed\"}\n\n")
		}}}
		var ids []string
		q, err := c.Stream(context.Background(), "req_1", func(ev Event) { ids = append(ids, ev.Type+"#"+ev.ID) })
		if err != nil || q.Status != StatusCompleted {
			t.Fatalf("Stream = %+v, %v", q, err)
		}
		if want := []string{"progress#1", "result#2"}; !slices.Equal(ids, want) {
			t.Fatalf("events %v, want %v", ids, want)
		}
		// Silent for StreamIdle (60 s), then reopened after the stream's
		// retry (2 s) with the last id it saw.
		if want := []string{`0s after ""`, `1m2s after "1"`}; !slices.Equal(opened, want) {
			t.Fatalf("opened %v, want %v", opened, want)
		}
	})
}
