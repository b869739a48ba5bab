package app

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/config"
)

// A fresh 3-node cluster with an API process and two workers started at the
// same moment, every stream and bucket replicated three times, is ready
// within 15 s: each process opens the store, the API answers /readyz with
// 200, and a query submitted to it completes on the workers. It used to take
// minutes: a request about a stream whose group had no leader yet, or a
// create racing another process's, was never answered, and each process
// waited out a whole 15 s deadline for it.
func TestClusterColdStartAllAtOnce(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the processes' logs:\n%s", logs)
		}
	})
	cfg := config.Defaults()
	cfg.NATSURL, cfg.Replicas = cl.url(), 3
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.AdminToken = "test-admin-token"
	cfg.WorkerAckWait = time.Second
	cfg.ShutdownGrace = 2 * time.Second

	// The bound the service promises for a cold start; before each process
	// waited out whole request deadlines, 15 s and more.
	const within = 15 * time.Second
	start := time.Now()
	roles := []string{RoleAPI, RoleWorker, RoleWorker}
	procs := make([]*Main, len(roles))
	opened := make([]time.Duration, len(roles))
	errs := make([]error, len(roles))
	var wg sync.WaitGroup
	for i, role := range roles {
		procs[i] = &Main{Config: cfg, Role: role, Log: zerolog.New(logs), RetryDelays: []time.Duration{5 * time.Millisecond}}
		t.Cleanup(func() { procs[i].Close() })
		wg.Go(func() {
			errs[i] = procs[i].Open(context.Background())
			opened[i] = time.Since(start)
		})
	}
	// Open returns once a process listens: polled, so that a slow start
	// fails the test at the deadline instead of hanging it.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	eventually(t, within, "every process to open the store", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	for i, err := range errs {
		must(t, err == nil, "open %s: %v", roles[i], err)
	}
	api := procs[0]
	client := &http.Client{Timeout: 5 * time.Second}
	eventually(t, within-time.Since(start), "the API's /readyz to answer 200", func() bool {
		resp, err := client.Get(api.URL() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ready := time.Since(start)
	t.Logf("cold start of 3 processes on a fresh 3-node cluster: opened after %v (api, worker, worker), /readyz 200 after %v",
		roundAll(opened), ready.Round(time.Millisecond))

	// The processes work together: a query submitted to the API completes
	// on the workers. A read right after the submission may be served by a
	// replica that has not applied it yet and answer 404 (not what this test
	// is about): polled until the deadline like any other answer.
	h := &harness{t: t, dir: cfg.DataDir, cfg: cfg, m: api, logs: logs, clock: &clock{}, client: &http.Client{Timeout: 60 * time.Second}}
	key := h.newKey()
	id := h.submitOK(key, "cold start: the Danube")
	var status any
	notFound := 0
	eventually(t, 60*time.Second, "the query to complete", func() bool {
		r := h.api("GET", "/v1/queries/"+id, key, nil)
		if r.status == http.StatusNotFound {
			notFound++
			return false
		}
		must(t, r.status == http.StatusOK, "GET %s: %d %s", id, r.status, r.body)
		status = r.json(t)["status"]
		return status == "completed" || status == "failed"
	})
	must(t, status == "completed", "%s: %v", id, status)
	t.Logf("a query submitted then completed %v after the start (%d reads answered 404 first)", time.Since(start).Round(time.Millisecond), notFound)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
