package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"

	"github.com/crosscheck/crosscheck/internal/app"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// growthResults are the figures of the growth phase: one account, whose
// every query goes through the API, measured as its history grows, and
// the first query of that account after a restart.
type growthResults struct {
	SyncPolicy string `json:"sync_policy"`
	// Clients is how many clients load the account at once: the run's,
	// at most the account's bound on queries in flight.
	Clients int          `json:"clients"`
	Steps   []growthStep `json:"steps"`
	// QueriesPerSRatio is the unify queries/s of the last step divided by
	// that of the first; CPUPerQueryRatio the same of the CPU per query.
	QueriesPerSRatio float64 `json:"unify_queries_per_s_ratio"`
	CPUPerQueryRatio float64 `json:"cpu_ms_per_query_ratio"`
	// ColdHistory is the settled queries of the account when the process
	// restarted; ColdFirstQueryMs the time from the first submission of the
	// account after the restart to its terminal event, and ColdFirstQueryCPUMs
	// the process's CPU meanwhile.
	ColdHistory         int     `json:"cold_history_queries"`
	ColdFirstQueryMs    float64 `json:"cold_first_query_ms"`
	ColdFirstQueryCPUMs float64 `json:"cold_first_query_cpu_ms"`
	// HistorySeconds is the time spent writing the history in bulk.
	HistorySeconds float64 `json:"history_seconds"`
	// Error is why the phase stopped before its end: a step whose queries
	// the service could no longer run (every submission given up after the
	// contract's retries), or a cold account it could not load. The
	// figures before it stand.
	Error string `json:"error,omitempty"`
}

// growthStep is one size of the account's history.
type growthStep struct {
	// SettledQueries is the account's settled queries when the step's
	// measured load began; SettledAfter when it ended.
	SettledQueries int `json:"settled_queries"`
	SettledAfter   int `json:"settled_after"`
	// Refused is the submissions of the step refused with 429: none while
	// its clients stay within the account's bound on queries in flight.
	Refused int64 `json:"refused"`
	// UnifyQueriesPerS and CPUMsPerQuery are of the account's unify queries
	// at full load through the API: CPU is the whole process's (the
	// embedded server's and the HTTP clients' included) over the queries
	// that ended.
	UnifyQueriesPerS float64 `json:"unify_queries_per_s"`
	CPUMsPerQuery    float64 `json:"cpu_ms_per_query"`
	// LedgerAppendShare is the share of the load's CPU that went into the
	// queries' ledger appends, read from a CPU profile of the load: the
	// embedded server's goroutines of the ACCOUNTS stream but its consumers'
	// (LedgerServerShare: its expected-sequence check, its store, its
	// acknowledgement; the server labels them with their stream) and this process's
	// account commands (LedgerClientShare: deciding, encoding and chaining
	// the event, publishing it, reading the account again after a conflict).
	LedgerAppendShare float64 `json:"ledger_append_cpu_share"`
	LedgerServerShare float64 `json:"ledger_append_cpu_share_server"`
	LedgerClientShare float64 `json:"ledger_append_cpu_share_client"`
}

// growthKeys is how many API keys the growth phase's account has: its
// clients share them, 8 each (the per-key bound on queries in flight).
func growthKeys(clients int) int { return (clients + 7) / 8 }

// growthClients is how many of the run's clients load the growth phase's
// one account: no more than the account may have queries in flight
// (perAccount; 0 is no bound), so that no submission is refused.
func growthClients(clients, perAccount int) int {
	if perAccount > 0 {
		return min(clients, perAccount)
	}
	return clients
}

// benchGrowth runs the growth phase into r under the fsync policy
// $BENCH_GROWTH_SYNC (interval, the default, or always): one account takes
// every query, from the run's clients up to the account's bound on queries
// in flight (growthClients); at each size of cfg.GrowthSizes, its history is brought to
// that many settled queries, then unify runs at full load through the API
// for half a phase (after a tenth of one unmeasured) and the ledger's
// appends are measured alone. Last, the process restarts on its data dir
// and the account's first query is timed.
//
// The history between steps is written in bulk, not through the API (100,000
// queries through the API take the best part of an hour on 2 cores): for
// each query, the ledger events the service appends, a reservation and a
// settlement of five calls priced as a unify query's, decided by the
// account's own decisions on its state, chained and wrapped in the ledger's
// layout as the service does, then published without waiting for each
// acknowledgement. The queries' own events are not written: nothing on the
// paths measured reads a settled query's events.
func benchGrowth(ctx context.Context, cfg benchConfig, w io.Writer, r *growthResults, saved func()) error {
	always := os.Getenv("BENCH_GROWTH_SYNC") == "always"
	r.SyncPolicy = policyName(always)
	fmt.Fprintf(w, "\n== growth: one account, fsync %s\n", r.SyncPolicy)
	m, dir, err := benchMain(ctx, always, 0)
	if dir != "" {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		return err
	}
	defer func() { m.Close() }()
	cfg.Clients = growthClients(cfg.Clients, m.Config.InflightPerAccount)
	r.Clients = cfg.Clients
	acct, err := m.Accounts.CreateAccount(ctx, "growth", events.PlanEnterprise)
	if err != nil {
		return err
	}
	if _, err := m.Ledger.Adjust(ctx, acct.ID, 1_000_000_000*events.MicrosPerCredit, "benchmark grant"); err != nil {
		return err
	}
	keys := make([]string, growthKeys(cfg.Clients))
	for i := range keys {
		k, _, err := m.Accounts.CreateKey(ctx, acct.ID, fmt.Sprintf("growth %d", i), true)
		if err != nil {
			return err
		}
		keys[i] = k.String()
	}
	h, err := newHistory(ctx, m, acct.ID)
	if err != nil {
		return err
	}
	settled := 0
	for _, size := range cfg.GrowthSizes {
		t := time.Now()
		if err := h.add(ctx, m, size-settled); err != nil {
			return err
		}
		r.HistorySeconds += time.Since(t).Seconds()
		settled = max(settled, size)
		step, n, err := growthLoad(ctx, cfg, m, acct.ID, keys, settled)
		if errors.Is(err, errGaveUp) {
			r.Error = fmt.Sprintf("at %d settled queries: %v", settled, err)
			saved()
			fmt.Fprintf(w, "  %7d settled: stopped: %v\n", settled, err)
			return nil
		}
		if err != nil {
			return err
		}
		settled += n
		r.Steps = append(r.Steps, step)
		first := r.Steps[0]
		if first.UnifyQueriesPerS > 0 && first.CPUMsPerQuery > 0 {
			r.QueriesPerSRatio = step.UnifyQueriesPerS / first.UnifyQueriesPerS
			r.CPUPerQueryRatio = step.CPUMsPerQuery / first.CPUMsPerQuery
		}
		saved()
		fmt.Fprintf(w, "  %7d settled: %7.1f q/s, %6.2f ms CPU/query, ledger appends %.1f %% of the CPU (server %.1f %%, client %.1f %%), in %.1fs\n",
			step.SettledQueries, step.UnifyQueriesPerS, step.CPUMsPerQuery, 100*step.LedgerAppendShare, 100*step.LedgerServerShare, 100*step.LedgerClientShare, time.Since(t).Seconds())
		if err := h.catchUp(ctx, m.Store); err != nil {
			return err
		}
	}

	// A restart: the account is cold, its history on disk.
	t := time.Now()
	m.Close()
	if m, _, err = benchMainAt(ctx, dir, always, 0); err != nil {
		return err
	}
	done, err := watchCompletions(m.Conn())
	if err != nil {
		return err
	}
	defer done.stop()
	// The key is known before the clock starts: authentication reads the
	// keys bucket, not the account.
	if err := warmKey(ctx, m, keys[0]); err != nil {
		return err
	}
	cpu0, start := cpuTime(), time.Now()
	id, err := benchSubmit(ctx, m.URL(), keys[0], "cold account")
	if errors.Is(err, errGaveUp) {
		r.Error = fmt.Sprintf("the first query of the cold account, %d settled, after %.1fs: %v", settled, time.Since(start).Seconds(), err)
		saved()
		fmt.Fprintf(w, "  cold account, %d settled: %s\n", settled, r.Error)
		return nil
	}
	if err != nil {
		return err
	}
	end, err := done.wait(ctx, id)
	if err != nil {
		return err
	}
	r.ColdHistory = settled
	r.ColdFirstQueryMs = float64(end.Sub(start)) / float64(time.Millisecond)
	r.ColdFirstQueryCPUMs = float64(cpuTime()-cpu0) / float64(time.Millisecond)
	saved()
	fmt.Fprintf(w, "  cold account, %d settled: first query %.1f ms (%.1f ms CPU), restart included %.1fs\n",
		settled, r.ColdFirstQueryMs, r.ColdFirstQueryCPUMs, time.Since(t).Seconds())
	return nil
}

// warmKey makes one authenticated request that reads nothing of the
// account: a poll of an unknown query.
func warmKey(ctx context.Context, m *app.Main, key string) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", m.URL()+"/v1/queries/req_"+events.NewID(), nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := benchHTTP.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("warm key: %d", resp.StatusCode)
	}
	return nil
}

// growthLoad runs one step: unify at full load on the account, under a
// CPU profile. It returns the step and how many queries it settled.
func growthLoad(ctx context.Context, cfg benchConfig, m *app.Main, acct string, keys []string, settled int) (growthStep, int, error) {
	step := growthStep{SettledQueries: settled}
	done, err := watchCompletions(m.Conn())
	if err != nil {
		return step, 0, err
	}
	defer done.stop()
	var (
		count atomic.Int64
		fail  firstError
	)
	// One query alone first, before the clock starts.
	id, err := benchSubmit(ctx, m.URL(), keys[0], "growth warm")
	if err != nil {
		return step, 0, err
	}
	if _, err := done.wait(ctx, id); err != nil {
		return step, 0, err
	}
	keyOf := func(c int) string { return keys[c/8] }
	limited0 := submitsLimited.Load()
	drive(ctx, m, done, cfg.Clients, keyOf, "growth warm-up", time.Now().Add(cfg.Phase/10), &fail, func(int, int, ownedQuery) { count.Add(1) })
	warm := count.Swap(0) + 1
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		return step, 0, err
	}
	cpu0, t := cpuTime(), time.Now()
	drive(ctx, m, done, cfg.Clients, keyOf, "growth", time.Now().Add(cfg.Phase/2), &fail, func(int, int, ownedQuery) { count.Add(1) })
	secs, cpu := time.Since(t).Seconds(), cpuTime()-cpu0
	pprof.StopCPUProfile()
	step.Refused = submitsLimited.Load() - limited0
	if path := os.Getenv("BENCH_CPUPROFILE"); path != "" && os.Getenv("BENCH_PROFILE_PHASE") == "growth" {
		_ = os.WriteFile(fmt.Sprintf("%s.%d", path, settled), prof.Bytes(), 0o644)
	}
	if e := fail.get(); e != nil {
		return step, 0, e
	}
	n := count.Load()
	step.SettledQueries += int(warm)
	step.SettledAfter = step.SettledQueries + int(n)
	if n > 0 {
		step.UnifyQueriesPerS = float64(n) / secs
		step.CPUMsPerQuery = float64(cpu) / float64(time.Millisecond) / float64(n)
	}
	if step.LedgerServerShare, step.LedgerClientShare, err = ledgerShares(prof.Bytes()); err != nil {
		return step, 0, err
	}
	step.LedgerAppendShare = step.LedgerServerShare + step.LedgerClientShare
	return step, int(warm + n), nil
}

// accountCommands is the function every account command runs in: the
// ledger's appends (and the account's other commands, which a load of
// queries does not make).
const accountCommands = "/internal/accounts.(*Service).Update"

// serverConsumer is the prefix of the embedded server's consumer code: its
// goroutines carry their stream's label too, and deliver events to readers
// (the balances projection), which is no part of an append.
const serverConsumer = "/server.(*consumer)."

// ledgerShares returns the shares of a CPU profile's time spent on the
// ledger's appends: on the embedded server's goroutines of the ACCOUNTS
// stream (nats-server labels them stream=ACCOUNTS) but its consumers', and
// elsewhere under accountCommands.
func ledgerShares(raw []byte) (server, client float64, err error) {
	p, err := profile.ParseData(raw)
	if err != nil {
		return 0, 0, err
	}
	cpu := len(p.SampleType) - 1 // the last value is the CPU time
	in := func(s *profile.Sample, name string, match func(string, string) bool) bool {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function != nil && match(line.Function.Name, name) {
					return true
				}
			}
		}
		return false
	}
	var total, srv, cli int64
	for _, s := range p.Sample {
		v := s.Value[cpu]
		total += v
		switch {
		case slices.Contains(s.Label["stream"], eventstore.StreamAccounts):
			if !in(s, serverConsumer, strings.Contains) {
				srv += v
			}
		case in(s, accountCommands, strings.HasSuffix):
			cli += v
		}
	}
	if total == 0 {
		return 0, 0, nil
	}
	return float64(srv) / float64(total), float64(cli) / float64(total), nil
}

// unifyCalls are the five calls of a unify query over the four simulated
// providers, with their usage and cost as a query records them.
func unifyCalls(m *app.Main) []events.Call {
	var calls []events.Call
	var first events.ModelRef
	for i, p := range m.Catalog.Providers {
		ref := events.ModelRef{Provider: p.Key, ModelID: p.Default().ID, Simulated: true}
		if i == 0 {
			first = ref
		}
		u := events.Usage{InputTokens: 16, OutputTokens: 52}
		calls = append(calls, events.Call{ID: events.NewID(), Step: events.ModelAnswered{}.EventName(), Model: ref, Usage: u, CostMicros: m.Ledger.Estimator.Cost(ref, u)})
	}
	u := events.Usage{InputTokens: 367, OutputTokens: 113}
	return append(calls, events.Call{ID: events.NewID(), Step: events.Synthesized{}.EventName(), Model: first, Usage: u, CostMicros: m.Ledger.Estimator.Cost(first, u)})
}

// history writes an account's settled queries in bulk. a is the account as
// this writer knows it: folded from the stream, and every event it wrote.
type history struct {
	acct    string
	a       *events.Account
	calls   func() []events.Call
	pricing func(events.ModelRef) catalog.Pricing
}

func newHistory(ctx context.Context, m *app.Main, acct string) (*history, error) {
	a, err := m.Store.LoadAccount(ctx, acct)
	if err != nil {
		return nil, err
	}
	return &history{acct: acct, a: a, calls: func() []events.Call { return unifyCalls(m) }, pricing: m.Ledger.Estimator.Price}, nil
}

// catchUp folds the account's events written since this writer last read
// or wrote (the service's, during a step).
func (h *history) catchUp(ctx context.Context, store *eventstore.Store) error {
	recs, err := store.Load(ctx, store.Accounts, events.Filter(events.AggregateAccount, h.acct), h.a.Read+1)
	if err != nil {
		return err
	}
	for _, r := range recs {
		h.a.CatchUp(r)
	}
	return nil
}

// historyBatch is how many queries' events one bulk publish holds.
const historyBatch = 1000

// add writes n settled queries to the account: for each, its reservation
// and its settlement, decided, chained and wrapped as the ledger service
// does, published in batches without waiting for each acknowledgement.
func (h *history) add(ctx context.Context, m *app.Main, n int) error {
	store := m.Store
	if err := h.catchUp(ctx, store); err != nil {
		return err
	}
	ending := events.EndingOf(events.QueryCompleted{})
	for n > 0 {
		batch := make([]eventstore.RawEvent, 0, 2*min(n, historyBatch))
		for range min(n, historyBatch) {
			id := "req_" + events.NewID()
			reserve, err := h.a.DecideReserve(id, 2*events.MicrosPerCredit, time.Now())
			if err != nil {
				return err
			}
			raw, err := h.append(reserve)
			if err != nil {
				return err
			}
			batch = append(batch, raw)
			var items []events.SettledCall
			for _, c := range h.calls() {
				p := h.pricing(c.Model)
				items = append(items, events.SettledCall{CallID: c.ID, Step: c.Step, Model: c.Model, InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens,
					InputPerMillion: p.InputPerMillion, OutputPerMillion: p.OutputPerMillion, CostMicros: c.CostMicros})
			}
			settle := h.a.DecideSettle(id, items, "settled").(events.ChargesSettled)
			settle.Ending = ending
			if raw, err = h.append(settle); err != nil {
				return err
			}
			batch = append(batch, raw)
		}
		seqs, err := store.AppendAll(ctx, batch)
		if err != nil {
			return err
		}
		// The events were folded before their sequences were known: the
		// account's sequences are those of the last one.
		last := seqs[len(seqs)-1]
		h.a.LastSeq, h.a.LedgerSeq, h.a.ChainSeq, h.a.Read = last, last, last, last
		n -= len(batch) / 2
		// The service reads the batch now, as it would have known each
		// event it appended itself: its copy of the account never has a
		// long history to catch up with.
		if _, err := m.Accounts.Account(ctx, h.acct); err != nil {
			return err
		}
	}
	return nil
}

// append folds ev into the account as the next ledger event and returns it
// encoded as stored.
func (h *history) append(ev events.Event) (eventstore.RawEvent, error) {
	linked, _ := events.Linked(ev, h.a.Ledger.Head)
	env, err := events.WrapLedger(h.acct, linked, time.Now())
	if err != nil {
		return eventstore.RawEvent{}, err
	}
	data, err := env.Encode()
	if err != nil {
		return eventstore.RawEvent{}, err
	}
	h.a.Apply(events.Record{Envelope: env, Event: linked, Raw: data})
	return eventstore.RawEvent{Subject: env.Subject, ID: env.ID, Data: data}, nil
}
