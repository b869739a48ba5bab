package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
)

// TestUsageAHostDidNotReportIsEstimatedChargedAndAudited: provider_d's
// Chat Completions host sends no usage and writes prose where JSON was
// asked for. Its answers are counted with the service's tokenizer, marked
// estimated in the events and the result, and charged; its revisions fail
// (not_json after the repair), and their usage is recorded on the
// step_failed events and counted as unbilled, never charged. The charge is
// the successful calls' recorded cost, and `crosscheck audit` passes.
func TestUsageAHostDidNotReportIsEstimatedChargedAndAudited(t *testing.T) {
	var calls atomic.Int64
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(body, &req)
		calls.Add(1)
		text := "The tower is 330 metres tall, and it was completed in 1889."
		if req["response_format"] != nil {
			text = "I would rather tell you a story about a tower."
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1760000000,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, req["model"], text)
	}))
	t.Cleanup(host.Close)
	t.Setenv("XC_LOCAL", "local-test")
	path := writeConfig(t, fmt.Sprintf(`
providers:
  provider_d: {backend: openai-compatible, base_url: "%s/v1/", api_key_env: XC_LOCAL}
`, host.URL))
	h := newHarness(t, withConfig(func(c *config.Config) { c.ConfigFile = path }))
	key := h.newKey()
	unbilled := func() float64 {
		return h.scrape(h.m.AdminURL()).sum("crosscheck_model_tokens_unbilled_total", "provider=provider_d", "model=mistral-medium-latest")
	}
	estimated := func() float64 {
		return h.scrape(h.m.AdminURL()).sum("crosscheck_model_usage_estimated_total", "provider=provider_d", "model=mistral-medium-latest")
	}
	beforeUnbilled, beforeEstimated := unbilled(), estimated()

	models := map[string]any{"provider_a": "gpt-4.1", "provider_d": "mistral-medium-latest"}
	var ids []string
	for _, mode := range []string{"unify", "justify"} {
		r := h.submit(key, map[string]any{"mode": mode, "prompt": "How tall is the Eiffel Tower?", "models": models})
		must(t, r.status == 202, "submit %s: %d %s", mode, r.status, r.body)
		id := r.json(t)["request_id"].(string)
		ids = append(ids, id)
		res := h.wait(key, id, 60*time.Second)
		must(t, res["status"] == "completed", "%s: status %v: %v", mode, res["status"], res["error"])
		d := jsonPath(res, "models", 1)
		must(t, jsonPath(d, "provider") == "provider_d" && jsonPath(d, "status") == "answered", "%s: provider_d: %v", mode, d)
		must(t, jsonPath(d, "usage_source") == "estimated", "%s: provider_d's usage_source %v", mode, jsonPath(d, "usage_source"))
		must(t, jsonPath(d, "usage", "input_tokens").(float64) > 0 && jsonPath(d, "usage", "output_tokens").(float64) > 0, "%s: provider_d's usage %v", mode, jsonPath(d, "usage"))
		must(t, jsonPath(d, "credits").(float64) > 0, "%s: provider_d charged %v", mode, jsonPath(d, "credits"))
		must(t, jsonPath(res, "models", 0, "usage_source") == "reported", "%s: the simulated model's usage_source %v", mode, jsonPath(res, "models", 0, "usage_source"))
	}

	// What the events record: the estimated answers charged, the failed
	// revision's usage on its step_failed and in no charge.
	var failedUsage int
	for _, id := range ids {
		var cost int64
		for _, rec := range h.streamRecords("QUERIES") {
			if !strings.Contains(rec.Envelope.Subject, id) {
				continue
			}
			if _, _, c, ok := events.Charged(rec.Event); ok {
				cost += c
			}
			if f, ok := rec.Event.(events.StepFailed); ok && f.Model != nil && f.Model.Provider == "provider_d" {
				must(t, f.Class == events.ClassNotJSON, "step_failed %+v: want not_json", f)
				must(t, f.Usage != nil && f.Usage.InputTokens > 0 && f.Usage.OutputTokens > 0 && f.UsageSource == events.UsageEstimated, "step_failed %+v: want its estimated usage", f)
				failedUsage += f.Usage.InputTokens + f.Usage.OutputTokens
			}
			if a, ok := rec.Event.(events.ModelAnswered); ok && a.Model.Provider == "provider_d" {
				must(t, a.UsageSource == events.UsageEstimated && a.CostMicros > 0, "model_answered %+v: want estimated and charged", a)
			}
		}
		res := h.wait(key, id, time.Second)
		charged := jsonPath(res, "credits", "charged").(float64)
		must(t, near(charged, events.Credits(cost)), "query %s charged %v, its recorded calls cost %v", id, charged, events.Credits(cost))
	}
	must(t, failedUsage > 0, "no revision of provider_d failed with its usage")
	must(t, unbilled()-beforeUnbilled == float64(failedUsage), "crosscheck_model_tokens_unbilled_total moved by %v, want %d", unbilled()-beforeUnbilled, failedUsage)
	must(t, estimated()-beforeEstimated == float64(calls.Load()), "crosscheck_model_usage_estimated_total moved by %v, want one per call of the host (%d)", estimated()-beforeEstimated, calls.Load())
	h.closeAndAudit()
}
