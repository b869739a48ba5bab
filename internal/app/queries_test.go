package app

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
)

func TestUnifyEndToEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "How tall is the tallest mountain on Earth?"})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	sub := r.json(t)
	id := sub["request_id"].(string)
	must(t, strings.HasPrefix(id, "req_"), "request_id %q does not begin with req_", id)
	must(t, sub["idempotent_replayed"] == false, "fresh submission says idempotent_replayed=%v", sub["idempotent_replayed"])

	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "completed", "status %v, want completed: %v", res["status"], res)
	must(t, res["progress_percent"] == 100.0, "progress_percent %v at completion", res["progress_percent"])
	text, _ := jsonPath(res, "answer", "text").(string)
	must(t, text != "", "completed result has no answer.text")
	conflicts, _ := jsonPath(res, "answer", "conflicts").([]any)
	must(t, len(conflicts) > 0, "the simulated providers disagree on purpose, yet no conflict was reported")
	for _, c := range conflicts {
		must(t, jsonPath(c, "topic") != "" && jsonPath(c, "resolution") != "", "conflict without topic or resolution: %v", c)
		must(t, len(jsonPath(c, "positions").([]any)) >= 2, "conflict with fewer than two positions: %v", c)
	}
	models, _ := res["models"].([]any)
	must(t, len(models) == 4, "got %d model answers, want 4", len(models))
	for i, want := range []string{"provider_a", "provider_b", "provider_c", "provider_d"} {
		m := models[i]
		must(t, jsonPath(m, "provider") == want, "models[%d].provider = %v, want %s", i, jsonPath(m, "provider"), want)
		must(t, jsonPath(m, "status") == "answered", "models[%d] status %v", i, jsonPath(m, "status"))
		must(t, jsonPath(m, "simulated") == true, "models[%d] is not labelled simulated", i)
		must(t, strings.Contains(jsonPath(m, "answer").(string), "simulated"), "models[%d] answer is not labelled simulated", i)
		must(t, jsonPath(m, "usage", "input_tokens").(float64) > 0, "models[%d] reports no usage", i)
	}
	must(t, jsonPath(res, "synthesis", "provider") == "provider_a", "synthesis by %v, want the first answering provider", jsonPath(res, "synthesis", "provider"))
	must(t, res["justify"] == nil && res["verify"] == nil, "unify populated justify or verify")

	// A late client gets the whole history, then exactly one result, then EOF.
	resp := h.openStream(key, id, nil)
	must(t, resp.StatusCode == 200 && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"), "stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	evs, _ := readStream(t, resp.Body)
	resp.Body.Close()
	checkStreamShape(t, evs)
	last := evs[len(evs)-1]
	var result map[string]any
	must(t, json.Unmarshal([]byte(last.data), &result) == nil, "result data is not JSON")
	must(t, result["request_id"] == id && result["status"] == "completed" && jsonPath(result, "answer", "text") == text,
		"result event does not carry the result body: %s", last.data)
}

// checkStreamShape checks SSE rules: ids are increasing stream sequences,
// progress events carry stage and a never-decreasing progress_percent, and
// exactly one terminal event comes last.
func checkStreamShape(t *testing.T, evs []streamEvent) {
	t.Helper()
	must(t, len(evs) >= 3, "stream had %d events", len(evs))
	prevID, prevPct := uint64(0), -1.0
	stages := map[string]bool{}
	for i, ev := range evs {
		id, err := strconv.ParseUint(ev.id, 10, 64)
		must(t, err == nil && id > prevID, "event %d id %q not increasing after %d", i, ev.id, prevID)
		prevID = id
		if i < len(evs)-1 {
			must(t, ev.name == "progress", "event %d is %q before the end; only progress may precede the terminal event", i, ev.name)
			var p map[string]any
			must(t, json.Unmarshal([]byte(ev.data), &p) == nil, "progress data not JSON: %s", ev.data)
			pct, ok := p["progress_percent"].(float64)
			must(t, ok && pct >= prevPct && pct == float64(int(pct)), "progress_percent %v after %v", p["progress_percent"], prevPct)
			prevPct = pct
			stage, _ := p["stage"].(string)
			must(t, stage != "", "progress without stage: %s", ev.data)
			stages[stage] = true
		}
	}
	must(t, stages["running_models"] && stages["aggregating"], "stages seen %v, want running_models and aggregating", stages)
	must(t, evs[len(evs)-1].name == "result" || evs[len(evs)-1].name == "error", "last event is %q", evs[len(evs)-1].name)
}

func TestStreamLiveResumeAndHeartbeat(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) {
		c.SimLatency = 400 * time.Millisecond
		c.SSEHeartbeat = 50 * time.Millisecond
	}))
	key := h.newKey()
	id := h.submitOK(key, "Stream me live")
	resp := h.openStream(key, id, nil)
	evs, comments := readStream(t, resp.Body)
	resp.Body.Close()
	checkStreamShape(t, evs)
	must(t, evs[len(evs)-1].name == "result", "last event %q, want result", evs[len(evs)-1].name)
	beats := 0
	for _, c := range comments {
		if strings.HasPrefix(c, ": heartbeat") {
			beats++
		}
	}
	must(t, beats > 0, "no heartbeat comment during a 400 ms model call with a 50 ms heartbeat")

	// Resume after the third event: only later events come again.
	resp = h.openStream(key, id, map[string]string{"Last-Event-ID": evs[2].id})
	resumed, _ := readStream(t, resp.Body)
	resp.Body.Close()
	must(t, len(resumed) == len(evs)-3, "resume after id %s gave %d events, want %d", evs[2].id, len(resumed), len(evs)-3)
	for i, ev := range resumed {
		must(t, ev.id == evs[i+3].id && ev.name == evs[i+3].name, "resumed event %d is %s/%s, want %s/%s", i, ev.id, ev.name, evs[i+3].id, evs[i+3].name)
	}
	// A client that saw the terminal event is told to stop reconnecting.
	r := h.api("GET", "/v1/queries/"+id+"/stream", key, nil, map[string]string{"Last-Event-ID": evs[len(evs)-1].id})
	must(t, r.status == 204 && len(r.body) == 0, "resume after the terminal event: %d %q", r.status, r.body)
	r = h.api("GET", "/v1/queries/"+id+"/stream", key, nil, map[string]string{"Last-Event-ID": "not-a-number"})
	must(t, r.status == 400 && r.errCode(t) == "invalid_request", "bad Last-Event-ID: %d %s", r.status, r.body)
}

func TestSubmitValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	big := strings.Repeat("a", 32*1024+1)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"not json", "{mode: unify", 400, "invalid_request"},
		{"array body", "[]", 400, "invalid_request"},
		{"empty body", "", 400, "invalid_request"},
		{"trailing data", `{"mode":"unify","prompt":"x"} {}`, 400, "invalid_request"},
		{"unknown field", map[string]any{"mode": "unify", "prompt": "x", "temperature": 1}, 400, "invalid_request"},
		{"missing mode", map[string]any{"prompt": "x"}, 400, "invalid_mode"},
		{"bad mode", map[string]any{"mode": "fastest", "prompt": "x"}, 400, "invalid_mode"},
		{"mode not string", map[string]any{"mode": 1, "prompt": "x"}, 400, "invalid_mode"},
		{"missing prompt", map[string]any{"mode": "unify"}, 400, "invalid_prompt"},
		{"empty prompt", map[string]any{"mode": "unify", "prompt": "  "}, 400, "invalid_prompt"},
		{"prompt not string", map[string]any{"mode": "unify", "prompt": 7}, 400, "invalid_prompt"},
		{"prompt over 32 KB", map[string]any{"mode": "unify", "prompt": big}, 400, "invalid_prompt"},
		{"body over limit", map[string]any{"mode": "unify", "prompt": strings.Repeat("\u0001", 50000)}, 400, "invalid_request"},
		{"models not object", map[string]any{"mode": "unify", "prompt": "x", "models": []string{"a"}}, 400, "invalid_models"},
		{"unknown provider key", map[string]any{"mode": "unify", "prompt": "x", "models": map[string]any{"provider_z": "m"}}, 400, "invalid_models"},
		{"model id not string", map[string]any{"mode": "unify", "prompt": "x", "models": map[string]any{"provider_a": 3}}, 400, "invalid_models"},
		{"unknown model", map[string]any{"mode": "unify", "prompt": "x", "models": map[string]any{"provider_a": "gpt-99"}}, 400, "invalid_model"},
		{"model of another provider", map[string]any{"mode": "unify", "prompt": "x", "models": map[string]any{"provider_a": "sim-beta-standard"}}, 400, "invalid_model"},
		{"nothing selected", map[string]any{"mode": "unify", "prompt": "x", "models": map[string]any{"provider_a": nil}}, 400, "invalid_models"},
		{"empty models object", map[string]any{"mode": "unify", "prompt": "x", "models": map[string]any{}}, 400, "invalid_models"},
		{"custom models malformed", map[string]any{"mode": "unify", "prompt": "x", "custom_models": []string{"gpt"}}, 400, "invalid_models"},
		{"custom models not array", map[string]any{"mode": "unify", "prompt": "x", "custom_models": "byom_1"}, 400, "invalid_models"},
		{"unknown byom", map[string]any{"mode": "unify", "prompt": "x", "custom_models": []string{"byom_nope"}}, 400, "invalid_model"},
	}
	for _, c := range cases {
		r := h.submit(key, c.body)
		if r.status != c.status || r.errCode(t) != c.code {
			t.Errorf("%s: got %d %s, want %d %s: %s", c.name, r.status, r.errCode(t), c.status, c.code, r.body)
			continue
		}
		e := r.json(t)["error"].(map[string]any)
		must(t, e["message"] != "" && e["retriable"] == false && e["retry_after_seconds"] == nil,
			"%s: envelope fields wrong: %v", c.name, e)
		must(t, e["docs_url"] == h.m.URL()+"/docs/errors/"+c.code, "%s: docs_url %v", c.name, e["docs_url"])
	}
	// Nothing was written for any of them.
	must(t, len(h.streamRecords("QUERIES")) == 0, "a rejected submission left events behind")
}

func TestModelSelectionRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	selected := func(body map[string]any) []string {
		t.Helper()
		body["mode"], body["prompt"] = "unify", "Which models run?"
		r := h.submit(key, body)
		must(t, r.status == 202, "submit %v: %d %s", body, r.status, r.body)
		res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
		var out []string
		for _, m := range res["models"].([]any) {
			out = append(out, fmt.Sprintf("%s=%s", jsonPath(m, "provider"), jsonPath(m, "model_id")))
		}
		return out
	}
	cases := []struct {
		name string
		body map[string]any
		want string
	}{
		{"rule 1: omitted runs every default", map[string]any{}, "provider_a=sim-alpha-standard provider_b=sim-beta-standard provider_c=sim-gamma-standard provider_d=sim-delta-standard"},
		{"models null is omitted", map[string]any{"models": nil}, "provider_a=sim-alpha-standard provider_b=sim-beta-standard provider_c=sim-gamma-standard provider_d=sim-delta-standard"},
		{"rule 2: only listed non-null run", map[string]any{"models": map[string]any{"provider_b": "sim-beta-pro", "provider_d": "sim-delta-nano", "provider_a": nil}}, "provider_b=sim-beta-pro provider_d=sim-delta-nano"},
		{"single provider", map[string]any{"models": map[string]any{"provider_c": "sim-gamma-lite"}}, "provider_c=sim-gamma-lite"},
	}
	for _, c := range cases {
		if got := strings.Join(selected(c.body), " "); got != c.want {
			t.Errorf("%s: ran %q, want %q", c.name, got, c.want)
		}
	}
}

func TestModelsCatalog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	r := h.api("GET", "/v1/models", key, nil)
	must(t, r.status == 200, "models: %d %s", r.status, r.body)
	groups := r.json(t)["groups"].([]any)
	must(t, len(groups) == 5, "got %d groups, want 4 providers and custom", len(groups))
	for _, g := range groups[:4] {
		must(t, jsonPath(g, "simulated") == true, "group %v is not labelled simulated", jsonPath(g, "name"))
		must(t, len(jsonPath(g, "models").([]any)) == 4, "group %v has %d models", jsonPath(g, "name"), len(jsonPath(g, "models").([]any)))
	}
	must(t, jsonPath(groups[4], "name") == "custom" && len(jsonPath(groups[4], "models").([]any)) == 0, "custom group: %v", groups[4])
	r = h.api("GET", "/v1/models", "", nil)
	must(t, r.status == 401 && r.errCode(t) == "invalid_api_key", "models without a key: %d %s", r.status, r.body)
}

func TestHealthAndDocs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.DocsURL = "https://docs.example.test" }))
	for _, p := range []string{"/healthz", "/readyz"} {
		r := h.api("GET", p, "", nil)
		must(t, r.status == 200, "%s: %d %s", p, r.status, r.body)
	}
	r := h.api("GET", "/v1/queries/req_nope", "", nil)
	must(t, jsonPath(r.json(t), "error", "docs_url") == "https://docs.example.test/errors/invalid_api_key", "configured docs base not used: %s", r.body)
	r = h.api("GET", "/docs/errors/rate_limited", "", nil)
	must(t, r.status == 200 && strings.Contains(string(r.body), "Retry-After"), "error doc: %d %s", r.status, r.body)
}
