package app

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// natsCluster is a 3-node NATS JetStream cluster in the test process, on
// loopback ports, each node with its own store.
type natsCluster struct {
	t     *testing.T
	mu    sync.Mutex
	opts  []*server.Options
	nodes []*server.Server
}

// startCluster starts the three nodes and waits for JetStream.
func startCluster(t *testing.T) *natsCluster {
	t.Helper()
	c := newCluster(t)
	for i := range 3 {
		c.start(i)
	}
	// Ready when JetStream answers through the cluster.
	eventually(t, 60*time.Second, "the JetStream cluster", func() bool {
		nc, err := nats.Connect(c.url())
		if err != nil {
			return false
		}
		defer nc.Close()
		js, _ := nc.JetStream()
		_, err = js.AccountInfo()
		return err == nil
	})
	return c
}

// newCluster configures the three nodes and starts none.
func newCluster(t *testing.T) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t}
	dir := t.TempDir()
	clientPorts, routePorts := make([]int, 3), make([]int, 3)
	var routes []string
	for i := range 3 {
		clientPorts[i], routePorts[i] = freePort(t), freePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i]))
	}
	for i := range 3 {
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: clientPorts[i],
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			Cluster: server.ClusterOpts{Name: "crosscheck-test", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
			NoSigs:  true, NoLog: true,
		})
	}
	c.nodes = make([]*server.Server, 3)
	t.Cleanup(func() {
		for i := range 3 {
			c.stop(i)
		}
	})
	return c
}

func (c *natsCluster) start(i int) {
	c.t.Helper()
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		c.t.Fatal(err)
	}
	log := &nodeLog{}
	s.SetLogger(log, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		c.t.Fatalf("node %d did not start: %s", i+1, log)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
}

// nodeLog keeps a node's fatal errors, for a test that fails to start it
// (a node that cannot listen says so only to its logger).
type nodeLog struct {
	mu     sync.Mutex
	errors []string
}

func (l *nodeLog) record(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, fmt.Sprintf(format, v...))
}

func (l *nodeLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errors) == 0 {
		return "it logged no fatal error"
	}
	return strings.Join(l.errors, "; ")
}

func (l *nodeLog) Fatalf(format string, v ...any) { l.record(format, v...) }
func (l *nodeLog) Errorf(string, ...any)          {}
func (l *nodeLog) Noticef(string, ...any)         {}
func (l *nodeLog) Warnf(string, ...any)           {}
func (l *nodeLog) Debugf(string, ...any)          {}
func (l *nodeLog) Tracef(string, ...any)          {}

func (c *natsCluster) stop(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// url lists every node, as CROSSCHECK_NATS_URL does.
func (c *natsCluster) url() string {
	var urls []string
	for _, o := range c.opts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(urls, ",")
}

// On a 3-node cluster with every stream and bucket replicated three times,
// an API process and two workers survive a worker killed mid-run and a NATS
// node stopped mid-run and restarted: every accepted query completes, each
// is charged once, and the audit passes. Submissions made while the node is
// down are retried with their Idempotency-Key when they get 503.
func TestClusterSurvivesANodeAndAWorker(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.Replicas = cl.url(), 3
		c.SimLatency = 300 * time.Millisecond
		c.WorkerAckWait = 2 * time.Second
	}))
	w1 := startProcess(t, h, RoleWorker)
	startProcess(t, h, RoleWorker)
	// A process opened with fewer replicas (a one-off audit, say) keeps the
	// cluster's three.
	one, err := eventstore.Open(context.Background(), h.m.Store.Conn(), 1)
	must(t, err == nil, "open with 1 replica: %v", err)
	for _, st := range []string{"QUERIES", "ACCOUNTS", "KV_balances", "KV_idempotency"} {
		info, err := storetest.JetStream(t, one).Stream(context.Background(), st)
		must(t, err == nil, "stream %s: %v", st, err)
		must(t, info.CachedInfo().Config.Replicas == 3, "%s has %d replicas, want 3", st, info.CachedInfo().Config.Replicas)
	}
	acct := h.accountWith("free", 50)
	keys := []string{h.key(acct), h.key(acct)}

	retried := 0
	submit := func(i int) string {
		body := map[string]any{"mode": []string{"unify", "justify", "verify"}[i%3], "prompt": fmt.Sprintf("cluster %d: the Danube", i)}
		idem := map[string]string{"Idempotency-Key": fmt.Sprintf("cluster-%d", i)}
		var r response
		pollUntil(t, 30*time.Second, 500*time.Millisecond, fmt.Sprintf("submit %d to be accepted", i), func() bool {
			if r = h.submit(keys[i%2], body, idem); r.status == 202 || r.status == 200 {
				return true
			}
			must(t, r.status == 503 && r.errCode(t) == "service_restarting", "submit %d: %d %s", i, r.status, r.body)
			retried++
			return false
		})
		return r.json(t)["request_id"].(string)
	}
	started := func(ids ...string) func() bool {
		return func() bool {
			for _, id := range ids {
				if h.countEvents(id, "started") == 0 {
					return false
				}
			}
			return true
		}
	}
	var ids []string
	for i := range 6 {
		ids = append(ids, submit(i))
	}
	eventually(t, 60*time.Second, "the first queries to start", started(ids[0]))
	w1.Crash()
	cl.stop(1) // a NATS node goes down mid-run
	for i := 6; i < 9; i++ {
		ids = append(ids, submit(i))
	}
	eventually(t, 60*time.Second, "the queries submitted while the node is down to start", started(ids[6:]...))
	cl.start(1) // and comes back
	for i, id := range ids {
		res := h.wait(keys[i%2], id, 120*time.Second)
		must(t, res["status"] == "completed", "%s: %v %v", id, res["status"], res["error"])
	}
	t.Logf("%d submissions answered 503 service_restarting and were retried with their Idempotency-Key", retried)

	// Two nodes of three down: JetStream has no quorum and cannot take a
	// write. A submission gets 503 service_restarting; once the nodes are
	// back its resubmission with the same Idempotency-Key runs it, once.
	cl.stop(1)
	cl.stop(2)
	body := map[string]any{"mode": "unify", "prompt": "no quorum: the Danube"}
	idem := map[string]string{"Idempotency-Key": "no-quorum"}
	refusedAt := time.Now()
	expectRestarting(t, h.submit(keys[0], body, idem))
	t.Logf("without quorum a submission was answered 503 service_restarting in %s", time.Since(refusedAt).Round(time.Millisecond))
	cl.start(1)
	cl.start(2)
	var id string
	refused := 0
	eventually(t, 120*time.Second, "the resubmission to be accepted", func() bool {
		r := h.submit(keys[0], body, idem)
		if r.status == 202 {
			id = r.json(t)["request_id"].(string)
			return true
		}
		expectRestarting(t, r)
		refused++
		return false
	})
	t.Logf("its resubmission was refused %d more times while the nodes came back, then accepted", refused)
	res := h.wait(keys[0], id, 120*time.Second)
	must(t, res["status"] == "completed" && h.countEvents(id, "submitted") == 1, "%s after the quorum came back: %v %v, %d submitted events", id, res["status"], res["error"], h.countEvents(id, "submitted"))
	// The balances read model catches up (a projection may have waited for
	// its lease while the node was down).
	eventually(t, 60*time.Second, "the balances read model to catch up", func() bool {
		last, err := h.m.Store.Last(context.Background(), h.m.Store.Accounts, events.Filter(events.AggregateAccount, acct))
		if err != nil || last == nil {
			return false
		}
		doc, err := projections.GetBalance(context.Background(), h.m.Store.Balances, acct)
		return err == nil && doc != nil && doc.Seq == last.Seq
	})
	h.closeAndAudit()
}

// Processes started with a cluster that cannot answer yet (one node of
// three up: no JetStream leader) wait for it instead of exiting, and run
// once the other nodes are up.
func TestProcessesWaitForAStartingCluster(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.start(0)
	cfg := config.Defaults()
	// A worker serves /metrics on its admin address: a free port, as for
	// its HTTP address.
	cfg.NATSURL, cfg.Replicas, cfg.HTTPAddr, cfg.AdminAddr = cl.url(), 3, "127.0.0.1:0", "127.0.0.1:0"
	w := &Main{Config: cfg, Role: RoleWorker, Log: zerolog.Nop()}
	t.Cleanup(func() { w.Close() })
	opened := make(chan error, 1)
	go func() { opened <- w.Open(context.Background()) }()
	select {
	case err := <-opened:
		t.Fatalf("the worker did not wait for the cluster: %v", err)
	case <-time.After(2 * time.Second):
	}
	cl.start(1)
	cl.start(2)
	select {
	case err := <-opened:
		must(t, err == nil, "the worker's start: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("the worker never started")
	}
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) { c.NATSURL, c.Replicas = cl.url(), 3 }))
	key := h.newKey()
	id := h.submitOK(key, "after the cluster came up")
	res := h.wait(key, id, 60*time.Second)
	must(t, res["status"] == "completed", "%s: %v %v", id, res["status"], res["error"])
}

// A query is readable at once after its submission was accepted, on a
// cluster too: a direct read is answered by any replica, and one that has
// not stored the submission yet found nothing. Before a direct read that
// finds nothing was asked again of the leader, 7 of 300 GETs answered 404
// and 2 of 300 reads of the last submitted event found none.
func TestClusterReadsAnAcceptedQueryAtOnce(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	h := newHarness(t, withRole(RoleAPI), withConfig(func(c *config.Config) {
		c.NATSURL, c.Replicas = cl.url(), 3
		c.AccountMaxKeys = 40
	}))
	startProcess(t, h, RoleWorker)
	acct := h.accountWith("pro", 10000)
	// Eight queries in flight per key at most.
	var keys []string
	for range 40 {
		keys = append(keys, h.key(acct))
	}
	const n = 600
	missing, noLast := 0, 0
	for i := range n {
		key := keys[i%len(keys)]
		r := h.submit(key, map[string]any{"mode": "unify", "prompt": fmt.Sprintf("read at once %d", i), "models": map[string]any{"provider_a": "sim-alpha-lite"}})
		must(t, r.status == 202, "submit %d: %d %s", i, r.status, r.body)
		id := r.json(t)["request_id"].(string)
		if i%2 == 1 {
			// The last event on a subject (an idempotent retry's check of
			// its submission, a settlement read back) is found at once too.
			rec, err := h.m.Store.Last(context.Background(), h.m.Store.Queries, events.Subject(events.AggregateQuery, id, events.QuerySubmitted{}.EventName()))
			must(t, err == nil, "last of %s: %v", id, err)
			if rec == nil {
				noLast++
			}
			continue
		}
		if g := h.api("GET", "/v1/queries/"+id, key, nil); g.status == 404 {
			missing++
		}
	}
	must(t, missing == 0, "%d of %d queries answered 404 right after their submission was accepted", missing, n/2)
	must(t, noLast == 0, "the submission of %d of %d queries was not found right after it was accepted", noLast, n/2)
}
