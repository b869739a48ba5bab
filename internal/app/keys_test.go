package app

import (
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
)

func TestAPIKeyStates(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	must(t, len(key) == 45 && strings.HasPrefix(key, "xchk_"), "key %d chars, want 45 with xchk_", len(key))
	fp := key[5:13]
	ok := func(k string) response { return h.api("GET", "/v1/models", k, nil) }
	expect := func(k string, status int, code string) {
		t.Helper()
		r := ok(k)
		if code == "" {
			must(t, r.status == 200, "want 200, got %d %s", r.status, r.body)
			return
		}
		must(t, r.status == status && r.errCode(t) == code, "want %d %s, got %d %s", status, code, r.status, r.body)
	}
	transition := func(action string, status int, state string) {
		t.Helper()
		r := h.admin("POST", "/admin/v1/keys/"+fp+"/"+action, nil)
		must(t, r.status == status, "%s: %d %s", action, r.status, r.body)
		if state != "" {
			must(t, r.json(t)["state"] == state, "%s: state %v, want %s", action, r.json(t)["state"], state)
		}
	}

	expect(key, 200, "")
	expect("", 401, "invalid_api_key")
	expect("xchk_short", 401, "invalid_api_key")
	expect("sk_x_"+key[5:], 401, "invalid_api_key")                  // wrong prefix
	expect(key[:13]+strings.Repeat("A", 32), 401, "invalid_api_key") // right fingerprint, wrong secret
	expect("xchk_zzzzzzzz"+key[13:], 401, "invalid_api_key")         // unknown fingerprint
	r := h.call(h.m.URL(), "GET", "/v1/models", "", nil, map[string]string{"Authorization": "Basic " + key})
	must(t, r.status == 401 && r.errCode(t) == "invalid_api_key", "Basic scheme accepted: %d", r.status)

	transition("disable", 200, "disabled")
	expect(key, 403, "key_disabled")
	transition("disable", 200, "disabled") // no-op, still 200
	transition("enable", 200, "active")
	expect(key, 200, "")
	transition("suspend", 200, "suspended")
	expect(key, 403, "key_suspended")
	transition("unsuspend", 200, "active")
	expect(key, 200, "")
	transition("disable", 200, "disabled")
	transition("suspend", 200, "suspended")
	transition("unsuspend", 200, "disabled") // a suspension lifts back to where it was
	expect(key, 403, "key_disabled")
	transition("revoke", 200, "revoked")
	expect(key, 401, "key_revoked")
	expect(key[:13]+strings.Repeat("A", 32), 401, "invalid_api_key") // a wrong secret never learns the state
	for _, action := range []string{"enable", "disable", "suspend", "unsuspend"} {
		r := h.admin("POST", "/admin/v1/keys/"+fp+"/"+action, nil)
		must(t, r.status == 409 && r.errCode(t) == "invalid_transition", "%s on a revoked key: %d %s", action, r.status, r.body)
	}
	expect(key, 401, "key_revoked")
	r = h.admin("POST", "/admin/v1/keys/"+fp+"/explode", nil)
	must(t, r.status == 404, "unknown action: %d", r.status)
	r = h.admin("POST", "/admin/v1/keys/zzzzzzzz/disable", nil)
	must(t, r.status == 404 && r.errCode(t) == "not_found", "unknown key: %d %s", r.status, r.body)

	// Every lifecycle change is an event on the account's subject.
	var names []string
	for _, rec := range h.streamRecords("ACCOUNTS") {
		if events.AggregateID(rec.Envelope.Subject) == acct {
			names = append(names, rec.Envelope.Type)
		}
	}
	want := "account.created account.credits_granted account.key_created account.key_disabled account.key_enabled account.key_suspended account.key_unsuspended account.key_disabled account.key_suspended account.key_unsuspended account.key_revoked"
	must(t, strings.Join(names, " ") == want, "account events:\n got %s\nwant %s", strings.Join(names, " "), want)

	// A revoked key stays revoked across a restart.
	h.restart(false)
	expect(key, 401, "key_revoked")
}

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := h.call(h.m.AdminURL(), "POST", "/admin/v1/accounts", "wrong", map[string]any{"name": "x"}, nil)
	must(t, r.status == 401 && r.errCode(t) == "invalid_admin_token", "wrong admin token: %d %s", r.status, r.body)
	r = h.call(h.m.AdminURL(), "POST", "/admin/v1/accounts", "", map[string]any{"name": "x"}, nil)
	must(t, r.status == 401, "no admin token: %d", r.status)
	r = h.admin("POST", "/admin/v1/accounts", map[string]any{"plan": "free"})
	must(t, r.status == 400 && r.errCode(t) == "invalid_request", "account without name: %d %s", r.status, r.body)
	r = h.admin("POST", "/admin/v1/accounts", map[string]any{"name": "a", "plan": "gold"})
	must(t, r.status == 400, "bad plan: %d %s", r.status, r.body)
	acct := h.account()
	r = h.admin("POST", "/admin/v1/accounts/"+acct+"/keys", map[string]any{"name": "k"})
	must(t, r.status == 400 && strings.Contains(string(r.body), "accept_aup"), "key without accept_aup: %d %s", r.status, r.body)
	r = h.admin("POST", "/admin/v1/accounts/"+acct+"/keys", map[string]any{"accept_aup": true})
	must(t, r.status == 400, "key without name: %d %s", r.status, r.body)
	r = h.admin("POST", "/admin/v1/accounts/acct_01m7z5t35a0fnv5te052s5j07j/keys", map[string]any{"name": "k", "accept_aup": true})
	must(t, r.status == 404, "key for a missing account: %d %s", r.status, r.body)
	key := h.key(acct)
	r = h.admin("GET", "/admin/v1/accounts/"+acct, nil)
	must(t, r.status == 200, "get account: %d %s", r.status, r.body)
	keys := r.json(t)["keys"].([]any)
	must(t, len(keys) == 1 && jsonPath(keys[0], "fingerprint") == key[5:13] && jsonPath(keys[0], "key") == nil, "account keys: %s", r.body)
	must(t, !strings.Contains(string(r.body), key[13:]), "the account view shows the key secret")
}

func TestQueryBelongsToItsAccount(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.account()
	mine, sameAccount := h.key(acct), h.key(acct)
	other := h.newKey()
	id := h.submitOK(mine, "private question")
	h.wait(mine, id, 30*time.Second)
	r := h.api("GET", "/v1/queries/"+id, sameAccount, nil)
	must(t, r.status == 200, "another key of the same account: %d", r.status)
	for _, path := range []string{"/v1/queries/" + id, "/v1/queries/" + id + "/stream"} {
		r := h.api("GET", path, other, nil)
		must(t, r.status == 404 && r.errCode(t) == "not_found", "%s with another account's key: %d %s", path, r.status, r.body)
	}
	for _, id := range []string{"req_01M7Z5T4Q295N5DJSD8HA71RYY", "nope", "req_..>", "req_01m7z5t4q295n5djsd8ha71ryy"} {
		r := h.api("GET", "/v1/queries/"+id, mine, nil)
		must(t, r.status == 404 && r.errCode(t) == "not_found", "unknown id %q: %d %s", id, r.status, r.body)
	}
}

// TestKeysPerAccountAreBounded: an account has at most
// CROSSCHECK_ACCOUNT_MAX_KEYS keys that are not revoked, since every
// per-key bound (streams, bodies, queries in flight) is multiplied by its
// keys; the next is a 400 that says what to do, and a revoked key makes
// room.
func TestKeysPerAccountAreBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.AccountMaxKeys = 2 }))
	acct := h.account()
	first := h.key(acct)
	h.key(acct)
	create := func() response {
		return h.admin("POST", "/admin/v1/accounts/"+acct+"/keys", map[string]any{"name": "one more", "accept_aup": true})
	}
	r := create()
	must(t, r.status == 400 && r.errCode(t) == "invalid_request", "a third key: %d %s", r.status, r.body)
	msg := r.json(t)["error"].(map[string]any)["message"].(string)
	must(t, strings.Contains(msg, "2 keys") && strings.Contains(msg, "revoke"), "message %q", msg)
	// Another account is not concerned.
	h.key(h.account())
	r = h.admin("POST", "/admin/v1/keys/"+first[5:13]+"/revoke", nil)
	must(t, r.status == 200, "revoke: %d %s", r.status, r.body)
	r = create()
	must(t, r.status == 201, "a key after one was revoked: %d %s", r.status, r.body)
}
