package app

import (
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Repeated grants through the admin API stop at the safe range of credits
// (events.MaxCredits) with invalid_request, before the balance can overflow;
// nothing refused is appended, and the audit passes.
func TestAdminGrantsStopAtTheSafeRange(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("enterprise", 0)
	const grant = 1e9 // the largest amount one request may carry
	grants := int(events.MaxCredits / grant)
	path := "/admin/v1/accounts/" + acct + "/credits"
	for i := range grants {
		r := h.admin("POST", path, map[string]any{"amount": grant, "reason": "contract grant"})
		must(t, r.status == 200, "grant %d: %d %s", i+1, r.status, r.body)
	}
	must(t, h.accountView(acct)["balance"] == float64(events.MaxCredits), "balance %v, want %d", h.accountView(acct)["balance"], events.MaxCredits)
	for _, amount := range []float64{grant, 0.000001} {
		r := h.admin("POST", path, map[string]any{"amount": amount, "reason": "one too many"})
		must(t, r.status == 400 && r.errCode(t) == "invalid_request", "grant of %v past the limit: %d %s", amount, r.status, r.body)
	}
	must(t, len(h.ledgerEvents(acct, "credits_granted")) == grants, "%d grants stored, want %d", len(h.ledgerEvents(acct, "credits_granted")), grants)
	// A correction makes room; a grant may then fill it, and no more.
	r := h.admin("POST", path, map[string]any{"amount": -5, "reason": "correction"})
	must(t, r.status == 200, "correction: %d %s", r.status, r.body)
	r = h.admin("POST", path, map[string]any{"amount": 5, "reason": "refill"})
	must(t, r.status == 200, "grant within the limit: %d %s", r.status, r.body)
	r = h.admin("POST", path, map[string]any{"amount": 0.000001, "reason": "one too many"})
	must(t, r.status == 400 && r.errCode(t) == "invalid_request", "grant past the limit: %d %s", r.status, r.body)
	must(t, h.accountView(acct)["balance"] == float64(events.MaxCredits), "balance %v after the refusals", h.accountView(acct)["balance"])
	// The account still works: a query is reserved, charged and settled.
	key := h.key(acct)
	h.wait(key, h.submitOK(key, "Is the balance safe?"), 30*time.Second)
	h.closeAndAudit()
}
