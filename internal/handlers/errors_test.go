package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

// A service_restarting that wraps the store's failure is answered 503 and
// its cause is logged once, with the request id; the answer shows only the
// application message.
func TestRestartingCauseIsLoggedWhereItIsAnswered(t *testing.T) {
	unavailable := &apperr.Error{Code: apperr.ServiceRestarting, Message: "the event store is unavailable"}
	err := fmt.Errorf("append query.submitted: %w: %w", unavailable, errors.New("nats: no responders available for request"))
	var logs bytes.Buffer
	l := zerolog.New(&logs)
	req := httptest.NewRequest("POST", "/v1/queries", nil)
	req = req.WithContext(context.WithValue(context.Background(), logKey{}, &l))
	w := httptest.NewRecorder()
	(&Server{}).writeError(w, req, err, "req_01M80000000000000000000001")
	if w.Code != 503 || strings.Contains(w.Body.String(), "no responders") {
		t.Fatalf("answer %d %s; want 503 without the cause", w.Code, w.Body.String())
	}
	out := logs.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "no responders") || !strings.Contains(out, "req_01M80000000000000000000001") {
		t.Fatalf("log %q; want one line with the cause and the request id", out)
	}
	// The application's own service_restarting (no cause) is not logged.
	logs.Reset()
	(&Server{}).writeError(httptest.NewRecorder(), req, unavailable, "")
	if logs.Len() != 0 {
		t.Fatalf("logged %q for an error without a cause", logs.String())
	}
}

// A chat completion that gives up on its submitted query (503
// service_restarting: its wait ended, or following its events failed)
// tells OpenAI's clients not to retry when the request had no
// Idempotency-Key: the retry would be a new query, charged again, while the
// first goes on. With a key the retry finds the same query, so it may.
func TestChatGivingUpOnASubmittedQueryIsNotRetriedWithoutAKey(t *testing.T) {
	restarting := &apperr.Error{Code: apperr.ServiceRestarting, Message: "the query is still running"}
	for _, tc := range []struct {
		name, key, requestID, want string
	}{
		{"submitted, no key", "", "req_01M80000000000000000000001", "false"},
		{"submitted, with a key", "k1", "req_01M80000000000000000000001", ""},
		{"not submitted", "", "", ""},
	} {
		req := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		w := httptest.NewRecorder()
		(&Server{}).chatError(w, req, restarting, tc.requestID)
		if w.Code != 503 || w.Header().Get("X-Should-Retry") != tc.want {
			t.Errorf("%s: %d, x-should-retry %q; want 503 and %q", tc.name, w.Code, w.Header().Get("X-Should-Retry"), tc.want)
		}
	}
}

// A completion that does not stream answers before the 10 minutes that
// OpenAI's Python and Node clients wait by default: a client that timed out
// first would retry on its own, and without an Idempotency-Key each retry
// is a new query, charged again. The answer (503, x-should-retry: false)
// stops that.
func TestChatWaitEndsBeforeTheOpenAIClientsTimeOut(t *testing.T) {
	const clientTimeout = 10 * time.Minute
	if chatWait > clientTimeout-30*time.Second {
		t.Fatalf("chatWait is %s; want it at least 30 s under OpenAI's clients' default timeout of %s", chatWait, clientTimeout)
	}
}
