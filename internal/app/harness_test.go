package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/search"
)

// harness runs one crosscheck process on a real embedded JetStream in a temp
// dir, with random ports, and talks to it over HTTP like a client would.
type harness struct {
	t     *testing.T
	dir   string
	cfg   config.Config
	m     *Main
	logs  *syncBuffer
	clock *clock
	// providers, when set, replace the simulated backends on each start.
	providers func() providers.Set
	// search, when set, replaces verify's search backend.
	search search.Backend
	// role is the process's role; empty is serve.
	role   string
	client *http.Client
	// files, when set, is the store of the files queries attach.
	files FileStore
}

type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type option func(*harness)

func withProviders(fn func() providers.Set) option { return func(h *harness) { h.providers = fn } }
func withConfig(fn func(*config.Config)) option    { return func(h *harness) { fn(&h.cfg) } }
func withSearch(b search.Backend) option           { return func(h *harness) { h.search = b } }
func withRole(role string) option                  { return func(h *harness) { h.role = role } }
func withFiles(f FileStore) option                 { return func(h *harness) { h.files = f } }

// newConfig returns the settings of a test process: its own data dir,
// free loopback ports, short waits.
func newConfig(t *testing.T) config.Config {
	return EphemeralConfig(t.TempDir())
}

func newHarness(t *testing.T, opts ...option) *harness {
	t.Helper()
	cfg := newConfig(t)
	h := &harness{t: t, dir: cfg.DataDir, cfg: cfg, logs: &syncBuffer{}, clock: &clock{}, client: &http.Client{Timeout: 60 * time.Second}}
	for _, o := range opts {
		o(h)
	}
	h.start()
	t.Cleanup(func() {
		h.m.Close()
		// Every event the test made is valid against its published schema.
		if h.cfg.NATSURL == "" && !t.Failed() {
			h.offline(func(store *eventstore.Store) {
				for _, st := range []*eventstore.Stream{store.Queries, store.Accounts, store.Files} {
					recs, err := store.Load(context.Background(), st, ">", 1)
					if err != nil {
						t.Fatalf("load the events: %v", err)
					}
					checkEventSchemas(t, recs)
				}
			})
		}
	})
	return h
}

func (h *harness) start() {
	h.t.Helper()
	m := &Main{Config: h.cfg, Log: zerolog.New(h.logs), Now: h.clock.Now, RetryDelays: []time.Duration{5 * time.Millisecond, 10 * time.Millisecond}}
	if h.providers != nil {
		m.Providers = h.providers()
	}
	m.Search, m.Role, m.Attached = h.search, h.role, h.files
	if err := m.Open(context.Background()); err != nil {
		m.Close()
		h.t.Fatalf("open: %v", err)
	}
	h.m = m
}

// restart stops the process (abruptly when crash) and starts a new one on
// the same data dir.
func (h *harness) restart(crash bool) {
	h.t.Helper()
	if crash {
		h.m.Crash()
	} else {
		h.m.Close()
	}
	h.start()
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, r.body)
	}
	return v
}

// errCode returns error.code of an error envelope.
func (r response) errCode(t testing.TB) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

// call makes one request against base with the bearer credential and checks
// the exchange against the OpenAPI document.
func (h *harness) call(base, method, path, bearer string, body any, header map[string]string) response {
	h.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			h.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, base+path, bytes.NewReader(raw))
	if err != nil {
		h.t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	req.Body = io.NopCloser(bytes.NewReader(raw))
	checkOpenAPI(h.t, req, raw, resp, out)
	return response{status: resp.StatusCode, header: resp.Header, body: out}
}

func (h *harness) api(method, path, key string, body any, header ...map[string]string) response {
	h.t.Helper()
	var hd map[string]string
	if len(header) > 0 {
		hd = header[0]
	}
	return h.call(h.m.URL(), method, path, key, body, hd)
}

func (h *harness) admin(method, path string, body any) response {
	h.t.Helper()
	return h.call(h.m.AdminURL(), method, path, h.cfg.AdminToken, body, nil)
}

// account creates an account and returns its id.
func (h *harness) account() string {
	h.t.Helper()
	r := h.admin("POST", "/admin/v1/accounts", map[string]any{"name": "test", "plan": "free"})
	if r.status != 201 {
		h.t.Fatalf("create account: %d %s", r.status, r.body)
	}
	return r.json(h.t)["account_id"].(string)
}

// key creates an API key on the account and returns the whole key.
func (h *harness) key(accountID string) string {
	h.t.Helper()
	r := h.admin("POST", "/admin/v1/accounts/"+accountID+"/keys", map[string]any{"name": "k", "accept_aup": true})
	if r.status != 201 {
		h.t.Fatalf("create key: %d %s", r.status, r.body)
	}
	return r.json(h.t)["key"].(string)
}

func (h *harness) newKey() string { return h.key(h.account()) }

func (h *harness) submit(key string, body any, header ...map[string]string) response {
	h.t.Helper()
	return h.api("POST", "/v1/queries", key, body, header...)
}

// submitOK submits and returns the request id, failing on anything but 202.
func (h *harness) submitOK(key, prompt string) string {
	h.t.Helper()
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": prompt})
	if r.status != 202 {
		h.t.Fatalf("submit: %d %s", r.status, r.body)
	}
	return r.json(h.t)["request_id"].(string)
}

// wait polls the query until its status is terminal or the deadline passes;
// it fails on any 404 along the way: an accepted query is never lost.
func (h *harness) wait(key, id string, within time.Duration) map[string]any {
	h.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := h.api("GET", "/v1/queries/"+id, key, nil)
		if r.status == 404 {
			h.t.Fatalf("GET %s answered 404 for an accepted query: %s", id, r.body)
		}
		if r.status == 200 {
			v := r.json(h.t)
			if s := v["status"]; s == "completed" || s == "failed" {
				return v
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("query %s not finished after %s: %d %s", id, within, r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	pollUntil(t, within, 20*time.Millisecond, what, cond)
}

// pollUntil polls cond every interval until it holds, and fails the test
// when the deadline passes first.
func pollUntil(t testing.TB, within, every time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(every)
	}
}

// never polls cond for the whole period and fails the test as soon as it
// holds.
func never(t testing.TB, period time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(period)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("%s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamEvent is one parsed SSE event.
type streamEvent struct {
	id, name, data string
}

// readStream reads SSE events until the server closes the connection; it
// returns the events and the comment lines seen.
func readStream(t testing.TB, body io.Reader) (evs []streamEvent, comments []string) {
	t.Helper()
	raw, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	return parseSSE(string(raw))
}

func parseSSE(raw string) (evs []streamEvent, comments []string) {
	for _, block := range strings.Split(raw, "\n\n") {
		var ev streamEvent
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				comments = append(comments, line)
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
		if ev.name != "" {
			evs = append(evs, ev)
		}
	}
	return evs, comments
}

// openStream opens the SSE stream of a query.
func (h *harness) openStream(key, id string, header map[string]string) *http.Response {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.m.URL()+"/v1/queries/"+id+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("open stream: %v", err)
	}
	return resp
}

// streamRecords reads every event of a stream straight from JetStream.
func (h *harness) streamRecords(stream string) []events.Record {
	h.t.Helper()
	st := h.m.Store.Queries
	if stream == "ACCOUNTS" {
		st = h.m.Store.Accounts
	}
	recs, err := h.m.Store.Load(context.Background(), st, ">", 1)
	if err != nil {
		h.t.Fatalf("load %s: %v", stream, err)
	}
	return recs
}

// countEvents counts the events named name of query id in the stream.
func (h *harness) countEvents(id, name string) int {
	n := 0
	for _, r := range h.streamRecords("QUERIES") {
		if r.Envelope.Subject == events.Subject(events.AggregateQuery, id, name) {
			n++
		}
	}
	return n
}

// countSettlements counts the settlements of query id in the ledger.
func (h *harness) countSettlements(id string) int {
	n := 0
	for _, r := range h.streamRecords("ACCOUNTS") {
		if s, ok := r.Event.(events.ChargesSettled); ok && s.RequestID == id {
			n++
		}
	}
	return n
}

func jsonPath(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func must(t testing.TB, cond bool, format string, args ...any) {
	t.Helper()
	if !cond {
		t.Fatalf(format, args...)
	}
}

// offline runs fn on the harness's data dir while no service holds it, as an
// operator's tool would.
func (h *harness) offline(fn func(store *eventstore.Store)) {
	h.t.Helper()
	store, closeStore, err := OpenStore(context.Background(), config.Config{DataDir: h.dir, Replicas: 1})
	if err != nil {
		h.t.Fatalf("open the data dir: %v", err)
	}
	defer closeStore()
	fn(store)
}

var _ = fmt.Sprintf
