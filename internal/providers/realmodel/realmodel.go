// Package realmodel runs a real language model behind an OpenAI-compatible
// chat-completions endpoint for the tests: testdata/server.mjs serves the
// tiny GGUF model of ../shared/models (beside the repository) through
// llama.cpp, on a loopback port, and plays several hosts that differ the way
// real ones do (see Host.BaseURL). It logs every call it answers, so a test
// can compare what the service charged with what the host processed.
//
// The runtime is the npm package node-llama-cpp, installed into
// testdata/node_modules by `make test` (the Makefile's realmodel target).
package realmodel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ModelFile is the model the host serves, relative to the directory that
// holds the repository.
const ModelFile = "shared/models/stories260K.gguf"

// The behaviours a host can be given; BaseURL joins them with "+".
const (
	// Grammar honours response_format's json_schema as a grammar, as
	// llama-server does: the reply is JSON of the schema, cut only by the
	// output bound.
	Grammar = "grammar"
	// Prose ignores response_format and answers prose (the default).
	Prose = "prose"
	// Refuse answers a prompt that does not fit the context with
	// llama-server's 400 exceed_context_size_error (the default).
	Refuse = "refuse"
	// Truncate keeps the end of a prompt that does not fit the context
	// and answers it, as Ollama does.
	Truncate = "truncate"
	// NoUsage sends no usage object.
	NoUsage = "nousage"
)

// Options are the host's limits; zero values take the defaults.
type Options struct {
	// ContextSize is the model's context in tokens (default 512, the
	// model's training context).
	ContextSize int
	// MaxTokens bounds the tokens one call generates, whatever the
	// request's max_tokens (default 96).
	MaxTokens int
	// Temperature samples the answers with a fixed seed instead of
	// decoding greedily (0, the default); the same request still gets the
	// same answer.
	Temperature float64
}

// ErrUnavailable is returned by Start when the runtime is not installed
// here: no node, or no testdata/node_modules, or no model file.
var ErrUnavailable = errors.New("the real-model runtime is not installed")

// Host is a running model host.
type Host struct {
	// URL is the host's root, http://127.0.0.1:<port>.
	URL string
	// LogPath is the file the host appends one JSON line to per call.
	LogPath string

	cmd    *exec.Cmd
	done   chan struct{}
	stderr *tail
}

// Call is one line of the host's log: one chat completion it answered or
// refused.
type Call struct {
	// Host is the behaviours of the path the call came on, e.g. "grammar".
	Host  string `json:"host"`
	Model string `json:"model"`
	// Status is the HTTP status answered.
	Status int `json:"status"`
	// PromptTokensSent is the prompt's length in the model's tokens, as
	// sent; PromptTokens is what the model processed (fewer when the host
	// truncated it, 0 when it refused it).
	PromptTokensSent int `json:"prompt_tokens_sent"`
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// MaxTokens is the request's max_tokens (0 when absent).
	MaxTokens int `json:"max_tokens"`
	// ResponseFormat is the name of the request's json_schema, if any;
	// Grammar says the reply was bound to it.
	ResponseFormat string `json:"response_format"`
	Grammar        bool   `json:"grammar"`
	// FinishReason is "stop" or "length" for an answer.
	FinishReason string `json:"finish_reason"`
	// UsageSent says the answer carried a usage object.
	UsageSent bool `json:"usage_sent"`
	// Error is the error type of a refusal (exceed_context_size_error).
	Error string `json:"error"`
}

// Start starts a host on a random loopback port, logging to a file in dir,
// and returns once it answers. It returns an error wrapping ErrUnavailable
// when node, the installed runtime or the model file is missing, and
// another error when the host does not start within two minutes.
func Start(dir string, opts Options) (*Host, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	server := filepath.Join(root, "internal", "providers", "realmodel", "testdata")
	model := filepath.Join(filepath.Dir(root), ModelFile)
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("%w: node is not on the PATH", ErrUnavailable)
	}
	if _, err := os.Stat(filepath.Join(server, "node_modules", "node-llama-cpp")); err != nil {
		return nil, fmt.Errorf("%w: %s has no node_modules (make realmodel installs it)", ErrUnavailable, server)
	}
	if _, err := os.Stat(model); err != nil {
		return nil, fmt.Errorf("%w: the model %s: %v", ErrUnavailable, model, err)
	}
	if opts.ContextSize == 0 {
		opts.ContextSize = 512
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = 96
	}
	h := &Host{LogPath: filepath.Join(dir, "realmodel-calls.jsonl"), done: make(chan struct{}), stderr: &tail{max: 8 << 10}}
	h.cmd = exec.Command(node, "server.mjs", "--model", model, "--log", h.LogPath, "--port", "0",
		"--ctx", strconv.Itoa(opts.ContextSize), "--max-tokens", strconv.Itoa(opts.MaxTokens),
		"--temperature", strconv.FormatFloat(opts.Temperature, 'f', -1, 64))
	h.cmd.Dir = server
	h.cmd.Stderr = h.stderr
	h.cmd.SysProcAttr = procAttr()
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the model host: %w", err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var line struct{ Listening string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Listening != "" {
				listening <- line.Listening
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = h.cmd.Wait()
		close(h.done)
	}()
	select {
	case h.URL = <-listening:
		return h, nil
	case <-h.done:
		return nil, fmt.Errorf("the model host exited before it listened (%v): %s", h.cmd.ProcessState, h.stderr)
	case <-time.After(2 * time.Minute):
		h.Close()
		return nil, fmt.Errorf("the model host did not listen within 2 minutes: %s", h.stderr)
	}
}

// ForTest starts a host for t and stops it when t ends. When the runtime is
// not installed, it skips t, except under CI (CI=true), where it fails t: the
// tests must run there.
func ForTest(t testing.TB, opts Options) *Host {
	t.Helper()
	h, err := Start(t.TempDir(), opts)
	switch {
	case errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true":
		t.Skipf("real model: %v", err)
	case err != nil:
		t.Fatalf("real model: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// BaseURL returns the OpenAI-compatible base URL of a host with the given
// behaviours (Grammar, Prose, Refuse, Truncate, NoUsage): without any, the
// host ignores response_format, refuses an overlong prompt and sends usage.
func (h *Host) BaseURL(behaviours ...string) string {
	if len(behaviours) == 0 {
		behaviours = []string{Prose}
	}
	return h.URL + "/" + strings.Join(behaviours, "+") + "/v1"
}

// Calls reads the host's log: every call answered so far, in order.
func (h *Host) Calls() ([]Call, error) {
	raw, err := os.ReadFile(h.LogPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var calls []Call
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var c Call
		if err := json.Unmarshal(line, &c); err != nil {
			return nil, fmt.Errorf("the host's log: %w: %s", err, line)
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// Close stops the host: SIGTERM, then SIGKILL after 5 seconds.
func (h *Host) Close() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// tail keeps the last max bytes written to it: the host's standard error,
// for the message of a failed start.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
