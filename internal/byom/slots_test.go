package byom

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/providers"
)

// held is a host whose calls wait until release is closed, counting the
// calls in flight.
type held struct {
	release        chan struct{}
	inFlight, most atomic.Int64
}

func (h *held) Complete(ctx context.Context, _ *providers.Request) (*providers.Response, error) {
	n := h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
	select {
	case <-h.release:
		return &providers.Response{Text: "ok"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestCallSlots: one account has at most its bound of calls in flight, the
// process at most its own; a call beyond waits, is served when a slot
// comes free, and fails rate_limited when its attempt's time runs out first;
// a cancelled call returns the context's error.
func TestCallSlots(t *testing.T) {
	slots := newCallSlots(3, 2)
	h := &held{release: make(chan struct{})}
	call := func(ctx context.Context, account string) error {
		_, err := bounded{Provider: h, slots: slots, account: account}.Complete(ctx, &providers.Request{})
		return err
	}
	done := make(chan error, 8)
	for range 2 {
		go func() { done <- call(context.Background(), "acct_a") }()
	}
	waitFor(t, func() bool { return h.inFlight.Load() == 2 })

	// The account's third call waits, and its time runs out.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := call(ctx, "acct_a")
	cancel()
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Class != providers.ClassRateLimited {
		t.Fatalf("a third call of the account: %v, want rate_limited", err)
	}
	// Another account is served beside it, up to the process's bound.
	go func() { done <- call(context.Background(), "acct_b") }()
	waitFor(t, func() bool { return h.inFlight.Load() == 3 })
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = call(ctx, "acct_c")
	cancel()
	if !errors.As(err, &pe) || pe.Class != providers.ClassRateLimited {
		t.Fatalf("a call past the process's bound: %v, want rate_limited", err)
	}
	// A cancelled wait is the context's error.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if err := call(ctx, "acct_c"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	// A waiting call is served once a slot comes free.
	go func() { done <- call(context.Background(), "acct_a") }()
	time.Sleep(20 * time.Millisecond)
	if h.inFlight.Load() != 3 {
		t.Fatalf("%d calls in flight, want the bound 3", h.inFlight.Load())
	}
	close(h.release)
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if h.most.Load() != 3 {
		t.Fatalf("at most %d calls in flight, want 3", h.most.Load())
	}
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if len(slots.accounts) != 0 {
		t.Fatalf("%d accounts' slots kept after their calls ended", len(slots.accounts))
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
