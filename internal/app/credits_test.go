package app

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// accountWith creates an account on plan and sets its balance to credits
// (through the admin API), returning the account id.
func (h *harness) accountWith(plan string, credits float64) string {
	h.t.Helper()
	r := h.admin("POST", "/admin/v1/accounts", map[string]any{"name": "billing", "plan": plan})
	must(h.t, r.status == 201, "create account: %d %s", r.status, r.body)
	acct := r.json(h.t)["account_id"].(string)
	if delta := credits - r.json(h.t)["balance"].(float64); delta != 0 {
		r = h.admin("POST", "/admin/v1/accounts/"+acct+"/credits", map[string]any{"amount": delta, "reason": "test balance"})
		must(h.t, r.status == 200, "adjust: %d %s", r.status, r.body)
	}
	return acct
}

func (h *harness) accountView(acct string) map[string]any {
	h.t.Helper()
	r := h.admin("GET", "/admin/v1/accounts/"+acct, nil)
	must(h.t, r.status == 200, "get account: %d %s", r.status, r.body)
	return r.json(h.t)
}

// ledgerEvents returns the account's events of the given name.
func (h *harness) ledgerEvents(acct, name string) []events.Record {
	var out []events.Record
	for _, r := range h.streamRecords("ACCOUNTS") {
		if r.Envelope.Type == events.AggregateAccount+"."+name && events.AggregateID(r.Envelope.Subject) == acct {
			out = append(out, r)
		}
	}
	return out
}

// chargedCalls counts how many times the ledger of acct charged each model
// call, by a settlement's item or a per-call debit, and sums what it charged.
func (h *harness) chargedCalls(acct string) (map[string]int, float64) {
	calls := map[string]int{}
	var sum float64
	for _, r := range h.ledgerEvents(acct, "charges_settled") {
		for _, c := range r.Event.(events.ChargesSettled).Calls {
			calls[c.CallID]++
			sum += events.Credits(c.AmountMicros)
		}
	}
	for _, r := range h.ledgerEvents(acct, "credits_debited") {
		d := r.Event.(events.CreditsDebited)
		calls[d.CallID]++
		sum += events.Credits(d.AmountMicros)
	}
	return calls, sum
}

// settlements counts the settlements of acct's queries: one event each,
// a charges_settled (or a credits_released of an abandoned submission or of
// the older layout).
func (h *harness) settlements(acct string) int {
	return len(h.ledgerEvents(acct, "charges_settled")) + len(h.ledgerEvents(acct, "credits_released"))
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// tamper appends ev to the stream directly, as an attacker with access to
// the data dir would, while no service runs.
func (h *harness) tamper(aggregate, id string, ev events.Event) {
	h.t.Helper()
	h.offline(func(store *eventstore.Store) {
		env, _ := events.Wrap(aggregate, id, ev, time.Now())
		_, err := store.Append(context.Background(), env, nil)
		must(h.t, err == nil, "tamper: %v", err)
	})
}

// audit runs `crosscheck audit` on the harness's data dir; the service must
// be stopped.
func (h *harness) audit() (bool, string) {
	h.t.Helper()
	var out bytes.Buffer
	ok, err := Audit(context.Background(), h.cfg, &out)
	must(h.t, err == nil, "audit: %v", err)
	return ok, out.String()
}

// closeAndAudit stops the harness's process and the others given (the audit
// opens the store as a one-off command would) and checks the audit passes.
func (h *harness) closeAndAudit(others ...*Main) {
	h.t.Helper()
	h.m.Close()
	for _, m := range others {
		m.Close()
	}
	ok, report := h.audit()
	must(h.t, ok, "audit:\n%s", report)
}

func TestCreditsChargedSettledAndAudited(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	id := h.submitOK(key, "Is it safe to raise the database connection pool from 20 to 200? Consider CPU, memory and max_connections.")
	res := h.wait(key, id, 30*time.Second)
	est := jsonPath(res, "credits", "estimated").(float64)
	charged, ok := jsonPath(res, "credits", "charged").(float64)
	must(t, ok && charged > 0 && est >= charged, "credits: estimated %v, charged %v", est, jsonPath(res, "credits", "charged"))
	sum := jsonPath(res, "synthesis", "credits").(float64)
	for _, m := range res["models"].([]any) {
		sum += jsonPath(m, "credits").(float64)
	}
	must(t, near(sum, charged), "charged %v, but the calls cost %v", charged, sum)
	must(t, charged > 0.85 && charged < 1.15, "four standard models cost %v credits in unify for a typical prompt; the calibration aims at about 1", charged)

	acc := h.accountView(acct)
	must(t, near(acc["balance"].(float64), 50-charged) && acc["reserved"] == 0.0 && near(acc["spent_this_month"].(float64), charged),
		"account after settlement: %v", acc)
	// The account's money moved twice: the reservation and the settlement,
	// which charged the five calls.
	for name, want := range map[string]int{"credits_reserved": 1, "charges_settled": 1, "credits_debited": 0, "credits_released": 0} {
		must(t, len(h.ledgerEvents(acct, name)) == want, "%s: %d events, want %d", name, len(h.ledgerEvents(acct, name)), want)
	}
	calls, _ := h.chargedCalls(acct)
	must(t, len(calls) == 5, "%d calls charged, want 5", len(calls))
	// The ledger page shows every entry with the balance after it.
	r := h.admin("GET", "/admin/v1/accounts/"+acct+"/ledger?limit=2", nil)
	must(t, r.status == 200, "ledger: %d %s", r.status, r.body)
	page := r.json(t)
	must(t, len(page["entries"].([]any)) == 2 && page["next_after"] != nil, "first page: %s", r.body)
	r = h.admin("GET", fmt.Sprintf("/admin/v1/accounts/%s/ledger?after=%.0f", acct, page["next_after"].(float64)), nil)
	rest := r.json(t)["entries"].([]any)
	last := rest[len(rest)-1]
	must(t, jsonPath(last, "type") == "charges_settled" && near(jsonPath(last, "balance_after").(float64), 50-charged), "last entry: %v", last)

	h.m.Close()
	okAudit, report := h.audit()
	must(t, okAudit, "audit of a clean log failed:\n%s", report)
}

// Many goroutines submitting on a small balance never overdraw. The models
// hold every call until the burst is over, so no query gives back its unused
// reservation during it: what is admitted must fit in the balance at once.
func TestConcurrentSubmissionsNeverOverdraw(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) { p.hold = hold })
		return set
	}))
	acct := h.accountWith("enterprise", 6)
	var keys []string
	for range 5 {
		keys = append(keys, h.key(acct))
	}
	const n = 40
	var wg sync.WaitGroup
	var accepted, broke, limited atomic.Int64
	ids := make(chan string, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			r := h.submit(keys[i%len(keys)], map[string]any{"mode": "unify", "prompt": fmt.Sprintf("spend %d", i)})
			switch {
			case r.status == 202:
				accepted.Add(1)
				ids <- r.json(t)["request_id"].(string)
			case r.status == 402 && r.errCode(t) == "insufficient_credits":
				broke.Add(1)
			case r.status == 429:
				limited.Add(1)
			default:
				t.Errorf("unexpected %d %s", r.status, r.body)
			}
		})
	}
	close(start)
	wg.Wait()
	close(ids)
	est := h.api("POST", "/v1/estimate-cost", keys[0], map[string]any{"mode": "unify", "prompt": "spend 10"}).json(t)["estimated_credits"].(float64)
	must(t, accepted.Load() > 0 && broke.Load() > 0, "accepted %d, refused %d: the balance should admit some and refuse others", accepted.Load(), broke.Load())
	must(t, float64(accepted.Load())*(est-0.01) <= 6, "%d queries of about %v credits were admitted on a balance of 6", accepted.Load(), est)
	acc := h.accountView(acct)
	must(t, acc["balance"].(float64) >= 0 && acc["balance"].(float64)+acc["reserved"].(float64) <= 6+1e-9, "during the burst: %v", acc)
	close(hold)
	var charged float64
	for id := range ids {
		res := h.wait(keys[0], id, 30*time.Second)
		charged += jsonPath(res, "credits", "charged").(float64)
	}
	acc = h.accountView(acct)
	must(t, acc["balance"].(float64) >= 0 && near(acc["balance"].(float64), 6-charged) && acc["reserved"] == 0.0, "account after: %v (charged %v)", acc, charged)
}

func TestMonthlyCap(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) { p.hold = hold })
		return set
	}))
	acct := h.accountWith("pro", 300)
	key := h.key(acct)
	r := h.admin("PUT", "/admin/v1/accounts/"+acct+"/monthly-cap", map[string]any{"credits": 2})
	must(t, r.status == 200 && r.json(t)["monthly_cap"] == 2.0, "set cap: %d %s", r.status, r.body)
	first := h.submitOK(key, "within the cap")
	r = h.submit(key, map[string]any{"mode": "unify", "prompt": "past the cap"})
	must(t, r.status == 402 && r.errCode(t) == "monthly_cap_exceeded", "second query under a cap of 2: %d %s", r.status, r.body)
	close(hold)
	h.wait(key, first, 30*time.Second)
	r = h.admin("PUT", "/admin/v1/accounts/"+acct+"/monthly-cap", map[string]any{"credits": nil})
	must(t, r.status == 200 && r.json(t)["monthly_cap"] == nil, "remove cap: %d %s", r.status, r.body)
	r = h.submit(key, map[string]any{"mode": "unify", "prompt": "no cap"})
	must(t, r.status == 202, "without a cap: %d %s", r.status, r.body)
	for _, bad := range []any{-1, "ten", map[string]any{}} {
		r = h.admin("PUT", "/admin/v1/accounts/"+acct+"/monthly-cap", map[string]any{"credits": bad})
		must(t, r.status == 400, "cap %v: %d %s", bad, r.status, r.body)
	}
}

func TestIdempotentReplayChargesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	body := map[string]any{"mode": "unify", "prompt": "charge me once"}
	idem := map[string]string{"Idempotency-Key": "once"}
	id := h.submit(key, body, idem).json(t)["request_id"].(string)
	h.wait(key, id, 30*time.Second)
	before := h.accountView(acct)["balance"]
	for range 3 {
		r := h.submit(key, body, idem)
		must(t, r.json(t)["request_id"] == id && r.json(t)["idempotent_replayed"] == true, "replay: %s", r.body)
	}
	must(t, h.accountView(acct)["balance"] == before, "a replay changed the balance")
	must(t, len(h.ledgerEvents(acct, "credits_reserved")) == 1, "replays reserved again")
}

// A worker killed mid-query: after the restart the query is charged once per
// call, and the audit passes.
func TestWorkerKilledMidQueryChargesOnce(t *testing.T) {
	t.Parallel()
	held, crash := holdUntilCrash(t, func(key string, p *testProvider, hold chan struct{}) {
		if key != catalog.ProviderA {
			p.hold = hold
		}
	})
	h := newHarness(t, held)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	id := h.submitOK(key, "killed mid-query")
	eventually(t, 30*time.Second, "provider_a's answer to be recorded", func() bool {
		return h.countEvents(id, "model_answered") == 1
	})
	crash(h)
	res := h.wait(key, id, 60*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	calls, sum := h.chargedCalls(acct)
	must(t, len(calls) == 5, "%d distinct calls charged, want 4 answers and the synthesis", len(calls))
	for call, n := range calls {
		must(t, n == 1, "call %s charged %d times", call, n)
	}
	must(t, near(sum, jsonPath(res, "credits", "charged").(float64)), "charges sum to %v, the query says %v", sum, jsonPath(res, "credits", "charged"))
	must(t, h.settlements(acct) == 1, "settled %d times", h.settlements(acct))
	h.closeAndAudit()
}

// The monthly grant of a Basic or Pro plan is made once per calendar month,
// by whichever request notices the new month first.
func TestMonthlyRolloverGrantsOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("basic", 100)
	var keys []string
	for range 3 {
		keys = append(keys, h.key(acct))
	}
	now := h.clock.Now()
	next := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 30, 0, time.UTC)
	h.clock.Advance(next.Sub(now))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 24 {
		wg.Go(func() {
			<-start
			h.submit(keys[i%len(keys)], map[string]any{"mode": "unify", "prompt": fmt.Sprintf("new month %d", i)})
		})
	}
	close(start)
	wg.Wait()
	h.accountView(acct) // reads grant too, and must not grant again
	var periods []string
	for _, r := range h.ledgerEvents(acct, "credits_granted") {
		if p := r.Event.(events.CreditsGranted).Period; p != "" {
			periods = append(periods, p)
		}
	}
	want := events.Period(now) + " " + events.Period(next)
	must(t, strings.Join(periods, " ") == want, "plan grants %v, want one per month: %s", periods, want)
}

func TestAuditDetectsTampering(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	id := h.submitOK(key, "audited")
	h.wait(key, id, 30*time.Second)
	h.closeAndAudit()

	// A grant written straight to the stream, outside the chain: the chain
	// breaks, and the read model, which never applied it, is behind.
	h.tamper(events.AggregateAccount, acct, events.CreditsGranted{AmountMicros: 1_000 * events.MicrosPerCredit, Reason: "forged", LedgerLink: events.LedgerLink{PrevHash: strings.Repeat("0", 64)}})
	ok, report := h.audit()
	must(t, !ok && strings.Contains(report, "hash chain broken") && strings.Contains(report, "1 accounts' balances read model is behind"), "a forged grant passed the audit:\n%s", report)
}

func TestAuditDetectsAMissingDebit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	id := h.submitOK(key, "audited too")
	h.wait(key, id, 30*time.Second)
	h.m.Close()
	// A model call recorded on the query that the ledger never charged.
	h.tamper(events.AggregateQuery, id, events.ModelAnswered{Model: events.ModelRef{Provider: "provider_b", ModelID: "sim-beta-standard"}, Answer: "x", Usage: events.Usage{InputTokens: 10, OutputTokens: 10}})
	ok, report := h.audit()
	must(t, !ok && strings.Contains(report, "has no debit"), "a call without a debit passed the audit:\n%s", report)
}

// A ledger event that names an older predecessor than the last one: the
// event in between is missing from the chain.
func TestAuditDetectsAMissingLedgerEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	h.wait(key, h.submitOK(key, "chain"), 30*time.Second)
	recs := h.ledgerEvents(acct, "credits_granted")
	h.m.Close()
	// Chained to the sign-up grant, as if everything after it were gone.
	h.tamper(events.AggregateAccount, acct, events.CreditsAdjusted{AmountMicros: 5, Reason: "after a gap", LedgerLink: events.LedgerLink{PrevHash: events.HashStored(recs[0].Raw)}})
	ok, report := h.audit()
	must(t, !ok && strings.Contains(report, "hash chain broken"), "a gap in the chain passed the audit:\n%s", report)
}

func TestBalancesRebuildToIdenticalBytes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var accts []string
	for i := range 3 {
		acct := h.accountWith("free", 50)
		accts = append(accts, acct)
		key := h.key(acct)
		for j := range i + 1 {
			h.wait(key, h.submitOK(key, fmt.Sprintf("rebuild %d %d", i, j)), 30*time.Second)
		}
	}
	ctx := context.Background()
	before := map[string][]byte{}
	eventually(t, 10*time.Second, "the balances projection to catch up", func() bool {
		info, _ := h.m.Store.Accounts.State(ctx)
		for _, a := range accts {
			e, err := h.m.Store.Balances.Get(ctx, a)
			if err != nil {
				return false
			}
			before[a] = e.Value
		}
		var last uint64
		for _, v := range before {
			var d projections.BalanceDoc
			_ = jsonUnmarshal(v, &d)
			last = max(last, d.Seq)
		}
		return last == info.LastSeq
	})
	h.m.Close()
	h.offline(func(store *eventstore.Store) {
		must(t, store.ResetBalances(ctx) == nil, "reset")
		must(t, projections.Rewind(ctx, store.Projections, projections.ConsumerAccounts) == nil, "rewind")
	})
	h.start()
	for _, a := range accts {
		eventually(t, 30*time.Second, "the rebuild of "+a, func() bool {
			e, err := h.m.Store.Balances.Get(ctx, a)
			return err == nil && bytes.Equal(e.Value, before[a])
		})
	}
}

func TestEstimateCost(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	r := h.api("POST", "/v1/estimate-cost", key, map[string]any{"mode": "unify", "prompt": "How much?"})
	must(t, r.status == 200, "estimate: %d %s", r.status, r.body)
	full := r.json(t)
	calls := full["calls"].([]any)
	must(t, len(calls) == 5 && jsonPath(calls[4], "role") == "synthesis", "four answers and a synthesis: %s", r.body)
	must(t, full["balance"] == 50.0 && full["sufficient"] == true && full["within_cap"] == true, "balance fields: %s", r.body)
	var sum float64
	for _, c := range calls {
		sum += jsonPath(c, "credits").(float64)
	}
	must(t, near(full["estimated_credits"].(float64), math.Floor(sum*1.25*1e6)/1e6) || math.Abs(full["estimated_credits"].(float64)-sum*1.25) < 1e-5, "estimate %v vs calls %v with a 25%% margin", full["estimated_credits"], sum)
	r = h.api("POST", "/v1/estimate-cost", key, map[string]any{"mode": "unify", "prompt": "How much?", "models": map[string]any{"provider_a": "sim-alpha-standard", "provider_b": "sim-beta-standard"}})
	must(t, r.status == 200 && r.json(t)["estimated_credits"].(float64) < full["estimated_credits"].(float64), "skipping providers must cost less: %s", r.body)
	r = h.api("POST", "/v1/estimate-cost", key, map[string]any{"mode": "unify", "prompt": "How much?", "models": map[string]any{"provider_a": "sim-alpha-max"}})
	must(t, r.status == 200 && len(r.json(t)["calls"].([]any)) == 1, "one premium model: %s", r.body)
	// The tools are input of each model's answer, not of the synthesis.
	tools := []any{map[string]any{"name": "get_weather", "description": strings.Repeat("Looks up the weather of a city. ", 200),
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}
	r = h.api("POST", "/v1/estimate-cost", key, map[string]any{"mode": "unify", "prompt": "How much?", "tools": tools})
	must(t, r.status == 200, "estimate with tools: %d %s", r.status, r.body)
	for i, c := range r.json(t)["calls"].([]any) {
		with, without := jsonPath(c, "credits").(float64), jsonPath(calls[i], "credits").(float64)
		if jsonPath(c, "role") == "answer" {
			must(t, with > without, "answer %d: %v credits with the tools, %v without", i, with, without)
		} else {
			must(t, with == without, "%v: %v credits with the tools, %v without", jsonPath(c, "role"), with, without)
		}
	}
	// It validates like POST /v1/queries and reserves nothing.
	for _, c := range []struct {
		body any
		code string
	}{{map[string]any{"prompt": "x"}, "invalid_mode"}, {map[string]any{"mode": "unify"}, "invalid_prompt"}, {map[string]any{"mode": "unify", "prompt": "x", "models": map[string]any{"provider_a": "nope"}}, "invalid_model"}} {
		r := h.api("POST", "/v1/estimate-cost", key, c.body)
		must(t, r.status == 400 && r.errCode(t) == c.code, "%v: %d %s", c.body, r.status, r.body)
	}
	must(t, len(h.ledgerEvents(acct, "credits_reserved")) == 0, "an estimate reserved credits")
	must(t, h.api("POST", "/v1/estimate-cost", "", map[string]any{"mode": "unify", "prompt": "x"}).status == 401, "estimate without a key")
}

func TestAdminCredits(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("enterprise", 0)
	r := h.admin("POST", "/admin/v1/accounts/"+acct+"/credits", map[string]any{"amount": 12.5, "reason": "contract grant"})
	must(t, r.status == 200 && r.json(t)["balance"] == 12.5, "grant: %d %s", r.status, r.body)
	r = h.admin("POST", "/admin/v1/accounts/"+acct+"/credits", map[string]any{"amount": -2.25, "reason": "correction"})
	must(t, r.status == 200 && r.json(t)["balance"] == 10.25, "negative adjustment: %d %s", r.status, r.body)
	for _, bad := range []map[string]any{
		{"amount": -11, "reason": "too much"}, {"amount": 5}, {"amount": 0, "reason": "nothing"}, {"reason": "no amount"}, {"amount": "5", "reason": "string"},
	} {
		r = h.admin("POST", "/admin/v1/accounts/"+acct+"/credits", bad)
		must(t, r.status == 400 && r.errCode(t) == "invalid_request", "%v: %d %s", bad, r.status, r.body)
	}
	must(t, h.accountView(acct)["balance"] == 10.25, "a refused adjustment changed the balance")
	r = h.admin("POST", "/admin/v1/accounts/acct_01m7z5t35a0fnv5te052s5j07j/credits", map[string]any{"amount": 1, "reason": "x"})
	must(t, r.status == 404, "unknown account: %d", r.status)
	r = h.admin("GET", "/admin/v1/accounts/"+acct+"/ledger?limit=0", nil)
	must(t, r.status == 400, "limit 0: %d", r.status)
	_ = nats.ErrTimeout
}
