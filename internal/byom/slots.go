package byom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/crosscheck/crosscheck/internal/providers"
)

// Defaults of the bounds on calls to customer-owned models in flight.
// About 4 MiB are allocated for a call whose response nears
// MaxResponseBytes, so 64 calls at once hold a few hundred MiB at worst.
const (
	DefaultMaxCalls           = 64
	DefaultMaxCallsPerAccount = 16
)

// callSlots bounds the calls to customer-owned models in flight in this
// process: at most process in all and perAccount of one account. A call
// takes its account's slot first, then one of the process's, so a call
// that waits for its account holds nothing another account could use.
type callSlots struct {
	process    chan struct{}
	perAccount int

	mu       sync.Mutex
	accounts map[string]*accountSlots
}

// accountSlots are one account's slots, kept while a call of the account
// holds or waits for one.
type accountSlots struct {
	ch    chan struct{}
	users int
}

func newCallSlots(process, perAccount int) *callSlots {
	if process <= 0 {
		process = DefaultMaxCalls
	}
	if perAccount <= 0 {
		perAccount = DefaultMaxCallsPerAccount
	}
	return &callSlots{process: make(chan struct{}, process), perAccount: perAccount, accounts: map[string]*accountSlots{}}
}

// errNoSlot says which bound a call waited on until its context ended.
type errNoSlot struct {
	account bool
	limit   int
}

// take waits for a slot of the account and one of the process until ctx
// ends, and returns the function that gives both back and whether it had to
// wait. It fails with errNoSlot when ctx ends first.
func (c *callSlots) take(ctx context.Context, accountID string) (release func(), waited bool, err error) {
	c.mu.Lock()
	a := c.accounts[accountID]
	if a == nil {
		a = &accountSlots{ch: make(chan struct{}, c.perAccount)}
		c.accounts[accountID] = a
	}
	a.users++
	c.mu.Unlock()
	leave := func() {
		c.mu.Lock()
		if a.users--; a.users == 0 {
			delete(c.accounts, accountID)
		}
		c.mu.Unlock()
	}
	select {
	case a.ch <- struct{}{}:
	default:
		waited = true
		select {
		case a.ch <- struct{}{}:
		case <-ctx.Done():
			leave()
			return nil, true, &errNoSlot{account: true, limit: c.perAccount}
		}
	}
	select {
	case c.process <- struct{}{}:
	default:
		waited = true
		select {
		case c.process <- struct{}{}:
		case <-ctx.Done():
			<-a.ch
			leave()
			return nil, true, &errNoSlot{limit: cap(c.process)}
		}
	}
	callsInFlight.Inc()
	return func() {
		callsInFlight.Dec()
		<-c.process
		<-a.ch
		leave()
	}, waited, nil
}

func (e *errNoSlot) Error() string {
	if e.account {
		return fmt.Sprintf("the account's customer-owned models already have %d calls in flight, the most one account may have (CROSSCHECK_BYOM_MAX_CALLS_PER_ACCOUNT)", e.limit)
	}
	return fmt.Sprintf("the service already has %d calls to customer-owned models in flight, the most it makes at once (CROSSCHECK_BYOM_MAX_CALLS)", e.limit)
}

// bounded is a BYOM's backend whose every attempt takes a call slot of its
// account first.
type bounded struct {
	providers.Provider
	slots   *callSlots
	account string
}

// Complete waits for a slot as long as the attempt's context allows (an
// attempt is bounded by CROSSCHECK_MODEL_TIMEOUT), then calls the host. An
// attempt whose time runs out while it waits fails with class
// rate_limited, retried like a host's 429; one whose context was cancelled
// returns the context's error.
func (b bounded) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	start := time.Now()
	release, waited, err := b.slots.take(ctx, b.account)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, ctx.Err()
		}
		callWaits.WithLabelValues("refused").Inc()
		return &providers.Response{Latency: time.Since(start)}, &providers.Error{Class: providers.ClassRateLimited,
			Message: fmt.Sprintf("no call slot came free within %s: %v", time.Since(start).Round(time.Millisecond), err)}
	}
	defer release()
	if waited {
		callWaits.WithLabelValues("served").Inc()
	}
	return b.Provider.Complete(ctx, req)
}
