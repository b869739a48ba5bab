package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/app"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
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
	cfg := benchConfig{Phase: 300 * time.Millisecond, Clients: 8, Rate: 40, Latency: 150 * time.Millisecond, Inflight: 40, Publishers: 4,
		GrowthSizes: []int{10, 2500}}
	var saves []benchResults
	res, err := runBench(context.Background(), cfg, io.Discard, func(r *benchResults) {
		raw, _ := json.Marshal(r)
		var cp benchResults
		_ = json.Unmarshal(raw, &cp)
		saves = append(saves, cp)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The results are saved as each phase ends: the first save holds the
	// raw publish alone, the last every figure.
	if len(saves) < 12 || saves[0].JetStreamPublishPerS == 0 || saves[0].UnifyQueriesPerS != 0 || saves[0].Complete || !saves[len(saves)-1].Complete {
		t.Errorf("%d saves, the first with raw publish %v and unify %v; want one per phase, the first of the raw publish alone, the last complete",
			len(saves), saves[0].JetStreamPublishPerS, saves[0].UnifyQueriesPerS)
	}
	g := res.Growth
	if g == nil {
		t.Fatal("no growth figures")
	}
	if len(g.Steps) != 2 || g.Steps[1].SettledQueries < 2500 || g.QueriesPerSRatio <= 0 || g.ColdFirstQueryMs <= 0 || g.ColdHistory < 2500 {
		t.Errorf("growth %+v; want two steps measured, the second past 2,500 settled queries, and the cold first query", g)
	}
	for _, st := range g.Steps {
		// A profile of a fraction of a second may hold no sample of the
		// ledger's appends: the shares are checked to be read, not to be
		// above zero.
		if st.UnifyQueriesPerS <= 0 || st.CPUMsPerQuery <= 0 || st.LedgerAppendShare >= 1 || st.LedgerAppendShare != st.LedgerServerShare+st.LedgerClientShare {
			t.Errorf("growth step %+v; want every figure measured", st)
		}
	}
	raw, _ := json.Marshal(res)
	var flat map[string]any
	_ = json.Unmarshal(raw, &flat)
	keys := []string{"jetstream_publish_per_s", "events_appended_per_s", "unify_queries_per_s", "overhead_ms_p50", "overhead_ms_p99",
		"sse_first_event_ms_p99", "poll_get_per_s", "inflight_bytes_per_query", "replay_events_per_s",
		"account_appends_per_query", "query_appends_per_query", "store_writes_per_query"}
	for _, k := range keys {
		for _, obj := range []map[string]any{flat, flat["sync_always"].(map[string]any)} {
			v, ok := obj[k].(float64)
			// The overheads may be zero or below; the smoke run's streams
			// may see no event after they opened on a loaded machine (its
			// queries end first), which leaves their figure zero.
			if !ok || (v <= 0 && k != "overhead_ms_p50" && k != "overhead_ms_p99" && k != "sse_first_event_ms_p99") || v < 0 && k == "sse_first_event_ms_p99" {
				t.Errorf("%s = %v (%s), want a measured figure", k, obj[k], obj["sync_policy"])
			}
		}
	}
	for _, r := range []policyResults{res.policyResults, res.SyncAlways} {
		if len(r.ReplayRounds) != replayRounds || slices.Sorted(slices.Values(r.ReplayRounds))[replayRounds/2] != r.ReplayEventsPerS {
			t.Errorf("replay rounds %v with the figure %v (%s), want %d rounds and their median", r.ReplayRounds, r.ReplayEventsPerS, r.SyncPolicy, replayRounds)
		}
	}
}

// BenchmarkReplay rebuilds the query read model from a store holding the
// events of many unify queries: one query run through the simulated
// pipeline, copied under new request and event ids. One op is one rebuild
// of every event; events/s is reported beside ns/op.
func BenchmarkReplay(b *testing.B) {
	const queries = 2000
	ctx := context.Background()
	m, dir, err := benchMain(ctx, false, 0)
	if dir != "" {
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	if err := copyQueries(ctx, m, queries); err != nil {
		b.Fatal(err)
	}
	var n int64
	var secs float64
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		before := cpuTime()
		got, s, err := replay(ctx, m.Store)
		if err != nil {
			b.Fatal(err)
		}
		n, secs, cpu = n+got, secs+s, cpu+cpuTime()-before
	}
	b.ReportMetric(float64(n)/secs, "events/s")
	// The CPU time of the whole process (the embedded server's included) per
	// event: unlike events/s, barely changed by other load on the machine.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/event")
}

// copyQueries runs one unify query through m and appends n copies of its
// events, each copy under a new request id and new event ids.
func copyQueries(ctx context.Context, m *app.Main, n int) error {
	keys, err := benchKeys(ctx, m, 1)
	if err != nil {
		return err
	}
	done, err := watchCompletions(m.Conn())
	if err != nil {
		return err
	}
	defer done.stop()
	id, err := benchSubmit(ctx, m.URL(), keys[0], "replay model query")
	if err != nil {
		return err
	}
	if _, err := done.wait(ctx, id); err != nil {
		return err
	}
	_, recs, err := m.Store.LoadQuery(ctx, id)
	if err != nil {
		return err
	}
	// Copies run interleaved, 64 at a time, as concurrent queries are
	// stored: a query's events spread over several batches of a rebuild.
	const together = 64
	for start := 0; start < n; start += together {
		ids := make([]string, min(together, n-start))
		for i := range ids {
			ids[i] = "req_" + events.NewID()
		}
		for _, r := range recs {
			for _, next := range ids {
				eid := events.NewID()
				raw := bytes.ReplaceAll(r.Raw, []byte(id), []byte(next))
				raw = bytes.Replace(raw, []byte(r.Envelope.ID), []byte(eid), 1)
				if _, err := m.Store.AppendRaw(ctx, strings.Replace(r.Envelope.Subject, id, next, 1), raw, eid); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// TestFirstErrorKeepsErrorsOfAnyType: the load phases' goroutines fail with
// errors of different types (a *url.Error, an *errors.errorString...); the
// first one is kept and the later ones do not panic.
func TestFirstErrorKeepsErrorsOfAnyType(t *testing.T) {
	var f firstError
	if f.get() != nil {
		t.Fatal("a new firstError holds an error")
	}
	first := errors.New("first")
	f.set(first)
	f.set(&url.Error{Op: "Post", URL: "http://127.0.0.1", Err: errors.New("second")})
	if f.get() != first {
		t.Fatalf("got %v, want the first error", f.get())
	}
}

// BenchmarkInflight holds 2,000 unify queries in flight (their simulated
// models wait ten minutes) and reports the process's heap and stacks per
// held query, as the in-flight phase of `make bench` does with 10,000. One op
// is one fresh service. BENCH_MEMPROFILE names a heap profile to write.
func BenchmarkInflight(b *testing.B) {
	var per float64
	for b.Loop() {
		got, err := benchInflight(context.Background(), benchConfig{Inflight: 2000}, false)
		if err != nil {
			b.Fatal(err)
		}
		per += got
	}
	b.ReportMetric(per/float64(b.N), "bytes/query")
}

// The growth phase puts every query on one account: with more clients than
// the account may have queries in flight (CROSSCHECK_INFLIGHT_PER_ACCOUNT),
// it runs as many as the bound allows, and none of its submissions is
// refused (a refused client retries at once, which would measure the
// refusals instead of the queries).
func TestGrowthStaysWithinTheAccountsInflightBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the growth phase")
	}
	bound := config.Defaults().InflightPerAccount
	cfg := benchConfig{Phase: 2 * time.Second, Clients: bound + 64, GrowthSizes: []int{10}}
	var g growthResults
	if err := benchGrowth(context.Background(), cfg, io.Discard, &g, func() {}); err != nil {
		t.Fatal(err)
	}
	if len(g.Steps) != 1 || g.Steps[0].SettledAfter <= g.Steps[0].SettledQueries {
		t.Fatalf("growth %+v; want one step that settled queries", g)
	}
	if st := g.Steps[0]; st.Refused != 0 {
		t.Errorf("%d submissions of %d clients on one account refused with 429 (the account's bound is %d)", st.Refused, cfg.Clients, bound)
	}
}
