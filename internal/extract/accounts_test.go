package extract

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// startedReader is a child's input that reports its child started: the
// runner copies it to the child's stdin only once the child runs.
type startedReader struct {
	io.Reader
	once    sync.Once
	started chan struct{}
}

func (s *startedReader) Read(p []byte) (int, error) {
	s.once.Do(func() { close(s.started) })
	return s.Reader.Read(p)
}

// held is an extraction whose input stays open until it is let go.
type held struct {
	in   *startedReader
	feed *io.PipeWriter
	done chan error
}

func hold(r *Runner, account string) *held {
	pr, pw := io.Pipe()
	h := &held{in: &startedReader{Reader: pr, started: make(chan struct{})}, feed: pw, done: make(chan error, 1)}
	go func() {
		_, err := r.Run(context.Background(), account, FormatText, h.in, Caps{})
		h.done <- err
	}()
	return h
}

func (h *held) let(t *testing.T) {
	t.Helper()
	h.feed.Write([]byte("text"))
	h.feed.Close()
	if err := <-h.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func startsWithin(h *held, d time.Duration) bool {
	select {
	case <-h.in.started:
		return true
	case <-time.After(d):
		return false
	}
}

// waiting returns how many extractions wait for a child of r.
func waiting(r *Runner) int {
	r.sched.mu.Lock()
	defer r.sched.mu.Unlock()
	return len(r.sched.waiters)
}

// TestChildrenGoFairlyBetweenAccounts: one account takes every child while
// no other wants one; then the next child that ends goes to the account
// running fewer, before the first account's own next extraction, though
// that one came first.
func TestChildrenGoFairlyBetweenAccounts(t *testing.T) {
	r := &Runner{Parallel: 2, Memory: MinMemory, Budget: 2 * MinMemory}
	if n, _ := r.Children(); n != 2 {
		t.Fatalf("children %d, want 2", n)
	}
	a1, a2 := hold(r, "acct_a"), hold(r, "acct_a")
	if !startsWithin(a1, 10*time.Second) || !startsWithin(a2, 10*time.Second) {
		t.Fatal("one account could not take both free children")
	}
	a3 := hold(r, "acct_a")
	for deadline := time.Now().Add(10 * time.Second); waiting(r) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the account's third extraction does not wait")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := hold(r, "acct_b")
	for deadline := time.Now().Add(10 * time.Second); waiting(r) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the other account's extraction does not wait")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a1.let(t)
	if !startsWithin(b, 10*time.Second) {
		t.Fatal("the child that ended did not go to the other account")
	}
	if startsWithin(a3, 300*time.Millisecond) {
		t.Fatal("the account's third extraction started before the other account's")
	}
	a2.let(t)
	if !startsWithin(a3, 10*time.Second) {
		t.Fatal("the account's third extraction did not start once its second ended")
	}
	a3.let(t)
	b.let(t)
}

func TestSchedulerBounds(t *testing.T) {
	s := newScheduler(1)
	ctx := context.Background()
	if err := s.acquire(ctx, "acct_a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.acquire(ctx, "acct_b", 50*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire with no child free = %v, want ErrBusy", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.acquire(cancelled, "acct_b", time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire after its context ended = %v, want context.Canceled", err)
	}
	s.release("acct_a")
	if err := s.acquire(ctx, "acct_b", 50*time.Millisecond); err != nil {
		t.Fatalf("acquire after the release: %v (the waiters that gave up still hold it)", err)
	}
	if len(s.waiters) != 0 || s.free != 0 || s.running["acct_b"] != 1 || len(s.running) != 1 {
		t.Errorf("state %+v", s)
	}
}

// TestAccountCPUIsBounded: an account whose extractions used its CPU time
// for the hour is refused, with when to retry, until its bucket refills;
// another account is not.
func TestAccountCPUIsBounded(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := &Runner{CPUSeconds: 1, AccountCPU: 500 * time.Millisecond, Now: clock}
	if _, err := r.Run(context.Background(), "acct_a", FormatDOCX, bytes.NewReader(storm()), Caps{}); !errors.Is(err, ErrCPU) {
		t.Fatalf("first run = %v, want ErrCPU", err)
	}
	_, err := r.Run(context.Background(), "acct_a", FormatText, bytes.NewReader([]byte("x")), Caps{})
	var refused *AccountError
	if !errors.As(err, &refused) || !errors.Is(err, ErrAccountCPU) {
		t.Fatalf("run past the account's CPU time = %v, want an *AccountError", err)
	}
	// The first run took at most 2 s of CPU: 1.5 s more than the
	// account's half second an hour, which refills in 3 hours.
	if refused.RetryAfter <= 0 || refused.RetryAfter > 3*time.Hour+time.Second || refused.PerHour != 500*time.Millisecond {
		t.Errorf("refusal %+v: want a retry within 3 hours and the hour's CPU time", refused)
	}
	if _, err := r.Run(context.Background(), "acct_b", FormatText, bytes.NewReader([]byte("x")), Caps{}); err != nil {
		t.Fatalf("another account: %v", err)
	}
	mu.Lock()
	now = now.Add(refused.RetryAfter)
	mu.Unlock()
	if _, err := r.Run(context.Background(), "acct_a", FormatText, bytes.NewReader([]byte("x")), Caps{}); err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
}
