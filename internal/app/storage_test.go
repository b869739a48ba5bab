package app

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// streamMsgs is how many messages a stream (or a bucket's stream) holds,
// markers of deleted keys included.
func (h *harness) streamMsgs(name string) uint64 {
	h.t.Helper()
	st, err := storetest.JetStream(h.t, h.m.Store).Stream(context.Background(), name)
	must(h.t, err == nil, "stream %s: %v", name, err)
	info, err := st.Info(context.Background())
	must(h.t, err == nil, "stream %s info: %v", name, err)
	return info.State.Msgs
}

// TestRefusedSubmissionsLeaveNothingBound: a submission refused for good
// (402 for credits, 429 for slots), each with a fresh Idempotency-Key,
// leaves nothing in the idempotency bucket, not even a delete marker; only
// admitted submissions keep their binding. Those refused before binding
// (the credits and the slots checked first) and those that lost the last
// slot to a concurrent submission after binding (their binding removed
// again) alike. A key with 0 credits left 188 B there for 25 h per
// refusal, 1,400 refusals a second.
func TestRefusedSubmissionsLeaveNothingBound(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	h := newHarness(t, withProviders(func() providers.Set {
		set, _ := testProviders(func(_ string, p *testProvider) { p.hold = hold })
		return set
	}))
	broke := h.key(h.accountWith("free", 0))
	busy := h.key(h.accountWith("free", 50))
	body := map[string]any{"mode": "unify", "prompt": "refused: the Danube"}
	for i := range 7 {
		r := h.submit(busy, body, map[string]string{"Idempotency-Key": fmt.Sprintf("held-%d", i)})
		must(t, r.status == 202, "held submission %d: %d %s", i, r.status, r.body)
	}
	// 20 at once for the last slot: one is admitted.
	var wg sync.WaitGroup
	var admitted, limited atomic.Int64
	for i := range 20 {
		wg.Go(func() {
			r := h.submit(busy, body, map[string]string{"Idempotency-Key": fmt.Sprintf("busy-%d", i)})
			switch {
			case r.status == 202:
				admitted.Add(1)
			case r.status == 429 && r.errCode(t) == "rate_limited":
				limited.Add(1)
			default:
				t.Errorf("a submission for the last slot: %d %s", r.status, r.body)
			}
		})
	}
	wg.Wait()
	must(t, admitted.Load() == 1 && limited.Load() == 19, "%d admitted and %d refused for the last slot; want 1 and 19", admitted.Load(), limited.Load())
	for i := range 40 {
		wg.Go(func() {
			r := h.submit(broke, body, map[string]string{"Idempotency-Key": fmt.Sprintf("broke-%d", i)})
			if r.status != 402 || r.errCode(t) != "insufficient_credits" {
				t.Errorf("a submission without credits: %d %s", r.status, r.body)
			}
		})
	}
	wg.Wait()
	eventually(t, 15*time.Second, "the idempotency bucket to hold only the 8 admitted bindings", func() bool {
		return h.streamMsgs("KV_idempotency") == 8
	})
	// A refused key is not used up: once there are credits, it admits.
	r := h.admin("POST", "/admin/v1/accounts/"+h.accountOf(broke)+"/credits", map[string]any{"amount": 10, "reason": "top up"})
	must(t, r.status == 200, "grant: %d %s", r.status, r.body)
	r = h.submit(broke, body, map[string]string{"Idempotency-Key": "broke-0"})
	must(t, r.status == 202 && r.json(t)["idempotent_replayed"] == false, "a refused key used again: %d %s", r.status, r.body)
}

// A submission that passes the check of its slots on a stale view (another
// process took the last slot since) binds its key, is refused the slot,
// and removes its binding again: nothing stays in the idempotency bucket.
func TestSubmissionThatLosesTheLastSlotLeavesNothingBound(t *testing.T) {
	t.Parallel()
	url, token := sharedNATS(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.NATSAuth.Token = url, token
	}))
	api2 := startProcess(t, h, RoleAPI)
	hold := make(chan struct{})
	set, _ := testProviders(func(_ string, p *testProvider) { p.hold = hold })
	startWorkerWith(t, h, set)
	t.Cleanup(func() { close(hold) }) // before the worker stops
	key := h.newKey()
	body := map[string]any{"mode": "unify", "prompt": "the last slot: the Danube"}
	for i := range 7 {
		r := h.submit(key, body, map[string]string{"Idempotency-Key": fmt.Sprintf("held-%d", i)})
		must(t, r.status == 202, "held submission %d: %d %s", i, r.status, r.body)
	}
	r := h.call(api2.URL(), "POST", "/v1/queries", key, body, map[string]string{"Idempotency-Key": "the-last"})
	must(t, r.status == 202, "the eighth, on the other process: %d %s", r.status, r.body)
	// This process last saw 7 slots: its check passes, the slot is refused.
	r = h.submit(key, body, map[string]string{"Idempotency-Key": "too-late"})
	must(t, r.status == 429 && r.errCode(t) == "rate_limited", "a ninth submission: %d %s", r.status, r.body)
	eventually(t, 15*time.Second, "the idempotency bucket to hold only the 8 admitted bindings", func() bool {
		return h.streamMsgs("KV_idempotency") == 8
	})
}

// TestAccountStorageFigures: GET /admin/v1/accounts/{id}/storage tells what
// the account keeps: its queries and those in flight, its account events,
// its live files and their bytes, and the file events the store keeps for
// it. /metrics tells the bytes and messages of every stream and bucket.
func TestAccountStorageFigures(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	for i := range 2 {
		h.wait(key, h.submitOK(key, fmt.Sprintf("storage %d: the Danube", i)), 30*time.Second)
	}
	kept := h.upload(key, "kept.py", []byte("print('kept')\n"))
	must(t, kept.status == 201, "upload: %d %s", kept.status, kept.body)
	gone := h.upload(key, "gone.py", []byte("print('gone')\n"))
	must(t, gone.status == 201, "upload: %d %s", gone.status, gone.body)
	del := h.api("DELETE", "/v1/files/"+gone.json(t)["file_id"].(string), key, "")
	must(t, del.status < 300, "delete: %d %s", del.status, del.body)

	var v map[string]any
	eventually(t, 15*time.Second, "the account's two queries in its index", func() bool {
		r := h.admin("GET", "/admin/v1/accounts/"+acct+"/storage", nil)
		must(t, r.status == 200, "storage: %d %s", r.status, r.body)
		v = r.json(t)
		return v["queries"] == 2.0
	})
	must(t, v["account_id"] == acct && v["queries_in_flight"] == 0.0, "storage: %v", v)
	must(t, v["files_live"] == 1.0 && v["files_live_bytes"] == float64(len("print('kept')\n")), "live files: %v", v)
	// Two uploads, each with its extraction, and one deletion.
	must(t, v["file_events"] == 5.0 && v["file_event_bytes"].(float64) > 5*100, "file events: %v", v)
	// The account, its key, its plan grant, and each query's reservation
	// and settlement.
	must(t, v["account_events"] == 7.0 && v["account_event_bytes"].(float64) > 7*100, "account events: %v", v)
	r := h.admin("GET", "/admin/v1/accounts/acct_01m8000000000000000000000x/storage", nil)
	must(t, r.status == 404 && r.errCode(t) == "not_found", "an unknown account: %d %s", r.status, r.body)

	s := h.scrape(h.m.AdminURL())
	for _, stream := range []string{"QUERIES", "ACCOUNTS", "FILES", "KV_idempotency", "KV_query_status", "OBJ_files"} {
		_, ok := s[`crosscheck_stream_bytes{stream="`+stream+`"}`]
		_, msgs := s[`crosscheck_stream_messages{stream="`+stream+`"}`]
		must(t, ok && msgs, "/metrics tells no size of %s", stream)
	}
}
