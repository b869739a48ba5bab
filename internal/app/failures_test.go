package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

func TestModelFailures(t *testing.T) {
	t.Parallel()
	overloaded := &providers.Error{Class: providers.ClassHostError, Status: 503, Message: "upstream overloaded"}
	set, _ := testProviders(func(key string, p *testProvider) {
		switch key {
		case catalog.ProviderA:
			// provider_a synthesizes; it fails only the synthesis of "no synthesis" prompts.
			p.fail, p.failJSON, p.failWhen = &providers.Error{Class: providers.ClassNotJSON, Message: "not JSON"}, true, "no synthesis"
		case catalog.ProviderC:
			p.fail, p.failWhen = overloaded, "c fails"
		}
		if key != catalog.ProviderA && p.fail == nil {
			p.fail, p.failWhen = overloaded, "all fail"
		}
	})
	set[catalog.ProviderA].(*testProvider).inner = &failingAll{inner: set[catalog.ProviderA].(*testProvider).inner, when: "all fail"}
	h := newHarness(t, withProviders(func() providers.Set { return set }))
	key := h.newKey()

	t.Run("one model failing does not sink the query", func(t *testing.T) {
		callsBefore := set[catalog.ProviderC].(*testProvider).calls.Load()
		id := h.submitOK(key, "c fails here")
		res := h.wait(key, id, 30*time.Second)
		calls := set[catalog.ProviderC].(*testProvider).calls.Load() - callsBefore
		must(t, calls == 3, "a retriable failure was tried %d times, want 3 (then 1 s, then 5 s, then stop)", calls)
		must(t, h.countEvents(id, "model_retried") == 2 && h.countEvents(id, "model_failed") == 1, "retried %d, failed %d: every failure must be an event",
			h.countEvents(id, "model_retried"), h.countEvents(id, "model_failed"))
		must(t, res["status"] == "completed", "status %v", res["status"])
		m := res["models"].([]any)[2]
		must(t, jsonPath(m, "provider") == "provider_c" && jsonPath(m, "status") == "failed", "provider_c: %v", m)
		must(t, jsonPath(m, "error", "class") == "host_error" && jsonPath(m, "error", "upstream_status") == 503.0, "provider_c error: %v", jsonPath(m, "error"))
		must(t, jsonPath(res, "answer", "text") != "", "no answer")
		for _, c := range jsonPath(res, "answer", "conflicts").([]any) {
			for _, p := range jsonPath(c, "positions").([]any) {
				must(t, jsonPath(p, "model") != "provider_c", "a failed model has a position in a conflict")
			}
		}
	})

	t.Run("all models failing is provider_error", func(t *testing.T) {
		id := h.submitOK(key, "all fail now; c fails too")
		res := h.wait(key, id, 30*time.Second)
		must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "provider_error", "result: %v %v", res["status"], res["error"])
		must(t, res["answer"] == nil, "a failed query has an answer")
		resp := h.openStream(key, id, nil)
		evs, _ := readStream(t, resp.Body)
		resp.Body.Close()
		last := evs[len(evs)-1]
		must(t, last.name == "error", "last SSE event %q, want error", last.name)
		var data map[string]any
		must(t, json.Unmarshal([]byte(last.data), &data) == nil, "error data: %s", last.data)
		must(t, data["request_id"] == id && data["status"] == "failed", "error event: %s", last.data)
		must(t, jsonPath(data, "error", "code") == "provider_error" && jsonPath(data, "error", "request_id") == id &&
			jsonPath(data, "error", "retriable") == true && strings.HasSuffix(jsonPath(data, "error", "docs_url").(string), "/errors/provider_error"),
			"error envelope: %s", last.data)
		for _, ev := range evs[:len(evs)-1] {
			must(t, ev.name == "progress", "event %q before the error", ev.name)
		}
	})

	t.Run("a failing synthesis is aggregation_failed", func(t *testing.T) {
		id := h.submitOK(key, "no synthesis possible")
		res := h.wait(key, id, 30*time.Second)
		must(t, res["status"] == "failed" && jsonPath(res, "error", "code") == "aggregation_failed", "result: %v %v", res["status"], res["error"])
		for i, m := range res["models"].([]any) {
			must(t, jsonPath(m, "status") == "answered", "model %d: %v; the models' answers must be kept", i, jsonPath(m, "status"))
		}
	})
}

// failingAll fails answer calls whose prompt contains when.
type failingAll struct {
	inner providers.Provider
	when  string
}

func (f *failingAll) Complete(ctx contextT, req *providers.Request) (*providers.Response, error) {
	if req.Schema == nil && strings.Contains(req.Messages[len(req.Messages)-1].Content, f.when) {
		return &providers.Response{}, &providers.Error{Class: providers.ClassRateLimited, Status: 429, Message: "slow down"}
	}
	return f.inner.Complete(ctx, req)
}

// Secrets: the key's secret never appears in a log, an error, an event or a
// read model; the fingerprint is logged with each request.
func TestKeySecretNeverLeaks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	fp, secret := key[5:13], key[13:]
	wrong := "xchk_" + fp + strings.Repeat("Z", 32)
	id := h.submitOK(key, "is my key safe?")
	h.wait(key, id, 30*time.Second)
	resp := h.openStream(key, id, nil)
	_, _ = readStream(t, resp.Body)
	resp.Body.Close()
	var bodies []string
	for _, k := range []string{wrong, key + "x", "Bearer " + key, secret} {
		r := h.api("GET", "/v1/queries/"+id, k, nil)
		must(t, r.status == 401, "bad credential accepted: %d", r.status)
		bodies = append(bodies, string(r.body))
	}
	// A client that sends its key as a prompt: that query's events are its business.
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": key})
	must(t, r.status == 202, "submit: %d", r.status)
	echoed := r.json(t)["request_id"].(string)
	h.admin("POST", "/admin/v1/keys/"+fp+"/disable", nil)
	r = h.api("GET", "/v1/models", key, nil)
	bodies = append(bodies, string(r.body))
	h.admin("POST", "/admin/v1/keys/"+fp+"/revoke", nil)
	r = h.api("GET", "/v1/models", key, nil)
	bodies = append(bodies, string(r.body))

	logs := h.logs.String()
	must(t, strings.Count(logs, `"key_fingerprint":"`+fp+`"`) >= 4, "request log lines do not carry the key fingerprint")
	for _, field := range []string{`"method":"GET"`, `"path":"/v1/queries/` + id + `"`, `"status":200`, `"duration_ms":`} {
		must(t, strings.Contains(logs, field), "request log lacks %s", field)
	}
	for _, s := range []string{secret, strings.Repeat("Z", 32)} {
		must(t, !strings.Contains(logs, s), "a key secret appears in the logs")
		for _, b := range bodies {
			must(t, !strings.Contains(b, s), "a key secret appears in an error response: %s", b)
		}
	}
	for _, rec := range h.streamRecords("ACCOUNTS") {
		must(t, !strings.Contains(string(rec.Raw), secret), "the key secret appears in event %s", rec.Envelope.Type)
	}
	for _, rec := range h.streamRecords("QUERIES") {
		if events.AggregateID(rec.Envelope.Subject) == echoed {
			continue
		}
		must(t, !strings.Contains(string(rec.Raw), secret), "the key secret appears in event %s", rec.Envelope.Type)
	}
	e, err := h.m.Store.Keys.Get(t.Context(), fp)
	must(t, err == nil && !strings.Contains(string(e.Value), secret), "the keys read model holds the secret")
}
