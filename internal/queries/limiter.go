package queries

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/lru"
)

// InflightLimit is the number of in-flight queries one API key may have (spec
// section 8).
const InflightLimit = 8

// RetryAfterSeconds is the Retry-After of a rate_limited answer.
const RetryAfterSeconds = 30

// slotGrace is how old a slot without a submitted event must be before it is
// dropped: younger, it may belong to a submission still being appended.
const slotGrace = 10 * time.Second

// healEvery bounds how often a full key checks its slots against the events.
const healEvery = time.Second

type slot struct {
	ID string    `json:"id"`
	At time.Time `json:"at"`
}

type slots struct {
	Requests []slot `json:"requests"`
}

func (s *slots) has(id string) bool {
	return slices.ContainsFunc(s.Requests, func(x slot) bool { return x.ID == id })
}

// CachedKeys bounds the keys whose slot sets a process keeps in memory; the
// least recently used is forgotten first, and read again from the bucket
// when next needed.
const CachedKeys = 10000

// keySlots is this process's view of one key's slot set. Its mutex
// serialises the process's own writes to the key, so they do not race each
// other for the compare-and-set; other processes are still seen through it.
// Changes that come while a write is under way wait in queue and go
// together in the next write (see changeSlots).
type keySlots struct {
	mu     sync.Mutex
	entry  *eventstore.Entry // as this process read or wrote it last; nil: read it
	healed time.Time

	queued sync.Mutex
	queue  []*slotChange
}

// slotChange is one change of a key's slot set waiting for a write: its
// decision, and its outcome once done is closed.
type slotChange struct {
	decide func(cur *slots, reloaded bool) (*slots, error)
	err    error
	done   chan struct{}
}

func (s *Service) keySlots(fingerprint string) *keySlots {
	s.init.Do(func() { s.slots = lru.New[string, *keySlots](CachedKeys) })
	return s.slots.GetOrAdd(fingerprint, func() *keySlots { return &keySlots{} })
}

// acquire takes an in-flight slot of the key for request id, exactly: the
// slot set of a key is one KV entry changed by compare-and-set, so concurrent
// submissions on any number of processes see each other. Taking a slot the
// request holds already succeeds.
func (s *Service) acquire(ctx context.Context, fingerprint, id string) error {
	ks := s.keySlots(fingerprint)
	return s.changeSlots(ctx, fingerprint, ks, func(cur *slots, reloaded bool) (*slots, error) {
		if cur.has(id) {
			return nil, nil
		}
		if len(cur.Requests) >= s.limit() {
			if !reloaded {
				return nil, eventstore.ErrStale // another process may have freed a slot
			}
			healed, err := s.heal(ctx, ks, cur)
			if err != nil {
				return nil, err
			}
			if len(healed.Requests) >= s.limit() {
				return nil, &apperr.Error{
					Code:       apperr.RateLimited,
					Message:    "this API key has 8 queries in flight or being admitted; wait for one to finish",
					RetryAfter: RetryAfterSeconds,
				}
			}
			cur = healed
		}
		next := &slots{Requests: append(slices.Clip(cur.Requests), slot{ID: id, At: s.Now().UTC()})}
		return next, nil
	})
}

// Release frees request id's slot; freeing a slot that is not held succeeds.
// The worker calls it once the query's ending is decided, before its
// terminal event. A slot it could not free (the release failed, or its
// process died after the terminal event with the release under way) is
// healed when the key is next full.
func (s *Service) Release(ctx context.Context, fingerprint, id string) error {
	return s.changeSlots(ctx, fingerprint, s.keySlots(fingerprint), func(cur *slots, reloaded bool) (*slots, error) {
		if !cur.has(id) {
			if !reloaded {
				return nil, eventstore.ErrStale
			}
			return nil, nil
		}
		next := &slots{Requests: slices.DeleteFunc(slices.Clone(cur.Requests), func(x slot) bool { return x.ID == id })}
		return next, nil
	})
}

// changeSlots changes a key's slot set through the bucket's compare-and-set,
// through ks, the process's view of the key, starting from the set as this
// process last saw it: decide gets the set
// (reloaded says whether it was just read from the bucket) and returns the
// next set, nil for no change, or eventstore.ErrStale to decide again on a
// fresh read.
//
// A key's changes are written one write at a time, and each write carries
// every change that came while the one before it was under way: the
// decisions are taken in order of arrival, each on the set the ones before
// it left, and written as one compare-and-set. Under load a key's slot set
// is written about once per query instead of twice, and a change waits for
// at most one write before its own (each write is an fsync under fsync
// always).
func (s *Service) changeSlots(ctx context.Context, fingerprint string, ks *keySlots, decide func(cur *slots, reloaded bool) (*slots, error)) error {
	c := &slotChange{decide: decide, done: make(chan struct{})}
	ks.queued.Lock()
	ks.queue = append(ks.queue, c)
	ks.queued.Unlock()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	select {
	case <-c.done: // written with the changes of the write before
		return c.err
	default:
	}
	ks.queued.Lock()
	batch := ks.queue
	ks.queue = nil
	ks.queued.Unlock()
	// The write is the batch's, not only this caller's: a caller that goes
	// away does not fail the others (the store bounds each request).
	s.writeSlots(context.WithoutCancel(ctx), fingerprint, ks, batch)
	return c.err
}

// writeSlots decides and writes batch in one compare-and-set; the caller
// holds ks.mu. A change refused by its decision fails alone; a failed write
// fails every change of the batch.
func (s *Service) writeSlots(ctx context.Context, fingerprint string, ks *keySlots, batch []*slotChange) {
	outcome := make([]error, len(batch))
	entry, err := s.Store.Inflight.Change(ctx, fingerprint, ks.entry, func(cur eventstore.Entry, fresh bool) ([]byte, error) {
		set := &slots{}
		if cur.Revision != 0 {
			if err := json.Unmarshal(cur.Value, set); err != nil {
				return nil, err
			}
		}
		changed := false
		for i, c := range batch {
			next, err := c.decide(set, fresh)
			if errors.Is(err, eventstore.ErrStale) {
				return nil, err // the whole batch decides again on a fresh read
			}
			outcome[i] = err
			if err == nil && next != nil {
				set, changed = next, true
			}
		}
		if !changed {
			return nil, nil
		}
		return json.Marshal(set)
	})
	if err != nil {
		ks.entry = nil
		for i := range outcome {
			outcome[i] = err
		}
	} else {
		ks.entry = &entry // the set as written, or as decided on: known
	}
	for i, c := range batch {
		c.err = outcome[i]
		close(c.done)
	}
}

func (s *Service) limit() int {
	if s.Limit > 0 {
		return s.Limit
	}
	return InflightLimit
}

// heal drops the slots of a full key that no longer hold a query in flight:
// a query that has its terminal event (its release failed), or a
// submission older than slotGrace that never reached the stream (its
// process died between taking the slot and appending). A key is checked at
// most once per healEvery; the caller holds ks's lock (the view of the key
// its change was made through: the cache may hold a newer one).
func (s *Service) heal(ctx context.Context, ks *keySlots, cur *slots) (*slots, error) {
	if s.Now().Sub(ks.healed) < healEvery {
		return cur, nil
	}
	ks.healed = s.Now()
	out := &slots{}
	for _, sl := range cur.Requests {
		live, err := s.inFlight(ctx, sl)
		if err != nil {
			return nil, err
		}
		if live {
			out.Requests = append(out.Requests, sl)
		}
	}
	return out, nil
}

func (s *Service) inFlight(ctx context.Context, sl slot) (bool, error) {
	for _, name := range events.TerminalEvents {
		rec, err := s.Store.Last(ctx, s.Store.Queries, events.Subject(events.AggregateQuery, sl.ID, name))
		if err != nil {
			return false, err
		}
		if rec != nil {
			return false, nil
		}
	}
	if s.Now().Sub(sl.At) < slotGrace {
		return true, nil
	}
	sub, err := s.Store.Last(ctx, s.Store.Queries, events.Subject(events.AggregateQuery, sl.ID, events.QuerySubmitted{}.EventName()))
	if err != nil {
		return false, err
	}
	return sub != nil, nil
}
