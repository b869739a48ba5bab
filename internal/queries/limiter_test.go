package queries

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/lru"
)

// The process keeps the slot sets of at most its bound of keys; a key
// forgotten is read again from the bucket, and its slots still count.
func TestSlotCacheIsBounded(t *testing.T) {
	store := storetest.Open(t)
	s := &Service{Store: store, Now: time.Now, Limit: 1}
	s.init.Do(func() { s.slots = lru.New[string, *keySlots](2) })
	ctx := context.Background()
	for i := range 3 {
		if err := s.acquire(ctx, fmt.Sprintf("key%05d", i), fmt.Sprintf("req_%d", i)); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	if n := s.slots.Len(); n != 2 {
		t.Fatalf("%d keys cached, want 2", n)
	}
	// key00000 was forgotten; its one slot is held, so a second is refused.
	if err := s.acquire(ctx, "key00000", "req_other"); err == nil {
		t.Fatal("a forgotten key took a slot beyond its limit")
	}
}
