package app

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// testProvider wraps the simulated backend: it counts calls, can hold every
// call until released, and can fail.
type testProvider struct {
	inner   providers.Provider
	calls   atomic.Int64
	answers *atomic.Int64 // counts answer calls (not synthesis); may be shared across restarts
	hold    chan struct{} // nil: answer at once; otherwise wait until closed
	// holdPurpose, when set, holds only the calls made for that purpose.
	holdPurpose string
	fail        *providers.Error
	failJSON    bool // fail only structured-output (synthesis) calls
	// failWhen, when set, fails only calls whose prompt contains it.
	failWhen string
	// failPurpose, when set, fails only calls made for that purpose.
	failPurpose string
	// garble, when set, answers the calls made for that purpose with text
	// that is not the JSON asked for.
	garble string

	mu   sync.Mutex
	seen []providers.Request
}

// requests returns the calls made for purpose.
func (p *testProvider) requests(purpose string) []providers.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []providers.Request
	for _, r := range p.seen {
		if r.Purpose == purpose {
			out = append(out, r)
		}
	}
	return out
}

func (p *testProvider) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	p.calls.Add(1)
	if req.Schema == nil && p.answers != nil {
		p.answers.Add(1)
	}
	if p.hold != nil && (p.holdPurpose == "" || p.holdPurpose == req.Purpose) {
		select {
		case <-p.hold:
		case <-ctx.Done():
			return &providers.Response{}, ctx.Err()
		}
	}
	p.mu.Lock()
	p.seen = append(p.seen, *req)
	p.mu.Unlock()
	prompt := req.Messages[len(req.Messages)-1].Content
	if p.fail != nil && (!p.failJSON || req.Schema != nil) && strings.Contains(prompt, p.failWhen) &&
		(p.failPurpose == "" || p.failPurpose == req.Purpose) {
		return &providers.Response{}, p.fail
	}
	if p.garble != "" && p.garble == req.Purpose {
		return &providers.Response{Text: "I am sorry, here is my answer in prose instead.", Usage: events.Usage{InputTokens: 10, OutputTokens: 10}}, nil
	}
	return p.inner.Complete(ctx, req)
}

// testProviders returns a provider set whose members are configured by fn.
func testProviders(fn func(key string, p *testProvider)) (providers.Set, map[string]*testProvider) {
	set, byKey := providers.Set{}, map[string]*testProvider{}
	for _, key := range catalog.ProviderKeys {
		p := &testProvider{inner: simulated.New(key, 0)}
		if fn != nil {
			fn(key, p)
		}
		set[key], byKey[key] = p, p
	}
	return set, byKey
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	body := map[string]any{"mode": "unify", "prompt": "idempotent question"}
	idem := map[string]string{"Idempotency-Key": "order-42"}

	first := h.submit(key, body, idem)
	must(t, first.status == 202 && first.json(t)["idempotent_replayed"] == false, "first: %d %s", first.status, first.body)
	id := first.json(t)["request_id"].(string)

	// Rule 1: same key, same body (different key order and spacing) → same id, replayed.
	again := h.submit(key, `{ "prompt": "idempotent question",  "mode": "unify" }`, idem)
	must(t, again.status == 202 && again.json(t)["request_id"] == id && again.json(t)["idempotent_replayed"] == true, "replay: %d %s", again.status, again.body)
	h.wait(key, id, 30*time.Second)
	again = h.submit(key, body, idem)
	must(t, again.json(t)["request_id"] == id && again.json(t)["status"] == "completed", "replay after completion: %s", again.body)
	must(t, h.countEvents(id, "submitted") == 1, "replays appended more submissions")

	// The same selection spelled differently is the same request.
	for _, models := range []map[string]any{
		{"provider_a": "sim-alpha-standard", "provider_b": "sim-beta-standard", "provider_c": "sim-gamma-standard", "provider_d": "sim-delta-standard"},
		{"provider_a": "sim-alpha-standard", "provider_b": "sim-beta-standard", "provider_c": "sim-gamma-standard", "provider_d": "sim-delta-standard", "provider_z": nil},
	} {
		r := h.submit(key, map[string]any{"mode": "unify", "prompt": "idempotent question", "models": models}, idem)
		if _, bad := models["provider_z"]; bad {
			must(t, r.status == 400, "unknown provider key still validated on replay: %d", r.status)
			continue
		}
		must(t, r.status == 202 && r.json(t)["request_id"] == id, "defaults listed explicitly: %d %s", r.status, r.body)
	}

	// Rule 2: same key, different body → 409, naming the original request.
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "another question"}, idem)
	must(t, r.status == 409 && r.errCode(t) == "idempotency_conflict", "different body: %d %s", r.status, r.body)
	must(t, jsonPath(r.json(t), "error", "request_id") == id, "409 envelope request_id: %s", r.body)
	r = h.submit(key, map[string]any{"mode": "unify", "prompt": "idempotent question", "models": map[string]any{"provider_a": "sim-alpha-standard"}}, idem)
	must(t, r.status == 409, "a different selection under the same key: %d %s", r.status, r.body)

	// The key is scoped to the API key: another key's identical request is new.
	other := h.newKey()
	r = h.submit(other, body, idem)
	must(t, r.status == 202 && r.json(t)["request_id"] != id && r.json(t)["idempotent_replayed"] == false, "other API key: %s", r.body)

	// Length: 200 characters pass, 201 do not; empty is rejected.
	r = h.submit(key, body, map[string]string{"Idempotency-Key": strings.Repeat("k", 200)})
	must(t, r.status == 202, "200-character key: %d %s", r.status, r.body)
	r = h.submit(key, body, map[string]string{"Idempotency-Key": strings.Repeat("é", 200)})
	must(t, r.status == 202, "200 two-byte characters: %d %s", r.status, r.body)
	r = h.submit(key, body, map[string]string{"Idempotency-Key": strings.Repeat("k", 201)})
	must(t, r.status == 400 && r.errCode(t) == "invalid_request", "201-character key: %d %s", r.status, r.body)

	// Rule 3: after 24 hours the key has expired and the submission is new.
	h.clock.Advance(24*time.Hour + time.Minute)
	r = h.submit(key, map[string]any{"mode": "unify", "prompt": "another question"}, idem)
	must(t, r.status == 202 && r.json(t)["request_id"] != id && r.json(t)["idempotent_replayed"] == false, "after 24 h: %d %s", r.status, r.body)
}

func TestIdempotencyConcurrentIdenticalSubmissions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	const n = 32
	var wg sync.WaitGroup
	results := make([]response, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = h.submit(key, map[string]any{"mode": "unify", "prompt": "same moment"}, map[string]string{"Idempotency-Key": "burst"})
		})
	}
	close(start)
	wg.Wait()
	ids, fresh := map[string]bool{}, 0
	for _, r := range results {
		must(t, r.status == 202, "concurrent identical submission: %d %s", r.status, r.body)
		v := r.json(t)
		ids[v["request_id"].(string)] = true
		if v["idempotent_replayed"] == false {
			fresh++
		}
	}
	must(t, len(ids) == 1 && fresh == 1, "%d request ids and %d fresh answers, want 1 and 1", len(ids), fresh)
	for id := range ids {
		h.wait(key, id, 30*time.Second)
		must(t, h.countEvents(id, "submitted") == 1 && h.countEvents(id, "started") == 1 && h.countEvents(id, "completed") == 1,
			"one job expected: submitted %d started %d completed %d", h.countEvents(id, "submitted"), h.countEvents(id, "started"), h.countEvents(id, "completed"))
	}
}

// A process that dies after binding the Idempotency-Key but before appending
// the submission must not strand the key: the retry finishes the submission.
func TestIdempotencyKeyBoundButNotSubmitted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	body := map[string]any{"mode": "unify", "prompt": "crash between steps"}
	// Play the dead process's first step: bind the key, append nothing.
	req, err := decodeForTest(h, body)
	must(t, err == nil, "decode: %v", err)
	stranded := "req_01M80000000000000000000000"
	claim, _ := json.Marshal(map[string]any{"request_id": stranded, "body_hash": req, "at": time.Now().UTC()})
	_, err = h.m.Store.Idempotency.Create(context.Background(), queries.ClaimKey(key[5:13], "crash-key"), claim)
	must(t, err == nil, "bind: %v", err)

	r := h.submit(key, body, map[string]string{"Idempotency-Key": "crash-key"})
	must(t, r.status == 202 && r.json(t)["request_id"] == stranded, "retry: %d %s", r.status, r.body)
	res := h.wait(key, stranded, 30*time.Second)
	must(t, res["status"] == "completed", "stranded submission did not complete: %v", res["status"])
}

func TestInflightLimitPerKey(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) { p.hold = hold })
		return set
	}))
	acct := h.account()
	key, second := h.key(acct), h.key(acct)

	const n = 40
	var wg sync.WaitGroup
	results := make([]response, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = h.submit(key, map[string]any{"mode": "unify", "prompt": "limit"})
		})
	}
	close(start)
	wg.Wait()
	accepted, limited := 0, 0
	for _, r := range results {
		switch r.status {
		case 202:
			accepted++
		case 429:
			limited++
			must(t, r.errCode(t) == "rate_limited" && r.header.Get("Retry-After") == "30", "429: %s Retry-After %q", r.body, r.header.Get("Retry-After"))
			e := r.json(t)["error"].(map[string]any)
			must(t, e["retry_after_seconds"] == 30.0 && e["retriable"] == true, "429 envelope: %v", e)
		default:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
	must(t, accepted == 8 && limited == n-8, "accepted %d, limited %d; want exactly 8 accepted", accepted, limited)

	// Each key has its own 8, even within one account.
	for i := range 8 {
		r := h.submit(second, map[string]any{"mode": "unify", "prompt": "second key"})
		must(t, r.status == 202, "second key submission %d: %d %s", i, r.status, r.body)
	}
	r := h.submit(second, map[string]any{"mode": "unify", "prompt": "second key"})
	must(t, r.status == 429, "second key's ninth: %d", r.status)

	// A terminal event frees the slot.
	close(hold)
	eventually(t, 30*time.Second, "a slot to be freed", func() bool {
		return h.submit(key, map[string]any{"mode": "unify", "prompt": "after"}).status == 202
	})
}

// TestInflightLimitPerAccount: an account's keys together hold at most the
// account's bound of queries in flight (64 by default), whatever the number
// of its keys; past it, 429 rate_limited with Retry-After 30 and a message
// that names the account's bound. Another account is not affected.
func TestInflightLimitPerAccount(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) { p.hold = hold })
		return set
	}))
	acct := h.accountWith("enterprise", 1000)
	var keys []string
	for range 10 {
		keys = append(keys, h.key(acct))
	}
	var wg sync.WaitGroup
	results := make([]response, 80)
	for i := range results {
		wg.Go(func() {
			results[i] = h.submit(keys[i%10], map[string]any{"mode": "unify", "prompt": "one account, many keys"})
		})
	}
	wg.Wait()
	accepted, limited := 0, 0
	for _, r := range results {
		switch r.status {
		case 202:
			accepted++
		case 429:
			limited++
			must(t, r.errCode(t) == "rate_limited" && r.header.Get("Retry-After") == "30", "429: %s Retry-After %q", r.body, r.header.Get("Retry-After"))
			must(t, strings.Contains(string(r.body), "account") && strings.Contains(string(r.body), "64"), "the refusal does not name the account's bound: %s", r.body)
		default:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
	must(t, accepted == 64 && limited == 16, "accepted %d, limited %d; want 64 and 16", accepted, limited)
	other := h.newKey()
	must(t, h.submit(other, map[string]any{"mode": "unify", "prompt": "another account"}).status == 202, "another account was refused")
}

// A slot whose release was lost with its process is freed when the key is
// next full: its query has a terminal event.
func TestInflightSlotOfAnEndedQueryHeals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	var ended []map[string]any
	for range 8 {
		id := h.submitOK(key, "ends normally")
		h.wait(key, id, 30*time.Second)
		ended = append(ended, map[string]any{"id": id, "key": key[5:13], "at": time.Now().UTC()})
	}
	// Play eight lost releases: the slots are back although the queries ended.
	raw, _ := json.Marshal(map[string]any{"requests": ended})
	_, err := h.m.Store.Inflight.Put(context.Background(), h.accountOf(key), raw)
	must(t, err == nil, "put slots: %v", err)
	h.restart(false) // a new process knows nothing of the key's slots
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "after lost releases"})
	must(t, r.status == 202, "a key whose slots all belong to ended queries was refused: %d %s", r.status, r.body)
}

func TestInflightSlotsFreedAfterCrash(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	held := true
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) {
			if held {
				p.hold = hold
			}
		})
		return set
	}))
	key := h.newKey()
	var ids []string
	for range 8 {
		ids = append(ids, h.submitOK(key, "held through a crash"))
	}
	must(t, h.submit(key, map[string]any{"mode": "unify", "prompt": "ninth"}).status == 429, "ninth accepted while 8 in flight")
	held = false
	h.restart(true)
	for _, id := range ids {
		res := h.wait(key, id, 60*time.Second)
		must(t, res["status"] == "completed", "query %s after crash: %v", id, res["status"])
	}
	eventually(t, 30*time.Second, "slots freed after the crashed queries completed", func() bool {
		return h.submit(key, map[string]any{"mode": "unify", "prompt": "after crash"}).status == 202
	})
	close(hold)
}

// holdUntilCrash returns the test providers, configured by fn on each start:
// a call fn holds on hold stays in flight, as in a process killed mid-call,
// until crash restarts h abruptly; after it hold is nil and calls answer.
func holdUntilCrash(t *testing.T, fn func(key string, p *testProvider, hold chan struct{})) (option, func(h *harness)) {
	var crashed atomic.Bool
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	opt := withProviders(func() providers.Set {
		hold := never
		if crashed.Load() {
			hold = nil
		}
		set, _ := testProviders(func(key string, p *testProvider) { fn(key, p, hold) })
		return set
	})
	return opt, func(h *harness) {
		crashed.Store(true)
		h.restart(true)
	}
}
