package providers

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

type script struct {
	errs  []error
	calls []time.Time
}

func (s *script) Complete(ctx context.Context, req *Request) (*Response, error) {
	s.calls = append(s.calls, time.Now())
	if len(s.calls) <= len(s.errs) {
		return &Response{}, s.errs[len(s.calls)-1]
	}
	return &Response{Text: "ok"}, nil
}

func TestRetryWaitsOneThenFiveSeconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{errs: []error{&Error{Class: ClassHostError, Status: 500}, &Error{Class: ClassRateLimited, Status: 429}}}
		r := &Retry{Provider: s, Delays: DefaultRetryDelays}
		resp, err := r.Complete(t.Context(), &Request{})
		if err != nil || resp.Text != "ok" {
			t.Fatalf("got %v %v, want the third attempt's answer", resp, err)
		}
		if len(s.calls) != 3 || s.calls[1].Sub(s.calls[0]) != time.Second || s.calls[2].Sub(s.calls[1]) != 5*time.Second {
			t.Fatalf("attempts at %v; want +1s, +5s", s.calls)
		}
	})
}

func TestRetryStopsAfterThreeAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := &Error{Class: ClassHostError, Status: 503}
		s := &script{errs: []error{fail, fail, fail, fail}}
		_, err := (&Retry{Provider: s, Delays: DefaultRetryDelays}).Complete(t.Context(), &Request{})
		if !errors.Is(err, fail) || len(s.calls) != 3 {
			t.Fatalf("%d attempts, err %v; want 3 and the last failure", len(s.calls), err)
		}
	})
}

func TestRetryHonoursRetryAfterAndSkipsPermanentFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{errs: []error{&Error{Class: ClassRateLimited, RetryAfter: 12 * time.Second}}}
		if _, err := (&Retry{Provider: s, Delays: DefaultRetryDelays}).Complete(t.Context(), &Request{}); err != nil {
			t.Fatal(err)
		}
		if d := s.calls[1].Sub(s.calls[0]); d != 12*time.Second {
			t.Fatalf("waited %s, want the upstream's Retry-After of 12s", d)
		}
		for _, fail := range []*Error{
			{Class: ClassHostError, Status: 401}, {Class: ClassHostError, Status: 400}, {Class: ClassHostError, Final: true},
			{Class: ClassContextOverflow, Status: 400}, {Class: ClassRefused}, {Class: ClassOutputLimit}, {Class: ClassNotJSON},
			{Class: ClassSchemaMismatch}, {Class: ClassEmpty},
		} {
			s := &script{errs: []error{fail}}
			if _, err := (&Retry{Provider: s, Delays: DefaultRetryDelays}).Complete(t.Context(), &Request{}); err == nil || len(s.calls) != 1 {
				t.Fatalf("%+v: %d attempts; a permanent failure must not be retried", fail, len(s.calls))
			}
		}
	})
}

func TestRetryTimeoutPerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := ProviderFunc(func(ctx context.Context, req *Request) (*Response, error) {
			<-ctx.Done()
			return &Response{}, ctx.Err()
		})
		start := time.Now()
		_, err := (&Retry{Provider: slow, Delays: DefaultRetryDelays, Timeout: 30 * time.Second}).Complete(t.Context(), &Request{})
		if Classify(err).Class != ClassTimeout || time.Since(start) != 96*time.Second {
			t.Fatalf("err %v after %s; want a timeout after 3×30s + 1s + 5s", err, time.Since(start))
		}
	})
}

// TestRetryCapsTheUpstreamWait: an error that asks for a wait longer than
// MaxRetryAfter (a backend outside the contract suite, a decorator) is
// retried after MaxRetryAfter.
func TestRetryCapsTheUpstreamWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{errs: []error{&Error{Class: ClassRateLimited, RetryAfter: 30 * 24 * time.Hour}}}
		var waits []time.Duration
		ctx := WithAttemptObserver(context.Background(), func(_ int, _ *Error, wait time.Duration) { waits = append(waits, wait) })
		r := &Retry{Provider: s, Delays: []time.Duration{time.Second}}
		if _, err := r.Complete(ctx, &Request{}); err != nil {
			t.Fatal(err)
		}
		if len(s.calls) != 2 || s.calls[1].Sub(s.calls[0]) != MaxRetryAfter || len(waits) != 1 || waits[0] != MaxRetryAfter {
			t.Fatalf("calls %v, waits %v; want a second call after %s", s.calls, waits, MaxRetryAfter)
		}
	})
}
