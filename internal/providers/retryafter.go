package providers

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter is the longest wait an upstream can ask for before a failed
// call is tried again. A job keeps its slot while it waits, so a longer
// retry-after (an upstream's mistake, or a limit reset hours away) is cut to
// this, and the call is given up after its last retry as usual.
const MaxRetryAfter = 2 * time.Minute

// RetryAfter reads the wait an upstream asks for in its response headers:
// retry-after-ms (milliseconds), else retry-after in seconds or as an HTTP
// date. It is zero when neither is set, or set to a wait that is not
// positive or not a number, and at most MaxRetryAfter. Every backend that sees
// the response headers reads them with it.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return RetryAfterSeconds(ms / 1000)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return RetryAfterSeconds(s)
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return RetryAfterSeconds(t.Sub(now).Seconds())
	}
	return 0
}

// RetryAfterSeconds is an upstream's wait of secs seconds as a duration: zero
// when secs is not positive or not a number, at most MaxRetryAfter. A backend
// that reads the wait from elsewhere than the headers (Gemini's RetryInfo)
// converts it with this.
func RetryAfterSeconds(secs float64) time.Duration {
	switch {
	case !(secs > 0): // also NaN
		return 0
	case secs >= MaxRetryAfter.Seconds():
		return MaxRetryAfter
	}
	return time.Duration(secs * float64(time.Second))
}
