package app

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A host that answers the connection test with something that is not a
// completion was reached: it is refused as a host that answered wrongly,
// never as unreachable, and allow_unverified does not save it.
func TestBYOMConnectGarbageAnswer(t *testing.T) {
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, "<html>a captive portal, not a model</html>")
	}))
	t.Cleanup(garbage.Close)
	h := newHarness(t)
	acct := h.account()
	for _, unverified := range []bool{false, true} {
		r := h.connect(acct, map[string]any{"name": "portal", "kind": "openai-compatible", "base_url": garbage.URL + "/v1",
			"model": "llama3.1:8b", "allow_unverified": unverified})
		must(t, r.status == 400 && r.errCode(t) == "connection_failed", "allow_unverified %v: %d %s", unverified, r.status, r.body)
		must(t, !strings.Contains(string(r.body), "cannot be reached") && strings.Contains(string(r.body), "not a completion"),
			"allow_unverified %v: the message does not say the host answered wrongly: %s", unverified, r.body)
	}
}
