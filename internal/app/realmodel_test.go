package app

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers/realmodel"
)

// realModelHosts binds each provider and the BYOM to a host of the real
// model that deviates the way real hosts do.
var realModelHosts = []struct{ model, host string }{
	{"provider_a", realmodel.Grammar},                          // llama-server with json_schema: JSON, refuses an overlong prompt
	{"provider_b", realmodel.Prose},                            // ignores response_format
	{"provider_c", realmodel.Truncate},                         // keeps the end of an overlong prompt
	{"provider_d", realmodel.Refuse + "+" + realmodel.NoUsage}, // refuses an overlong prompt, sends no usage
	{"custom", realmodel.Grammar + "+" + realmodel.Truncate},   // the BYOM: a local runner
}

// The real model's prices, per million tokens: the standard tier's.
const realInPrice, realOutPrice = 500, 2000

// realModelQueries are a few queries of each mode: short ones, a prompt
// with a false premise, and one longer than every host's context.
var realModelQueries = []struct{ mode, prompt string }{
	{"unify", "Why is the sky blue?"},
	{"unify", strings.Repeat("Tell me about the little red boat on the big blue sea, and the fish that swim under it. ", 60)},
	{"justify", "Should a small bakery open a second shop this year?"},
	{"justify", "Is it better to walk or to take the bus to school?"},
	{"verify", "The Eiffel Tower was completed in 1920 and is in Berlin. Explain its history."},
	{"verify", "How far away is the Moon?"},
}

// A real language model (a real llama.cpp runtime, real tokens, real
// output) behind OpenAI-compatible hosts that differ the way real ones do,
// four providers and a BYOM, runs a few queries of each mode. Whatever the
// model writes, the invariants hold: every query ends completed or failed
// with a documented code; each failed call is said so in the result; the
// charge is the reported usage of the recorded calls at their price, and no
// more tokens than the host processed; the audit passes.
func TestRealModelEveryMode(t *testing.T) {
	t.Parallel()
	// Twice the model's training context: the prompts of most steps fit,
	// the largest do not, so queries both complete and fail.
	rm := realmodel.ForTest(t, realmodel.Options{ContextSize: 1024})
	var yaml strings.Builder
	yaml.WriteString("providers:\n")
	hostOf := map[string]string{}
	for _, b := range realModelHosts {
		hostOf[b.model] = b.host
		if b.model == "custom" {
			continue
		}
		fmt.Fprintf(&yaml, "  %s:\n    backend: openai-compatible\n    base_url: %q\n    models:\n", b.model, rm.BaseURL(b.host))
		fmt.Fprintf(&yaml, "      - {model_id: stories-%s, upstream: stories260K, name: \"stories260K (%s)\", tier: standard, default: true, input_per_million: %d, output_per_million: %d, expected_output_tokens: 96}\n",
			strings.TrimPrefix(b.model, "provider_"), b.host, realInPrice, realOutPrice)
	}
	path := writeConfig(t, yaml.String())
	h := newHarness(t, withConfig(func(c *config.Config) {
		c.ConfigFile = path
		c.BYOMAllow, c.BYOMAllowSet = "127.0.0.1", true
	}))
	acct := h.accountWith("pro", 1000)
	key := h.key(acct)
	r := h.connect(acct, map[string]any{"name": "local stories", "kind": "openai-compatible", "base_url": rm.BaseURL(hostOf["custom"]),
		"model": "stories260K", "capabilities": map[string]any{"structured_output": true, "context_window": 512}})
	must(t, r.status == 201, "connect the BYOM: %d %s", r.status, r.body)
	byomID := r.json(t)["model_id"].(string)

	var ids []string
	for _, q := range realModelQueries {
		r := h.submit(key, map[string]any{"mode": q.mode, "prompt": q.prompt, "custom_models": []string{byomID}})
		must(t, r.status == 202, "submit %s: %d %s", q.mode, r.status, r.body)
		id := r.json(t)["request_id"].(string)
		ids = append(ids, id)
		res := h.wait(key, id, 3*time.Minute)
		checkRealModelQuery(t, h, q.mode, id, res)
	}

	// No more tokens were charged than the hosts that report usage
	// processed: what a host did not do is never billed.
	calls, err := rm.Calls()
	must(t, err == nil, "the host's log: %v", err)
	processed := map[string]events.Usage{}
	for _, c := range calls {
		if c.Status == 200 {
			u := processed[c.Host]
			u.InputTokens += c.PromptTokens
			u.OutputTokens += c.CompletionTokens
			processed[c.Host] = u
		}
	}
	recorded := map[string]events.Usage{}
	for _, id := range ids {
		for _, ev := range h.queryEvents(id) {
			if m, ok := ev.(events.Metered); ok {
				model, usage, _ := m.Metering()
				if usage == (events.Usage{}) {
					continue
				}
				u := recorded[hostOf[model.Provider]]
				u.InputTokens += usage.InputTokens
				u.OutputTokens += usage.OutputTokens
				recorded[hostOf[model.Provider]] = u
			}
		}
	}
	for host, u := range recorded {
		if strings.Contains(host, realmodel.NoUsage) {
			continue // what it is charged is the service's estimate
		}
		p := processed[host]
		must(t, u.InputTokens <= p.InputTokens && u.OutputTokens <= p.OutputTokens,
			"host %s: the events record %+v tokens, the host processed %+v", host, u, p)
	}
	t.Logf("host calls: %d; tokens processed %v; recorded %v", len(calls), processed, recorded)
	h.closeAndAudit()
}

// checkRealModelQuery checks the invariants of one ended query.
func checkRealModelQuery(t *testing.T, h *harness, mode, id string, res map[string]any) {
	t.Helper()
	status, code := res["status"], jsonPath(res, "error", "code")
	switch status {
	case "completed":
		must(t, jsonPath(res, "answer", "text") != "" && jsonPath(res, "synthesis", "provider") != nil, "%s %s completed without an answer: %v", mode, id, res)
	case "failed":
		must(t, code == "aggregation_failed" || code == "provider_error", "%s %s failed with %v: %v", mode, id, code, res["error"])
	default:
		t.Fatalf("%s %s ended %v", mode, id, status)
	}

	evs := h.queryEvents(id)
	// Each failed answer is a failed entry with its class; each failed
	// step of justify and verify but the final one is in missing.
	failedSteps := 0
	for _, ev := range evs {
		switch e := ev.(type) {
		case events.ModelFailed:
			m := modelEntry(res, e.Model.Key())
			must(t, m != nil && m["status"] == "failed" && jsonPath(m, "error", "class") == e.Class && e.Class != "",
				"%s %s: %s failed (%s) but its entry is %v", mode, id, e.Model.Key(), e.Class, m)
		case events.StepFailed:
			must(t, e.Class != "" && e.Message != "", "%s %s: a step_failed without class or message: %+v", mode, id, e)
			if e.Step != events.StepRewrite && e.Step != events.StepSynthesis {
				failedSteps++
			}
		}
	}
	if mode != "unify" {
		missing := asList(jsonPath(res, mode, "missing"))
		must(t, len(missing) >= failedSteps, "%s %s: %d steps failed, missing says %d: %v", mode, id, failedSteps, len(missing), missing)
	}

	// The charge is the usage the recorded calls report at their price (a
	// BYOM's at 0), each call charged once by the settlement.
	var want int64
	callIDs := map[string]bool{}
	for _, rec := range h.streamRecords("QUERIES") {
		if events.AggregateID(rec.Envelope.Subject) != id {
			continue
		}
		if m, ok := rec.Event.(events.Metered); ok {
			model, usage, _ := m.Metering()
			callIDs[rec.Envelope.ID] = true
			if model.CustomModel == "" {
				want += int64(usage.InputTokens)*realInPrice + int64(usage.OutputTokens)*realOutPrice
			}
		}
	}
	charged, ok := jsonPath(res, "credits", "charged").(float64)
	must(t, ok && near(charged, events.Credits(want)), "%s %s (%v): charged %v, the recorded usage costs %v", mode, id, status, jsonPath(res, "credits", "charged"), events.Credits(want))
	var settled []events.ChargesSettled
	for _, rec := range h.streamRecords("ACCOUNTS") {
		if s, ok := rec.Event.(events.ChargesSettled); ok && s.RequestID == id {
			settled = append(settled, s)
		}
	}
	must(t, len(settled) == 1 && settled[0].ChargedMicros == want, "%s %s: settlements %+v, want one charging %d", mode, id, settled, want)
	var items []string
	for _, c := range settled[0].Calls {
		must(t, callIDs[c.CallID] && !slices.Contains(items, c.CallID), "%s %s: the settlement charges call %s, which the query does not record once", mode, id, c.CallID)
		items = append(items, c.CallID)
	}
	if code != nil {
		status = fmt.Sprintf("%v (%v)", status, code)
	}
	t.Logf("%s %s: %v, charged %v, %d calls charged, %d steps failed", mode, id, status, charged, len(items), failedSteps)
}

// queryEvents returns the events of query id, in order.
func (h *harness) queryEvents(id string) []events.Event {
	var out []events.Event
	for _, rec := range h.streamRecords("QUERIES") {
		if events.AggregateID(rec.Envelope.Subject) == id {
			out = append(out, rec.Event)
		}
	}
	return out
}
