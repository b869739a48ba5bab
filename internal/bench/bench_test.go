package bench

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"
)

// A seconds-long run of the benchmark code: every phase runs and reports a
// figure. It asserts nothing about speed; `make bench` measures.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every benchmark phase")
	}
	// The simulated models take long enough for a stream opened after the
	// submission to see the later events even on a loaded machine: with no
	// event after the stream opened there is no SSE figure to measure.
	cfg := benchConfig{Phase: 300 * time.Millisecond, Clients: 8, Rate: 40, Latency: 150 * time.Millisecond, Inflight: 40, Publishers: 4}
	res, err := runBench(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res)
	var flat map[string]any
	_ = json.Unmarshal(raw, &flat)
	keys := []string{"jetstream_publish_per_s", "events_appended_per_s", "unify_queries_per_s", "overhead_ms_p50", "overhead_ms_p99",
		"sse_first_event_ms_p99", "poll_get_per_s", "inflight_bytes_per_query", "replay_events_per_s",
		"account_appends_per_query", "query_appends_per_query"}
	for _, k := range keys {
		for _, obj := range []map[string]any{flat, flat["sync_always"].(map[string]any)} {
			v, ok := obj[k].(float64)
			if !ok || (v <= 0 && k != "overhead_ms_p50" && k != "overhead_ms_p99") {
				t.Errorf("%s = %v (%s), want a measured figure", k, obj[k], obj["sync_policy"])
			}
		}
	}
}
