// Package handlers is the HTTP layer: decode, call, encode. It holds no
// business rules; those live in the packages it calls.
package handlers

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/apperr"
)

// Status maps an error code to its HTTP status. It is the only place that does.
func Status(code string) int {
	switch code {
	case apperr.InvalidRequest, apperr.InvalidPrompt, apperr.InvalidMode, apperr.InvalidModels, apperr.InvalidModel,
		apperr.InvalidFiles, apperr.FileNotFound, apperr.FileExpired, apperr.InvalidFile, apperr.ConnectionFailed:
		return http.StatusBadRequest
	case apperr.UnsupportedFileType:
		return http.StatusUnsupportedMediaType
	case apperr.FileTooLarge, apperr.RequestTooLarge:
		return http.StatusRequestEntityTooLarge
	case apperr.InsufficientCredits, apperr.MonthlyCapExceeded:
		return http.StatusPaymentRequired
	case apperr.RateLimited:
		return http.StatusTooManyRequests
	case apperr.IdempotencyConflict, apperr.InvalidTransition, apperr.QueryEnded:
		return http.StatusConflict
	case apperr.Cancelled:
		// Only the chat door answers a query's own error as its status: a
		// query its owner cancelled conflicts with the completion, it is no
		// failure of the service.
		return http.StatusConflict
	case apperr.InvalidAPIKey, apperr.KeyRevoked, apperr.InvalidAdminToken:
		return http.StatusUnauthorized
	case apperr.KeySuspended, apperr.KeyDisabled:
		return http.StatusForbidden
	case apperr.NotFound, apperr.ModelNotFound:
		return http.StatusNotFound
	case apperr.MethodNotAllowed:
		return http.StatusMethodNotAllowed
	case apperr.ServiceRestarting:
		return http.StatusServiceUnavailable
	case apperr.ProviderError, apperr.AggregationFailed:
		return http.StatusBadGateway
	case apperr.QueryTimeout:
		// Only the chat door answers a query's own error as its status.
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// ErrorBody is the error envelope of spec 2.6.
type ErrorBody = apiv1.ErrorBody

// ErrorDetail is the inside of the envelope.
type ErrorDetail = apiv1.ErrorDetail

// Envelope builds the envelope of e; requestID is the query it concerns, if any.
func Envelope(e *apperr.Error, requestID, docsBase string) ErrorBody {
	d := ErrorDetail{Code: e.Code, Message: e.Message, Retriable: e.Retriable(), DocsURL: docsBase + "/errors/" + e.Code}
	if requestID == "" {
		requestID = e.RequestID
	}
	if requestID != "" {
		d.RequestID = &requestID
	}
	if ra := e.RetryAfterSeconds(); ra > 0 {
		d.RetryAfterSeconds = &ra
	}
	return ErrorBody{Error: d}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRaw(w http.ResponseWriter, status int, raw []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(raw)
	_, _ = w.Write([]byte("\n"))
}

// writeError writes err as the envelope. Errors that are not application
// errors are logged in detail and answered as a bare internal_error; a
// service_restarting that has a cause (the event store's failure, wrapped
// beside it) is logged with that cause, here and only here.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error, requestID string) {
	e := apperr.From(err)
	s.logAnswered(r, err, e, requestID)
	if ra := e.RetryAfterSeconds(); ra > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(ra))
	}
	writeJSON(w, Status(e.Code), Envelope(e, requestID, s.DocsURL))
}

// logAnswered logs an error that is answered: internal errors in detail,
// and a service_restarting with a cause (the event store's failure,
// wrapped beside it) with that cause; no other.
func (s *Server) logAnswered(r *http.Request, err error, e *apperr.Error, requestID string) {
	var ev *zerolog.Event
	switch {
	case e.Code == apperr.Internal:
		ev = logger(r).Error()
	case e.Code == apperr.ServiceRestarting && err != error(e):
		ev = logger(r).Warn()
	}
	if ev != nil {
		if id := cmp.Or(requestID, e.RequestID, chi.URLParam(r, "id")); id != "" {
			ev = ev.Str("request_id", id)
		}
		ev.Err(err).Msg("answered " + e.Code)
	}
}
