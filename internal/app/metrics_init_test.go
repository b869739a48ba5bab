package app

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// openLabels are the metrics whose label values are not known before their
// first event (a route and status, a catalog's model, a refusal's code), or
// that exist only on a shared NATS (a projection's lease), or once a
// projection has measured its lag.
var openLabels = map[string]bool{
	"crosscheck_http_requests_total": true, "crosscheck_http_request_duration_seconds": true,
	"crosscheck_queries_refused_total": true,
	"crosscheck_model_calls_total":     true, "crosscheck_model_call_duration_seconds": true, "crosscheck_model_tokens_total": true, "crosscheck_model_credits_charged_total": true,
	"crosscheck_model_usage_estimated_total": true, "crosscheck_model_tokens_unbilled_total": true,
	"crosscheck_projection_lease_held": true, "crosscheck_projection_lag_events": true,
}

// Every metric docs/operations.md lists (but openLabels) is on /metrics of
// a fresh serve before anything happened that it counts (a dashboard reads "No data" for a
// metric that is absent, not 0). The check runs in a child process of the
// test binary, whose registry no other test has moved.
func TestDocumentedMetricsExposedFromTheStart(t *testing.T) {
	if os.Getenv("CROSSCHECK_TEST_FRESH_METRICS") != "1" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "CROSSCHECK_TEST_FRESH_METRICS=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("the fresh process: %v\n%s", err, out)
		}
		return
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `crosscheck_") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		names = append(names, regexp.MustCompile(`crosscheck_[a-z_]+`).FindAllString(cell, -1)...)
	}
	if len(names) < 40 {
		t.Fatalf("only %d metrics found in the documentation's table", len(names))
	}
	h := newHarness(t)
	resp, err := http.Get(h.m.AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range names {
		if openLabels[name] {
			continue
		}
		if !strings.Contains(string(body), "\n# TYPE "+name+" ") {
			t.Errorf("%s is documented but absent from /metrics", name)
		}
	}
}
