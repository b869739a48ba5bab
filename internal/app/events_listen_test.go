package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
)

// crosscheck events reads the store of a running serve: the embedded
// server listens on a loopback port (CROSSCHECK_NATS_LISTEN, auto on
// loopback addresses) and advertises it with its token in the data dir,
// where the command finds them. Before, it refused: the data dir was held.
func TestEventsReachARunningServe(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	id := h.submitOK(key, "while the service runs")
	h.wait(key, id, 60*time.Second)

	cfg := config.Config{DataDir: h.dir, Replicas: 1, StartTimeout: 10 * time.Second}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Events(ctx, cfg, []string{"export", "-stream", "queries"}, &out, &errOut)
	must(t, code == 0 && strings.Contains(out.String(), id) && strings.Contains(out.String(), ".completed"), "export: exit %d, stderr %q\n%s", code, errOut.String(), out.String())

	// tail writes what is stored and goes on until interrupted.
	tail := &syncBuffer{}
	tctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() { done <- Events(tctx, cfg, []string{"tail", "-stream", "queries"}, tail, &syncBuffer{}) }()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(tail.String(), id) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	must(t, <-done == 0 && strings.Contains(tail.String(), id), "tail: %s", tail.String())
}

// A serve that listens on no port: the command says exactly what to set.
func TestEventsSayWhatToSetWhenServeListensNowhere(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withConfig(func(c *config.Config) { c.NATSListen = config.NATSListenOff }))
	var out, errOut bytes.Buffer
	code := Events(context.Background(), config.Config{DataDir: h.dir, Replicas: 1}, []string{"export"}, &out, &errOut)
	must(t, code == 1 && strings.Contains(errOut.String(), "CROSSCHECK_NATS_LISTEN") && strings.Contains(errOut.String(), "CROSSCHECK_NATS_URL"), "exit %d, stderr %q", code, errOut.String())
}
