package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
)

// TestSecondProcessOnADataDirIsRefused: a second serve on the data dir of a
// running one (other ports) refuses to start, naming the holder, and so do
// audit and events export; the first keeps serving its queries.
func TestSecondProcessOnADataDirIsRefused(t *testing.T) {
	h := newHarness(t)
	key := h.newKey()
	id := h.submitOK(key, "Is the data dir held?")

	second := &Main{Config: h.cfg, Log: zerolog.Nop()}
	err := second.Open(context.Background())
	second.Close()
	if !errors.Is(err, embedded.ErrLocked) {
		t.Fatalf("second serve on the same data dir: err = %v, want ErrLocked", err)
	}
	if pid := "process " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), pid) {
		t.Errorf("error %q does not name the holder (%s)", err, pid)
	}

	if _, _, err := OpenStore(context.Background(), config.Config{DataDir: h.dir, Replicas: 1}); !errors.Is(err, embedded.ErrLocked) {
		t.Fatalf("audit on a held data dir: err = %v, want ErrLocked", err)
	}
	h.wait(key, id, 30e9)
}

// TestSecondStartOnTheSamePortsFailsBeforeTheStore: a start on ports that
// another process serves fails before it opens (or creates) its store.
func TestSecondStartOnTheSamePortsFailsBeforeTheStore(t *testing.T) {
	h := newHarness(t)
	cfg := h.cfg
	cfg.DataDir = filepath.Join(t.TempDir(), "other")
	cfg.HTTPAddr = strings.TrimPrefix(h.m.URL(), "http://")
	second := &Main{Config: cfg, Log: zerolog.Nop()}
	err := second.Open(context.Background())
	second.Close()
	if err == nil || !strings.Contains(err.Error(), "public API on") {
		t.Fatalf("start on a port in use: err = %v, want the public address refused", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "jetstream")); !os.IsNotExist(err) {
		t.Fatalf("the refused start created a store in its data dir (stat: %v)", err)
	}
}
