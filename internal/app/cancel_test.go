package app

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// cancelProbe is a model backend that answers like the simulated one but
// holds every call made for purpose until the call's context ends, and
// then until release is closed: a run cut short by a cancel stays running
// until the test lets it go.
type cancelProbe struct {
	purpose string
	release chan struct{}
	once    sync.Once
	// held counts the calls being held, ended the held calls whose context
	// ended; calls counts every call by its user message.
	held, ended atomic.Int64
	mu          sync.Mutex
	calls       map[string]int
}

func newCancelProbe(purpose string) *cancelProbe {
	return &cancelProbe{purpose: purpose, release: make(chan struct{}), calls: map[string]int{}}
}

// free lets the held calls return.
func (p *cancelProbe) free() { p.once.Do(func() { close(p.release) }) }

// set returns the probe as every provider of the catalog.
func (p *cancelProbe) set() providers.Set {
	set := providers.Set{}
	for _, key := range catalog.ProviderKeys {
		inner := simulated.New(key, 0)
		set[key] = providers.ProviderFunc(func(ctx context.Context, req *providers.Request) (*providers.Response, error) {
			p.mu.Lock()
			for _, m := range req.Messages {
				if m.Role == "user" {
					p.calls[m.Content]++
				}
			}
			p.mu.Unlock()
			if req.Purpose == p.purpose {
				p.held.Add(1)
				<-ctx.Done()
				p.ended.Add(1)
				<-p.release
				return &providers.Response{}, ctx.Err()
			}
			return inner.Complete(ctx, req)
		})
	}
	return set
}

// callsFor counts the calls whose user message mentions prompt.
func (p *cancelProbe) callsFor(prompt string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for content, c := range p.calls {
		if strings.Contains(content, prompt) {
			n += c
		}
	}
	return n
}

// startWorkerWith starts a worker process on the harness's shared JetStream
// whose models are set.
func startWorkerWith(t *testing.T, h *harness, set providers.Set) *Main {
	t.Helper()
	cfg := h.cfg
	cfg.HTTPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	m := &Main{Config: cfg, Role: RoleWorker, Log: zerolog.New(h.logs), Now: h.clock.Now, Providers: set,
		RetryDelays: []time.Duration{5 * time.Millisecond}}
	if err := m.Open(context.Background()); err != nil {
		m.Close()
		t.Fatalf("open worker: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// A justify query running on a worker process is cancelled through a
// second API process: the worker's held model calls see their contexts end,
// a second cancel while it still runs is accepted with no second event, the
// query ends failed with code cancelled, charged exactly for its finished
// round-1 calls, its stream ends with that error event, and the audit
// passes. A query cancelled while queued ends at pickup without any model
// call. An ended query answers 409, another account's or an unknown one 404.
func TestCancelARunningQueryFromAnotherProcess(t *testing.T) {
	t.Parallel()
	url, token := sharedNATS(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.NATSAuth.Token = url, token
	}))
	api2 := startProcess(t, h, RoleAPI)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	cancel := func(base, key, id string) response {
		return h.call(base, "POST", "/v1/queries/"+id+"/cancel", key, nil, nil)
	}

	// Cancelled while no worker runs: twice, one event, no call at pickup.
	queued := h.submit(key, map[string]any{"mode": "justify", "prompt": "queued then cancelled: the Moon"})
	must(t, queued.status == 202, "submit: %d %s", queued.status, queued.body)
	qid := queued.json(t)["request_id"].(string)
	for i := range 2 {
		r := cancel(api2.URL(), key, qid)
		must(t, r.status == 202 && r.json(t)["request_id"] == qid && r.json(t)["status"] == "queued", "cancel %d of a queued query: %d %s", i, r.status, r.body)
	}
	must(t, h.countEvents(qid, "cancel_requested") == 1, "%d cancel_requested events", h.countEvents(qid, "cancel_requested"))

	probe := newCancelProbe(events.StepRevise)
	worker := startWorkerWith(t, h, probe.set())
	t.Cleanup(probe.free) // before the worker stops, on a failure
	res := h.wait(key, qid, 30*time.Second)
	must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "cancelled", "queued query: %v %v", res["status"], res["error"])
	// Charged its cancellation minimum, 10 % of its reservation, and no call.
	minimum := events.CancellationMinimum(int64(math.Round(jsonPath(res, "credits", "estimated").(float64)*1e6)), 10)
	must(t, near(jsonPath(res, "credits", "charged").(float64), events.Credits(minimum)), "queued query charged %v, want its minimum %v", jsonPath(res, "credits", "charged"), events.Credits(minimum))
	must(t, probe.callsFor("queued then cancelled") == 0, "%d model calls for a query cancelled while queued", probe.callsFor("queued then cancelled"))
	must(t, h.countEvents(qid, "started") == 0, "a query cancelled while queued was started")

	// Cancelled while running, through the other API process.
	before := h.accountView(acct)["balance"].(float64)
	sub := h.submit(key, map[string]any{"mode": "justify", "prompt": "cancel me while I deliberate: the Moon"})
	must(t, sub.status == 202, "submit: %d %s", sub.status, sub.body)
	id := sub.json(t)["request_id"].(string)
	streamed := make(chan []streamEvent, 1)
	resp := h.openStream(key, id, nil)
	go func() {
		defer resp.Body.Close()
		evs, _ := readStream(t, resp.Body)
		streamed <- evs
	}()
	eventually(t, 30*time.Second, "the revisions to be called", func() bool { return probe.held.Load() > 0 })
	must(t, h.countEvents(id, "model_answered") == 4, "%d round-1 answers before the revisions", h.countEvents(id, "model_answered"))

	r := cancel(api2.URL(), key, id)
	must(t, r.status == 202 && r.json(t)["request_id"] == id && r.json(t)["status"] == "running", "cancel: %d %s", r.status, r.body)
	eventually(t, 30*time.Second, "the held calls' contexts to end", func() bool { return probe.ended.Load() == probe.held.Load() })
	// Still running (its calls are held): a second cancel is accepted and
	// changes nothing.
	r = cancel(h.m.URL(), key, id)
	must(t, r.status == 202 && r.json(t)["status"] == "running", "second cancel: %d %s", r.status, r.body)
	must(t, h.countEvents(id, "cancel_requested") == 1, "%d cancel_requested events", h.countEvents(id, "cancel_requested"))
	probe.free()

	res = h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "cancelled", "cancelled query: %v %v", res["status"], res["error"])
	must(t, h.countEvents(id, "model_revised") == 0 && h.countEvents(id, "synthesized") == 0, "steps after the cancel were recorded")
	var cost int64
	for _, rec := range h.streamRecords("QUERIES") {
		if a, ok := rec.Event.(events.ModelAnswered); ok && events.AggregateID(rec.Envelope.Subject) == id {
			cost += a.CostMicros
		}
	}
	charged := jsonPath(res, "credits", "charged").(float64)
	must(t, cost > 0 && near(charged, events.Credits(cost)), "charged %v, the finished calls cost %v", charged, events.Credits(cost))
	acc := h.accountView(acct)
	must(t, near(acc["balance"].(float64), before-charged) && acc["reserved"] == 0.0, "account after the cancel: %v (before %v, charged %v)", acc, before, charged)

	select {
	case evs := <-streamed:
		must(t, len(evs) > 0, "empty stream")
		last := evs[len(evs)-1]
		var data map[string]any
		must(t, json.Unmarshal([]byte(last.data), &data) == nil, "stream data %q", last.data)
		must(t, last.name == "error" && jsonPath(data, "error", "code") == "cancelled" && data["status"] == "failed", "last stream event: %s %s", last.name, last.data)
		var progress bool
		for _, ev := range evs {
			progress = progress || (ev.name == "progress" && strings.Contains(ev.data, "cancel requested"))
		}
		must(t, progress, "no progress event told of the cancel")
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end with the query")
	}

	// Ended: 409 with the query named. Another account's, unknown, malformed: 404.
	r = cancel(api2.URL(), key, id)
	must(t, r.status == 409 && r.errCode(t) == "query_ended" && jsonPath(r.json(t), "error", "request_id") == id, "cancel of an ended query: %d %s", r.status, r.body)
	other := h.newKey()
	for _, c := range []struct{ key, id string }{{other, id}, {key, "req_01M7Z5ZWVQ401ZYRSQ5ZF59AJE"}, {key, "nope"}} {
		r = cancel(h.m.URL(), c.key, c.id)
		must(t, r.status == 404 && r.errCode(t) == "not_found", "cancel %s: %d %s", c.id, r.status, r.body)
	}
	must(t, h.countEvents(id, "cancel_requested") == 1, "a refused cancel appended an event")
	h.closeAndAudit(api2, worker)
}

// TestCancelledQueryIsChargedItsMinimum: a query cancelled before any of
// its model calls is recorded is charged the cancellation minimum, 10 % of
// its reservation, itemised in its settlement; the audit recomputes it.
// Submit-then-cancel was free: 4,958 cycles a minute from a free key left
// its balance at 50.
func TestCancelledQueryIsChargedItsMinimum(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) { p.hold = hold })
		return set
	}))
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	id := h.submitOK(key, "cancel me at once: the Moon")
	r := h.api("POST", "/v1/queries/"+id+"/cancel", key, nil)
	must(t, r.status == 202, "cancel: %d %s", r.status, r.body)
	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "cancelled", "cancelled query: %v %v", res["status"], res["error"])
	estimated := int64(math.Round(jsonPath(res, "credits", "estimated").(float64) * 1e6))
	minimum := (estimated*10 + 99) / 100
	charged := jsonPath(res, "credits", "charged").(float64)
	must(t, minimum > 0 && near(charged, float64(minimum)/1e6), "charged %v for a query cancelled before its calls; want 10 %% of its reservation %v, %v", charged, float64(estimated)/1e6, float64(minimum)/1e6)
	eventually(t, 30*time.Second, "the balance to show the charge", func() bool {
		acc := h.accountView(acct)
		return near(acc["balance"].(float64), 50-charged) && acc["reserved"] == 0.0
	})
	h.closeAndAudit()
}
