package app

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
)

// heldHost is an openai-compatible host that answers the connection test at
// once and holds every other call until released, counting the calls in
// flight; with bomb set, it answers them with a gzip body that inflates to
// 64 MiB instead.
type heldHost struct {
	srv  *httptest.Server
	bomb bool

	mu             sync.Mutex
	inFlight, most int
	release        chan struct{}
}

func newHeldHost(t *testing.T, bomb bool) *heldHost {
	h := &heldHost{bomb: bomb, release: make(chan struct{})}
	h.srv = httptest.NewServer(h)
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.open)
	return h
}

func (h *heldHost) open() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *heldHost) calls() (inFlight, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight, h.most
}

func (h *heldHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(body, &req)
	if tokens, _ := req["max_tokens"].(float64); tokens == 16 { // the connection test
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		return
	}
	if h.bomb {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestCompression)
		io.WriteString(zw, `{"id":"`)
		chunk := strings.Repeat("a", 1<<20)
		for range 64 {
			io.WriteString(zw, chunk)
		}
		io.WriteString(zw, `"}`)
		zw.Close()
		return
	}
	h.mu.Lock()
	h.inFlight++
	h.most = max(h.most, h.inFlight)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
	case <-r.Context().Done():
		return
	}
	out := playStep(req)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, out.Text)
}

// connectHeld connects n models of host to the account and returns their ids.
func (h *harness) connectHeld(accountID string, host *heldHost, n int) []string {
	h.t.Helper()
	var ids []string
	for i := range n {
		r := h.connect(accountID, map[string]any{"name": fmt.Sprintf("held %d", i), "kind": "openai-compatible", "base_url": host.srv.URL + "/v1", "model": "m"})
		if r.status != 201 {
			h.t.Fatalf("connect: %d %s", r.status, r.body)
		}
		ids = append(ids, r.json(h.t)["model_id"].(string))
	}
	return ids
}

// The calls to customer-owned models in flight are bounded per account and
// per process: an account's calls past its bound wait for one of its own to
// end, another account's are served beside them up to the process's bound,
// and every waiting call is served once slots come free.
func TestBYOMCallsInFlightBounded(t *testing.T) {
	host := newHeldHost(t, false)
	h := newHarness(t, withConfig(func(c *config.Config) { c.BYOMMaxCalls, c.BYOMMaxCallsPerAccount = 3, 2 }))
	a, b := h.account(), h.account()
	keyA, keyB := h.key(a), h.key(b)
	idsA, idsB := h.connectHeld(a, host, 4), h.connectHeld(b, host, 2)
	submit := func(key string, ids []string) string {
		r := h.submit(key, map[string]any{"mode": "unify", "prompt": "the Moon", "models": map[string]any{}, "custom_models": ids})
		must(t, r.status == 202, "submit: %d %s", r.status, r.body)
		return r.json(t)["request_id"].(string)
	}
	qa := submit(keyA, idsA)
	eventually(t, 30*time.Second, "the account's first calls to reach the host", func() bool { n, _ := host.calls(); return n >= 2 })
	qb := submit(keyB, idsB)
	eventually(t, 30*time.Second, "the other account's call to reach the host", func() bool { n, _ := host.calls(); return n >= 3 })
	time.Sleep(300 * time.Millisecond) // any call past the bounds would reach the host meanwhile
	_, most := host.calls()
	must(t, most == 3, "%d calls in flight at once; want 2 of one account and 1 of the other (bounds 2 per account, 3 in all)", most)
	host.open()
	for _, q := range []struct{ key, id string }{{keyA, qa}, {keyB, qb}} {
		res := h.wait(q.key, q.id, 60*time.Second)
		must(t, res["status"] == "completed", "%s: %v %v", q.id, res["status"], res["error"])
		for _, m := range res["models"].([]any) {
			must(t, jsonPath(m, "status") == "answered", "%s: %v", q.id, m)
		}
	}
}

// A customer-owned model's host that answers with a small gzip body
// inflating to 64 MiB fails that model (host_error) after at most
// byom.MaxResponseBytes of it are read; the query goes on with the others.
func TestBYOMGzipBomb(t *testing.T) {
	host := newHeldHost(t, true)
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	ids := h.connectHeld(acct, host, 1)
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "the Moon", "custom_models": ids})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 60*time.Second)
	must(t, res["status"] == "completed", "query: %v %v", res["status"], res["error"])
	m := modelEntry(res, ids[0])
	msg, _ := jsonPath(m, "error", "message").(string)
	must(t, m["status"] == "failed" && jsonPath(m, "error", "class") == "host_error" && strings.Contains(msg, "1048576 bytes"),
		"the BYOM: %v", m)
}

// A verify query whose customer-owned model's host never answers ends at
// CROSSCHECK_QUERY_TIMEOUT, failed with query_timeout, charged for the
// first-party answers recorded; before, it ran until its calls' timeouts
// and retries were spent (367 s with the defaults).
func TestHostThatNeverAnswersEndsQueryTimeout(t *testing.T) {
	host := newHeldHost(t, false)
	h := newHarness(t, withConfig(func(c *config.Config) { c.QueryTimeout = 2 * time.Second }))
	acct := h.account()
	key := h.key(acct)
	ids := h.connectHeld(acct, host, 1)
	start := time.Now()
	r := h.submit(key, map[string]any{"mode": "verify", "prompt": "How tall is Mount Everest?", "custom_models": ids})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 60*time.Second)
	took := time.Since(start)
	must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "query_timeout", "query: %v %v", res["status"], res["error"])
	must(t, took < 30*time.Second, "the query ended after %s", took)
	answered := 0
	for _, m := range res["models"].([]any) {
		if jsonPath(m, "status") == "answered" {
			answered++
		}
	}
	charged, _ := jsonPath(res, "credits", "charged").(float64)
	must(t, answered == 4 && charged > 0, "%d answers, charged %v: want the four first-party answers recorded and charged", answered, charged)
	must(t, modelEntry(res, ids[0])["status"] == "pending", "the BYOM: %v", modelEntry(res, ids[0]))
}
