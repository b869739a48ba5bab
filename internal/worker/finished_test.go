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
