package projections

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// Three processes compete for one projection: one runs it at a time, and
// when the holder stops, another takes over.
func TestLeaseRunsOneHolderAtATime(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	const ttl = 800 * time.Millisecond
	// Every holder here stops cleanly and gives the lease up: the bucket's
	// own expiry, for a holder that dies, is not waited for.
	kv := store.Leases
	var running, overlaps atomic.Int32
	var mu sync.Mutex
	var order []string
	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, name := range []string{"p1", "p2", "p3"} {
		pctx, cancel := context.WithCancel(ctx)
		stops[name] = cancel
		l := &Lease{KV: kv, Name: "proj_test", Holder: name, TTL: ttl, Log: zerolog.Nop()}
		wg.Go(func() {
			l.Run(pctx, func(ctx context.Context) error {
				if running.Add(1) > 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				<-ctx.Done()
				running.Add(-1)
				return nil
			})
		})
	}
	holder := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(order) == 0 {
			return ""
		}
		return order[len(order)-1]
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		storetest.WaitFor(t, 10*time.Second, what, cond)
	}
	waitFor("a first holder", func() bool { return holder() != "" })
	// Renewals keep the lease with its holder: over two TTLs of them.
	revision := func() uint64 {
		e, err := kv.Get(ctx, "proj_test")
		if err != nil {
			return 0
		}
		return e.Revision
	}
	taken := revision()
	waitFor("eight renewals", func() bool { return revision() >= taken+8 })
	first := holder()
	mu.Lock()
	if len(order) != 1 {
		t.Fatalf("the lease changed hands while its holder ran: %v", order)
	}
	mu.Unlock()
	stops[first]()
	waitFor("a second holder", func() bool { return holder() != first })
	second := holder()
	stops[second]()
	waitFor("a third holder", func() bool { h := holder(); return h != first && h != second })
	for _, stop := range stops {
		stop()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d times two holders ran at once: %v", overlaps.Load(), order)
	}
}
