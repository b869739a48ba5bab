package worker

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// syncBuffer is a log sink safe for the worker's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A slot that could not be freed when its query ended is logged, with the
// query: the operator sees why a key stays full until it heals.
func TestFinishedErrorIsLogged(t *testing.T) {
	store := storetest.Open(t)
	var logs syncBuffer
	w := newTestWorker(store, &scripted{script: func(int64, context.Context) (events.Event, error) {
		return events.QueryCompleted{}, nil
	}}, &fakeLedger{debits: map[string]int{}})
	w.Log = zerolog.New(&logs)
	w.Finished = func(context.Context, string, string) error { return errors.New("inflight bucket unreachable") }
	id := "req_01M80000000000000000000031"
	submitJob(t, store, id)
	runWorker(t, w)
	ended(t, store, id)
	storetest.WaitFor(t, 10*time.Second, "a log line of the slot not freed", func() bool {
		out := logs.String()
		return strings.Contains(out, "inflight bucket unreachable") && strings.Contains(out, id)
	})
}

// A query's slot is freed once its ending is decided, before its terminal
// event is appended: a client that sees the query end (its SSE
// result, a subscription, a poll) and submits its next query at once finds
// the slot free, instead of a 429 until the key's slots next heal.
func TestSlotIsFreedBeforeTheQueryEnds(t *testing.T) {
	store := storetest.Open(t)
	var decided atomic.Bool
	w := newTestWorker(store, &scripted{script: func(int64, context.Context) (events.Event, error) {
		decided.Store(true)
		return events.QueryCompleted{}, nil
	}}, &fakeLedger{debits: map[string]int{}})
	type call struct {
		accountID string
		terminal  bool
		decided   bool
		err       error
	}
	calls := make(chan call, 4)
	w.Finished = func(ctx context.Context, accountID, id string) error {
		q, _, err := store.LoadQuery(ctx, id)
		if err != nil {
			calls <- call{err: err}
			return err
		}
		calls <- call{accountID: accountID, terminal: q.Terminal(), decided: decided.Load()}
		return nil
	}
	id := "req_01M80000000000000000000032"
	submitJob(t, store, id)
	runWorker(t, w)
	ended(t, store, id)
	select {
	case c := <-calls:
		switch {
		case c.err != nil:
			t.Fatal(c.err)
		case c.accountID != "acct_x":
			t.Errorf("a slot of account %q freed, want acct_x", c.accountID)
		case c.terminal:
			t.Error("the slot was freed after the terminal event: a client that saw the query end could be refused its next submission")
		case !c.decided:
			t.Error("the slot was freed before the query's ending was decided")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slot was never freed")
	}
	select {
	case c := <-calls:
		t.Errorf("the slot was freed twice (second call %+v)", c)
	case <-time.After(100 * time.Millisecond):
	}
}

// A release that does not come back (the inflight bucket unavailable) holds
// a query's end back by at most releaseWait: the release is best effort,
// and the end is what the client waits for.
func TestASlowSlotReleaseDoesNotHoldTheEndBack(t *testing.T) {
	store := storetest.Open(t)
	w := newTestWorker(store, &scripted{script: func(int64, context.Context) (events.Event, error) {
		return events.QueryCompleted{}, nil
	}}, &fakeLedger{debits: map[string]int{}})
	stuck := make(chan struct{})
	defer close(stuck)
	w.Finished = func(context.Context, string, string) error {
		<-stuck
		return errors.New("inflight bucket unavailable")
	}
	id := "req_01M80000000000000000000033"
	submitJob(t, store, id)
	runWorker(t, w)
	start := time.Now()
	storetest.WaitFor(t, releaseWait+5*time.Second, "the query to end while its release hangs", func() bool {
		q, _, err := store.LoadQuery(context.Background(), id)
		return err == nil && q.Terminal()
	})
	t.Logf("ended %v after the submission with its release hanging", time.Since(start).Round(time.Millisecond))
}
