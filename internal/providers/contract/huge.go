package contract

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// HugeDecodedBytes is the size of the body KindHuge sends, decoded: far
// more than any backend reads of one response.
const HugeDecodedBytes = 64 << 20

// huge is the body of KindHuge: gzip members, one per MiB (a gzip stream
// may hold several, and readers decode them as one), so that only one MiB
// is ever compressed.
var huge = sync.OnceValue(func() []byte {
	member := func(p []byte) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(p)
		_ = zw.Close()
		return b.Bytes()
	}
	mib := member(bytes.Repeat([]byte("a"), 1<<20))
	body := member([]byte(`{"id":"`))
	for range HugeDecodedBytes >> 20 {
		body = append(body, mib...)
	}
	return append(body, member([]byte(`"}`))...)
})

// WriteHuge answers 200 with a JSON body of HugeDecodedBytes, gzip-compressed
// (about 64 KB on the wire): what a hostile or broken host sends to fill the
// memory of whoever decompresses it.
func WriteHuge(w http.ResponseWriter) {
	body := huge()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// childEnv names, in a child process of the test binary, the test it runs.
const childEnv = "CROSSCHECK_CONTRACT_CHILD"

// childMemory is the data-segment limit (RLIMIT_DATA) of a child.
const childMemory = 1 << 30

// InChild runs fn in a child process of the test binary that runs t alone:
// a backend that reads without bound fails there, its memory limited to
// childMemory (not under the race detector, whose shadow memory the limit
// would count), and not in the whole test run. t fails when the child does.
func InChild(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		if !raceEnabled {
			if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: childMemory, Max: childMemory}); err != nil {
				t.Fatalf("limit the child's memory: %v", err)
			}
		}
		fn(t)
		return
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+strings.Join(pattern, "/"), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	last := t.Name()[strings.LastIndex(t.Name(), "/")+1:]
	switch {
	case err != nil:
		t.Fatalf("in a child process: %v\n%s", err, tail(out))
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name())) && !bytes.Contains(out, []byte("--- PASS: "+last)):
		t.Fatalf("the child process did not run %s:\n%s", t.Name(), tail(out))
	case testing.Verbose():
		t.Logf("the child process:\n%s", tail(out))
	}
}

func tail(b []byte) []byte {
	if len(b) > 4096 {
		return b[len(b)-4096:]
	}
	return b
}
