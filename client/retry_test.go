package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
)

// handlerTransport serves requests with an in-process handler, so that a
// synctest bubble's fake clock runs the whole exchange.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// call is one request a test server saw: when (on the bubble's clock,
// since the test began) and with which Idempotency-Key.
type call struct {
	at  time.Duration
	key string
}

// recorder answers each request with the next of answers (the last one
// repeated) and records the calls.
type recorder struct {
	start   time.Time
	mu      sync.Mutex
	calls   []call
	answers []func(w http.ResponseWriter)
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	n := len(rc.calls)
	rc.calls = append(rc.calls, call{at: time.Since(rc.start), key: r.Header.Get("Idempotency-Key")})
	rc.mu.Unlock()
	rc.answers[min(n, len(rc.answers)-1)](w)
}

func (rc *recorder) times() []time.Duration {
	var out []time.Duration
	for _, c := range rc.calls {
		out = append(out, c.at)
	}
	return out
}

func envelope(status int, code string, retriable bool, retryAfter int) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		body := apiv1.ErrorBody{Error: apiv1.ErrorDetail{Code: code, Message: "test " + code, Retriable: retriable}}
		if retryAfter > 0 {
			body.Error.RetryAfterSeconds = &retryAfter
			w.Header().Set("Retry-After", itoa(retryAfter))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func accepted(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(apiv1.Accepted{RequestID: "req_1", Object: "query", Status: "queued"})
}

func bubbleClient(t *testing.T, h http.Handler) *Client {
	t.Helper()
	c, err := New("http://crosscheck.test", "xchk_test")
	if err != nil {
		t.Fatal(err)
	}
	c.HTTP = &http.Client{Transport: handlerTransport{h}}
	return c
}

func secs(s ...float64) []time.Duration {
	var out []time.Duration
	for _, v := range s {
		out = append(out, time.Duration(v*float64(time.Second)))
	}
	return out
}

func TestSubmitRetryRules(t *testing.T) {
	cases := []struct {
		name     string
		answers  []func(http.ResponseWriter)
		wantAt   []time.Duration
		wantCode string // empty: the submission succeeds
	}{
		{"429 waits Retry-After", []func(http.ResponseWriter){envelope(429, CodeRateLimited, true, 30), accepted}, secs(0, 30), ""},
		{"502 twice then success", []func(http.ResponseWriter){envelope(502, CodeProviderError, true, 0), envelope(502, CodeProviderError, true, 0), accepted}, secs(0, 1, 6), ""},
		{"502 three times stops", []func(http.ResponseWriter){envelope(502, CodeProviderError, true, 0)}, secs(0, 1, 6), CodeProviderError},
		{"503 then success", []func(http.ResponseWriter){envelope(503, CodeServiceRestarting, true, 1), accepted}, secs(0, 1), ""},
		{"502 without an envelope", []func(http.ResponseWriter){func(w http.ResponseWriter) { w.WriteHeader(502) }, accepted}, secs(0, 1), ""},
		{"400 is not retried", []func(http.ResponseWriter){envelope(400, "invalid_mode", false, 0)}, secs(0), "invalid_mode"},
		{"500 not retriable", []func(http.ResponseWriter){envelope(500, "internal_error", false, 0)}, secs(0), "internal_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{start: time.Now(), answers: tc.answers}
				c := bubbleClient(t, rec)
				acc, err := c.Submit(context.Background(), apiv1.QueryRequest{Mode: "unify", Prompt: "p"})
				if got := rec.times(); !slices.Equal(got, tc.wantAt) {
					t.Errorf("calls at %v, want %v", got, tc.wantAt)
				}
				for _, call := range rec.calls {
					if call.key == "" || call.key != rec.calls[0].key {
						t.Errorf("Idempotency-Keys %+v: want one key on every attempt", rec.calls)
					}
				}
				if tc.wantCode == "" {
					if err != nil || acc.RequestID != "req_1" {
						t.Fatalf("Submit = %+v, %v; want req_1", acc, err)
					}
					return
				}
				var e *Error
				if !errors.As(err, &e) || e.Code != tc.wantCode {
					t.Fatalf("Submit error = %v; want an *Error with code %s", err, tc.wantCode)
				}
			})
		})
	}
}

func TestRateLimitWaitsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{start: time.Now(), answers: []func(http.ResponseWriter){envelope(429, CodeRateLimited, true, 2)}}
		c := bubbleClient(t, rec)
		c.MaxRateLimitWaits = 3
		_, err := c.Submit(context.Background(), apiv1.QueryRequest{Mode: "unify", Prompt: "p"})
		if !HasCode(err, CodeRateLimited) {
			t.Fatalf("err = %v, want rate_limited", err)
		}
		if got, want := rec.times(), secs(0, 2, 4, 6); !slices.Equal(got, want) {
			t.Fatalf("calls at %v, want %v", got, want)
		}
		var e *Error
		if errors.As(err, &e); e.RetryAfter != 2*time.Second || e.Status != 429 {
			t.Fatalf("error %+v: want status 429, RetryAfter 2s", e)
		}
	})
}

func TestEachSubmitHasItsOwnKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{start: time.Now(), answers: []func(http.ResponseWriter){accepted}}
		c := bubbleClient(t, rec)
		ctx := context.Background()
		_, _ = c.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "p"})
		_, _ = c.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "p"})
		_, _ = c.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "p"}, WithIdempotencyKey("mine"))
		if k := rec.calls; k[0].key == k[1].key || k[2].key != "mine" {
			t.Fatalf("keys %+v: want two different generated keys, then mine", k)
		}
	})
}

func TestRetryStopsWithTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{start: time.Now(), answers: []func(http.ResponseWriter){envelope(429, CodeRateLimited, true, 30)}}
		c := bubbleClient(t, rec)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.Submit(ctx, apiv1.QueryRequest{Mode: "unify", Prompt: "p"})
		if !errors.Is(err, context.DeadlineExceeded) || len(rec.calls) != 1 {
			t.Fatalf("err = %v after %d calls; want the deadline after one call", err, len(rec.calls))
		}
	})
}

func TestWaitCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		rec := &recorder{start: start}
		rec.answers = []func(http.ResponseWriter){func(w http.ResponseWriter) {
			q := apiv1.Query{RequestID: "req_1", Status: StatusRunning}
			if time.Since(start) >= 95*time.Second {
				q.Status = StatusCompleted
			}
			_ = json.NewEncoder(w).Encode(q)
		}}
		c := bubbleClient(t, rec)
		q, err := c.Wait(context.Background(), "req_1")
		if err != nil || q.Status != StatusCompleted {
			t.Fatalf("Wait = %+v, %v", q, err)
		}
		want := secs(0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 70, 80, 90, 100)
		if got := rec.times(); !slices.Equal(got, want) {
			t.Fatalf("polls at %v, want %v", got, want)
		}
	})
}

func TestWaitReturnsTheFailureTyped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{start: time.Now(), answers: []func(http.ResponseWriter){func(w http.ResponseWriter) {
			_ = json.NewEncoder(w).Encode(apiv1.Query{RequestID: "req_1", Status: StatusFailed, Error: &apiv1.QueryError{Code: CodeCancelled, Message: "cancelled"}})
		}}}
		q, err := bubbleClient(t, rec).Wait(context.Background(), "req_1")
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeCancelled || e.RequestID != "req_1" || q == nil || q.Status != StatusFailed {
			t.Fatalf("Wait = %+v, %v; want the failed query and a cancelled *Error", q, err)
		}
	})
}

func TestPollIntervalNeverBelowOneSecond(t *testing.T) {
	for _, d := range []time.Duration{0, time.Second, 59 * time.Second, time.Minute, time.Hour} {
		if got := PollInterval(d); got < time.Second {
			t.Fatalf("PollInterval(%s) = %s", d, got)
		}
	}
}
