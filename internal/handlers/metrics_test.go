package handlers

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Requests are counted under the route pattern they matched, never the raw
// path; a path no route matches is "unmatched", an unknown method OTHER.
func TestRequestsCountedByRoutePattern(t *testing.T) {
	api := (&Admin{Token: "a-token-long-enough-for-the-admin"}).Handler()
	for _, c := range []struct {
		method, path, route, status string
	}{
		{"GET", "/admin/v1/accounts/acc_12345", "/admin/v1/accounts/{account_id}", "401"},
		{"GET", "/no/such/path/req_secret", routeUnmatched, "404"},
		{"BREW", "/healthz", routeUnmatched, "405"},
		{"GET", "/healthz", "/healthz", "200"},
	} {
		method := c.method
		if !knownMethods[method] {
			method = "OTHER"
		}
		before := testutil.ToFloat64(httpRequests.WithLabelValues(c.route, method, c.status))
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if got := testutil.ToFloat64(httpRequests.WithLabelValues(c.route, method, c.status)) - before; got != 1 {
			t.Errorf("%s %s (answered %d): counted %v under route %q status %s, want 1", c.method, c.path, rec.Code, got, c.route, c.status)
		}
	}
}
