package worker

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
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

// A query's slot is freed once its credits are settled, before its
// terminal event is appended: a client that sees the query end (its SSE
// result, a subscription, a poll) and submits its next query at once finds
// the slot free, instead of a 429 until the key's slots next heal.
func TestSlotIsFreedBeforeTheQueryEnds(t *testing.T) {
	store := storetest.Open(t)
	led := &fakeLedger{debits: map[string]int{}}
	w := newTestWorker(store, &scripted{script: func(int64, context.Context) (events.Event, error) {
		return events.QueryCompleted{}, nil
	}}, led)
	type call struct {
		fingerprint string
		terminal    bool
		settled     bool
		err         error
	}
	calls := make(chan call, 4)
	w.Finished = func(ctx context.Context, fingerprint, id string) error {
		q, _, err := store.LoadQuery(ctx, id)
		if err != nil {
			calls <- call{err: err}
			return err
		}
		settlement, _ := led.Settlement(ctx, "", id)
		calls <- call{fingerprint: fingerprint, terminal: q.Terminal(), settled: settlement != nil}
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
		case c.fingerprint != "abcdefgh":
			t.Errorf("the slot of key %q freed, want abcdefgh", c.fingerprint)
		case c.terminal:
			t.Error("the slot was freed after the terminal event: a client that saw the query end could be refused its next submission")
		case !c.settled:
			t.Error("the slot was freed before the query's credits were settled")
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
