package client

import (
	"errors"
	"fmt"
	"time"
)

// Error is a failure the service answered with: the HTTP status and the
// error envelope of the spec. Callers branch on Code with errors.As:
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Code == client.CodeInsufficientCredits { … }
//
// A failed query (an SSE error event, or Wait on a query that ended
// failed) is an *Error too, with the query's error code and its
// RequestID.
type Error struct {
	// Status is the HTTP status; 0 for the error event of a stream.
	Status int
	// Code is the envelope's error.code: the stable value to branch on.
	// An answer without an envelope (a proxy's page) has the code
	// CodeHTTP.
	Code    string
	Message string
	// RequestID is the query the error concerns, when there is one.
	RequestID string
	// Retriable is the envelope's retriable: the same request may succeed
	// later unchanged.
	Retriable bool
	// RetryAfter is the wait the service advised (Retry-After), or 0.
	RetryAfter time.Duration
	// DocsURL is the page that explains the code.
	DocsURL string
}

// Error codes of the spec that callers of this package commonly branch on.
const (
	CodeInvalidRequest      = "invalid_request"
	CodeInvalidMode         = "invalid_mode"
	CodeInvalidAPIKey       = "invalid_api_key"
	CodeNotFound            = "not_found"
	CodeRateLimited         = "rate_limited"
	CodeInsufficientCredits = "insufficient_credits"
	CodeMonthlyCapExceeded  = "monthly_cap_exceeded"
	CodeIdempotencyConflict = "idempotency_conflict"
	CodeServiceRestarting   = "service_restarting"
	CodeProviderError       = "provider_error"
	CodeAggregationFailed   = "aggregation_failed"
	// CodeCancelled is the error code of a query that was cancelled.
	CodeCancelled = "cancelled"
	// CodeQueryEnded answers the cancel of a query that had already ended.
	CodeQueryEnded = "query_ended"
	// CodeQueryCrashed is the error code of a query the service stopped
	// running because its runs kept ending with their process;
	// CodeQueryTimeout of one that ran longer than one query may.
	CodeQueryCrashed = "query_crashed"
	CodeQueryTimeout = "query_timeout"
	// CodeHTTP is the code of an answer that carried no error envelope.
	CodeHTTP = "http_error"
)

func (e *Error) Error() string {
	s := e.Code
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Status != 0 {
		s = fmt.Sprintf("%s (HTTP %d)", s, e.Status)
	}
	return s
}

// HasCode reports whether err is, or wraps, an *Error with the code.
func HasCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}
