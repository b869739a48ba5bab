package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

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
