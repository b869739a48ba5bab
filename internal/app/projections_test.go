package app

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// readyz returns the status of GET /readyz.
func (h *harness) readyz() int {
	h.t.Helper()
	r, err := http.Get(h.m.URL() + "/readyz")
	if err != nil {
		h.t.Fatalf("GET /readyz: %v", err)
	}
	r.Body.Close()
	return r.StatusCode
}

// On the embedded server, a projection whose run fails at start is retried
// with backoff, and /readyz answers 503 while it is down: once the cause is
// gone the projection runs again, /readyz answers 200 and queries are read
// back as they complete.
func TestProjectionFailingAtStartIsRetried(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	h.m.Close()
	// A checkpoint that is not a sequence: the query-status projection
	// cannot start.
	h.offline(func(store *eventstore.Store) {
		if _, err := store.Projections.Put(context.Background(), projections.ConsumerQueryStatus, []byte("not a sequence")); err != nil {
			t.Fatalf("spoil the checkpoint: %v", err)
		}
	})
	h.start()

	eventually(t, 30*time.Second, "/readyz to answer 503 while the projection is down", func() bool { return h.readyz() == http.StatusServiceUnavailable })
	failures := func() int {
		n := 0
		for _, line := range strings.Split(h.logs.String(), "\n") {
			if strings.Contains(line, `"consumer":"`+projections.ConsumerQueryStatus+`"`) && strings.Contains(line, "projection stopped") {
				n++
			}
		}
		return n
	}
	eventually(t, 30*time.Second, "the projection to be tried again", func() bool { return failures() >= 2 })
	must(t, h.readyz() == http.StatusServiceUnavailable, "/readyz answered %d while the projection cannot start", h.readyz())

	if err := projections.Rewind(context.Background(), h.m.Store.Projections, projections.ConsumerQueryStatus); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "/readyz to answer 200 once the projection runs", func() bool { return h.readyz() == http.StatusOK })
	id := h.submitOK(key, "after the repair")
	got := h.wait(key, id, 60*time.Second)
	must(t, got["status"] == "completed", "query %s: %v", id, got)
}
