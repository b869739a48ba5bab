package providers

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"ms wins", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {now.Add(30 * time.Second).Format(http.TimeFormat)}}, 30 * time.Second},
		{"http date 90 s away", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"http date passed", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"not a wait", http.Header{"Retry-After": {"soon"}}, 0},
		{"none", http.Header{}, 0},
		{"zero", http.Header{"Retry-After": {"0"}}, 0},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0},
		{"NaN", http.Header{"Retry-After": {"NaN"}}, 0},
		{"invalid ms falls back to seconds", http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"3"}}, 3 * time.Second},
		{"at the cap", http.Header{"Retry-After": {strconv.Itoa(int(MaxRetryAfter / time.Second))}}, MaxRetryAfter},
		{"a day is capped", http.Header{"Retry-After": {"86400"}}, MaxRetryAfter},
		{"past a Duration is capped", http.Header{"Retry-After": {"1e30"}}, MaxRetryAfter},
		{"infinity is capped", http.Header{"Retry-After": {"+Inf"}}, MaxRetryAfter},
		{"ms past the cap", http.Header{"Retry-After-Ms": {"999999999999999"}}, MaxRetryAfter},
		{"a date next year is capped", http.Header{"Retry-After": {now.AddDate(1, 0, 0).Format(http.TimeFormat)}}, MaxRetryAfter},
	} {
		if got := RetryAfter(c.h, now); got != c.want {
			t.Errorf("%s: RetryAfter(%v) = %s, want %s", c.name, c.h, got, c.want)
		}
	}
	if got := RetryAfterSeconds(math.MaxFloat64); got != MaxRetryAfter {
		t.Errorf("RetryAfterSeconds(MaxFloat64) = %s, want %s", got, MaxRetryAfter)
	}
}
