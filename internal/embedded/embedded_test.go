package embedded

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// A data dir whose last server did not stop is found unclean at the next
// start, and stays so for every later start (an offline audit's among them)
// until a server's owner says it recovered.
func TestUncleanStopIsRemembered(t *testing.T) {
	dir := t.TempDir()
	start := func() *Server {
		t.Helper()
		s, err := Start(Options{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := start()
	if s.Unclean() {
		t.Fatal("a new data dir is unclean")
	}
	s.Stop()
	if s = start(); s.Unclean() {
		t.Fatal("a data dir stopped cleanly is unclean")
	}
	// A process that dies leaves the file; so does a machine losing power.
	s.Stop()
	if err := os.WriteFile(filepath.Join(dir, RunningFile), []byte("4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s = start(); !s.Unclean() {
		t.Fatal("a data dir whose server did not stop is clean")
	}
	s.Stop() // not recovered: an audit's start, say
	if s = start(); !s.Unclean() {
		t.Fatal("an unclean data dir is clean after a start that did not recover it")
	}
	s.Recovered()
	s.Stop()
	if s = start(); s.Unclean() {
		t.Fatal("a recovered data dir is still unclean")
	}
	s.Stop()
}

// The server's warnings and errors reach the log, its notices at debug.
func TestServerLogThroughZerolog(t *testing.T) {
	var buf lockedBuffer
	s, err := Start(Options{DataDir: t.TempDir(), Log: zerolog.New(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	s.Errorf("a test error: %s", "no space left on device")
	s.Warnf("a test warning")
	s.Stop()
	out := buf.String()
	for _, want := range []string{`"level":"error"`, `"component":"nats-server"`, "a test error: no space left on device", `"level":"warn"`, "a test warning", `"level":"debug"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
}

// lockedBuffer is a buffer the server's goroutines may write while the test
// reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
