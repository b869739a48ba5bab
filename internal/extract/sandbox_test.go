package extract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probeFormat is a format only the test binary reads: its "file" names a
// thing a parser exploit would try from inside the child, and its text
// says whether the child could ("ok: ...") or not ("denied: ...").
const probeFormat = "test-probe"

func init() {
	formats[probeFormat] = func(data []byte) (Document, error) {
		verb, arg, _ := strings.Cut(string(data), " ")
		return Document{Paragraphs: []string{probe(verb, arg)}}, nil
	}
}

func probe(verb, arg string) string {
	outcome := func(err error, ok string) string {
		if err != nil {
			return "denied: " + err.Error()
		}
		return "ok: " + ok
	}
	switch verb {
	case "read":
		b, err := os.ReadFile(arg)
		return outcome(err, string(b))
	case "read-environ":
		b, err := os.ReadFile("/proc/" + arg + "/environ")
		return outcome(err, strings.ReplaceAll(string(b), "\x00", " "))
	case "create":
		return outcome(os.WriteFile(arg, []byte("written by the child"), 0o600), "created")
	case "exec":
		return outcome(syscall.Exec(arg, []string{arg}, nil), "ran "+arg)
	case "fork-exec":
		pid, err := syscall.ForkExec(arg, []string{arg}, &syscall.ProcAttr{})
		if err == nil {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, 0, nil)
		}
		return outcome(err, "ran "+arg)
	case "connect":
		c, err := net.DialTimeout("tcp", arg, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return outcome(err, "connected")
	case "signal":
		pid, _ := strconv.Atoi(arg)
		return outcome(syscall.Kill(pid, 0), "may signal "+arg)
	case "environ":
		return "ok: " + strings.Join(os.Environ(), " ")
	}
	return "unknown probe " + verb
}

// runProbe runs a probe in a child of r and returns its text.
func runProbe(t *testing.T, r *Runner, verb, arg string) string {
	t.Helper()
	res, err := r.Run(context.Background(), "", probeFormat, strings.NewReader(verb+" "+arg), Caps{})
	if err != nil {
		t.Fatalf("probe %s: %v", verb, err)
	}
	return res.Text()
}

// TestChildReachesNothingButItsInput: a parser exploit in the child can
// neither read the data dir's secrets nor its parent's environment, write a
// file, run a program, open a connection or signal its parent.
func TestChildReachesNothingButItsInput(t *testing.T) {
	dataDir := t.TempDir()
	secret := filepath.Join(dataDir, "admin-token")
	if err := os.WriteFile(secret, []byte("the-admin-token-of-this-test"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CROSSCHECK_ADMIN_TOKEN", "the-admin-token-of-this-test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var r Runner
	for _, p := range []struct{ verb, arg string }{
		{"read", secret},
		{"read-environ", strconv.Itoa(os.Getpid())},
		{"create", filepath.Join(dataDir, "planted")},
		{"exec", "/bin/true"},
		{"fork-exec", "/bin/true"},
		{"connect", ln.Addr().String()},
		{"signal", strconv.Itoa(os.Getpid())},
	} {
		t.Run(p.verb, func(t *testing.T) {
			got := runProbe(t, &r, p.verb, p.arg)
			t.Logf("%s %s: %s", p.verb, p.arg, got)
			if !strings.HasPrefix(got, "denied: ") {
				t.Errorf("the child could %s %s: %q", p.verb, p.arg, got)
			}
			if strings.Contains(got, "the-admin-token-of-this-test") {
				t.Errorf("the child read the admin token")
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dataDir, "planted")); err == nil {
		t.Error("the child wrote a file into the data dir")
	}
	if env := runProbe(t, &r, "environ", ""); strings.Contains(env, "CROSSCHECK_") {
		t.Errorf("the child's environment holds the parent's settings: %q", env)
	}
}

// childOf waits until this process has a child whose command line holds
// want, and returns its pid.
func childOf(t *testing.T, parent int, want string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if ppid, _ := procState(pid); ppid != parent {
				continue
			}
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(cmd, []byte(want)) {
				return pid
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no child of %d running %q", parent, want)
	return 0
}

// procState returns the parent and the state letter of process pid, or
// 0 and "" when it is gone.
func procState(pid int) (ppid int, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(fields[1])
	return ppid, fields[0]
}

// procField returns the value of the line of /proc/pid/file that starts
// with key.
func procField(pid int, file, key string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			return strings.Join(strings.Fields(rest), " ")
		}
	}
	return ""
}

// TestChildIsLockedDown reads, from outside, the state of a child waiting
// for its input: no new privileges, a seccomp filter, and bounded CPU,
// memory, file size, processes and core dumps.
func TestChildIsLockedDown(t *testing.T) {
	r := Runner{CPUSeconds: 7, Memory: 300 << 20}
	in, feed := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), "", FormatText, in, Caps{})
		done <- err
	}()
	pid := childOf(t, os.Getpid(), ChildCommand)
	deadline := time.Now().Add(10 * time.Second)
	for procField(pid, "status", "Seccomp:") != "2" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	want := map[[2]string]string{
		{"status", "NoNewPrivs:"}:        "1",
		{"status", "Seccomp:"}:           "2",
		{"status", "CapEff:"}:            "0000000000000000",
		{"limits", "Max cpu time"}:       "7 8 seconds",
		{"limits", "Max file size"}:      "0 0 bytes",
		{"limits", "Max core file size"}: "0 0 bytes",
		{"limits", "Max locked memory"}:  "0 0 bytes",
		{"limits", "Max open files"}:     "16 16 files",
	}
	if !raceEnabled {
		want[[2]string{"limits", "Max data size"}] = fmt.Sprintf("%d %d bytes", 300<<20, 300<<20)
	}
	for k, v := range want {
		if got := procField(pid, k[0], k[1]); got != v {
			t.Errorf("%s %s = %q, want %q", k[0], k[1], got, v)
		}
	}
	mine, _, _ := strings.Cut(procField(os.Getpid(), "limits", "Max processes"), " ")
	theirs, _, _ := strings.Cut(procField(pid, "limits", "Max processes"), " ")
	if n, err := strconv.Atoi(theirs); err != nil || mine != "unlimited" && n >= atoiOr(mine, 0) {
		t.Errorf("Max processes = %s, want a bound below this process's (%s)", theirs, mine)
	}
	feed.Write([]byte("hello"))
	feed.Close()
	if err := <-done; err != nil {
		t.Fatalf("Run after the inspection: %v", err)
	}
}

// parentRole is the environment variable that makes the test binary play
// a parent of an extraction child for TestChildDiesWithItsParent.
const parentRole = "EXTRACT_TEST_PARENT_OF_A_CHILD"

// actAsParentIfAsked starts a child that would sleep for a minute and
// waits for ever, when the process was started for that.
func actAsParentIfAsked() {
	if os.Getenv(parentRole) == "" {
		return
	}
	r := Runner{Path: "/bin/sh", Args: []string{"-c", "exec sleep 60"}, Timeout: time.Minute}
	in, _ := io.Pipe()
	r.Run(context.Background(), "", FormatText, in, Caps{})
	os.Exit(0)
}

// TestChildDiesWithItsParent kills a process while its extraction child
// runs: the child dies with it rather than run on, its limits aside.
func TestChildDiesWithItsParent(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^$")
	parent.Env = append(os.Environ(), parentRole+"=1")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	child := childOf(t, parent.Process.Pid, "sleep")
	t.Cleanup(func() {
		if _, state := procState(child); state != "" && state != "Z" {
			syscall.Kill(child, syscall.SIGKILL)
		}
	})
	parent.Process.Kill()
	parent.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, state := procState(child)
		if state == "" || state == "Z" || state == "X" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child %d still runs (state %s) 10 s after its parent died", child, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestChildOfAnotherParentExits: a child that finds it is not the child of
// the process that started it (that parent died before the child could
// ask for a signal at its death) exits before reading anything.
func TestChildOfAnotherParentExits(t *testing.T) {
	cmd := exec.Command(os.Args[0], ChildCommand, "-format", FormatText, "-parent", strconv.Itoa(os.Getpid()+1))
	cmd.Stdin = strings.NewReader("hello")
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitOrphaned || out.Len() != 0 {
		t.Fatalf("child of another parent: %v, output %q; want exit code %d and no output", err, out.String(), exitOrphaned)
	}
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}
