package app

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/audit"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// powerLossStores are the stores whose directories a power cut can leave
// at different moments when each is synced on its own timer: the two
// streams of record, the read models and the projections' checkpoints.
var powerLossStores = []string{
	eventstore.StreamQueries, eventstore.StreamAccounts,
	"KV_" + eventstore.BucketProjections,
	"KV_" + eventstore.BucketQueryStatus, "KV_" + eventstore.BucketQueryList,
	"KV_" + eventstore.BucketBalances, "KV_" + eventstore.BucketKeys,
}

// streamDir is where the embedded server keeps the stream (or bucket
// stream) name of the data dir.
func streamDir(dataDir, name string) string {
	return filepath.Join(dataDir, "jetstream", "jetstream", "$G", "streams", name)
}

// copyTree copies the directory src to dst, which must not exist.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// A power cut under a sync interval leaves each store as it was at its own
// last fsync. The test takes the store directories at two moments of a
// run, A and B (queries running at each), and starts the service on B with
// every subset of the stores taken back to A. Whatever the subset, after
// the start no query is charged twice, every query of the stream is listed
// and polls what its events say, queries submitted after the start are
// listed and complete, and crosscheck audit passes.
func TestPowerLossStoreCombinations(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service once per combination of restored stores")
	}
	work := t.TempDir()
	snapA, snapB := filepath.Join(work, "A"), filepath.Join(work, "B")
	// The operator's opt-in that makes this possible: an fsync interval.
	interval := func(c *config.Config) { c.SyncAlways, c.SyncInterval = false, 2*time.Minute }
	h := newHarness(t, withConfig(func(c *config.Config) { interval(c); c.SimLatency = 150 * time.Millisecond }))
	acc := h.account()
	k1 := h.key(acc)
	var done []string
	for i := range 4 {
		done = append(done, h.submitOK(k1, fmt.Sprintf("before A %d", i)))
	}
	for _, id := range done {
		h.wait(k1, id, 30*time.Second)
	}
	for i := range 4 {
		h.submitOK(k1, fmt.Sprintf("running at A %d", i))
	}
	time.Sleep(100 * time.Millisecond)
	h.m.Crash()
	copyTree(t, h.dir, snapA)
	h.start()
	// Between A and B: a new key and a grant on the account, queries that
	// end and queries still running at B.
	k2 := h.key(acc)
	if r := h.admin("POST", "/admin/v1/accounts/"+acc+"/credits", map[string]any{"amount": 20, "reason": "top up"}); r.status != 200 {
		t.Fatalf("grant: %d %s", r.status, r.body)
	}
	var mid []string
	for i := range 6 {
		mid = append(mid, h.submitOK(k2, fmt.Sprintf("between A and B %d", i)))
	}
	for _, id := range mid {
		h.wait(k2, id, 30*time.Second)
	}
	for i := range 3 {
		h.submitOK(k2, fmt.Sprintf("running at B %d", i))
	}
	time.Sleep(100 * time.Millisecond)
	h.m.Crash()
	copyTree(t, h.dir, snapB)

	var mu sync.Mutex
	var failed []string
	t.Run("combinations", func(t *testing.T) {
		for mask := range 1 << len(powerLossStores) {
			combination(t, mask, work, snapA, snapB, k1, k2, interval, func(name string) {
				mu.Lock()
				defer mu.Unlock()
				failed = append(failed, name)
			})
		}
	})
	slices.Sort(failed)
	t.Logf("%d of %d combinations failed: %v", len(failed), 1<<len(powerLossStores), failed)
}

// combination starts the service on snapB with the stores of mask taken
// back to snapA, beside the other combinations, and checks it; failed is
// told the names of those that fail.
func combination(t *testing.T, mask int, work, snapA, snapB, k1, k2 string, cfg func(*config.Config), failed func(string)) {
	var older []string
	for i, name := range powerLossStores {
		if mask&(1<<i) != 0 {
			older = append(older, name)
		}
	}
	name := "none older"
	if len(older) > 0 {
		name = strings.Join(older, "+") + " older"
	}
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		t.Cleanup(func() {
			if t.Failed() {
				failed(name)
			}
		})
		dir := filepath.Join(work, fmt.Sprintf("c%03d", mask))
		copyTree(t, snapB, dir)
		for _, st := range older {
			if err := os.RemoveAll(streamDir(dir, st)); err != nil {
				t.Fatal(err)
			}
			copyTree(t, streamDir(snapA, st), streamDir(dir, st))
		}
		// The process did not stop: its data dir is marked in use.
		if err := os.WriteFile(filepath.Join(dir, embedded.RunningFile), []byte("4242\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		checkAfterPowerLoss(t, dir, k1, k2, cfg)
	})
}

// checkAfterPowerLoss starts the service on dir and checks what a power cut
// must not break; key is a key of the one account, which every combination
// knows, and later a key created between A and B, which must authenticate
// whenever ACCOUNTS holds it.
func checkAfterPowerLoss(t *testing.T, dir, key, later string, with func(*config.Config)) {
	t.Helper()
	cfg := EphemeralConfig(dir)
	with(&cfg)
	h := &harness{t: t, dir: dir, cfg: cfg, logs: &syncBuffer{}, clock: &clock{}, client: &http.Client{Timeout: 60 * time.Second}}
	h.start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the service's log:\n%s", h.logs.String())
		}
	})
	closed := false
	defer func() {
		if !closed {
			h.m.Close()
		}
	}()
	// Queries submitted after the start are listed and complete.
	var fresh []string
	for i := range 2 {
		fresh = append(fresh, h.submitOK(key, fmt.Sprintf("after the cut %d", i)))
	}
	for _, id := range fresh {
		h.wait(key, id, 30*time.Second)
	}
	// Every query of the stream ends, and polls what its events say.
	submitted := map[string]bool{}
	for _, r := range h.streamRecords(eventstore.StreamQueries) {
		if e, ok := r.Event.(events.QuerySubmitted); ok {
			submitted[e.RequestID] = true
		}
	}
	for id := range submitted {
		got := h.wait(key, id, 20*time.Second)
		_, recs, err := h.m.Store.LoadQuery(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		want := projections.FoldQuery(recs).Result
		if got["status"] != want.Status {
			t.Errorf("query %s polls %v, but its events say %s", id, got["status"], want.Status)
		}
	}
	ids, _ := h.listAll(key, 100, url.Values{})
	for id := range submitted {
		if !slices.Contains(ids, id) {
			t.Errorf("query %s is not in GET /v1/queries (%d listed, %d in the stream)", id, len(ids), len(submitted))
		}
	}
	for _, id := range ids {
		if !submitted[id] {
			t.Errorf("GET /v1/queries lists %s, which the stream does not hold", id)
		}
	}
	known := false
	for _, r := range h.streamRecords(eventstore.StreamAccounts) {
		if e, ok := r.Event.(events.KeyCreated); ok && strings.Contains(later, e.Fingerprint) {
			known = true
		}
	}
	if r := h.api("GET", "/v1/queries", later, nil); known && r.status != 200 {
		t.Errorf("a key ACCOUNTS holds does not authenticate: %d %s", r.status, r.body)
	}
	h.m.Close()
	closed = true
	h.offline(func(store *eventstore.Store) {
		rep, err := audit.Run(context.Background(), store)
		if err != nil {
			t.Fatalf("audit: %v", err)
		}
		for _, p := range rep.Problems {
			t.Errorf("audit: %s", p)
		}
	})
}
