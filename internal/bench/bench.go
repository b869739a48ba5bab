// Package bench measures the service beside the raw JetStream limit, under
// both fsync policies, and writes the figures as JSON (`crosscheck bench`,
// `make bench`).
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/app"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// benchConfig sizes one benchmark run.
type benchConfig struct {
	// Phase is the length of each throughput phase (after a warm-up of Phase/5).
	Phase time.Duration
	// Clients is the number of concurrent HTTP clients at full load.
	Clients int
	// Rate is the fixed submission rate (queries/s) of the latency phases.
	Rate int
	// Latency is the simulated model latency of the latency phases.
	Latency time.Duration
	// Inflight is the number of queries held in flight for the memory figure.
	Inflight int
	// Publishers is the number of concurrent raw publishers.
	Publishers int
	// GrowthSizes are the settled queries of history of the growth phase's
	// account at each of its steps; none leaves the phase out.
	GrowthSizes []int
	// GrowthOnly runs the growth phase alone.
	GrowthOnly bool
}

func defaultBenchConfig() benchConfig {
	return benchConfig{Phase: 8 * time.Second, Clients: 128, Rate: 100, Latency: 5 * time.Millisecond, Inflight: 10000, Publishers: 256,
		GrowthSizes: []int{1000, 10000, 100000}}
}

// policyResults are the figures of one fsync policy.
type policyResults struct {
	SyncPolicy           string  `json:"sync_policy"`
	JetStreamPublishPerS float64 `json:"jetstream_publish_per_s"`
	EventsAppendedPerS   float64 `json:"events_appended_per_s"`
	UnifyQueriesPerS     float64 `json:"unify_queries_per_s"`
	// LatencyRatePerS is the fixed rate of the latency phase: the
	// configured rate, or half the measured unify throughput when that is
	// lower (a rate above capacity measures a queue, not the latency).
	LatencyRatePerS       int     `json:"latency_rate_per_s"`
	OverheadMsP50         float64 `json:"overhead_ms_p50"`
	OverheadMsP99         float64 `json:"overhead_ms_p99"`
	SSEFirstEventMsP99    float64 `json:"sse_first_event_ms_p99"`
	PollGetPerS           float64 `json:"poll_get_per_s"`
	InflightBytesPerQuery float64 `json:"inflight_bytes_per_query"`
	ReplayEventsPerS      float64 `json:"replay_events_per_s"`
	// ReplayRounds are the rebuilds the replay phase timed, in events/s;
	// ReplayEventsPerS is their median.
	ReplayRounds []float64 `json:"replay_events_per_s_rounds"`
	// AccountAppendsPerQuery and QueryAppendsPerQuery are counted on the
	// load phase's finished queries: the events of the query's own stream,
	// and the ACCOUNTS events that name the query (its reservation, debits,
	// releases and settlement).
	AccountAppendsPerQuery float64 `json:"account_appends_per_query"`
	QueryAppendsPerQuery   float64 `json:"query_appends_per_query"`
	// StoreWritesPerQuery is every message written to any stream of the
	// server during the load phase (events, read-model documents, in-flight
	// slots, jobs, checkpoints) per finished query: under fsync always each
	// is an fsync. StoreWritesByStream splits it by stream.
	StoreWritesPerQuery float64            `json:"store_writes_per_query"`
	StoreWritesByStream map[string]float64 `json:"store_writes_per_query_by_stream,omitempty"`
	// SubmitRetries counts the submissions of the policy's phases retried
	// after a retriable 5xx, SubmitsGivenUp those given up after the
	// retries (see benchSubmit); LatencyRefused the latency phase's
	// submissions refused (429, or given up), which it does not measure.
	SubmitRetries  int64 `json:"submit_retries"`
	SubmitsGivenUp int64 `json:"submits_given_up"`
	LatencyRefused int64 `json:"latency_refused"`
}

// benchResults is the JSON written to BENCH_OUT: the shipped default policy
// at the top level, the other nested, and the growth phase. It is written
// again as each phase ends, so a run cut short keeps the figures of the
// phases it finished (Complete false).
type benchResults struct {
	policyResults
	SyncAlways policyResults  `json:"sync_always"`
	Growth     *growthResults `json:"growth,omitempty"`
	Machine    map[string]any `json:"machine"`
	Config     map[string]any `json:"config"`
	StartedAt  time.Time      `json:"started_at"`
	Seconds    float64        `json:"seconds"`
	// Complete says every phase ran.
	Complete bool `json:"complete"`
}

// Command runs `crosscheck bench`: phases of $BENCH_PHASE (default 8s),
// a table on standard output and the JSON to $BENCH_OUT (default
// bench/results.json), written as each phase ends. $BENCH_GROWTH=off
// leaves the growth phase out, $BENCH_GROWTH=only runs it alone.
func Command() error {
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = "bench/results.json"
	}
	cfg := defaultBenchConfig()
	if v := os.Getenv("BENCH_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("BENCH_PHASE: %w", err)
		}
		cfg.Phase = d
	}
	switch os.Getenv("BENCH_GROWTH") {
	case "off":
		cfg.GrowthSizes = nil
	case "only":
		cfg.GrowthOnly = true
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	var saveErr error
	save := func(res *benchResults) {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil && saveErr == nil {
			saveErr = err
		}
	}
	if _, err := runBench(context.Background(), cfg, os.Stdout, save); err != nil {
		return fmt.Errorf("%w (the figures of the phases that ended are in %s)", err, out)
	}
	if saveErr != nil {
		return saveErr
	}
	fmt.Printf("\nwrote %s\n", out)
	return nil
}

// runBench measures both fsync policies and the growth phase, prints a
// table to w, and calls save (when set) with the results so far as each
// phase ends.
func runBench(ctx context.Context, cfg benchConfig, w io.Writer, save func(*benchResults)) (*benchResults, error) {
	start := time.Now()
	res := &benchResults{StartedAt: start.UTC(), Machine: machine(), Config: map[string]any{
		"phase_seconds": cfg.Phase.Seconds(), "clients": cfg.Clients, "rate_per_s": cfg.Rate,
		"latency_ms": cfg.Latency.Milliseconds(), "inflight": cfg.Inflight, "publishers": cfg.Publishers,
		"growth_sizes": cfg.GrowthSizes,
	}}
	saved := func() {
		res.Seconds = time.Since(start).Seconds()
		if save != nil {
			save(res)
		}
	}
	fmt.Fprintf(w, "crosscheck bench: %d CPUs, %s, phases of %s\n", runtime.NumCPU(), runtime.Version(), cfg.Phase)
	for _, p := range []struct {
		always bool
		r      *policyResults
	}{{false, &res.policyResults}, {true, &res.SyncAlways}} {
		if cfg.GrowthOnly {
			break
		}
		if err := benchPolicy(ctx, cfg, p.always, w, p.r, saved); err != nil {
			return res, err
		}
	}
	if len(cfg.GrowthSizes) > 0 {
		res.Growth = &growthResults{}
		if err := benchGrowth(ctx, cfg, w, res.Growth, saved); err != nil {
			return res, fmt.Errorf("growth: %w", err)
		}
	}
	res.Complete = true
	saved()
	printTable(w, res)
	return res, nil
}

func printTable(w io.Writer, r *benchResults) {
	rows := []struct {
		name, unit, target string
		a, b               float64
	}{
		{"jetstream_publish_per_s", "msg/s", "the limit", r.JetStreamPublishPerS, r.SyncAlways.JetStreamPublishPerS},
		{"events_appended_per_s", "ev/s", "≥ 0.5 × limit", r.EventsAppendedPerS, r.SyncAlways.EventsAppendedPerS},
		{"unify_queries_per_s", "q/s", "≥ 1000", r.UnifyQueriesPerS, r.SyncAlways.UnifyQueriesPerS},
		{"overhead_ms_p50", "ms", "", r.OverheadMsP50, r.SyncAlways.OverheadMsP50},
		{"overhead_ms_p99", "ms", "≤ 10", r.OverheadMsP99, r.SyncAlways.OverheadMsP99},
		{"sse_first_event_ms_p99", "ms", "≤ 5", r.SSEFirstEventMsP99, r.SyncAlways.SSEFirstEventMsP99},
		{"poll_get_per_s", "req/s", "≥ 20000", r.PollGetPerS, r.SyncAlways.PollGetPerS},
		{"inflight_bytes_per_query", "B", "≤ 51200", r.InflightBytesPerQuery, r.SyncAlways.InflightBytesPerQuery},
		{"replay_events_per_s", "ev/s", "≥ 150000", r.ReplayEventsPerS, r.SyncAlways.ReplayEventsPerS},
		{"account_appends_per_query", "ev", "≤ 2", r.AccountAppendsPerQuery, r.SyncAlways.AccountAppendsPerQuery},
		{"query_appends_per_query", "ev", "", r.QueryAppendsPerQuery, r.SyncAlways.QueryAppendsPerQuery},
		{"store_writes_per_query", "msg", "", r.StoreWritesPerQuery, r.SyncAlways.StoreWritesPerQuery},
	}
	if r.SyncPolicy != "" {
		fmt.Fprintf(w, "\n%-26s %14s %14s  %-6s %s\n", "metric", "sync interval", "sync always", "unit", "target (2 cores)")
		for _, row := range rows {
			fmt.Fprintf(w, "%-26s %14.1f %14.1f  %-6s %s\n", row.name, row.a, row.b, row.unit, row.target)
		}
		fmt.Fprintf(w, "replay_events_per_s is the median of %d rebuilds: %s (interval), %s (always)\n",
			replayRounds, rounds(r.ReplayRounds), rounds(r.SyncAlways.ReplayRounds))
	}
	if g := r.Growth; g != nil {
		fmt.Fprintf(w, "\ngrowth (one account, fsync %s):\n%-16s %12s %14s %22s\n", g.SyncPolicy, "settled queries", "unify q/s", "CPU ms/query", "ledger appends' CPU")
		for _, st := range g.Steps {
			fmt.Fprintf(w, "%-16d %12.1f %14.2f %21.1f%%\n", st.SettledQueries, st.UnifyQueriesPerS, st.CPUMsPerQuery, 100*st.LedgerAppendShare)
		}
		fmt.Fprintln(w, "(ledger appends' CPU: the share of a profile of the load; target ≤ 4 %)")
		fmt.Fprintf(w, "q/s last ÷ first %.2f (target ≥ 0.9); CPU/query last ÷ first %.2f\n", g.QueriesPerSRatio, g.CPUPerQueryRatio)
		if g.ColdFirstQueryMs > 0 {
			fmt.Fprintf(w, "first query of the account after a restart, %d settled: %.1f ms (target ≤ 50), %.1f ms CPU\n", g.ColdHistory, g.ColdFirstQueryMs, g.ColdFirstQueryCPUMs)
		}
		if g.Error != "" {
			fmt.Fprintf(w, "stopped: %s\n", g.Error)
		}
	}
	fmt.Fprintf(w, "(%.0f s in all)\n", r.Seconds)
}

// rounds prints figures as "a / b / c".
func rounds(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(s, " / ")
}

func machine() map[string]any {
	m := map[string]any{"cpus": runtime.NumCPU(), "goos": runtime.GOOS, "goarch": runtime.GOARCH, "go": runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				m["cpu"] = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return m
}

func policyName(always bool) string {
	if always {
		return "always"
	}
	return "interval (server default, 2m)"
}

func benchPolicy(ctx context.Context, cfg benchConfig, always bool, w io.Writer, r *policyResults, saved func()) error {
	r.SyncPolicy = policyName(always)
	fmt.Fprintf(w, "\n== fsync: %s\n", r.SyncPolicy)
	retries0, gaveUp0 := submitRetries.Load(), submitsGivenUp.Load()
	var err error
	step := func(name string, fn func() error) {
		if err != nil {
			return
		}
		t := time.Now()
		err = fn()
		r.SubmitRetries, r.SubmitsGivenUp = submitRetries.Load()-retries0, submitsGivenUp.Load()-gaveUp0
		saved()
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
			return
		}
		fmt.Fprintf(w, "  %-22s done in %.1fs\n", name, time.Since(t).Seconds())
	}
	step("raw publish", func() (e error) { r.JetStreamPublishPerS, e = benchRawPublish(ctx, cfg, always); return })
	var loadDir string
	step("unify full load + poll", func() (e error) {
		loadDir, e = benchLoad(ctx, cfg, always, r)
		return
	})
	r.LatencyRatePerS = max(1, min(cfg.Rate, int(r.UnifyQueriesPerS/2)))
	step("latency", func() error { return benchLatency(ctx, cfg, always, r) })
	step("in-flight memory", func() (e error) { r.InflightBytesPerQuery, e = benchInflight(ctx, cfg, always); return })
	step("replay", func() (e error) { r.ReplayEventsPerS, r.ReplayRounds, e = benchReplay(ctx, loadDir, always); return })
	if loadDir != "" {
		_ = os.RemoveAll(loadDir)
	}
	return err
}

// benchMain starts a quiet in-process service on a fresh data dir.
func benchMain(ctx context.Context, always bool, latency time.Duration) (*app.Main, string, error) {
	dir, err := os.MkdirTemp("", "crosscheck-bench-")
	if err != nil {
		return nil, "", err
	}
	return benchMainAt(ctx, dir, always, latency)
}

// benchMainAt starts a quiet in-process service on the data dir dir.
func benchMainAt(ctx context.Context, dir string, always bool, latency time.Duration) (*app.Main, string, error) {
	c := config.Defaults()
	c.DataDir, c.HTTPAddr, c.AdminAddr, c.AdminToken = dir, "127.0.0.1:0", "127.0.0.1:0", "bench"
	c.SyncAlways, c.SimLatency, c.ShutdownGrace, c.WorkerMaxJobs = always, latency, time.Second, 20000
	m := &app.Main{Config: c, Log: zerolog.Nop()}
	if err := m.Open(ctx); err != nil {
		m.Close()
		return nil, dir, err
	}
	return m, dir, nil
}

// benchKeys creates n API keys, one account each.
func benchKeys(ctx context.Context, m *app.Main, n int) ([]string, error) {
	out := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			acc, err := m.Accounts.CreateAccount(ctx, fmt.Sprintf("bench %d", i), events.PlanEnterprise)
			if err == nil {
				_, err = m.Ledger.Adjust(ctx, acc.ID, 1_000_000*events.MicrosPerCredit, "benchmark grant")
			}
			if err != nil {
				errs <- err
				return
			}
			k, _, err := m.Accounts.CreateKey(ctx, acc.ID, "bench", true)
			if err != nil {
				errs <- err
				return
			}
			out[i] = k.String()
		})
	}
	wg.Wait()
	close(errs)
	return out, <-errs
}

// completions tells clients when their query reached a terminal event, by
// plain subscriptions to the terminal subjects only: the server delivers the
// harness one message per query, not every event (a real client follows its
// own query, not every query's stream).
type completions struct {
	mu      sync.Mutex
	waiting map[string]chan time.Time
	early   map[string]time.Time
	subs    []*nats.Subscription
}

func watchCompletions(nc *nats.Conn) (*completions, error) {
	c := &completions{waiting: map[string]chan time.Time{}, early: map[string]time.Time{}}
	ended := func(msg *nats.Msg) {
		now := time.Now()
		id := events.AggregateID(msg.Subject)
		c.mu.Lock()
		if ch, ok := c.waiting[id]; ok {
			delete(c.waiting, id)
			ch <- now
		} else {
			c.early[id] = now
		}
		c.mu.Unlock()
	}
	for _, ending := range []string{events.QueryCompleted{}.EventName(), events.QueryFailed{}.EventName()} {
		sub, err := nc.Subscribe("ev.query.*."+ending, ended)
		if err == nil {
			c.subs = append(c.subs, sub)
			err = sub.SetPendingLimits(-1, -1)
		}
		if err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// stop ends the subscriptions.
func (c *completions) stop() {
	for _, sub := range c.subs {
		_ = sub.Unsubscribe()
	}
}

// wait returns when id completed.
func (c *completions) wait(ctx context.Context, id string) (time.Time, error) {
	c.mu.Lock()
	if t, ok := c.early[id]; ok {
		delete(c.early, id)
		c.mu.Unlock()
		return t, nil
	}
	ch := make(chan time.Time, 1)
	c.waiting[id] = ch
	c.mu.Unlock()
	select {
	case t := <-ch:
		return t, nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

var errLimited = errors.New("rate limited")

// errGaveUp is a submission refused with a retriable 5xx after the
// contract's retries (after 1 s, then 5 s): the harness counts it and goes
// on, as a client would give that one query up.
var errGaveUp = errors.New("gave up after the retries of a retriable 5xx")

// submitRetryDelays are the contract's waits before each retry of a
// submission refused with a retriable 5xx (503 service_restarting
// included): 1 s, then 5 s, then stop.
var submitRetryDelays = []time.Duration{time.Second, 5 * time.Second}

// submitRetries and submitsGivenUp count, over the whole run, the
// submissions retried after a retriable 5xx and those given up; a phase
// reports their growth.
var submitRetries, submitsGivenUp atomic.Int64

// submitsLimited counts, over the whole run, the submissions refused with
// 429 (an API key's or an account's queries in flight at their bound); a
// phase that must stay within the bounds reports its growth.
var submitsLimited atomic.Int64

// benchHTTP is the harness's HTTP client. It opens at most
// benchConnsPerHost connections to the service, below the service's bound
// per client address (CROSSCHECK_HTTP_MAX_CONNS_PER_ADDR, 256): on a loaded
// machine, requests that pile up wait for a connection in the client
// instead of being refused by the server.
var benchHTTP = &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: benchConnsPerHost, MaxConnsPerHost: benchConnsPerHost, IdleConnTimeout: time.Minute}, Timeout: 2 * time.Minute}

const benchConnsPerHost = 224

// benchSubmit posts one unify query and returns its request id. A 429 is
// errLimited. A retriable 5xx (a loaded machine's 503 service_restarting)
// is retried by the contract's rule, after 1 s and then 5 s; after that it
// is errGaveUp. The harness sends no Idempotency-Key, as its earlier
// figures were measured without one (a key is one more write per
// submission): a retried submission that had landed after all runs one
// query more than the phase counts.
func benchSubmit(ctx context.Context, base, key, prompt string) (string, error) {
	for attempt := 0; ; attempt++ {
		id, err := submitOnce(ctx, base, key, prompt)
		var retry *retriable
		if !errors.As(err, &retry) {
			return id, err
		}
		if attempt == len(submitRetryDelays) {
			submitsGivenUp.Add(1)
			return "", fmt.Errorf("%w: %w", errGaveUp, err)
		}
		submitRetries.Add(1)
		select {
		case <-time.After(submitRetryDelays[attempt]):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// retriable is a submission's answer with a 5xx status that says it may be
// retried.
type retriable struct {
	status int
	body   string
}

func (e *retriable) Error() string { return fmt.Sprintf("submit: %d %s", e.status, e.body) }

// submitOnce posts one unify query.
func submitOnce(ctx context.Context, base, key, prompt string) (string, error) {
	body := fmt.Sprintf(`{"mode":"unify","prompt":%q}`, prompt)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/queries", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := benchHTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v struct {
		RequestID string `json:"request_id"`
		Error     *struct {
			Retriable bool `json:"retriable"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &v)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		submitsLimited.Add(1)
		return "", errLimited
	case resp.StatusCode >= 500 && (resp.StatusCode == http.StatusServiceUnavailable || v.Error != nil && v.Error.Retriable):
		return "", &retriable{resp.StatusCode, string(raw)}
	case resp.StatusCode != http.StatusAccepted:
		return "", fmt.Errorf("submit: %d %s", resp.StatusCode, raw)
	}
	return v.RequestID, nil
}

// benchRawPublish measures the raw JetStream limit: synchronous publishes with
// a message id, of an event-sized payload, to a stream configured as QUERIES,
// from as many concurrent publishers as the service has appenders at load.
func benchRawPublish(ctx context.Context, cfg benchConfig, always bool) (float64, error) {
	dir, err := os.MkdirTemp("", "crosscheck-bench-raw-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	store, closeStore, err := app.OpenStore(ctx, config.Config{DataDir: dir, SyncAlways: always, Replicas: 1})
	if err != nil {
		return 0, err
	}
	defer closeStore()
	env, _ := events.Wrap(events.AggregateQuery, "req_01M7Z5T4Q295N5DJSD8HA71RYY", events.ModelAnswered{
		Model: events.ModelRef{Provider: "provider_a", ModelID: "sim-alpha-standard", Simulated: true}, Answer: strings.Repeat("an answer ", 20), Usage: events.Usage{InputTokens: 12, OutputTokens: 48},
	}, time.Now())
	payload, _ := json.Marshal(env)
	var count atomic.Int64
	run := func(d time.Duration, counting bool) {
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		for p := range cfg.Publishers {
			wg.Go(func() {
				for i := 0; time.Now().Before(deadline); i++ {
					if _, err := store.AppendRaw(ctx, fmt.Sprintf("ev.query.req_%d_%d.model_answered", p, i), payload, events.NewID()); err == nil && counting {
						count.Add(1)
					}
				}
			})
		}
		wg.Wait()
	}
	run(cfg.Phase/5, false)
	t := time.Now()
	run(cfg.Phase, true)
	return float64(count.Load()) / time.Since(t).Seconds(), nil
}

// benchLoad runs unify at full load through the HTTP API, then polls; it
// returns the data dir, kept for the replay phase.
func benchLoad(ctx context.Context, cfg benchConfig, always bool, r *policyResults) (string, error) {
	m, dir, err := benchMain(ctx, always, 0)
	if err != nil {
		return dir, err
	}
	defer m.Close()
	keys, err := benchKeys(ctx, m, (cfg.Clients+7)/8)
	if err != nil {
		return dir, err
	}
	done, err := watchCompletions(m.Conn())
	if err != nil {
		return dir, err
	}
	defer done.stop()
	var (
		count atomic.Int64
		mu    sync.Mutex
		owned []ownedQuery
		fail  firstError
	)
	run := func(d time.Duration, counting bool) {
		drive(ctx, m, done, cfg.Clients, func(c int) string { return keys[c/8] }, "load", time.Now().Add(d), &fail, func(c, i int, q ownedQuery) {
			if counting {
				count.Add(1)
				if i < 4 {
					mu.Lock()
					owned = append(owned, q)
					mu.Unlock()
				}
			}
		})
	}
	run(cfg.Phase/5, false)
	seq0 := lastSeq(ctx, m.Store.Queries)
	seqs0, err := m.Store.LastSeqs(ctx)
	if err != nil {
		return dir, err
	}
	stop := startProfile("load", always)
	t := time.Now()
	run(cfg.Phase, true)
	secs := time.Since(t).Seconds()
	stop()
	if e := fail.get(); e != nil {
		return dir, e
	}
	seqs1, err := m.Store.LastSeqs(ctx)
	if err != nil {
		return dir, err
	}
	if n := float64(count.Load()); n > 0 {
		r.StoreWritesByStream = map[string]float64{}
		for name, seq := range seqs1 {
			if w := float64(seq-seqs0[name]) / n; w > 0 {
				r.StoreWritesByStream[name] = w
				r.StoreWritesPerQuery += w
			}
		}
	}
	r.UnifyQueriesPerS = float64(count.Load()) / secs
	r.EventsAppendedPerS = float64(lastSeq(ctx, m.Store.Queries)-seq0) / secs
	if r.AccountAppendsPerQuery, r.QueryAppendsPerQuery, err = appendsPerQuery(ctx, m.Store, owned); err != nil {
		return dir, err
	}

	// Polls of finished queries, by the clients that own them.
	var polls atomic.Int64
	deadline := time.Now().Add(cfg.Phase / 2)
	stop = startProfile("poll", always)
	defer stop()
	t = time.Now()
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				q := owned[(c+i)%len(owned)]
				req, _ := http.NewRequestWithContext(ctx, "GET", m.URL()+"/v1/queries/"+q.id, nil)
				req.Header.Set("Authorization", "Bearer "+q.key)
				resp, err := benchHTTP.Do(req)
				if err != nil {
					fail.set(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					polls.Add(1)
				}
			}
		})
	}
	wg.Wait()
	r.PollGetPerS = float64(polls.Load()) / time.Since(t).Seconds()
	if e := fail.get(); e != nil {
		return dir, e
	}
	return dir, nil
}

// drive runs clients concurrent clients until deadline, each submitting a
// unify query with the key keyOf gives it and waiting for its end before
// the next; finished is called with each query that ended. A query refused
// with 429 is submitted again at once (the slot of the client's last query
// is freed just after its terminal event); one given up after the retries
// of a retriable 5xx is counted (submitsGivenUp) and the client goes on.
// Any other failure stops the client and is kept in fail.
func drive(ctx context.Context, m *app.Main, done *completions, clients int, keyOf func(c int) string, label string, deadline time.Time, fail *firstError, finished func(c, i int, q ownedQuery)) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			key := keyOf(c)
			for i := 0; time.Now().Before(deadline); i++ {
				prompt := fmt.Sprintf("%s %d %d", label, c, i)
				id, err := benchSubmit(ctx, m.URL(), key, prompt)
				for errors.Is(err, errLimited) && time.Now().Before(deadline) {
					runtime.Gosched()
					id, err = benchSubmit(ctx, m.URL(), key, prompt)
				}
				switch {
				case errors.Is(err, errLimited):
					return
				case errors.Is(err, errGaveUp):
					continue
				case err != nil:
					fail.set(err)
					return
				}
				if _, err := done.wait(ctx, id); err != nil {
					return
				}
				finished(c, i, ownedQuery{id, key})
			}
		})
	}
	wg.Wait()
}

// appendsPerQuery counts the appends of finished queries: the events on
// each query's own stream and the ACCOUNTS events that name it, averaged.
func appendsPerQuery(ctx context.Context, store *eventstore.Store, finished []ownedQuery) (account, query float64, err error) {
	if len(finished) == 0 {
		return 0, 0, nil
	}
	finished = finished[:min(len(finished), 200)]
	recs, err := store.Load(ctx, store.Accounts, "ev.account.>", 1)
	if err != nil {
		return 0, 0, err
	}
	byQuery := map[string]int{}
	for _, r := range recs {
		switch e := r.Event.(type) {
		case events.CreditsReserved:
			byQuery[e.RequestID]++
		case events.CreditsDebited:
			byQuery[e.RequestID]++
		case events.CreditsReleased:
			byQuery[e.RequestID]++
		case events.ChargesSettled:
			byQuery[e.RequestID]++
		}
	}
	var a, q int
	for _, f := range finished {
		_, qrecs, err := store.LoadQuery(ctx, f.id)
		if err != nil {
			return 0, 0, err
		}
		a, q = a+byQuery[f.id], q+len(qrecs)
	}
	n := float64(len(finished))
	return float64(a) / n, float64(q) / n, nil
}

// ownedQuery is a finished query and the key that may read it.
type ownedQuery struct{ id, key string }

// startProfile writes a CPU profile of one phase of the default policy to
// $BENCH_CPUPROFILE, when it is set: the phase named by $BENCH_PROFILE_PHASE
// (load, poll or replay; default load). The growth phase profiles each of
// its steps itself; with $BENCH_PROFILE_PHASE=growth, each step's profile
// is written to $BENCH_CPUPROFILE.<settled queries>.
func startProfile(phase string, always bool) func() {
	path := os.Getenv("BENCH_CPUPROFILE")
	want := os.Getenv("BENCH_PROFILE_PHASE")
	if want == "" {
		want = "load"
	}
	if path == "" || always || want != phase {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

func lastSeq(ctx context.Context, s *eventstore.Stream) uint64 {
	state, err := s.State(ctx)
	if err != nil {
		return 0
	}
	return state.LastSeq
}

// benchLatency submits at a fixed moderate rate with a small simulated model
// latency: overhead is end-to-end time minus the simulated time (models in
// parallel, then the synthesis: twice the latency); the SSE figure is, for
// each event appended after a stream was opened, the time from the event's
// envelope time (stamped just before its append) to its arrival at the client.
func benchLatency(ctx context.Context, cfg benchConfig, always bool, r *policyResults) error {
	m, dir, err := benchMain(ctx, always, cfg.Latency)
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		return err
	}
	defer m.Close()
	keys, err := benchKeys(ctx, m, 32)
	if err != nil {
		return err
	}
	done, err := watchCompletions(m.Conn())
	if err != nil {
		return err
	}
	defer done.stop()
	var (
		mu       sync.Mutex
		overhead []float64
		sse      []float64
		fail     firstError
		wg       sync.WaitGroup
		refused  atomic.Int64
	)
	n := int(cfg.Phase.Seconds() * float64(r.LatencyRatePerS))
	tick := time.NewTicker(time.Second / time.Duration(r.LatencyRatePerS))
	defer tick.Stop()
	for i := range n {
		<-tick.C
		key := keys[i%len(keys)]
		withSSE := i%2 == 1
		wg.Go(func() {
			start := time.Now()
			id, err := benchSubmit(ctx, m.URL(), key, fmt.Sprintf("latency %d", i))
			if errors.Is(err, errLimited) || errors.Is(err, errGaveUp) {
				// A query refused on a loaded machine (its key's queries
				// still in flight) is not measured, and counted.
				refused.Add(1)
				return
			}
			if err != nil {
				fail.set(err)
				return
			}
			if !withSSE {
				end, err := done.wait(ctx, id)
				if err != nil {
					return
				}
				mu.Lock()
				overhead = append(overhead, float64(end.Sub(start)-2*cfg.Latency)/float64(time.Millisecond))
				mu.Unlock()
				return
			}
			lat, err := sseLatencies(ctx, m, key, id)
			if err != nil {
				fail.set(err)
				return
			}
			mu.Lock()
			sse = append(sse, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	r.LatencyRefused = refused.Load()
	if e := fail.get(); e != nil {
		return e
	}
	r.OverheadMsP50, r.OverheadMsP99 = percentile(overhead, 50), percentile(overhead, 99)
	r.SSEFirstEventMsP99 = percentile(sse, 99)
	return nil
}

// sseLatencies follows one query's stream and returns, in milliseconds, the
// delay of every event appended after the stream was open.
func sseLatencies(ctx context.Context, m *app.Main, key, id string) ([]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", m.URL()+"/v1/queries/"+id+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := benchHTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	opened := time.Now()
	type arrival struct {
		seq uint64
		at  time.Time
	}
	var got []arrival
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			var seq uint64
			fmt.Sscan(v, &seq)
			got = append(got, arrival{seq, time.Now()})
		}
	}
	var out []float64
	for _, a := range got {
		msg, err := m.Store.Queries.Message(ctx, a.seq)
		if err != nil {
			return nil, err
		}
		var env events.Envelope
		if err := json.Unmarshal(msg.Data, &env); err != nil {
			return nil, err
		}
		if env.Time.After(opened) {
			out = append(out, float64(a.at.Sub(env.Time))/float64(time.Millisecond))
		}
	}
	return out, nil
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// benchInflight holds cfg.Inflight queries in flight (models that take ten
// minutes) on as many keys as the limit needs and reports the growth of the
// process's heap and stacks per query.
func benchInflight(ctx context.Context, cfg benchConfig, always bool) (float64, error) {
	m, dir, err := benchMain(ctx, always, 10*time.Minute)
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		return 0, err
	}
	defer m.Close()
	keys, err := benchKeys(ctx, m, (cfg.Inflight+7)/8)
	if err != nil {
		return 0, err
	}
	var started atomic.Int64
	sub, err := m.Conn().Subscribe("ev.query.*.started", func(*nats.Msg) { started.Add(1) })
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	before := heapAndStacks()
	var wg sync.WaitGroup
	var fail firstError
	sem := make(chan struct{}, 64)
	for i := range cfg.Inflight {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := benchSubmit(ctx, m.URL(), keys[i/8], fmt.Sprintf("held %d", i)); err != nil {
				fail.set(err)
			}
		})
	}
	wg.Wait()
	if e := fail.get(); e != nil {
		return 0, e
	}
	deadline := time.Now().Add(2 * time.Minute)
	for started.Load() < int64(cfg.Inflight) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("only %d of %d queries started", started.Load(), cfg.Inflight)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let the last model calls begin
	after := heapAndStacks()
	if path := os.Getenv("BENCH_MEMPROFILE"); path != "" && !always {
		if f, err := os.Create(path); err == nil {
			_ = pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	return float64(after-before) / float64(cfg.Inflight), nil
}

func heapAndStacks() int64 {
	debug.FreeOSMemory() // a full collection, twice over, so readings compare
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse + ms.StackInuse)
}

// replayRounds is how many rebuilds the replay phase times. One rebuild
// lasts under a second (a fifth of one under fsync always, which loads
// fewer queries), so a single figure moves by ±10 % with the machine; the
// phase reports the median and keeps every round in the JSON.
const replayRounds = 3

// benchReplay rebuilds the query read model of dir from zero with the
// production projector replayRounds times, each on the store opened afresh
// (as a process that rebuilds starts), and reports the events applied per
// second: the median, and every round.
func benchReplay(ctx context.Context, dir string, always bool) (float64, []float64, error) {
	if dir == "" {
		return 0, nil, errors.New("no data dir from the load phase")
	}
	var rounds []float64
	for i := range replayRounds {
		rate, err := replayRound(ctx, dir, always, i == 0)
		if err != nil {
			return 0, rounds, err
		}
		rounds = append(rounds, rate)
	}
	return percentile(rounds, 50), rounds, nil
}

// replayRound opens the store of dir, rebuilds its query read model once
// and returns the events applied per second; profiled names whether this
// round is the one $BENCH_CPUPROFILE may profile.
func replayRound(ctx context.Context, dir string, always, profiled bool) (float64, error) {
	store, closeStore, err := app.OpenStore(ctx, config.Config{DataDir: dir, Replicas: 1})
	if err != nil {
		return 0, err
	}
	defer closeStore()
	// The phase before holds 10,000 queries and leaves a heap goal of twice
	// that: without a collection first, the rebuild would run with none, on
	// memory the runtime had meanwhile returned to the system, and spend a
	// third of its CPU more on faulting it back in (docs/BENCHMARKS.md). The
	// garbage of the phases before, and of opening the store (the server
	// reads every recent message back to rebuild its duplicate window), is
	// collected first, outside the timing.
	runtime.GC()
	if profiled {
		stop := startProfile("replay", always)
		defer stop()
	}
	n, secs, err := replay(ctx, store)
	if err != nil {
		return 0, err
	}
	return float64(n) / secs, nil
}

// replay empties the query read model of store and rebuilds it from every
// event of QUERIES with the production projector and runner; it returns the
// number of events applied and the seconds the rebuild took.
func replay(ctx context.Context, store *eventstore.Store) (int64, float64, error) {
	if err := store.ResetQueryStatus(ctx); err != nil {
		return 0, 0, err
	}
	const name = "bench_replay"
	_ = projections.Rewind(ctx, store.Projections, name)
	defer func() { _ = projections.Rewind(context.WithoutCancel(ctx), store.Projections, name) }()
	state, err := store.Queries.State(ctx)
	if err != nil {
		return 0, 0, err
	}
	total := int64(state.Msgs)
	var applied atomic.Int64
	status := &projections.QueryStatus{Store: store, Every: projections.RunningDocEvery}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	finished := make(chan struct{})
	runner := &projections.Runner{Name: name, Stream: store.Queries, Filters: []string{"ev.query.>"}, Log: zerolog.Nop(), Checkpoints: store.Projections, Deferred: status,
		HandleBatch: func(ctx context.Context, recs []events.Record) error {
			if err := status.HandleBatch(ctx, recs); err != nil {
				return err
			}
			if applied.Add(int64(len(recs))) == total {
				// Until every document is stored: the last batch's
				// writes are still on their way.
				if _, _, err := status.Flush(ctx, true); err != nil {
					return err
				}
				close(finished)
			}
			return nil
		}}
	t := time.Now()
	ran := make(chan struct{})
	go func() { _ = runner.Run(runCtx); close(ran) }()
	defer func() { cancel(); <-ran }()
	select {
	case <-finished:
	case <-time.After(3 * time.Minute):
		return 0, 0, fmt.Errorf("replay applied %d of %d events", applied.Load(), total)
	}
	return total, time.Since(t).Seconds(), nil
}

// firstError keeps the first error that any of many goroutines reports;
// the errors may be of different types.
type firstError struct{ p atomic.Pointer[error] }

// set keeps err if no error was kept before.
func (f *firstError) set(err error) { f.p.CompareAndSwap(nil, &err) }

// get returns the kept error, or nil.
func (f *firstError) get() error {
	if p := f.p.Load(); p != nil {
		return *p
	}
	return nil
}
