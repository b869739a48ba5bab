package handlers

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"
)

// TestProbesOnTheAdminAddress: /healthz and /readyz are answered on the
// admin address too, of an API process and of a worker, with the same
// readiness as on the public one: a flood of connections to the public
// address cannot fail the probes that restart a pod.
func TestProbesOnTheAdminAddress(t *testing.T) {
	ready := errors.New("JetStream: not ready")
	notReady := func(context.Context) error { return ready }
	admin := (&Admin{Log: zerolog.Nop(), Ready: notReady}).Handler()
	worker := (&Server{Log: zerolog.Nop(), Ready: notReady}).MetricsHandler()
	for name, h := range map[string]http.Handler{"api admin": admin, "worker admin": worker} {
		for path, want := range map[string]int{"/healthz": 200, "/readyz": 503} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
			if w.Code != want {
				t.Errorf("%s %s: %d %s; want %d", name, path, w.Code, w.Body, want)
			}
		}
	}
	ready = nil
	for name, h := range map[string]http.Handler{"api admin": admin, "worker admin": worker} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
		if w.Code != 200 {
			t.Errorf("%s /readyz when ready: %d %s", name, w.Code, w.Body)
		}
	}
	stopping := (&Admin{Log: zerolog.Nop(), Stopping: func() bool { return true }}).Handler()
	w := httptest.NewRecorder()
	stopping.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != 503 {
		t.Errorf("admin /readyz of a stopping process: %d", w.Code)
	}
}
