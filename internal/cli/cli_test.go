package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/app/apptest"
	"github.com/crosscheck/crosscheck/internal/cli"
)

// service is the crosscheck process the tests share; binary is the
// command the tests run in a process of its own (a terminal, Ctrl-C): this
// test binary, which runs the client commands as crosscheck does when
// CROSSCHECK_TEST_CLI is set, so that no binary is built for the tests.
var (
	service *apptest.Server
	binary  = os.Args[0]
)

func TestMain(m *testing.M) {
	apptest.RunChildIfAsked()
	if os.Getenv("CROSSCHECK_TEST_CLI") == "1" {
		os.Exit(cli.Run(context.Background(), os.Args[1:], cli.IO{Stdout: os.Stdout, Stderr: os.Stderr}))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if service, err = apptest.Start(apptest.WithSimLatency(30 * time.Millisecond)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer service.Close()
	return m.Run()
}

func env(url, key string) []string {
	return append(os.Environ(), "CROSSCHECK_TEST_CLI=1", cli.EnvURL+"="+url, cli.EnvKey+"="+key)
}

// runCLI runs a command in-process against url with key, stdout not a
// terminal, and returns its exit code and outputs.
func runCLI(t *testing.T, url, key string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	vars := map[string]string{cli.EnvURL: url, cli.EnvKey: key}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := cli.Run(ctx, args, cli.IO{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return vars[k] }})
	return code, out.String(), errOut.String()
}

func TestAskInATerminalDrawsProgress(t *testing.T) {
	cmd := exec.Command(binary, "ask", "--mode", "justify", "Is a tomato a fruit?")
	cmd.Env = env(service.URL, service.Key)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var out bytes.Buffer
	_, _ = io.Copy(&out, tty) // until the command exits (EIO on Linux)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ask: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"\r", "deliberating", "100%", "Answer", "Disagreements", "credits charged"} {
		if !strings.Contains(s, want) {
			t.Errorf("the terminal shows no %q:\n%s", want, s)
		}
	}
	if !regexp.MustCompile(`\|[█ ]+\|`).MatchString(s) {
		t.Errorf("no progress bar drawn:\n%q", s)
	}
}

func TestAskWithoutATerminalPrintsLines(t *testing.T) {
	cmd := exec.Command(binary, "ask", "Is a tomato a fruit?", "--mode", "unify")
	cmd.Env = env(service.URL, service.Key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ask: %v\n%s", err, stderr.String())
	}
	if strings.ContainsAny(stdout.String()+stderr.String(), "\r\x1b") {
		t.Fatalf("redraws or escape codes without a terminal:\n%q\n%q", stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if !strings.HasPrefix(lines[0], "query req_") || !strings.Contains(stderr.String(), "%] running_models\n") || lines[len(lines)-1] != "[100%] completed" {
		t.Fatalf("stderr is not a line per stage:\n%s", stderr.String())
	}
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		if seen[l] {
			t.Fatalf("the line %q twice:\n%s", l, stderr.String())
		}
		seen[l] = true
	}
	if !strings.Contains(stdout.String(), "Answer\n\n  ") || !strings.Contains(stdout.String(), "completed, credits charged") {
		t.Fatalf("no answer on stdout:\n%s", stdout.String())
	}
}

func TestAskVerifyPrintsAClaimTable(t *testing.T) {
	code, out, errOut := runCLI(t, service.URL, service.Key, "ask", "--mode", "verify", "The Eiffel Tower is in Paris and was finished in 1889.")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Claims", "CLAIM", "VERDICT", "CONFIDENCE", "FIRST SOURCE"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
}

func TestAskJSONPrintsTheResult(t *testing.T) {
	code, out, errOut := runCLI(t, service.URL, service.Key, "ask", "--json", "--model", "provider_a=sim-alpha-lite", "--model", "provider_b=sim-beta-standard", "--model", "provider_d=none", "What is 2+2?")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var q apiv1.Query
	if err := json.Unmarshal([]byte(out), &q); err != nil || q.Status != "completed" {
		t.Fatalf("stdout is not the completed query: %v\n%s", err, out)
	}
	var ran []string
	for _, m := range q.Models {
		ran = append(ran, m.Provider+"="+m.ModelID)
	}
	if got := strings.Join(ran, ","); got != "provider_a=sim-alpha-lite,provider_b=sim-beta-standard" {
		t.Fatalf("models %s; want the two selected", got)
	}
}

func TestAskWithAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.json")
	if err := os.WriteFile(path, []byte(`{"meeting": "Tuesday"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, service.URL, service.Key, "ask", "--json", "--file", path, "When is the meeting?")
	var q apiv1.Query
	if code != 0 || json.Unmarshal([]byte(out), &q) != nil || len(q.Files) != 1 || q.Files[0].Name != "notes.json" {
		t.Fatalf("exit %d, %s\n%s", code, errOut, out)
	}
}

func TestCtrlCDetaches(t *testing.T) {
	slow, err := apptest.Start(apptest.WithSimLatency(3 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	cmd := exec.Command(binary, "ask", "--mode", "justify", "Take your time.")
	cmd.Env = env(slow.URL, slow.Key)
	var stdout bytes.Buffer
	stderr := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := ""
	re := regexp.MustCompile(`query (req_\S+) submitted`)
	pollUntil(t, 30*time.Second, "the submission", func() bool {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			id = m[1]
		}
		return id != ""
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("exit: %v; want 130\n%s", err, stderr.String())
	}
	for _, want := range []string{"detached from " + id, "crosscheck watch " + id, "crosscheck cancel " + id} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("no %q in:\n%s", want, stderr.String())
		}
	}
	// The query went on: watch picks it up and sees it to its end.
	code, out, errOut := runCLI(t, slow.URL, slow.Key, "watch", id)
	if code != 0 || !strings.Contains(out, id+" completed") {
		t.Fatalf("watch: exit %d %s\n%s", code, errOut, out)
	}
}

func TestStatusEstimateModels(t *testing.T) {
	code, out, _ := runCLI(t, service.URL, service.Key, "ask", "--json", "Why is the sea salty?")
	var q apiv1.Query
	if code != 0 || json.Unmarshal([]byte(out), &q) != nil {
		t.Fatalf("ask: %d %s", code, out)
	}
	// The stream can tell the end before the query's read model does.
	pollUntil(t, 10*time.Second, "status to show the completed query", func() bool {
		code, out, _ := runCLI(t, service.URL, service.Key, "status", q.RequestID)
		return code == 0 && strings.Contains(out, q.RequestID+"  unify  completed") && strings.Contains(out, "Answer")
	})
	if code, out, _ := runCLI(t, service.URL, service.Key, "estimate", "--mode", "verify", "Is Pluto a planet?"); code != 0 || !strings.Contains(out, "verify: about ") || !strings.Contains(out, "ROLE") {
		t.Fatalf("estimate: %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, service.URL, service.Key, "models"); code != 0 || !strings.Contains(out, "(simulated)") || !strings.Contains(out, "sim-alpha-standard") || !strings.Contains(out, "DEFAULT") {
		t.Fatalf("models: %d\n%s", code, out)
	}
}

func TestUsageAndServiceErrors(t *testing.T) {
	cases := []struct {
		name     string
		key      string
		args     []string
		code     int
		inStderr string
	}{
		{"no key", "", []string{"models"}, 2, "set CROSSCHECK_KEY"},
		{"no key flag", service.Key, []string{"ask", "--key", "xchk_x", "p"}, 2, "unknown flag: --key"},
		{"no prompt", service.Key, []string{"ask"}, 2, "give the prompt"},
		{"bad model flag", service.Key, []string{"ask", "--model", "provider_a", "p"}, 2, "provider=model_id"},
		{"two ids", service.Key, []string{"watch", "a", "b"}, 2, "give one query id"},
		{"unknown query", service.Key, []string{"status", "req_nope"}, 1, "not_found"},
		{"bad mode", service.Key, []string{"ask", "--mode", "guess", "p"}, 1, "invalid_mode"},
		{"bad key", "xchk_00000000" + strings.Repeat("0", 32), []string{"models"}, 1, "check the key in CROSSCHECK_KEY"},
		{"help", service.Key, []string{"ask", "-h"}, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, service.URL, tc.key, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.inStderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.inStderr)
			}
			if tc.key != "" && strings.Contains(errOut, tc.key) {
				t.Fatalf("stderr shows the key")
			}
		})
	}
}

// listAndCancel speaks the contract of GET /v1/queries and POST
// /v1/queries/{id}/cancel for one running and one completed query.
func listAndCancel(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	charged := 0.5
	rows := []apiv1.QuerySummary{
		{RequestID: "req_run", Object: "query", Mode: "justify", Status: "running", Stage: "deliberating", CreatedAt: time.Now()},
		{RequestID: "req_done", Object: "query", Mode: "unify", Status: "completed", Stage: "aggregating", Credits: apiv1.QueryCredits{Charged: &charged}, CreatedAt: time.Now()},
	}
	switch {
	case r.URL.Path == "/v1/queries" && r.Method == http.MethodGet:
		page := apiv1.QueryList{Object: "list", Data: []apiv1.QuerySummary{}}
		for _, q := range rows {
			if s := r.URL.Query().Get("status"); s == "" || s == q.Status {
				page.Data = append(page.Data, q)
			}
		}
		_ = json.NewEncoder(w).Encode(page)
	case r.URL.Path == "/v1/queries/req_run/cancel":
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(apiv1.Query{RequestID: "req_run", Object: "query", Mode: "justify", Status: "running"})
	case r.URL.Path == "/v1/queries/req_done/cancel":
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(apiv1.ErrorBody{Error: apiv1.ErrorDetail{Code: "query_ended", Message: "the query has already ended"}})
	default:
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(apiv1.ErrorBody{Error: apiv1.ErrorDetail{Code: "not_found", Message: "no such query"}})
	}
}

func TestListAndCancel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(listAndCancel))
	defer srv.Close()
	code, out, _ := runCLI(t, srv.URL, "xchk_k", "list")
	if code != 0 || !strings.Contains(out, "req_run") || !strings.Contains(out, "req_done") || !strings.Contains(out, "REQUEST ID") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, srv.URL, "xchk_k", "list", "--status", "running"); code != 0 || strings.Contains(out, "req_done") {
		t.Fatalf("list --status running: %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, srv.URL, "xchk_k", "cancel", "req_run"); code != 0 || !strings.Contains(out, "cancelling req_run") {
		t.Fatalf("cancel: %d\n%s", code, out)
	}
	if code, _, errOut := runCLI(t, srv.URL, "xchk_k", "cancel", "req_done"); code != 1 || !strings.Contains(errOut, "query_ended") {
		t.Fatalf("cancel of an ended query: %d %s", code, errOut)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pollUntil polls cond until it holds, failing the test after within.
func pollUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// list against the real service: a page ends with the command that lists
// the next one, which lists the rest with the same filters.
func TestListPagesAgainstTheService(t *testing.T) {
	_, key, err := service.NewAccount()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		code, out, errOut := runCLI(t, service.URL, key, "ask", "--json", fmt.Sprintf("page me %d", i))
		if code != 0 {
			t.Fatalf("ask: %d %s %s", code, out, errOut)
		}
		var q apiv1.Query
		if err := json.Unmarshal([]byte(out), &q); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, q.RequestID)
	}
	pollUntil(t, 30*time.Second, "the list to show the three queries", func() bool {
		_, out, _ := runCLI(t, service.URL, key, "list", "--json")
		return strings.Count(out, `"request_id"`) == 3
	})
	code, out, errOut := runCLI(t, service.URL, key, "list", "--limit", "2", "--mode", "unify")
	if code != 0 || !strings.Contains(out, ids[2]) || !strings.Contains(out, ids[1]) || strings.Contains(out, ids[0]) {
		t.Fatalf("first page: %d\n%s%s", code, out, errOut)
	}
	_, hint, ok := strings.Cut(out, "more: ")
	if !ok {
		t.Fatalf("no hint of the next page:\n%s", out)
	}
	args := strings.Fields(strings.TrimPrefix(strings.TrimSpace(strings.SplitN(hint, "\n", 2)[0]), "crosscheck "))
	code, out, errOut = runCLI(t, service.URL, key, args...)
	if code != 0 || !strings.Contains(out, ids[0]) || strings.Contains(out, ids[1]) || strings.Contains(out, "more: ") {
		t.Fatalf("the next page (%v): %d\n%s%s", args, code, out, errOut)
	}
}

// A service that does not answer: the message says where the command
// looked and how to point it elsewhere.
func TestServiceDownNamesTheURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	code, _, errOut := runCLI(t, url, "xchk_k", "models")
	if code != 1 || !strings.Contains(errOut, "no service answers at "+url) || !strings.Contains(errOut, "set CROSSCHECK_URL") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// A client command's -h prints its flags, on standard output, and calls
// nothing.
func TestClientHelp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Errorf("a help called %s", r.URL) }))
	defer srv.Close()
	for cmd, flags := range map[string][]string{"ask": {"--mode", "--model", "--custom", "--file", "--json"}, "list": {"--status", "--limit", "--after", "--all"}, "watch": {"--json"}} {
		code, out, errOut := runCLI(t, srv.URL, "xchk_k", cmd, "-h")
		if code != 0 || errOut != "" || !strings.Contains(out, "crosscheck "+cmd) || !strings.Contains(out, "CROSSCHECK_URL") {
			t.Fatalf("%s -h: exit %d\n%s%s", cmd, code, out, errOut)
		}
		for _, f := range flags {
			if !strings.Contains(out, f) {
				t.Errorf("%s -h does not list %s:\n%s", cmd, f, out)
			}
		}
	}
}
