package queries

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
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

// keySlots is this process's view of one key's slot set. Its mutex
// serialises the process's own changes to the key, so they do not race each
// other for the compare-and-set; other processes are still seen through it.
type keySlots struct {
	mu     sync.Mutex
	cur    *slots
	rev    uint64
	fresh  bool // cur and rev were read or written by this process last
	healed time.Time
}

func (s *Service) keySlots(fingerprint string) *keySlots {
	v, _ := s.slots.LoadOrStore(fingerprint, &keySlots{})
	return v.(*keySlots)
}

// acquire takes an in-flight slot of the key for request id, exactly: the
// slot set of a key is one KV entry changed by compare-and-set, so concurrent
// submissions on any number of processes see each other. Taking a slot the
// request holds already succeeds.
func (s *Service) acquire(ctx context.Context, fingerprint, id string) error {
	return s.changeSlots(ctx, fingerprint, func(cur *slots, reloaded bool) (*slots, error) {
		if cur.has(id) {
			return nil, nil
		}
		if len(cur.Requests) >= s.limit() {
			if !reloaded {
				return nil, errStale // another process may have freed a slot
			}
			healed, err := s.heal(ctx, fingerprint, cur)
			if err != nil {
				return nil, err
			}
			if len(healed.Requests) >= s.limit() {
				return nil, &apperr.Error{
					Code:       apperr.RateLimited,
					Message:    "this API key has 8 queries in flight; wait for one to finish",
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
// The worker calls it as soon as a query ends. A slot it could not free (the
// process died between the terminal event and the release) is healed when
// the key is next full.
func (s *Service) Release(ctx context.Context, fingerprint, id string) error {
	return s.changeSlots(ctx, fingerprint, func(cur *slots, reloaded bool) (*slots, error) {
		if !cur.has(id) {
			if !reloaded {
				return nil, errStale
			}
			return nil, nil
		}
		next := &slots{Requests: slices.DeleteFunc(slices.Clone(cur.Requests), func(x slot) bool { return x.ID == id })}
		return next, nil
	})
}

// errStale asks changeSlots to decide again on a freshly read slot set.
var errStale = errors.New("slot set may be stale")

// changeSlots is the one compare-and-set path of a key's slot set: decide
// gets the set (reloaded says whether it was just read from the bucket) and
// returns the next set, nil for no change, or errStale to decide again on a
// fresh read. A lost compare-and-set reloads and decides again.
func (s *Service) changeSlots(ctx context.Context, fingerprint string, decide func(cur *slots, reloaded bool) (*slots, error)) error {
	ks := s.keySlots(fingerprint)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for {
		reloaded := false
		if !ks.fresh {
			cur, rev, err := s.loadSlots(ctx, fingerprint)
			if err != nil {
				return err
			}
			ks.cur, ks.rev, ks.fresh, reloaded = cur, rev, true, true
		}
		next, err := decide(ks.cur, reloaded)
		if errors.Is(err, errStale) {
			ks.fresh = false
			continue
		}
		if err != nil || next == nil {
			return err
		}
		rev, ok, err := s.storeSlots(ctx, fingerprint, next, ks.rev)
		if err != nil {
			ks.fresh = false
			return err
		}
		if !ok {
			ks.fresh = false
			continue
		}
		ks.cur, ks.rev = next, rev
	}
}

func (s *Service) limit() int {
	if s.Limit > 0 {
		return s.Limit
	}
	return InflightLimit
}

func (s *Service) loadSlots(ctx context.Context, fingerprint string) (*slots, uint64, error) {
	entry, err := s.Store.Inflight.Get(ctx, fingerprint)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &slots{}, 0, nil
	}
	if err != nil {
		return nil, 0, unavailable(err)
	}
	var cur slots
	if err := json.Unmarshal(entry.Value(), &cur); err != nil {
		return nil, 0, err
	}
	return &cur, entry.Revision(), nil
}

// storeSlots writes the set if it is still at rev and returns the new
// revision; false means another writer came first and the caller must reload.
func (s *Service) storeSlots(ctx context.Context, fingerprint string, cur *slots, rev uint64) (uint64, bool, error) {
	data, err := json.Marshal(cur)
	if err != nil {
		return 0, false, err
	}
	var next uint64
	if rev == 0 {
		next, err = s.Store.Inflight.Create(ctx, fingerprint, data)
	} else {
		next, err = s.Store.Inflight.Update(ctx, fingerprint, data, rev)
	}
	switch {
	case err == nil:
		return next, true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return 0, false, nil
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return 0, false, nil
	}
	return 0, false, unavailable(err)
}

// heal drops the slots of a full key that no longer hold a query in flight:
// a query that has its terminal event (its release was lost with its
// process), or a submission older than slotGrace that never reached the
// stream (its process died between taking the slot and appending). A key is
// checked at most once per healEvery; the caller holds its keySlots lock.
func (s *Service) heal(ctx context.Context, fingerprint string, cur *slots) (*slots, error) {
	ks := s.keySlots(fingerprint)
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
			return false, unavailable(err)
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
		return false, unavailable(err)
	}
	return sub != nil, nil
}

func unavailableOr(err error) error {
	if err == nil {
		return nil
	}
	return unavailable(err)
}

func unavailable(err error) error {
	var ae *apperr.Error
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return &apperr.Error{Code: apperr.ServiceRestarting, Message: "the event store is unavailable; resubmit with the same Idempotency-Key", RetryAfter: 1}
}
