package app

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// queriesConsumers is the number of consumers the QUERIES stream has.
func (h *harness) queriesConsumers() int {
	h.t.Helper()
	st, err := h.m.Store.Queries.State(context.Background())
	if err != nil {
		h.t.Fatalf("QUERIES state: %v", err)
	}
	return st.Consumers
}

// openStarted opens a query's stream on client and reads up to the end of
// its first block (the retry advice): the stream's response has started.
func openStarted(t testing.TB, client *http.Client, url, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("open stream: %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "retry:") {
		t.Fatalf("first line of the stream %q, %v", line, err)
	}
	return resp
}

// One key cannot hold more than its bound of open streams, nor the process
// more than its own: a refusal is the error envelope, before any SSE byte,
// and another key's stream still works.
func TestStreamBounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) {
		c.SimLatency = time.Minute
		c.SSEMaxStreamsPerKey = 3
		c.SSEMaxStreams = 4
	}))
	a, b, c := h.newKey(), h.newKey(), h.newKey()
	idA, idB, idC := h.submitOK(a, "Hold my streams"), h.submitOK(b, "Mine too"), h.submitOK(c, "And mine")
	url := func(id string) string { return h.m.URL() + "/v1/queries/" + id + "/stream" }
	client := &http.Client{Transport: &http.Transport{}}
	defer client.Transport.(*http.Transport).CloseIdleConnections()
	for range 3 {
		defer openStarted(t, client, url(idA), a).Body.Close()
	}
	r := h.api("GET", "/v1/queries/"+idA+"/stream", a, nil)
	must(t, r.status == 429 && r.errCode(t) == "rate_limited", "4th stream of one key: %d %s", r.status, r.body)
	must(t, strings.HasPrefix(r.header.Get("Content-Type"), "application/json") && r.header.Get("Retry-After") != "",
		"4th stream of one key: headers %v", r.header)
	must(t, strings.Contains(r.json(t)["error"].(map[string]any)["message"].(string), "3 open event streams"), "message %s", r.body)

	// Another key still streams, up to the process's bound.
	defer openStarted(t, client, url(idB), b).Body.Close()
	r = h.api("GET", "/v1/queries/"+idC+"/stream", c, nil)
	must(t, r.status == 503 && r.errCode(t) == "service_restarting", "stream over the process's bound: %d %s", r.status, r.body)
	must(t, strings.Contains(r.json(t)["error"].(map[string]any)["message"].(string), "4 open event streams"), "message %s", r.body)
}

// A stream whose follow of the query fails after the response started ends
// with an error event (the envelope, the request id and the status as far as
// the stream told it), not with a silent close.
func TestStreamEndsWithAnErrorEventWhenItsFollowFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.SimLatency = time.Minute }))
	key := h.newKey()
	id := h.submitOK(key, "Follow me until the store goes")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.Transport.(*http.Transport).CloseIdleConnections()
	resp := openStarted(t, client, h.m.URL()+"/v1/queries/"+id+"/stream", key)
	defer resp.Body.Close()
	// The process loses its NATS connection for good.
	h.m.Store.Conn().Close()
	evs, _ := readStream(t, resp.Body)
	must(t, len(evs) > 0, "the stream ended with no event")
	last := evs[len(evs)-1]
	must(t, last.name == "error", "last event %q, want error: %v", last.name, evs)
	must(t, strings.Contains(last.data, `"code":"service_restarting"`) && strings.Contains(last.data, `"request_id":"`+id+`"`),
		"error event data %s", last.data)
}

// 500 streams opened and closed, half on a finished query (they end after
// its result) and half on a running one (their client goes), leave neither
// consumers on the NATS server nor goroutines in the process behind.
func TestManyStreamsReturnToBaseline(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) { c.SSEMaxStreamsPerKey = 0 }))
	key := h.newKey()
	done := h.submitOK(key, "Finished before the streams")
	h.wait(key, done, 30*time.Second)
	h.cfg.SimLatency = time.Minute
	h.restart(false)
	running := h.submitOK(key, "Running while the streams come and go")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	tr := client.Transport.(*http.Transport)
	defer tr.CloseIdleConnections()
	// The restarted process's own consumers (its worker's cancel watch among
	// them) start beside its readiness: the baseline is the count once it
	// has held for a second.
	baseConsumers, same := h.queriesConsumers(), 0
	storetest.WaitFor(t, 10*time.Second, "the QUERIES consumers of the restarted process steady", func() bool {
		time.Sleep(100 * time.Millisecond)
		if n := h.queriesConsumers(); n != baseConsumers {
			baseConsumers, same = n, 0
			return false
		}
		same++
		return same >= 10
	})
	// A first stream, so the baseline counts what stays of it in the
	// process (the connection pool's and the client's goroutines).
	openStarted(t, client, h.m.URL()+"/v1/queries/"+running+"/stream", key).Body.Close()
	tr.CloseIdleConnections()
	storetest.WaitFor(t, 10*time.Second, fmt.Sprintf("the QUERIES consumers back to %d after one stream", baseConsumers), func() bool {
		return h.queriesConsumers() == baseConsumers
	})
	runtime.GC()
	baseGoroutines := runtime.NumGoroutine()
	var baseMem runtime.MemStats
	runtime.ReadMemStats(&baseMem)

	const total, batch = 500, 50
	for n := 0; n < total; n += batch {
		var wg sync.WaitGroup
		errs := make(chan error, batch)
		for i := range batch {
			wg.Go(func() {
				id := running
				if i%2 == 0 {
					id = done
				}
				req, _ := http.NewRequest("GET", h.m.URL()+"/v1/queries/"+id+"/stream", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				line, err := br.ReadString('\n')
				if resp.StatusCode != 200 || err != nil || !strings.HasPrefix(line, "retry:") {
					errs <- fmt.Errorf("stream of %s: %d %q %v", id, resp.StatusCode, line, err)
				}
				if id == done {
					_, _ = br.WriteTo(discard{})
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		tr.CloseIdleConnections()
	}
	storetest.WaitFor(t, 15*time.Second, fmt.Sprintf("the QUERIES consumers back to %d", baseConsumers), func() bool {
		return h.queriesConsumers() == baseConsumers
	})
	storetest.WaitFor(t, 15*time.Second, fmt.Sprintf("the goroutines back near %d", baseGoroutines), func() bool {
		return runtime.NumGoroutine() <= baseGoroutines+10
	})
	storetest.WaitFor(t, 15*time.Second, "the heap back near its baseline", func() bool {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse <= baseMem.HeapInuse+16<<20
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
