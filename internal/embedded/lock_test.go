package embedded

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLockIsExclusiveAndNamesTheHolder(t *testing.T) {
	dir := t.TempDir()
	first, err := Lock(dir)
	if err != nil {
		t.Fatalf("first lock: %v", err)
	}
	_, err = Lock(dir)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: err = %v, want ErrLocked", err)
	}
	if pid := "process " + strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), pid) {
		t.Errorf("error %q does not name the holder (%s)", err, pid)
	}
	first.Unlock()
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again.Unlock()
}

func TestSecondServerOnADataDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Options{DataDir: dir}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second server: err = %v, want ErrLocked", err)
	}
	s.Stop()
	s2, err := Start(Options{DataDir: dir})
	if err != nil {
		t.Fatalf("start after stop: %v", err)
	}
	s2.Stop()
}
