package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
)

type logKey struct{}

// maxLoggedPath bounds the bytes of a request's path in its log lines and
// in the router's refusals: a client without a key must not write tens of
// kilobytes of log a request.
const maxLoggedPath = 256

// clip is client input as a log line or a message echoes it: at most n
// bytes, with what does not print escaped (apperr.Echo).
func clip(s string, n int) string { return apperr.Echo(s, n) }

func logger(r *http.Request) *zerolog.Logger {
	if l, ok := r.Context().Value(logKey{}).(*zerolog.Logger); ok {
		return l
	}
	l := zerolog.Nop()
	return &l
}

// accessLog writes one structured line per request: method, path, status,
// duration and, when a key authenticated the request, the key's public
// fingerprint. The Authorization header itself is never logged, nor the
// fingerprint of a key that did not verify: a refused guess logged with a
// real fingerprint would tell the log's readers which fingerprints exist.
func accessLog(base zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			l := base.With().Str("method", clip(r.Method, maxLoggedPath)).Str("path", clip(r.URL.Path, maxLoggedPath)).Logger()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			var fingerprint string
			ctx := context.WithValue(context.WithValue(r.Context(), logKey{}, &l), authenticatedKey{}, &fingerprint)
			next.ServeHTTP(ww, r.WithContext(ctx))
			ev := l.Info().Int("status", ww.Status()).Float64("duration_ms", float64(time.Since(start).Microseconds())/1000)
			if fingerprint != "" {
				ev = ev.Str("key_fingerprint", fingerprint)
			}
			ev.Msg("request")
		})
	}
}

type authenticatedKey struct{}

// authenticated records, for r's access log line, the fingerprint of the
// key that authenticated r.
func authenticated(r *http.Request, c accounts.Caller) {
	if p, ok := r.Context().Value(authenticatedKey{}).(*string); ok {
		*p = c.Fingerprint
	}
}
