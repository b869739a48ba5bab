package handlers

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/config"
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

// TestIdleConnectionsMakeRoom: keep-alive connections that wait for their
// next request are closed when a server holds 80% of its connections and
// another arrives, so clients that hold every connection idle cannot keep
// a new client, or a probe, out for the idle timeout. Before, 17 addresses
// of 256 idle connections each held all 4,096 for 60 s, and /healthz
// answered 503.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	const maxConns = 20
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limits := config.Defaults().HTTP
	limits.MaxConns = maxConns
	srv, bounded := NewServer(ln, (&Server{Log: zerolog.Nop()}).HealthHandler(), limits, "", context.Background())
	go srv.Serve(bounded)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String() + "/healthz"

	// One client per connection, each left idle after one request.
	var idle []*http.Client
	for range maxConns {
		c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 5 * time.Second}
		t.Cleanup(c.CloseIdleConnections)
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		idle = append(idle, c)
	}
	probe := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for i := range 5 {
		resp, err := probe.Get(url)
		if err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("probe %d while idle connections hold every slot: %d", i, resp.StatusCode)
		}
	}
	// An idle client that was closed reconnects on its next request.
	for i, c := range idle {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("idle client %d after the server closed its connection: %v", i, err)
		}
		resp.Body.Close()
	}
}
