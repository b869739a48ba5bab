// Package openaitest writes OpenAI's wire format for fake upstreams: the
// Responses API and every Chat Completions host answer errors the same way.
package openaitest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// WriteJSON writes v as a JSON answer.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes OpenAI's error body with its usual type and code, and a
// retry-after header (retry-after-ms when retryAfter is not whole seconds).
func WriteError(w http.ResponseWriter, status int, message string, retryAfter time.Duration) {
	typ, code := "invalid_request_error", any(nil)
	switch {
	case status == 429:
		typ, code = "requests", "rate_limit_exceeded"
	case status == 401:
		code = "invalid_api_key"
	case status >= 500:
		typ = "server_error"
	}
	if retryAfter > 0 {
		if retryAfter%time.Second == 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
		} else {
			w.Header().Set("Retry-After-Ms", strconv.Itoa(int(retryAfter/time.Millisecond)))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
}
