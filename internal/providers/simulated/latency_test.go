package simulated

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// TestLatencyEndsWithTheCallsContext checks when a call with latency
// returns: after the latency with an answer, or when its context ends
// first (a deadline before the latency's end, or a cancel) with the
// context's error at that moment.
func TestLatencyEndsWithTheCallsContext(t *testing.T) {
	req := providers.Request{Purpose: events.StepAnswer, Messages: []providers.Message{{Role: providers.RoleUser, Content: "why is the sky blue?"}}}
	for _, tc := range []struct {
		name     string
		latency  time.Duration
		timeout  time.Duration // zero: no deadline
		cancelAt time.Duration // zero: never cancelled
		wantErr  error
		wantTook time.Duration
	}{
		{name: "answers after the latency", latency: time.Second, wantTook: time.Second},
		{name: "answers within its deadline", latency: time.Second, timeout: time.Minute, wantTook: time.Second},
		{name: "deadline before the latency", latency: 10 * time.Minute, timeout: 2 * time.Minute, wantErr: context.DeadlineExceeded, wantTook: 2 * time.Minute},
		{name: "cancelled during the latency", latency: 10 * time.Minute, cancelAt: 30 * time.Second, wantErr: context.Canceled, wantTook: 30 * time.Second},
		{name: "cancelled before its deadline", latency: 10 * time.Minute, timeout: 2 * time.Minute, cancelAt: 30 * time.Second, wantErr: context.Canceled, wantTook: 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.timeout > 0 {
					var stop context.CancelFunc
					ctx, stop = context.WithTimeout(ctx, tc.timeout)
					defer stop()
				}
				if tc.cancelAt > 0 {
					time.AfterFunc(tc.cancelAt, cancel)
				}
				start := time.Now()
				resp, err := New("provider_a", tc.latency).Complete(ctx, &req)
				if took := time.Since(start); took != tc.wantTook {
					t.Errorf("returned after %v, want %v", took, tc.wantTook)
				}
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				if err == nil && resp.Text == "" {
					t.Fatal("no answer after the latency")
				}
			})
		})
	}
}
