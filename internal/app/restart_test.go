package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/projections"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// A worker that dies mid-query: after the restart every accepted query
// completes, polling never answers 404, and a model that had answered is
// neither called nor recorded again.
func TestRestartResumesFromEvents(t *testing.T) {
	t.Parallel()
	answers := map[string]*atomic.Int64{}
	for _, k := range catalog.ProviderKeys {
		answers[k] = &atomic.Int64{}
	}
	held, crash := holdUntilCrash(t, func(key string, p *testProvider, hold chan struct{}) {
		p.answers = answers[key]
		if key != catalog.ProviderA {
			p.hold = hold // b, c and d are mid-call when the process dies
		}
	})
	h := newHarness(t, held)
	key := h.newKey()
	var ids []string
	for i := range 3 {
		ids = append(ids, h.submitOK(key, fmt.Sprintf("resume me %d", i)))
	}
	eventually(t, 30*time.Second, "provider_a to answer and the others to be called", func() bool {
		for _, id := range ids {
			if h.countEvents(id, "model_answered") != 1 {
				return false
			}
		}
		return answers[catalog.ProviderD].Load() == 3
	})
	crash(h)
	for _, id := range ids {
		res := h.wait(key, id, 60*time.Second)
		must(t, res["status"] == "completed", "query %s: %v", id, res["status"])
		for i, m := range res["models"].([]any) {
			must(t, jsonPath(m, "status") == "answered", "query %s model %d: %v", id, i, jsonPath(m, "status"))
		}
		must(t, h.countEvents(id, "model_answered") == 4, "query %s has %d model_answered events, want 4", id, h.countEvents(id, "model_answered"))
		must(t, h.countEvents(id, "started") == 1 && h.countEvents(id, "completed") == 1, "query %s started %d completed %d times", id, h.countEvents(id, "started"), h.countEvents(id, "completed"))
	}
	must(t, answers[catalog.ProviderA].Load() == 3, "provider_a answered %d times for 3 queries; an answered model was called again", answers[catalog.ProviderA].Load())
	for _, k := range []string{catalog.ProviderB, catalog.ProviderC, catalog.ProviderD} {
		must(t, answers[k].Load() == 6, "%s called %d times, want 3 interrupted + 3 resumed", k, answers[k].Load())
	}
}

// kill -9 of the real binary while queries run; a restart on the same data
// dir completes every accepted query, each exactly once.
func TestKillNineAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "crosscheck")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/crosscheck").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	httpAddr, adminAddr := freeAddr(t), freeAddr(t)
	run := func() (*exec.Cmd, *bufio.Reader) {
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(),
			"CROSSCHECK_DATA_DIR="+dir, "CROSSCHECK_HTTP_ADDR="+httpAddr, "CROSSCHECK_ADMIN_ADDR="+adminAddr,
			"CROSSCHECK_SIM_LATENCY=1500ms", "CROSSCHECK_WORKER_ACK_WAIT=1s", "CROSSCHECK_ADMIN_TOKEN=",
		)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, bufio.NewReader(stdout)
	}
	readUntil := func(r *bufio.Reader, marker string) string {
		t.Helper()
		var seen strings.Builder
		for {
			line, err := r.ReadString('\n')
			seen.WriteString(line)
			if strings.Contains(line, marker) {
				go func() { _, _ = io.Copy(io.Discard, r) }()
				return line
			}
			if err != nil {
				t.Fatalf("output ended before %q:\n%s", marker, seen.String())
			}
		}
	}
	cmd, out := run()
	key := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(readUntil(out, "export CROSSCHECK_KEY=")), "export CROSSCHECK_KEY="))
	must(t, len(key) == 45, "printed key has %d characters", len(key))
	h := &harness{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	base := "http://" + httpAddr
	var ids []string
	for i := range 5 {
		r := h.call(base, "POST", "/v1/queries", key, map[string]any{"mode": "unify", "prompt": fmt.Sprintf("survive kill -9 #%d", i)}, nil)
		must(t, r.status == 202, "submit: %d %s", r.status, r.body)
		ids = append(ids, r.json(t)["request_id"].(string))
	}
	// Mid-run: the queries are started (1.5 s model latency), none finished.
	eventually(t, 10*time.Second, "the queries to start", func() bool {
		r := h.call(base, "GET", "/v1/queries/"+ids[4], key, nil, nil)
		return r.status == 200 && r.json(t)["status"] == "running"
	})
	must(t, cmd.Process.Signal(syscall.SIGKILL) == nil, "kill -9")
	_ = cmd.Wait()

	cmd, out = run()
	readUntil(out, "already holds accounts")
	for _, id := range ids {
		pollUntil(t, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("query %s to complete after the restart", id), func() bool {
			r, err := h.client.Get(base + "/readyz")
			if err != nil {
				return false
			}
			r.Body.Close()
			resp := h.call(base, "GET", "/v1/queries/"+id, key, nil, nil)
			must(t, resp.status != 404, "GET %s answered 404 after the restart", id)
			return resp.status == 200 && resp.json(t)["status"] == "completed"
		})
	}
	// A clean SIGTERM exits 0; then every query has exactly one terminal event.
	must(t, cmd.Process.Signal(syscall.SIGTERM) == nil, "SIGTERM")
	must(t, cmd.Wait() == nil, "serve did not exit cleanly on SIGTERM")
	store, closeStore, err := OpenStore(context.Background(), config.Config{DataDir: dir, Replicas: 1})
	must(t, err == nil, "reopen data dir: %v", err)
	defer closeStore()
	for _, id := range ids {
		q, _, err := store.LoadQuery(context.Background(), id)
		must(t, err == nil && q.Status == events.StatusCompleted, "query %s: %v %v", id, q.Status, err)
		for _, name := range []string{"submitted", "completed"} {
			rec, _ := store.Last(context.Background(), store.Queries, events.Subject(events.AggregateQuery, id, name))
			must(t, rec != nil, "query %s has no %s event", id, name)
		}
		must(t, len(q.Answers) == 4, "query %s: %d answers", id, len(q.Answers))
	}
}

// The query read model can be deleted and rebuilt from the stream to the
// same bytes.
func TestReadModelRebuildsToIdenticalBytes(t *testing.T) {
	t.Parallel()
	set, _ := testProviders(func(key string, p *testProvider) {
		if key == catalog.ProviderC {
			p.fail, p.failWhen = &providers.Error{Class: providers.ClassHostError, Status: 503, Message: "upstream overloaded"}, "flaky"
		}
	})
	h := newHarness(t, withProviders(func() providers.Set { return set }))
	key := h.newKey()
	var ids []string
	for i := range 6 {
		prompt := fmt.Sprintf("rebuild %d", i)
		if i%2 == 0 {
			prompt += " flaky"
		}
		ids = append(ids, h.submitOK(key, prompt))
	}
	// The blocks of justify and verify rebuild too.
	for _, mode := range []string{"justify", "verify"} {
		r := h.submit(key, map[string]any{"mode": mode, "prompt": "rebuild the moon and the Danube flaky"})
		must(t, r.status == 202, "submit %s: %d %s", mode, r.status, r.body)
		ids = append(ids, r.json(t)["request_id"].(string))
	}
	ctx := context.Background()
	before := map[string][]byte{}
	for _, id := range ids {
		h.wait(key, id, 30*time.Second)
		eventually(t, 10*time.Second, "the projection of "+id, func() bool {
			e, err := h.m.Store.QueryStatus.Get(ctx, id)
			if err != nil {
				return false
			}
			var d projections.QueryDoc
			_ = jsonUnmarshal(e.Value, &d)
			if !d.Result.Terminal() {
				return false
			}
			before[id] = e.Value
			return true
		})
	}
	h.m.Close()

	h.offline(func(store *eventstore.Store) {
		must(t, store.ResetQueryStatus(ctx) == nil, "reset bucket")
		must(t, projections.Rewind(ctx, store.Projections, projections.ConsumerQueryStatus) == nil, "rewind")
		bucket, err := storetest.JetStream(t, store).KeyValue(ctx, eventstore.BucketQueryStatus)
		must(t, err == nil, "bucket: %v", err)
		keys, _ := bucket.ListKeys(ctx)
		n := 0
		for range keys.Keys() {
			n++
		}
		must(t, n == 0, "bucket not empty after reset: %d keys", n)
	})

	h.start()
	for _, id := range ids {
		eventually(t, 30*time.Second, "the rebuild of "+id, func() bool {
			e, err := h.m.Store.QueryStatus.Get(ctx, id)
			return err == nil && string(e.Value) == string(before[id])
		})
	}
}
