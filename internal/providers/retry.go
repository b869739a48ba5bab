package providers

import (
	"context"
	"time"
)

// DefaultRetryDelays are the waits before the second and third attempt of a
// retriable failure: 1 s, then 5 s, then stop (spec section 7, rule 3).
var DefaultRetryDelays = []time.Duration{time.Second, 5 * time.Second}

// Retriable reports whether the failure may pass if the call is repeated:
// a rate limit, a timeout, or a host error that is not final and is a 5xx
// or no answer at all (a connection that failed).
func (e *Error) Retriable() bool {
	switch e.Class {
	case ClassRateLimited, ClassTimeout:
		return true
	case ClassHostError:
		return !e.Final && (e.Status == 0 || e.Status >= 500)
	}
	return false
}

// AttemptObserver is told of every failed attempt that will be retried:
// which attempt failed, how, and how long the retry waits.
type AttemptObserver func(attempt int, failure *Error, wait time.Duration)

type observerKey struct{}

// WithAttemptObserver returns ctx carrying observe for the calls made with it.
func WithAttemptObserver(ctx context.Context, observe AttemptObserver) context.Context {
	return context.WithValue(ctx, observerKey{}, observe)
}

// Retry runs each call with a timeout per attempt and repeats a retriable
// failure after each of Delays in turn, or after the upstream's Retry-After
// (at most MaxRetryAfter) when that is longer. Other failures, and the last one, are returned as they
// are.
type Retry struct {
	Provider Provider
	Delays   []time.Duration
	// Timeout bounds one attempt; zero means none.
	Timeout time.Duration
}

var _ Provider = (*Retry)(nil)

// Complete runs req until it succeeds, fails for good, or ctx ends.
// The response of a failed call is never nil: it carries the last
// attempt's latency.
func (r *Retry) Complete(ctx context.Context, req *Request) (*Response, error) {
	// Each attempt waits on the model in this frame, as deep as the call
	// path allows (no frame of its own): the retry's decision is in again.
	for attempt := 0; ; attempt++ {
		actx, cancel := r.attemptContext(ctx)
		start := time.Now()
		resp, err := r.Provider.Complete(actx, req)
		cancel()
		resp = WithLatency(resp, start)
		if err == nil || !r.again(ctx, attempt, err) {
			return resp, err
		}
	}
}

// WithLatency returns resp, a new empty response when it is nil, with its
// Latency set to the time since start when the backend reported none.
func WithLatency(resp *Response, start time.Time) *Response {
	if resp == nil {
		resp = &Response{}
	}
	if resp.Latency == 0 {
		resp.Latency = time.Since(start)
	}
	return resp
}

// attemptContext bounds one attempt by r.Timeout, if set.
func (r *Retry) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.Timeout > 0 {
		return context.WithTimeout(ctx, r.Timeout)
	}
	return ctx, func() {}
}

// again reports whether attempt, which failed with err, is retried, after
// waiting its delay (or the upstream's advice, whichever is longer); false
// when ctx ended, the attempts are spent or err is not retriable.
//
//go:noinline
func (r *Retry) again(ctx context.Context, attempt int, err error) bool {
	if ctx.Err() != nil || attempt >= len(r.Delays) {
		return false
	}
	e := Classify(err)
	if !e.Retriable() {
		return false
	}
	wait := max(r.Delays[attempt], min(e.RetryAfter, MaxRetryAfter))
	if observe, ok := ctx.Value(observerKey{}).(AttemptObserver); ok {
		observe(attempt+1, e, wait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
