package eventstore_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// A write the client still retries when an earlier one of the same puts
// has failed must not land after a newer value of its key: Wait answers
// once every write is answered, which Done tells right after it. Without a
// bucket, each publish is tried again by the client before it fails; the
// bucket comes back at once after Wait, and newer values are written. (A
// Wait that returned at the first failure left later writes to land over
// newer values in a review's run with 3,000 entries of 64 KB; with these
// 300, only the Done check catches it every time.)
func TestWaitAnswersOnceEveryWriteIsAnswered(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	ctx := context.Background()
	const n = 300
	entries := func(value byte) []eventstore.Entry {
		out := make([]eventstore.Entry, n)
		for i := range out {
			out[i] = eventstore.Entry{Key: fmt.Sprintf("req_%03d", i), Value: bytes.Repeat([]byte{value}, 64<<10)}
		}
		return out
	}
	if err := storetest.JetStream(t, store).DeleteKeyValue(ctx, eventstore.BucketQueryStatus); err != nil {
		t.Fatal(err)
	}
	puts, err := store.QueryStatus.PutAsync(ctx, entries('o'))
	if err != nil {
		t.Fatal(err)
	}
	if err := puts.Wait(ctx); err == nil {
		t.Fatal("writes into no bucket were acknowledged")
	}
	if done, err := puts.Done(); !done || err == nil {
		t.Fatalf("Done after Wait = %v, %v; want every write answered and the failure", done, err)
	}
	if err := store.ResetQueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.QueryStatus.PutAll(ctx, entries('n')); err != nil {
		t.Fatal(err)
	}
	older := 0
	for _, e := range entries('n') {
		got, err := store.QueryStatus.GetLatest(ctx, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[0] != 'n' {
			older++
		}
	}
	if older > 0 {
		t.Fatalf("%d of %d keys hold a value older than the last acknowledged one", older, n)
	}
}
