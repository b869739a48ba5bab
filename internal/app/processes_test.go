package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
)

// sharedNATS starts a NATS server with JetStream that requires a token: the
// external server the api and worker processes share.
func sharedNATS(t *testing.T) (url, token string) {
	t.Helper()
	token = "nats-test-token"
	srv, err := embedded.Start(embedded.Options{DataDir: t.TempDir(), Port: -1, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv.ClientURL(), token
}

// startProcess starts a process of role on the shared server, with the
// harness's settings changed by set.
func startProcess(t *testing.T, h *harness, role string, set ...func(*config.Config)) *Main {
	t.Helper()
	cfg := h.cfg
	cfg.HTTPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	for _, f := range set {
		f(&cfg)
	}
	m := &Main{Config: cfg, Role: role, Log: zerolog.New(h.logs), Now: h.clock.Now, RetryDelays: []time.Duration{5 * time.Millisecond}}
	if err := m.Open(context.Background()); err != nil {
		m.Close()
		t.Fatalf("open %s: %v", role, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Two API processes and two workers on one JetStream: queries submitted to
// either API complete, a worker killed mid-run leaves its jobs to the other,
// each query is charged once, the read models agree, and the audit passes.
func TestAPIAndWorkerProcesses(t *testing.T) {
	t.Parallel()
	url, token := sharedNATS(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.NATSAuth.Token = url, token
		c.SimLatency = 150 * time.Millisecond
	}))
	api2 := startProcess(t, h, RoleAPI)
	w1 := startProcess(t, h, RoleWorker)
	startProcess(t, h, RoleWorker)

	// A worker serves only its health checks.
	r, err := http.Get(w1.URL() + "/readyz")
	must(t, err == nil && r.StatusCode == 200, "worker /readyz: %v %v", err, r)
	r, _ = http.Get(w1.URL() + "/v1/models")
	must(t, r.StatusCode == 404, "a worker serves the API: %d", r.StatusCode)

	acct := h.accountWith("free", 50)
	keys := []string{h.key(acct), h.key(acct)} // 8 in flight per key
	var ids []string
	for i := range 12 {
		r := h.submit(keys[i%2], map[string]any{"mode": []string{"unify", "justify", "verify"}[i%3], "prompt": fmt.Sprintf("shared %d: the Moon", i)})
		must(t, r.status == 202, "submit %d: %d %s", i, r.status, r.body)
		ids = append(ids, r.json(t)["request_id"].(string))
	}
	eventually(t, 30*time.Second, "a query to start", func() bool { return h.countEvents(ids[0], "started") > 0 })
	w1.Crash() // mid-run: its jobs are redelivered to the other worker
	for i, id := range ids {
		key := keys[i%2]
		res := h.wait(key, id, 90*time.Second)
		must(t, res["status"] == "completed", "%s: %v %v", id, res["status"], res["error"])
		// The other API process answers the same.
		other := h.call(api2.URL(), "GET", "/v1/queries/"+id, key, nil, nil)
		must(t, other.status == 200 && strings.Contains(string(other.body), `"status":"completed"`), "the second API: %d %s", other.status, other.body)
	}
	// An SSE client that loses its connection resumes on the other API
	// process with Last-Event-ID: the ids are stream sequences.
	resp := h.openStream(keys[0], ids[0], nil)
	evs, _ := readStream(t, resp.Body)
	resp.Body.Close()
	must(t, len(evs) > 4, "%d events", len(evs))
	req, _ := http.NewRequest("GET", api2.URL()+"/v1/queries/"+ids[0]+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+keys[0])
	req.Header.Set("Last-Event-ID", evs[2].id)
	resp, err = http.DefaultClient.Do(req)
	must(t, err == nil, "stream on the second API: %v", err)
	resumed, _ := readStream(t, resp.Body)
	resp.Body.Close()
	must(t, len(resumed) == len(evs)-3, "resumed %d events on the second API, want %d", len(resumed), len(evs)-3)
	for i, ev := range resumed {
		must(t, ev.id == evs[i+3].id && ev.name == evs[i+3].name, "event %d: %s/%s, want %s/%s", i, ev.id, ev.name, evs[i+3].id, evs[i+3].name)
	}
	h.closeAndAudit(api2)
}

// The api and worker roles need a shared JetStream; an api needs the admin
// token every API process accepts.
func TestProcessRolesNeedASharedJetStream(t *testing.T) {
	t.Parallel()
	for _, role := range []string{RoleAPI, RoleWorker} {
		m := &Main{Config: config.Defaults(), Role: role, Log: zerolog.Nop()}
		m.Config.DataDir = t.TempDir()
		err := m.Open(context.Background())
		m.Close()
		must(t, err != nil && strings.Contains(err.Error(), "CROSSCHECK_NATS_URL"), "%s without a NATS URL: %v", role, err)
	}
	url, _ := sharedNATS(t)
	m := &Main{Config: config.Defaults(), Role: RoleAPI, Log: zerolog.Nop()}
	m.Config.NATSURL = url
	err := m.Open(context.Background())
	m.Close()
	must(t, err != nil && (strings.Contains(err.Error(), "Authorization") || strings.Contains(err.Error(), "authorization")), "a wrong token: %v", err)
}

// On SIGTERM a worker lets its running queries finish within the grace
// period, and hands back the ones that cannot: another worker takes those at
// once (long before the ack wait would have brought them back) and they
// complete, each charged once.
func TestWorkerStopFinishesOrHandsBackItsJobs(t *testing.T) {
	t.Parallel()
	url, token := sharedNATS(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.NATSAuth.Token = url, token
		c.WorkerAckWait = time.Minute // a job not handed back would wait this long
	}))
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	submitAll := func(prefix string) []string {
		var ids []string
		for i := range 4 {
			ids = append(ids, h.submitOK(key, fmt.Sprintf("%s %d: the Moon", prefix, i)))
		}
		return ids
	}
	running := func(ids []string) bool {
		for _, id := range ids {
			if h.countEvents(id, "started") != 1 {
				return false
			}
		}
		return true
	}

	// Quick queries finish within the grace: when Close returns they are done.
	quick := startProcess(t, h, RoleWorker, func(c *config.Config) { c.SimLatency, c.ShutdownGrace = 300*time.Millisecond, 20*time.Second })
	ids := submitAll("finish")
	eventually(t, 30*time.Second, "the worker to start every query", func() bool { return running(ids) })
	quick.Close()
	for _, id := range ids {
		must(t, h.countEvents(id, "completed") == 1, "%s did not finish within the grace: %d completed events", id, h.countEvents(id, "completed"))
	}

	// Slow queries outlast the grace: handed back, another worker ends them.
	slow := startProcess(t, h, RoleWorker, func(c *config.Config) { c.SimLatency, c.ShutdownGrace = time.Hour, 500*time.Millisecond })
	handed := submitAll("hand back")
	eventually(t, 30*time.Second, "the slow worker to start every query", func() bool { return running(handed) })
	slow.Close()
	startProcess(t, h, RoleWorker)
	for _, id := range handed {
		res := h.wait(key, id, 30*time.Second)
		must(t, res["status"] == "completed", "%s: %v %v", id, res["status"], res["error"])
	}
	charged := 0.0
	for _, id := range append(ids, handed...) {
		charged += jsonPath(h.wait(key, id, time.Second), "credits", "charged").(float64)
	}
	h.chargedOnce(acct, 8, 50, charged)
	h.closeAndAudit()
}
