package app

import (
	"strings"
	"testing"
	"time"
)

// A customer's own model is counted as customer-billed, under the provider
// and model "custom": neither the host's model name nor the model's id is
// ever a label value.
func TestBYOMCallsCountedCustomerBilled(t *testing.T) {
	h, host, _, key, id := byomAccount(t, "llama-metrics-label-check")

	before := h.scrape(h.m.AdminURL())
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "When was the Eiffel Tower completed?", "models": map[string]any{}, "custom_models": []string{id}})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
	after := h.scrape(h.m.AdminURL())

	moved(t, before, after, map[string]float64{
		"crosscheck_model_calls_customer_billed_total outcome=ok":                             1,
		"crosscheck_model_calls_total provider=custom model=custom purpose=answer outcome=ok": 1,
		"crosscheck_model_tokens_total provider=custom model=custom direction=output":         1,
	})
	for series := range after {
		must(t, !strings.Contains(series, host.model) && !strings.Contains(series, id),
			"a customer's model is a label value: %s", series)
	}
}
