package handlers

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestAccessLogBoundsThePath: a request's path goes into its log line cut
// to maxLoggedPath bytes, so a client without a key cannot write tens of
// kilobytes of log a request (30 KB paths wrote 86 MB of log a second).
func TestAccessLogBoundsThePath(t *testing.T) {
	var logs bytes.Buffer
	h := accessLog(zerolog.New(&logs))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger(r).Warn().Msg("inside")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	long := "/v1/" + strings.Repeat("a", 30000)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", long, nil))
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if len(line) > 2*maxLoggedPath || !strings.Contains(line, "/v1/aaa") {
			t.Fatalf("log line of %d bytes: %.300s", len(line), line)
		}
	}
}
