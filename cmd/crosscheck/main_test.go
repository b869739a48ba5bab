package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/crosscheck/crosscheck/internal/cli"
)

// TestMain runs the real main in a child process when the tests ask for it,
// so that the command line is tried as the binary runs it without building
// the binary.
func TestMain(m *testing.M) {
	if os.Getenv("CROSSCHECK_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// recorder is a service that records what it was asked to do and does
// nothing.
type recorder struct {
	mu  sync.Mutex
	ran []string
}

func (r *recorder) record(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran = append(r.ran, what)
}

func (r *recorder) serve(role string) error { r.record(role); return nil }
func (r *recorder) audit(context.Context, io.Writer) (bool, error) {
	r.record("audit")
	return true, nil
}

// events runs the real events command on a data dir that does not exist:
// its help opens no store, and a store opened would create the dir.
func (r *recorder) events(ctx context.Context, args []string, out, errOut io.Writer) int {
	return realService{}.events(ctx, args, out, errOut)
}
func (r *recorder) rotateKeys(context.Context, io.Writer) error { r.record("keys rotate"); return nil }
func (r *recorder) bench() error                                { r.record("bench"); return nil }

// execute runs the command line args in-process on a recorder.
func execute(t *testing.T, args ...string) (code int, stdout, stderr string, ran []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	o := cli.IO{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	rec := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = cli.Execute(ctx, newRoot(o, rec), args, o)
	return code, out.String(), errOut.String(), rec.ran
}

// commandPaths returns the path of every command under c that a user may
// type, c's own included.
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	paths := [][]string{prefix}
	for _, sub := range c.Commands() {
		if sub.Hidden || strings.HasPrefix(sub.Name(), "__") {
			continue
		}
		paths = append(paths, commandPaths(sub, append(slices.Clone(prefix), sub.Name()))...)
	}
	return paths
}

// Every command, the service's and the client's, has its own -h: it exits
// 0, prints the command's usage and flags (and, for the service's commands,
// the settings with their defaults) and runs nothing.
func TestEveryCommandHelpRunsNothing(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	t.Setenv("CROSSCHECK_DATA_DIR", dataDir)
	t.Setenv("CROSSCHECK_NATS_URL", "")
	root := newRoot(cli.IO{Stdout: io.Discard, Stderr: io.Discard}, &recorder{})
	root.InitDefaultCompletionCmd()
	root.InitDefaultHelpCmd()
	paths := commandPaths(root, nil)
	if len(paths) < 20 {
		t.Fatalf("only %d commands: %v", len(paths), paths)
	}
	for _, path := range paths {
		for _, help := range []string{"-h", "--help"} {
			args := append(slices.Clone(path), help)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, out, errOut, ran := execute(t, args...)
				if code != 0 || len(ran) != 0 {
					t.Fatalf("exit %d, ran %v; want 0 and nothing run\nstderr: %s", code, ran, errOut)
				}
				if !strings.Contains(out, "Usage:") {
					t.Fatalf("no usage on stdout:\n%s", out)
				}
				cmd, _, _ := root.Find(path)
				if cmd.Name() != "events" {
					cmd.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
						if !strings.Contains(out, "--"+f.Name) {
							t.Errorf("the help does not list --%s:\n%s", f.Name, out)
						}
					})
				} else if !strings.Contains(out, "-from-seq") {
					t.Errorf("the help does not list the flags:\n%s", out)
				}
				if len(path) == 1 && cmd.GroupID == cli.GroupService && !slices.Contains([]string{"version", "bench", "keys", "completion", "help"}, path[0]) {
					// Events' -h is its export's; crosscheck help events
					// shows the settings.
					if path[0] != "events" && (!strings.Contains(out, "CROSSCHECK_DATA_DIR") || !strings.Contains(out, "[./data]")) {
						t.Errorf("the settings are not listed with their defaults:\n%s", out)
					}
				}
			})
		}
	}
	if _, err := os.Stat(dataDir); err == nil {
		t.Fatal("a help created the data dir")
	}
	// The test sees a command that runs.
	if code, _, _, ran := execute(t, "serve"); code != 0 || !slices.Equal(ran, []string{"serve"}) {
		t.Fatalf("serve: exit %d, ran %v", code, ran)
	}
}

// An unknown flag, an argument a command does not take or an unknown
// command is a usage error: exit 2, the reason and the usage line, nothing
// run.
func TestUnknownFlagsAndArgumentsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--port", "9000"}, {"serve", "extra"}, {"api", "x"}, {"worker", "--nope"},
		{"audit", "x"}, {"bench", "x"}, {"bench", "--count", "3"}, {"version", "x"},
		{"keys"}, {"keys", "rotate", "x"}, {"keys", "turn"},
		{"ask", "--key", "xchk_x", "p"}, {"watch", "a", "b"}, {"status"}, {"models", "x"}, {"list", "x"},
		{"bogus"}, {"--nope"}, {"completion", "tcsh"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut, ran := execute(t, args...)
			if code != 2 || len(ran) != 0 {
				t.Fatalf("exit %d, ran %v; want 2 and nothing run\nstdout %s\nstderr %s", code, ran, out, errOut)
			}
			if !strings.Contains(errOut, "usage: crosscheck") || !strings.HasPrefix(errOut, "crosscheck") {
				t.Fatalf("stderr is not the reason and the usage line:\n%s", errOut)
			}
		})
	}
	code, _, errOut, _ := execute(t)
	if code != 2 || !strings.Contains(errOut, "serve") || !strings.Contains(errOut, "ask") {
		t.Fatalf("no command: exit %d, stderr %s", code, errOut)
	}
}

func TestCompletionAndVersion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut, _ := execute(t, "completion", shell)
		if code != 0 || !strings.Contains(out, "crosscheck") {
			t.Errorf("completion %s: exit %d %s", shell, code, errOut)
		}
	}
	// The completion of a command's flags comes from the command line.
	code, out, _, _ := execute(t, "__complete", "ask", "--mode", "")
	if code != 0 || !strings.Contains(out, "justify") {
		t.Errorf("completion of --mode: exit %d\n%s", code, out)
	}
	code, out, _, _ = execute(t, "__complete", "se")
	if code != 0 || !strings.Contains(out, "serve") {
		t.Errorf("completion of se: exit %d\n%s", code, out)
	}
	Version = "v1.2.3"
	defer func() { Version = "" }()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out, _, _ := execute(t, args...); code != 0 || out != "v1.2.3\n" {
			t.Errorf("%v: exit %d %q", args, code, out)
		}
	}
}

// The binary's -h of the commands that used to start something starts
// nothing: no data dir, no benchmark results, an exit within seconds.
func TestBinaryHelpStartsNothing(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"serve", "-h"}, {"api", "--help"}, {"worker", "-h"}, {"audit", "-h"}, {"bench", "-h"}, {"keys", "rotate", "-h"}, {"events", "export", "-h"}, {"ask", "-h"}, {"help", "serve"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], args...)
			cmd.Env = append(os.Environ(), "CROSSCHECK_TEST_MAIN=1", "CROSSCHECK_DATA_DIR="+filepath.Join(dir, "data"),
				"BENCH_OUT="+filepath.Join(dir, "bench.json"), "CROSSCHECK_NATS_URL=", "CROSSCHECK_HTTP_ADDR=127.0.0.1:0", "CROSSCHECK_ADMIN_ADDR=127.0.0.1:0")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Usage:") {
				t.Fatalf("%v\n%s", err, out)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("the help left %v behind", entries)
			}
		})
	}
}
