package queries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"

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

// Changes of one key that come while a write is under way go together in
// the next write, decided in order: with the key's lock held while 20
// acquisitions queue, they take one write; exactly the limit of them get a
// slot and the others are refused as rate_limited.
func TestQueuedSlotChangesShareOneWrite(t *testing.T) {
	store := storetest.Open(t)
	s := &Service{Store: store, Now: time.Now, Limit: 8}
	ctx := context.Background()
	const key, n = "key00001", 20
	ks := s.keySlots(key)
	ks.mu.Lock() // a write under way
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- s.acquire(ctx, key, fmt.Sprintf("req_%02d", i)) }()
	}
	storetest.WaitFor(t, 10*time.Second, "every acquisition queued", func() bool {
		ks.queued.Lock()
		defer ks.queued.Unlock()
		return len(ks.queue) == n
	})
	ks.mu.Unlock()
	took, limited := 0, 0
	for range n {
		err := <-errs
		var ae *apperr.Error
		switch {
		case err == nil:
			took++
		case errors.As(err, &ae) && ae.Code == apperr.RateLimited:
			limited++
		default:
			t.Fatalf("acquire: %v", err)
		}
	}
	if took != 8 || limited != n-8 {
		t.Fatalf("%d took a slot and %d were refused; want 8 and %d", took, limited, n-8)
	}
	e, err := store.Inflight.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var set slots
	if err := json.Unmarshal(e.Value, &set); err != nil {
		t.Fatal(err)
	}
	if e.Revision != 1 || len(set.Requests) != 8 {
		t.Fatalf("the key's set is at revision %d with %d slots; want one write of 8 slots", e.Revision, len(set.Requests))
	}
}

// Many goroutines taking and freeing the slots of one key never hold more
// than its limit, and leave its set empty.
func TestSlotsOfOneKeyHoldUnderContention(t *testing.T) {
	store := storetest.Open(t)
	s := &Service{Store: store, Now: time.Now, Limit: 3}
	ctx := context.Background()
	const key = "key00002"
	var held, most atomic.Int64
	var wg sync.WaitGroup
	for g := range 24 {
		wg.Go(func() {
			for i := range 10 {
				id := fmt.Sprintf("req_%02d_%02d", g, i)
				if err := s.acquire(ctx, key, id); err != nil {
					var ae *apperr.Error
					if !errors.As(err, &ae) || ae.Code != apperr.RateLimited {
						t.Errorf("acquire: %v", err)
					}
					continue
				}
				now := held.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				held.Add(-1)
				if err := s.Release(ctx, key, id); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if most.Load() > 3 {
		t.Fatalf("%d slots held at once; the limit is 3", most.Load())
	}
	e, err := store.Inflight.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var set slots
	if err := json.Unmarshal(e.Value, &set); err != nil || len(set.Requests) != 0 {
		t.Fatalf("the key's set after every release: %s (%v); want empty", e.Value, err)
	}
}

// Keys forgotten and read again while their slots change (a process with
// more keys than it keeps) hold their limits, and a key's changes and its
// healing use one view of the key: no data race under -race.
func TestSlotsHoldWhileKeysAreForgotten(t *testing.T) {
	stores := storetest.OpenMany(t, 2)
	ctx := context.Background()
	var services []*Service
	for _, store := range stores {
		s := &Service{Store: store, Now: time.Now, Limit: 2}
		s.init.Do(func() { s.slots = lru.New[string, *keySlots](2) })
		services = append(services, s)
	}
	var wg sync.WaitGroup
	var most [4]atomic.Int64
	var held [4]atomic.Int64
	for k := range 4 {
		key := fmt.Sprintf("key0001%d", k)
		for g := range 8 {
			s := services[g%2]
			wg.Go(func() {
				for i := range 8 {
					id := fmt.Sprintf("req_%d_%d_%d", k, g, i)
					if err := s.acquire(ctx, key, id); err != nil {
						if apperr.Code(err) != apperr.RateLimited {
							t.Errorf("acquire: %v", err)
						}
						continue
					}
					now := held[k].Add(1)
					for m := most[k].Load(); now > m && !most[k].CompareAndSwap(m, now); m = most[k].Load() {
					}
					held[k].Add(-1)
					if err := s.Release(ctx, key, id); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	for k := range most {
		if most[k].Load() > 2 {
			t.Errorf("key %d: %d slots held at once; the limit is 2", k, most[k].Load())
		}
	}
}
