package eventstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

func consumers(t testing.TB, store *eventstore.Store) int {
	t.Helper()
	st, err := store.Queries.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Consumers
}

// Every follow that ends, because its client went, leaves no consumer behind
// on the stream: the stream's consumers are a shared, bounded resource.
func TestEndedFollowsLeaveNoConsumer(t *testing.T) {
	store := storetest.Open(t)
	appendProgress(t, store, "req_follow", 2)
	base := consumers(t, store)
	const n = 100
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		recs, errc := store.FollowQuery(ctx, "req_follow")
		select {
		case <-recs:
		case err := <-errc:
			t.Fatalf("follow %d: %v", i, err)
		}
	}
	if got := consumers(t, store); got < base+n {
		t.Fatalf("%d consumers with %d follows open, want at least %d", got, n, base+n)
	}
	for _, cancel := range cancels {
		cancel()
	}
	storetest.WaitFor(t, 10*time.Second, fmt.Sprintf("the stream's consumers back to %d", base), func() bool {
		return consumers(t, store) == base
	})
}

// A follow whose consumer cannot be recreated (here: the process lost its
// connection for good) ends with an error instead of waiting forever.
func TestFollowFailsWhenItCannotGoOn(t *testing.T) {
	store := storetest.Open(t)
	appendProgress(t, store, "req_lost", 1)
	recs, errc := store.FollowQuery(context.Background(), "req_lost")
	select {
	case <-recs:
	case err := <-errc:
		t.Fatalf("follow: %v", err)
	}
	store.Conn().Close()
	var err error
	storetest.WaitFor(t, 60*time.Second, "the follow to fail", func() bool {
		select {
		case err = <-errc:
			return true
		default:
			return false
		}
	})
	if err == nil {
		t.Fatal("the follow ended without an error")
	}
	t.Logf("follow failed with: %v", err)
}
