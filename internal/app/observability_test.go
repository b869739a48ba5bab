package app

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// scrape is one read of a /metrics page: each sample line, series → value.
type scrape map[string]float64

func (h *harness) scrape(base string) scrape {
	h.t.Helper()
	resp, err := http.Get(base + "/metrics")
	must(h.t, err == nil, "scrape: %v", err)
	defer resp.Body.Close()
	must(h.t, resp.StatusCode == 200, "scrape: status %d", resp.StatusCode)
	out := scrape{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		must(h.t, err == nil, "scrape: the line %q", line)
		out[line[:i]] = v
	}
	return out
}

// sum adds the samples of metric name whose labels include every one of
// labels ("k=v" each).
func (s scrape) sum(name string, labels ...string) float64 {
	var total float64
	for series, v := range s {
		n, rest, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			k, val, _ := strings.Cut(l, "=")
			ok = ok && strings.Contains(rest, k+`="`+val+`"`)
		}
		if ok {
			total += v
		}
	}
	return total
}

// moved checks that each metric grew from before to after by at least its
// minimum. Other tests of the package run beside this one and share the
// process's registry, so a metric may grow more.
func moved(t *testing.T, before, after scrape, want map[string]float64) {
	t.Helper()
	for spec, min := range want {
		parts := strings.Fields(spec)
		d := after.sum(parts[0], parts[1:]...) - before.sum(parts[0], parts[1:]...)
		must(t, d >= min, "%s moved by %v, want at least %v", spec, d, min)
	}
}

// Scraping /metrics on the admin address before and after a unify that
// completes and one that fails: the counters and histograms of every layer
// move, under bounded labels; the public address serves no /metrics.
func TestMetricsMoveWithQueries(t *testing.T) {
	t.Parallel()
	refused := &providers.Error{Class: providers.ClassHostError, Status: 401, Message: "bad upstream key"}
	set, _ := testProviders(func(key string, p *testProvider) { p.fail, p.failWhen = refused, "every model fails" })
	h := newHarness(t, withProviders(func() providers.Set { return set }))
	key := h.newKey()

	r := h.call(h.m.URL(), "GET", "/metrics", "", nil, nil)
	must(t, r.status == 404 && r.errCode(t) == "not_found", "the public address serves /metrics: %d %s", r.status, r.body)

	before := h.scrape(h.m.AdminURL())
	ok := h.submitOK(key, "metrics: the boiling point of water")
	must(t, h.wait(key, ok, 30*time.Second)["status"] == "completed", "the unify did not complete")
	bad := h.submitOK(key, "metrics: every model fails")
	res := h.wait(key, bad, 30*time.Second)
	must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "provider_error", "the failing query: %v %v", res["status"], res["error"])
	h.countEvents(bad, "failed") // the worker counts before the projection shows it
	after := h.scrape(h.m.AdminURL())

	moved(t, before, after, map[string]float64{
		"crosscheck_http_requests_total route=/v1/queries method=POST status=202":       2,
		"crosscheck_http_requests_total route=/v1/queries/{id} method=GET status=200":   2,
		"crosscheck_http_request_duration_seconds_count route=/v1/queries method=POST":  2,
		"crosscheck_queries_submitted_total mode=unify":                                 2,
		"crosscheck_queries_completed_total mode=unify":                                 1,
		"crosscheck_queries_failed_total mode=unify code=provider_error":                1,
		"crosscheck_query_time_to_terminal_seconds_count mode=unify status=completed":   1,
		"crosscheck_query_time_to_terminal_seconds_count mode=unify status=failed":      1,
		"crosscheck_query_stage_duration_seconds_count mode=unify stage=running_models": 2,
		"crosscheck_model_calls_total provider=provider_a purpose=answer outcome=ok":    1,
		"crosscheck_model_calls_total provider=provider_a purpose=synthesis outcome=ok": 1,
		"crosscheck_model_calls_total provider=provider_b outcome=failed_host_error":    1,
		"crosscheck_model_call_duration_seconds_count provider=provider_b":              2,
		"crosscheck_model_tokens_total provider=provider_a direction=input":             1,
		"crosscheck_model_tokens_total provider=provider_a direction=output":            1,
		"crosscheck_model_credits_charged_total provider=provider_a":                    1e-6,
		"crosscheck_ledger_reservations_total":                                          2,
		"crosscheck_ledger_settlements_total":                                           2,
		"crosscheck_ledger_credits_charged_total":                                       1e-6,
		"crosscheck_ledger_credits_released_total":                                      1e-6,
		"crosscheck_eventstore_append_duration_seconds_count aggregate=query":           8,
		"crosscheck_eventstore_append_duration_seconds_count aggregate=account":         4,
	})
	for _, name := range []string{"crosscheck_worker_jobs_running", "crosscheck_http_requests_in_flight",
		"crosscheck_sse_streams_open", "go_goroutines", "process_resident_memory_bytes"} {
		must(t, after.served(name), "%s is not served", name)
	}
	// The registry is the test binary's, shared by the processes of tests
	// running beside this one: one of them releasing its leases as it closes
	// removes the lag series until a projection here sets it again (after
	// its next batch, or its 5 s refresh).
	eventually(t, 20*time.Second, "crosscheck_projection_lag_events served", func() bool {
		return h.scrape(h.m.AdminURL()).served("crosscheck_projection_lag_events")
	})
	for series := range after {
		must(t, !strings.Contains(series, ok) && !strings.Contains(series, bad) && !strings.Contains(series, key[:12]),
			"a request id or a key is a label value: %s", series)
	}
	// A balance refusal counts as one.
	poor := h.key(h.accountWith("free", 0))
	before = h.scrape(h.m.AdminURL())
	r = h.submit(poor, map[string]any{"mode": "verify", "prompt": "metrics: too expensive"})
	must(t, r.status == 402, "a submission with no credits: %d %s", r.status, r.body)
	moved(t, before, h.scrape(h.m.AdminURL()), map[string]float64{
		"crosscheck_ledger_balance_refusals_total code=insufficient_credits":      1,
		"crosscheck_queries_refused_total code=insufficient_credits":              1,
		"crosscheck_http_requests_total route=/v1/queries method=POST status=402": 1,
	})
}

// served reports whether the scrape has a sample of metric name.
func (s scrape) served(name string) bool {
	for series := range s {
		if series == name || strings.HasPrefix(series, name+"{") {
			return true
		}
	}
	return false
}

var (
	spansOnce sync.Once
	spans     *tracetest.InMemoryExporter
)

// recordSpans installs, once for the package's tests, a tracer provider that
// keeps in memory the spans of the traces a client started sampled (a
// sampled traceparent), and none of the others: the tests that trace send
// one, the rest of the package's tests are not recorded.
func recordSpans() *tracetest.InMemoryExporter {
	spansOnce.Do(func() {
		spans = tracetest.NewInMemoryExporter()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
		otel.SetTextMapPropagator(propagation.TraceContext{})
	})
	return spans
}

// newTraceparent returns a sampled W3C traceparent of a new trace, and the
// trace's id.
func newTraceparent() (string, trace.TraceID) {
	var id trace.TraceID
	var parent [8]byte
	_, _ = rand.Read(id[:])
	_, _ = rand.Read(parent[:])
	return "00-" + id.String() + "-" + hex.EncodeToString(parent[:]) + "-01", id
}

// traceSpans returns the ended spans of trace id.
func traceSpans(id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// checkQueryTrace checks that trace id holds the span of POST /v1/queries,
// the worker's run of the query under it, and a span per model call with
// the GenAI attributes: models answers and one synthesis at least.
func checkQueryTrace(t *testing.T, id trace.TraceID, requestID string, models int) tracetest.SpanStubs {
	t.Helper()
	var got tracetest.SpanStubs
	pollUntil(t, 30*time.Second, 20*time.Millisecond, "the query's spans", func() bool {
		got = traceSpans(id)
		var runs, calls int
		for _, s := range got {
			if v, ok := attr(s, "crosscheck.request_id"); ok && v.AsString() == requestID && s.Name == "query.run" {
				runs++
			}
			if strings.HasPrefix(s.Name, "chat ") {
				calls++
			}
		}
		return runs > 0 && calls >= models+1
	})
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range got {
		byID[s.SpanContext.SpanID()] = s
	}
	var post, run *tracetest.SpanStub
	var calls int
	for i, s := range got {
		switch {
		case s.Name == "POST /v1/queries":
			post = &got[i]
			must(t, s.SpanKind == trace.SpanKindServer, "POST /v1/queries is a %v span", s.SpanKind)
		case s.Name == "query.run":
			run = &got[i]
		case strings.HasPrefix(s.Name, "chat "):
			calls++
			want := []string{"gen_ai.system", "gen_ai.request.model", "gen_ai.operation.name", "crosscheck.purpose", "crosscheck.outcome"}
			if v, _ := attr(s, "crosscheck.outcome"); v.AsString() == providers.OutcomeOK {
				want = append(want, "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
			}
			for _, k := range want {
				_, ok := attr(s, k)
				must(t, ok, "the model call span %s has no %s: %v", s.Name, k, s.Attributes)
			}
			for _, k := range []string{"gen_ai.prompt", "gen_ai.completion"} {
				_, ok := attr(s, k)
				must(t, !ok, "the model call span %s holds %s without content capture", s.Name, k)
			}
			// A model call descends from the run of the query.
			p, ok := byID[s.Parent.SpanID()]
			for ok && p.Name != "query.run" {
				p, ok = byID[p.Parent.SpanID()]
			}
			must(t, ok, "the model call span %s is not under the query's run", s.Name)
		}
	}
	must(t, post != nil, "no span of POST /v1/queries in the trace: %d spans", len(got))
	must(t, run != nil, "no span of the worker's run in the trace")
	must(t, calls >= models+1, "%d model call spans, want %d answers and a synthesis", calls, models)
	return got
}

// One trace from POST /v1/queries through the worker to each model call,
// in one process on the embedded NATS server.
func TestTraceFromRequestToModelCalls(t *testing.T) {
	t.Parallel()
	recordSpans()
	// The test is a caller the operator trusts: its traceparent decides.
	h := newHarness(t, withConfig(func(c *config.Config) { c.TrustTraceparent = true }))
	key := h.newKey()
	tp, id := newTraceparent()
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "traced: the speed of light"}, map[string]string{"traceparent": tp})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	reqID := r.json(t)["request_id"].(string)
	res := h.wait(key, reqID, 30*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	got := checkQueryTrace(t, id, reqID, len(res["models"].([]any)))
	// Each model call is a child of the stage it runs in: the answers of
	// running_models, the synthesis of aggregating.
	names := map[trace.SpanID]string{}
	for _, s := range got {
		names[s.SpanContext.SpanID()] = s.Name
	}
	for _, s := range got {
		if !strings.HasPrefix(s.Name, "chat ") {
			continue
		}
		purpose, _ := attr(s, "crosscheck.purpose")
		want := map[string]string{"answer": "stage running_models", "synthesis": "stage aggregating"}[purpose.AsString()]
		must(t, want != "" && names[s.Parent.SpanID()] == want, "the %s call %s is a child of %q, want %q", purpose.AsString(), s.Name, names[s.Parent.SpanID()], want)
	}
	for _, s := range got {
		for _, kv := range s.Attributes {
			must(t, !strings.Contains(kv.Value.Emit(), "speed of light") && !strings.Contains(kv.Value.Emit(), key[5:]),
				"span %s attribute %s holds the prompt or the key", s.Name, kv.Key)
		}
	}

	// The event stream of the query, in a trace of its own, links to the
	// query's trace.
	streamTP, streamID := newTraceparent()
	resp := h.openStream(key, reqID, map[string]string{"traceparent": streamTP})
	readStream(t, resp.Body)
	resp.Body.Close()
	pollUntil(t, 10*time.Second, 20*time.Millisecond, "the stream's span linked to the query's trace", func() bool {
		for _, s := range traceSpans(streamID) {
			if s.Name != "GET /v1/queries/{id}/stream" {
				continue
			}
			for _, l := range s.Links {
				if l.SpanContext.TraceID() == id {
					return true
				}
			}
		}
		return false
	})
}

// The same trace with separate API and worker processes on a shared NATS:
// the trace context travels in the submitted event's headers. A job
// redelivered after its worker died continues that trace.
func TestTraceAcrossProcessesAndRedelivery(t *testing.T) {
	t.Parallel()
	recordSpans()
	url, token := sharedNATS(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.NATSAuth.Token = url, token
		c.TrustTraceparent = true
	}))
	w1 := startProcess(t, h, RoleWorker)
	key := h.newKey()

	// The worker serves /metrics on its admin address, and nothing else of the API there.
	must(t, w1.AdminURL() != "", "the worker serves no /metrics")
	must(t, h.scrape(w1.AdminURL()).sum("go_goroutines") > 0, "the worker's /metrics has no Go runtime metrics")

	tp, id := newTraceparent()
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "traced across processes"}, map[string]string{"traceparent": tp})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	reqID := r.json(t)["request_id"].(string)
	res := h.wait(key, reqID, 30*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	checkQueryTrace(t, id, reqID, len(res["models"].([]any)))
	w1.Crash()

	// A worker that dies mid-run: the next one continues the same trace.
	slow := startProcess(t, h, RoleWorker, func(c *config.Config) { c.SimLatency = time.Minute })
	tp, id = newTraceparent()
	r = h.submit(key, map[string]any{"mode": "unify", "prompt": "traced and redelivered"}, map[string]string{"traceparent": tp})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	reqID = r.json(t)["request_id"].(string)
	eventually(t, 30*time.Second, "the query to start", func() bool { return h.countEvents(reqID, "started") > 0 })
	slow.Crash()
	startProcess(t, h, RoleWorker)
	res = h.wait(key, reqID, 60*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	got := checkQueryTrace(t, id, reqID, len(res["models"].([]any)))
	redelivered := false
	for _, s := range got {
		if v, ok := attr(s, "messaging.message.delivery_count"); ok && s.Name == "query.run" && v.AsInt64() > 1 {
			redelivered = true
		}
	}
	must(t, redelivered, "no run of the redelivered job in the query's trace")
}
