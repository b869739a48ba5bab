package accounts

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/lru"
)

// CachedAccounts bounds the account aggregates a process keeps in memory;
// the least recently used is forgotten first, and read again from the
// stream when next needed.
const CachedAccounts = 10000

// Decide is one step of a command: it returns the events to append to the
// account, or none.
type Decide func(a *events.Account) ([]events.Event, error)

// cached is this process's copy of one account aggregate. Its mutex
// serialises the process's commands on the account, so they do not race each
// other for the expected sequence; other processes are seen by reading the
// events after the cached sequence before each command.
type cached struct {
	mu sync.Mutex
	a  *events.Account
	// snapped is the Folded of a's last snapshot (written, or loaded),
	// snappedAt when that was; pending is the write of the last snapshot
	// this copy wrote, until its answer is seen.
	snapped   uint64
	snappedAt time.Time
	pending   *eventstore.Puts
}

func (s *Service) cached(accountID string) *cached {
	s.init.Do(func() { s.accounts = lru.New[string, *cached](CachedAccounts) })
	return s.accounts.GetOrAdd(accountID, func() *cached { return &cached{} })
}

// Update is the one load → decide → append path of the account aggregate.
// Each step decides on the state its predecessors left; every event is
// appended with the account's expected last sequence, and the whole command
// is decided again when another process appended in between — so every step
// must decide "nothing to do" when its own event already landed. Ledger events
// are chained to their predecessor's hash. then, when set, reads the
// resulting state before another command can change it.
func (s *Service) Update(ctx context.Context, accountID string, then func(a *events.Account), steps ...Decide) error {
	c := s.cached(accountID)
	c.mu.Lock()
	defer c.mu.Unlock()
	stale := c.a == nil
	for attempt := 0; ; attempt++ {
		// The cached state is used as it is: an append decided on a stale
		// state fails its expected sequence, and then the tail is read.
		if stale {
			if err := s.refresh(ctx, c, accountID); err != nil {
				return err
			}
		}
		stale = true
		conflict := false
		for _, step := range steps {
			evs, err := step(c.a)
			if err != nil {
				return err
			}
			for _, ev := range evs {
				env, expect, err := s.envelope(accountID, c.a, ev)
				if err != nil {
					return err
				}
				app, err := s.Store.Append(ctx, env, expect)
				if errors.Is(err, eventstore.ErrConflict) {
					conflict = true
					break
				}
				if err != nil {
					c.a = nil // unknown whether it landed: read it back next time
					return err
				}
				// The hash chain is over the bytes the stream holds.
				c.a.Apply(events.Record{Seq: app.Seq, Envelope: env, Event: ev, Raw: app.Data})
			}
			if conflict {
				break
			}
		}
		if !conflict {
			if then != nil {
				then(c.a)
			}
			s.snapshot(ctx, accountID, c)
			return nil
		}
		if attempt > 50 {
			return apperr.New(apperr.ServiceRestarting, "account %s is too busy; retry", accountID)
		}
	}
}

// envelope wraps one event of a command on a and says what its append
// expects. A ledger event is chained to the ledger's head and goes on the
// ledger's one subject, conditional on the last event of that subject (a
// lookup of one subject, whatever the account's history); any other event
// goes on the account's own subjects, conditional on the last of those. Keys
// and the ledger therefore never fail each other's expectation, in any
// number of processes.
func (s *Service) envelope(accountID string, a *events.Account, ev events.Event) (events.Envelope, *eventstore.Expect, error) {
	if ev, ledger := events.Linked(ev, a.Ledger.Head); ledger {
		env, err := events.WrapLedger(accountID, ev, s.Now())
		return env, &eventstore.Expect{Filter: events.LedgerSubject(accountID), Seq: a.ChainSeq}, err
	}
	env, err := events.Wrap(events.AggregateAccount, accountID, ev, s.Now())
	return env, &eventstore.Expect{Filter: events.OwnFilter(accountID), Seq: a.OwnSeq}, err
}

// refresh brings the cached aggregate up to the stream: on first use its
// snapshot and the events after it (all of its events when it has no
// snapshot this process can use), then only the events after the cached
// sequence.
func (s *Service) refresh(ctx context.Context, c *cached, accountID string) error {
	if c.a == nil || !c.a.Exists() {
		a, snapped, err := s.load(ctx, accountID)
		if err != nil {
			return err
		}
		c.a, c.snapped, c.snappedAt = a, snapped, s.Now()
		return nil
	}
	return s.catchUp(ctx, accountID, c.a)
}

// catchUp applies to a the account's events after a.Read. The events a
// has applied already (its own appends) are read but not decoded.
func (s *Service) catchUp(ctx context.Context, accountID string, a *events.Account) error {
	recs, last, err := s.Store.LoadNew(ctx, s.Store.Accounts, events.Filter(events.AggregateAccount, accountID), a.Read+1, a.Applied)
	if err != nil {
		return err
	}
	s.read(len(recs))
	for _, r := range recs {
		a.CatchUp(r)
	}
	a.Read = max(a.Read, last)
	return nil
}

// Refreshed is a step that reads the account's latest events (from any
// process) before the next step decides.
func (s *Service) Refreshed(ctx context.Context, accountID string) Decide {
	return func(a *events.Account) ([]events.Event, error) {
		return nil, s.catchUp(ctx, accountID, a)
	}
}
