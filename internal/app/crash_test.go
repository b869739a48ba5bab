package app

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/worker"
)

// A query whose run kills its process every time (here: its customer-owned
// model's host is called, and the test kills the real binary with kill -9,
// as the kernel kills a process out of memory) is run DefaultMaxCrashes
// times and no more: the next start ends it failed with query_crashed,
// without calling the host again. Before, every restart ran it again until
// JetStream's max_deliver (30 deliveries).
func TestQueryThatKillsItsProcessEndsQueryCrashed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "crosscheck")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/crosscheck").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var calls atomic.Int64
	called := make(chan struct{}, 16)
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json")
		if tokens, _ := req["max_tokens"].(float64); tokens != 16 { // a query's call, not the connection test
			calls.Add(1)
			called <- struct{}{}
			<-r.Context().Done() // the process is killed meanwhile
			return
		}
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(host.Close)

	dir := t.TempDir()
	httpAddr, adminAddr := freeAddr(t), freeAddr(t)
	const token = "crash-test-admin-token-0123456789"
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, "serve")
		cmd.Env = append(os.Environ(),
			"CROSSCHECK_DATA_DIR="+dir, "CROSSCHECK_HTTP_ADDR="+httpAddr, "CROSSCHECK_ADMIN_ADDR="+adminAddr,
			"CROSSCHECK_WORKER_ACK_WAIT=1s", "CROSSCHECK_ADMIN_TOKEN="+token, "CROSSCHECK_BYOM_ALLOW=127.0.0.0/8",
			"CROSSCHECK_PRINT_FIRST_KEY=false",
		)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, bufio.NewReader(stderr)) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	h := &harness{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	base, admin := "http://"+httpAddr, "http://"+adminAddr
	ready := func() {
		pollUntil(t, 30*time.Second, 50*time.Millisecond, "the service to be ready", func() bool {
			r, err := h.client.Get(base + "/readyz")
			if err != nil {
				return false
			}
			r.Body.Close()
			return r.StatusCode == 200
		})
	}
	cmd := run()
	ready()
	r := h.call(admin, "POST", "/admin/v1/accounts", token, map[string]any{"name": "crasher", "plan": "free"}, nil)
	must(t, r.status == 201, "account: %d %s", r.status, r.body)
	acct := r.json(t)["account_id"].(string)
	r = h.call(admin, "POST", "/admin/v1/accounts/"+acct+"/keys", token, map[string]any{"name": "k", "accept_aup": true}, nil)
	must(t, r.status == 201, "key: %d %s", r.status, r.body)
	key := r.json(t)["key"].(string)
	r = h.call(admin, "POST", "/admin/v1/accounts/"+acct+"/models", token, map[string]any{"name": "crasher", "kind": "openai-compatible",
		"base_url": host.URL + "/v1", "model": "m"}, nil)
	must(t, r.status == 201, "connect: %d %s", r.status, r.body)
	model := r.json(t)["model_id"].(string)
	r = h.call(base, "POST", "/v1/queries", key, map[string]any{"mode": "unify", "prompt": "crash me", "models": map[string]any{}, "custom_models": []string{model}}, nil)
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	id := r.json(t)["request_id"].(string)

	kills := 0
	for {
		select {
		case <-called:
			must(t, kills < worker.DefaultMaxCrashes, "the host was called again (call %d): the query crashed its process %d times and runs again", kills+1, kills)
			must(t, cmd.Process.Signal(syscall.SIGKILL) == nil, "kill -9")
			_ = cmd.Wait()
			kills++
			cmd = run()
			ready()
			continue
		case <-time.After(200 * time.Millisecond):
		}
		q := h.call(base, "GET", "/v1/queries/"+id, key, nil, nil)
		if q.status == 200 && q.json(t)["status"] == "failed" {
			res := q.json(t)
			must(t, jsonPath(res, "error", "code") == "query_crashed" && kills == worker.DefaultMaxCrashes && calls.Load() == int64(kills),
				"after %d kills and %d calls: %v", kills, calls.Load(), res["error"])
			msg, _ := jsonPath(res, "error", "message").(string)
			must(t, strings.Contains(msg, fmt.Sprintf("last %d runs", kills)), "message: %s", msg)
			break
		}
		must(t, q.status == 200 && q.json(t)["status"] != "completed", "query: %d %s", q.status, q.body)
	}
	must(t, cmd.Process.Signal(syscall.SIGTERM) == nil && cmd.Wait() == nil, "serve did not exit cleanly on SIGTERM")
}
