package queries

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/lru"
)

// InflightLimit is the number of in-flight queries one API key may have (spec
// section 8). An account's keys together may also be bounded
// (Service.AccountLimit).
const InflightLimit = 8

// RetryAfterSeconds is the Retry-After of a rate_limited answer.
const RetryAfterSeconds = 30

// slotGrace is how old a slot without a submitted event must be before it is
// dropped: younger, it may belong to a submission still being appended.
const slotGrace = 10 * time.Second

// healEvery bounds how often a full account checks its slots against the
// events.
const healEvery = time.Second

// slot is one query in flight: its request id, the fingerprint of the API
// key that submitted it, and when its admission took it.
type slot struct {
	ID  string    `json:"id"`
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

// slots is an account's set of slots, every key's together: one entry of
// the inflight bucket, by account id, so that one compare-and-set checks
// both the key's bound and the account's.
type slots struct {
	Requests []slot `json:"requests"`
}

func (s *slots) has(id string) bool {
	return slices.ContainsFunc(s.Requests, func(x slot) bool { return x.ID == id })
}

// ofKey counts the slots of the key with fingerprint.
func (s *slots) ofKey(fingerprint string) int {
	n := 0
	for _, x := range s.Requests {
		if x.Key == fingerprint {
			n++
		}
	}
	return n
}

// CachedAccounts bounds the accounts whose slot sets a process keeps in
// memory; the least recently used is forgotten first, and read again from
// the bucket when next needed.
const CachedAccounts = 10000

// accountSlots is this process's view of one account's slot set. Its
// mutex serialises the process's own writes to the account, so they do not
// race each other for the compare-and-set; other processes are still seen
// through it. Changes that come while a write is under way wait in queue
// and go together in the next write (see changeSlots).
type accountSlots struct {
	mu     sync.Mutex
	entry  *eventstore.Entry // as this process read or wrote it last; nil: read it
	healed time.Time
	// view is the set entry holds, for a look without the mutex (room);
	// nil when entry is.
	view atomic.Pointer[slots]

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

func (s *Service) accountSlots(accountID string) *accountSlots {
	s.init.Do(func() { s.slots = lru.New[string, *accountSlots](CachedAccounts) })
	return s.slots.GetOrAdd(accountID, func() *accountSlots { return &accountSlots{} })
}

// acquire takes an in-flight slot of the account's key with fingerprint for
// request id, exactly, within the key's bound and the account's: the slot
// set of an account is one KV entry changed by compare-and-set, so
// concurrent submissions on any number of processes see each other. Taking
// a slot the request holds already succeeds. A refusal is rate_limited,
// its message naming the bound that refused.
func (s *Service) acquire(ctx context.Context, accountID, fingerprint, id string) error {
	as := s.accountSlots(accountID)
	return s.changeSlots(ctx, accountID, as, func(cur *slots, reloaded bool) (*slots, error) {
		if cur.has(id) {
			return nil, nil
		}
		if s.full(cur, fingerprint) != nil {
			if !reloaded {
				return nil, eventstore.ErrStale // another process may have freed a slot
			}
			healed, err := s.heal(ctx, as, cur)
			if err != nil {
				return nil, err
			}
			if err := s.full(healed, fingerprint); err != nil {
				return nil, err
			}
			cur = healed
		}
		next := &slots{Requests: append(slices.Clip(cur.Requests), slot{ID: id, Key: fingerprint, At: s.Now().UTC()})}
		return next, nil
	})
}

// room checks, without taking a slot, whether the account's key with
// fingerprint has room for one more query in flight: nil, or the
// rate_limited refusal acquire would give now. It writes nothing but a
// healed set (the slots of queries that ended dropped, as acquire would),
// and when this process's last view of the account leaves room it reads
// nothing either: a stale view that leaves room is caught by acquire, one
// that leaves none is read again. A submission checks it before it binds
// its Idempotency-Key, so that a refusal leaves nothing bound.
func (s *Service) room(ctx context.Context, accountID, fingerprint string) error {
	as := s.accountSlots(accountID)
	if set := as.view.Load(); set != nil && s.full(set, fingerprint) == nil {
		return nil
	}
	return s.changeSlots(ctx, accountID, as, func(cur *slots, reloaded bool) (*slots, error) {
		if s.full(cur, fingerprint) == nil {
			return nil, nil
		}
		if !reloaded {
			return nil, eventstore.ErrStale // another process may have freed a slot
		}
		healed, err := s.heal(ctx, as, cur)
		if err != nil {
			return nil, err
		}
		if err := s.full(healed, fingerprint); err != nil {
			return nil, err
		}
		return healed, nil
	})
}

// full returns the rate_limited refusal of one more slot for the key with
// fingerprint in set, or nil when both its bound and the account's leave
// room.
func (s *Service) full(set *slots, fingerprint string) error {
	switch {
	case set.ofKey(fingerprint) >= s.limit():
		return &apperr.Error{
			Code:       apperr.RateLimited,
			Message:    fmt.Sprintf("this API key has %d queries in flight or being admitted; wait for one to finish", s.limit()),
			RetryAfter: RetryAfterSeconds,
		}
	case s.AccountLimit > 0 && len(set.Requests) >= s.AccountLimit:
		return &apperr.Error{
			Code:       apperr.RateLimited,
			Message:    fmt.Sprintf("this account has %d queries in flight or being admitted, the bound of one account across all its API keys; wait for one to finish", s.AccountLimit),
			RetryAfter: RetryAfterSeconds,
		}
	}
	return nil
}

// Release frees request id's slot in its account's set; freeing a slot
// that is not held succeeds. The worker calls it once the query's ending
// is decided, before its terminal event. A slot it could not free (the
// release failed, or its process died after the terminal event with the
// release under way) is healed when the key or the account is next full.
func (s *Service) Release(ctx context.Context, accountID, id string) error {
	return s.changeSlots(ctx, accountID, s.accountSlots(accountID), func(cur *slots, reloaded bool) (*slots, error) {
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

// changeSlots changes an account's slot set through the bucket's
// compare-and-set, through as, the process's view of the account, starting
// from the set as this process last saw it: decide gets the set
// (reloaded says whether it was just read from the bucket) and returns the
// next set, nil for no change, or eventstore.ErrStale to decide again on a
// fresh read.
//
// An account's changes are written one write at a time, and each write carries
// every change that came while the one before it was under way: the
// decisions are taken in order of arrival, each on the set the ones before
// it left, and written as one compare-and-set. Under load an account's slot set
// is written about once per query instead of twice, and a change waits for
// at most one write before its own (each write is an fsync under fsync
// always).
func (s *Service) changeSlots(ctx context.Context, accountID string, as *accountSlots, decide func(cur *slots, reloaded bool) (*slots, error)) error {
	c := &slotChange{decide: decide, done: make(chan struct{})}
	as.queued.Lock()
	as.queue = append(as.queue, c)
	as.queued.Unlock()
	as.mu.Lock()
	defer as.mu.Unlock()
	select {
	case <-c.done: // written with the changes of the write before
		return c.err
	default:
	}
	as.queued.Lock()
	batch := as.queue
	as.queue = nil
	as.queued.Unlock()
	// The write is the batch's, not only this caller's: a caller that goes
	// away does not fail the others (the store bounds each request).
	s.writeSlots(context.WithoutCancel(ctx), accountID, as, batch)
	return c.err
}

// writeSlots decides and writes batch in one compare-and-set; the caller
// holds as.mu. A change refused by its decision fails alone; a failed write
// fails every change of the batch.
func (s *Service) writeSlots(ctx context.Context, accountID string, as *accountSlots, batch []*slotChange) {
	outcome := make([]error, len(batch))
	var last *slots // the set of the last decision: as written, or as decided on
	entry, err := s.Store.Inflight.Change(ctx, accountID, as.entry, func(cur eventstore.Entry, fresh bool) ([]byte, error) {
		set := &slots{}
		if cur.Revision != 0 {
			if err := json.Unmarshal(cur.Value, set); err != nil {
				return nil, err
			}
		}
		defer func() { last = set }()
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
		as.entry = nil
		as.view.Store(nil)
		for i := range outcome {
			outcome[i] = err
		}
	} else {
		as.entry = &entry // the set as written, or as decided on: known
		as.view.Store(last)
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

// heal drops the slots of a full key or account that no longer hold a
// query in flight: a query that has its terminal event (its release
// failed), or a submission older than slotGrace that never reached the
// stream (its process died between taking the slot and appending). An
// account is checked at most once per healEvery; the caller holds as's
// lock (the view of the account its change was made through: the cache may
// hold a newer one).
func (s *Service) heal(ctx context.Context, as *accountSlots, cur *slots) (*slots, error) {
	if s.Now().Sub(as.healed) < healEvery {
		return cur, nil
	}
	as.healed = s.Now()
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

// InFlight returns the number of the account's queries in flight (or being
// admitted), every key's together, as the inflight bucket holds them now.
func (s *Service) InFlight(ctx context.Context, accountID string) (int, error) {
	e, err := s.Store.Inflight.Get(ctx, accountID)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	var set slots
	if err := json.Unmarshal(e.Value, &set); err != nil {
		return 0, fmt.Errorf("in-flight slots of %s: %w", accountID, err)
	}
	return len(set.Requests), nil
}
