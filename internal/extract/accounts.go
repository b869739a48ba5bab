package extract

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// ErrAccountCPU is the reason of an *AccountError.
var ErrAccountCPU = errors.New("extract: the account used its extraction CPU time")

// AccountError refuses an account's extraction: its children used the CPU
// time it has in an hour. errors.Is matches ErrAccountCPU.
type AccountError struct {
	// PerHour is the account's CPU time in an hour.
	PerHour time.Duration
	// RetryAfter is when the account has CPU time again.
	RetryAfter time.Duration
}

func (e *AccountError) Error() string {
	return fmt.Sprintf("%v (%s per hour; again in %s)", ErrAccountCPU, e.PerHour, e.RetryAfter.Round(time.Second))
}

func (e *AccountError) Unwrap() error { return ErrAccountCPU }

// accountCPU counts the CPU time of each account's children in a bucket of
// perHour that refills continuously. An account may start a child while
// its bucket holds any time; the child's CPU time is taken from it when it
// ends, which may leave it below zero. An account's entry goes once its
// bucket is full again.
type accountCPU struct {
	perHour time.Duration // <= 0: no bound
	now     func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	left time.Duration // at at
	at   time.Time
}

func newAccountCPU(perHour time.Duration, now func() time.Time) *accountCPU {
	if perHour == 0 {
		perHour = DefaultAccountCPU
	}
	return &accountCPU{perHour: perHour, now: now, buckets: map[string]*bucket{}}
}

// refill brings b to now.
func (c *accountCPU) refill(b *bucket, now time.Time) {
	if elapsed := now.Sub(b.at); elapsed > 0 {
		b.left = min(c.perHour, b.left+time.Duration(float64(elapsed)*float64(c.perHour)/float64(time.Hour)))
	}
	b.at = now
}

// admit returns an *AccountError when account's bucket is empty. An empty
// account, or no bound, always passes.
func (c *accountCPU) admit(account string) error {
	if account == "" || c.perHour <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.sweep(now)
	b := c.buckets[account]
	if b == nil {
		return nil
	}
	c.refill(b, now)
	if b.left > 0 {
		return nil
	}
	accountRefusals.WithLabelValues("cpu").Inc()
	retry := time.Duration(math.Ceil(float64(-b.left)*float64(time.Hour)/float64(c.perHour))) + time.Second
	return &AccountError{PerHour: c.perHour, RetryAfter: retry}
}

// spend takes cpu from account's bucket.
func (c *accountCPU) spend(account string, cpu time.Duration) {
	if account == "" || c.perHour <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	b := c.buckets[account]
	if b == nil {
		b = &bucket{left: c.perHour, at: now}
		c.buckets[account] = b
	}
	c.refill(b, now)
	b.left -= cpu
}

// sweep drops, at most once a minute, the buckets that are full again.
// c.mu is held.
func (c *accountCPU) sweep(now time.Time) {
	if now.Sub(c.lastSweep) < time.Minute {
		return
	}
	c.lastSweep = now
	for id, b := range c.buckets {
		if c.refill(b, now); b.left >= c.perHour {
			delete(c.buckets, id)
		}
	}
}

// scheduler hands out the process's children, fairly between accounts: a
// free child goes at once to whoever asks while nobody waits; when none is
// free, each child that ends goes to the waiter whose account runs the
// fewest children, the longest waiting among them. One account may so take
// every child while no other wants one, and another's extraction waits at
// most for the first of them to end.
type scheduler struct {
	mu      sync.Mutex
	free    int
	running map[string]int
	waiters []*waiter // in the order they came
}

type waiter struct {
	account string
	ready   chan struct{} // closed when it has a child
}

func newScheduler(children int) *scheduler {
	return &scheduler{free: children, running: map[string]int{}}
}

// acquire returns once account has a child, ErrBusy when none came within
// wait, ctx's error when ctx ends first. release gives the child back.
func (s *scheduler) acquire(ctx context.Context, account string, wait time.Duration) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.running[account]++
		s.mu.Unlock()
		return nil
	}
	w := &waiter{account: account, ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-timer.C:
		err = ErrBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.waiters, w); i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
		return err
	}
	// It was handed a child as it gave up: it takes it.
	return nil
}

// release gives back a child of account, to the next waiter if any.
func (s *scheduler) release(account string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[account]--; s.running[account] == 0 {
		delete(s.running, account)
	}
	if len(s.waiters) == 0 {
		s.free++
		return
	}
	next := 0
	for i, w := range s.waiters {
		if s.running[w.account] < s.running[s.waiters[next].account] {
			next = i
		}
	}
	w := s.waiters[next]
	s.waiters = slices.Delete(s.waiters, next, next+1)
	s.running[w.account]++
	close(w.ready)
}
