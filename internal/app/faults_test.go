package app

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// expectRestarting checks a 503 service_restarting envelope: retriable, with
// a Retry-After.
func expectRestarting(t *testing.T, r response) {
	t.Helper()
	must(t, r.status == 503 && r.errCode(t) == "service_restarting", "want 503 service_restarting, got %d %s", r.status, r.body)
	e, _ := r.json(t)["error"].(map[string]any)
	must(t, e["retriable"] == true && r.header.Get("Retry-After") != "", "503 envelope %v, Retry-After %q: want retriable with a Retry-After", e, r.header.Get("Retry-After"))
}

// chargedOnce checks that the account's n queries were each settled once and
// cost charged in all: n reservations, n releases, the balance down by
// charged and nothing held.
func (h *harness) chargedOnce(acct string, n int, grant, charged float64) {
	h.t.Helper()
	must(h.t, len(h.ledgerEvents(acct, "credits_reserved")) == n, "credits_reserved: %d events, want %d", len(h.ledgerEvents(acct, "credits_reserved")), n)
	must(h.t, h.settlements(acct) == n, "settlements: %d events, want %d", h.settlements(acct), n)
	eventually(h.t, 30*time.Second, "the balance read model", func() bool {
		acc := h.accountView(acct)
		return near(acc["balance"].(float64), grant-charged) && acc["reserved"] == 0.0
	})
}

// JetStream refuses the submitted event after the Idempotency-Key was bound
// and the credits reserved: the client gets 503 service_restarting, and its
// resubmission with the same key finishes that submission — one query, one
// reservation, charged once (spec section 7, rule 4).
func TestSubmissionRefusedByJetStreamIsFinishedByItsRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	ctx := context.Background()
	before := h.submitOK(key, "before the refusal")
	h.wait(key, before, 30*time.Second)
	st, err := storetest.JetStream(t, h.m.Store).Stream(ctx, "QUERIES")
	must(t, err == nil, "stream: %v", err)
	info, err := st.Info(ctx)
	must(t, err == nil, "stream info: %v", err)
	// The real refusal of a full stream: no room for the submitted event.
	blocked := info.Config
	blocked.MaxMsgs, blocked.Discard = int64(info.State.Msgs), jetstream.DiscardNew
	_, err = storetest.JetStream(t, h.m.Store).UpdateStream(ctx, blocked)
	must(t, err == nil, "block the stream: %v", err)

	body := map[string]any{"mode": "unify", "prompt": "refused once: the Danube"}
	idem := map[string]string{"Idempotency-Key": "refused-once"}
	expectRestarting(t, h.submit(key, body, idem))
	must(t, len(h.ledgerEvents(acct, "credits_reserved")) == 2, "the admission reserved before the append failed")

	_, err = storetest.JetStream(t, h.m.Store).UpdateStream(ctx, info.Config)
	must(t, err == nil, "unblock the stream: %v", err)
	r := h.submit(key, body, idem)
	must(t, r.status == 202, "resubmission: %d %s", r.status, r.body)
	id := r.json(t)["request_id"].(string)
	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "completed", "%s: %v %v", id, res["status"], res["error"])
	must(t, h.countEvents(id, "submitted") == 1, "%d submitted events", h.countEvents(id, "submitted"))
	again := h.submit(key, body, idem)
	must(t, again.status == 202 && again.json(t)["request_id"] == id && again.json(t)["idempotent_replayed"] == true, "a third try: %d %s", again.status, again.body)
	first := h.wait(key, before, time.Second)
	h.chargedOnce(acct, 2, 50, jsonPath(first, "credits", "charged").(float64)+jsonPath(res, "credits", "charged").(float64))
	h.closeAndAudit()
}

// An API process that is shutting down drains: it reports not ready and
// answers submissions with 503 service_restarting while reads still work; the
// client resubmits to another API process with the same Idempotency-Key and
// the query runs and is charged once.
func TestStoppingAPIProcessDrains(t *testing.T) {
	t.Parallel()
	url, token := sharedNATS(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.NATSAuth.Token = url, token
	}))
	startProcess(t, h, RoleWorker)
	stopping := startProcess(t, h, RoleAPI, func(c *config.Config) { c.ShutdownDrain = 3 * time.Second })
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	done := h.submitOK(key, "before the stop")
	h.wait(key, done, 30*time.Second)

	base := stopping.URL()
	closed := make(chan struct{})
	go func() { defer close(closed); stopping.Close() }()
	eventually(t, 10*time.Second, "the stopping process to report not ready", func() bool {
		r, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 503
	})
	body := map[string]any{"mode": "unify", "prompt": "submitted during a stop"}
	idem := map[string]string{"Idempotency-Key": "during-stop"}
	expectRestarting(t, h.call(base, "POST", "/v1/queries", key, body, idem))
	read := h.call(base, "GET", "/v1/queries/"+done, key, nil, nil)
	must(t, read.status == 200, "a read during the drain: %d %s", read.status, read.body)

	r := h.submit(key, body, idem)
	must(t, r.status == 202, "resubmission to the other API: %d %s", r.status, r.body)
	id := r.json(t)["request_id"].(string)
	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "completed", "%s: %v %v", id, res["status"], res["error"])
	<-closed
	first := h.wait(key, done, time.Second)
	h.chargedOnce(acct, 2, 50, jsonPath(first, "credits", "charged").(float64)+jsonPath(res, "credits", "charged").(float64))
	h.closeAndAudit(stopping)
}
