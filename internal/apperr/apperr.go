// Package apperr holds the one application error type of crosscheck. Its Code is
// the stable error.code of the API contract; clients branch on it. The mapping of
// codes to HTTP statuses lives in the handlers package, in one function.
package apperr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The stable error codes of the API contract (spec section 7) and the ones this
// service adds where the spec is silent.
const (
	InvalidRequest      = "invalid_request"
	InvalidPrompt       = "invalid_prompt"
	InvalidMode         = "invalid_mode"
	InvalidModels       = "invalid_models"
	InvalidModel        = "invalid_model"
	InsufficientCredits = "insufficient_credits"
	MonthlyCapExceeded  = "monthly_cap_exceeded"
	RateLimited         = "rate_limited"
	IdempotencyConflict = "idempotency_conflict"
	InvalidAPIKey       = "invalid_api_key"
	KeyRevoked          = "key_revoked"
	KeySuspended        = "key_suspended"
	KeyDisabled         = "key_disabled"
	ServiceRestarting   = "service_restarting"
	ProviderError       = "provider_error"
	AggregationFailed   = "aggregation_failed"
	NotFound            = "not_found"
	MethodNotAllowed    = "method_not_allowed"
	Internal            = "internal_error"

	// Codes of the files a query attaches (400): the list itself is not
	// acceptable (not an array of file ids, more than 5, repeats, over 20 MB
	// combined), a file is unknown or another account's, a file has expired
	// (also the answer to a read of an expired file).
	InvalidFiles = "invalid_files"
	FileNotFound = "file_not_found"
	FileExpired  = "file_expired"

	// Codes of an upload: a type the service does not take (415), a file
	// over its kind's limit (413), a file that is empty, does not match its
	// extension or cannot be read (400).
	UnsupportedFileType = "unsupported_file_type"
	FileTooLarge        = "file_too_large"
	InvalidFile         = "invalid_file"

	// QueryEnded (409) answers a cancel of a query that has ended.
	// Cancelled is the error code of a query that ended because its owner
	// cancelled it (its status is failed); it is never an HTTP answer.
	QueryEnded = "query_ended"
	Cancelled  = "cancelled"

	// ModelNotFound (404) answers a chat completion whose model is not one
	// of the chat door's models (svc-unify, svc-justify, svc-verify), with
	// the code OpenAI's clients know.
	ModelNotFound = "model_not_found"

	// RequestTooLarge (413) answers an admin API request whose body is over
	// its bound.
	RequestTooLarge = "request_too_large"

	// Admin API codes.
	InvalidAdminToken = "invalid_admin_token"
	InvalidTransition = "invalid_transition"
	// ConnectionFailed: the connection test of a customer-owned model failed.
	ConnectionFailed = "connection_failed"

	// Error codes of a query the service stopped running, never an HTTP
	// answer but on the chat door (which answers its query's error):
	// QueryCrashed, a query whose runs ended with their worker too many
	// times in a row (its process died running it); QueryTimeout, a query
	// that ran longer than one query may.
	QueryCrashed = "query_crashed"
	QueryTimeout = "query_timeout"
)

// Error is an application error with a stable code and a human message.
type Error struct {
	Code    string
	Message string
	// RetryAfter is the number of seconds a client should wait before retrying;
	// zero means no advice.
	RetryAfter int
	// RequestID names the query the error concerns, if any.
	RequestID string
	// Param names the request parameter at fault, if any (the chat
	// completions door reports it as OpenAI's error.param).
	Param string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Retriable reports whether a client may retry the same request unchanged.
func (e *Error) Retriable() bool {
	switch e.Code {
	case RateLimited, ServiceRestarting, ProviderError, AggregationFailed, Internal:
		return true
	}
	return false
}

// RetryAfterSeconds is the wait to advise: RetryAfter, or one second for a
// service that is restarting.
func (e *Error) RetryAfterSeconds() int {
	if e.RetryAfter == 0 && e.Code == ServiceRestarting {
		return 1
	}
	return e.RetryAfter
}

// New returns an *Error with the code and a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Code returns the code of the *Error in err's chain, or Internal when there is none.
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// From returns the *Error in err's chain, or an internal error that hides err's text.
func From(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: Internal, Message: "internal error"}
}

// Echo is client input as a message or a log line may echo it: at most n
// bytes, cut on a character boundary with "…" when it was cut, bytes that
// are not UTF-8 shown as "?", and every character that is not printable
// (control characters such as a line break or the escape that starts
// terminal sequences, bidirectional and zero-width characters) shown as
// its Go escape (\n, \x1b, \u202e), so that what is echoed shows as what
// it is.
func Echo(s string, n int) string {
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	s = strings.ToValidUTF8(s, "?")
	if !strings.ContainsFunc(s, unprintable) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unprintable(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unprintable(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }
