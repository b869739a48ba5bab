package app

import (
	"context"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
)

// With CROSSCHECK_NATS_URL the service uses that server instead of starting
// its own, and keeps its data there across restarts.
func TestExternalNATS(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(embedded.Options{DataDir: t.TempDir(), Port: -1})
	must(t, err == nil, "start nats-server: %v", err)
	t.Cleanup(srv.Stop)
	url := srv.ClientURL()
	h := newHarness(t, withConfig(func(c *config.Config) { c.NATSURL = url }))
	must(t, h.m.nats == nil, "an embedded server was started although CROSSCHECK_NATS_URL is set")
	key := h.newKey()
	id := h.submitOK(key, "over an external server")
	res := h.wait(key, id, 30*time.Second)
	must(t, res["status"] == "completed", "status %v", res["status"])
	h.restart(false)
	r := h.api("GET", "/v1/queries/"+id, key, nil)
	must(t, r.status == 200 && r.json(t)["status"] == "completed", "after restart: %d %s", r.status, r.body)
	info, err := h.m.Store.Queries.State(context.Background())
	must(t, err == nil && info.Msgs > 0, "QUERIES on the external server: %v", err)
}
