package queries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"

	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/lru"
)

// The process keeps the slot sets of at most its bound of accounts; one
// forgotten is read again from the bucket, and its slots still count.
func TestSlotCacheIsBounded(t *testing.T) {
	store := storetest.Open(t)
	s := &Service{Store: store, Now: time.Now, Limit: 1}
	s.init.Do(func() { s.slots = lru.New[string, *accountSlots](2) })
	ctx := context.Background()
	for i := range 3 {
		key := fmt.Sprintf("key%05d", i)
		if err := s.acquire(ctx, key, key, fmt.Sprintf("req_%d", i)); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	if n := s.slots.Len(); n != 2 {
		t.Fatalf("%d keys cached, want 2", n)
	}
	// key00000 was forgotten; its one slot is held, so a second is refused.
	if err := s.acquire(ctx, "key00000", "key00000", "req_other"); err == nil {
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
	ks := s.accountSlots(key)
	ks.mu.Lock() // a write under way
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- s.acquire(ctx, key, key, fmt.Sprintf("req_%02d", i)) }()
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
				if err := s.acquire(ctx, key, key, id); err != nil {
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
		s.init.Do(func() { s.slots = lru.New[string, *accountSlots](2) })
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
					if err := s.acquire(ctx, key, key, id); err != nil {
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

// Many goroutines on three processes taking and freeing the slots of one
// account's six keys never hold more than the account's bound, nor more
// than a key's; both bounds refuse, each with its own message, and the
// account's set is empty at the end.
func TestSlotsOfOneAccountHoldAcrossProcesses(t *testing.T) {
	stores := storetest.OpenMany(t, 3)
	ctx := context.Background()
	var services []*Service
	for _, store := range stores {
		services = append(services, &Service{Store: store, Now: time.Now, Limit: 3, AccountLimit: 5})
	}
	const account = "acct_01k0000000000000000000000a"
	// Each bound refuses with its own message: a key at its 3, then the
	// account at its 5 with room left in the key.
	for i, key := range []string{"key00020", "key00020", "key00020", "key00020", "key00021", "key00021", "key00022"} {
		err := services[i%3].acquire(ctx, account, key, fmt.Sprintf("req_first_%d", i))
		switch want := map[int]string{3: "this API key has 3", 6: "this account has 5"}[i]; {
		case want == "" && err != nil:
			t.Fatalf("slot %d of %s: %v", i, key, err)
		case want != "" && (apperr.Code(err) != apperr.RateLimited || !strings.Contains(err.Error(), want)):
			t.Fatalf("slot %d of %s: %v; want rate_limited, %q", i, key, err, want)
		}
	}
	for i := range 7 {
		if err := services[0].Release(ctx, account, fmt.Sprintf("req_first_%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var held, most atomic.Int64
	var keyHeld, keyMost [6]atomic.Int64
	var byKey, byAccount atomic.Int64
	var wg sync.WaitGroup
	for g := range 36 {
		s, k := services[g%3], g%6
		key := fmt.Sprintf("key0002%d", k)
		wg.Go(func() {
			for i := range 12 {
				id := fmt.Sprintf("req_%02d_%02d", g, i)
				if err := s.acquire(ctx, account, key, id); err != nil {
					switch msg := err.Error(); {
					case apperr.Code(err) != apperr.RateLimited:
						t.Errorf("acquire: %v", err)
					case strings.Contains(msg, "this API key has 3"):
						byKey.Add(1)
					case strings.Contains(msg, "this account has 5"):
						byAccount.Add(1)
					default:
						t.Errorf("a refusal that names no bound: %v", err)
					}
					continue
				}
				raise(&most, held.Add(1))
				raise(&keyMost[k], keyHeld[k].Add(1))
				time.Sleep(time.Millisecond)
				keyHeld[k].Add(-1)
				held.Add(-1)
				if err := s.Release(ctx, account, id); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if most.Load() > 5 {
		t.Fatalf("%d slots of the account held at once; its bound is 5", most.Load())
	}
	for k := range keyMost {
		if keyMost[k].Load() > 3 {
			t.Fatalf("key %d: %d slots held at once; its bound is 3", k, keyMost[k].Load())
		}
	}
	if byAccount.Load()+byKey.Load() == 0 {
		t.Fatal("no submission was refused: the bounds were never reached")
	}
	e, err := stores[0].Inflight.Get(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	var set slots
	if err := json.Unmarshal(e.Value, &set); err != nil || len(set.Requests) != 0 {
		t.Fatalf("the account's set after every release: %s (%v); want empty", e.Value, err)
	}
}

// raise sets most to now when now is higher.
func raise(most *atomic.Int64, now int64) {
	for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
	}
}
