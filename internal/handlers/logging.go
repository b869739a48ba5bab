package handlers

import (
	"context"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/keys"
)

type logKey struct{}

// maxLoggedPath bounds the bytes of a request's path in its log lines and
// in the router's refusals: a client without a key must not write tens of
// kilobytes of log a request.
const maxLoggedPath = 256

// clip is client input as a log line or a message echoes it: at most n
// bytes, cut on a character boundary with "…" when it was cut, and bytes
// that are not UTF-8 shown as "?".
func clip(s string, n int) string {
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

func logger(r *http.Request) *zerolog.Logger {
	if l, ok := r.Context().Value(logKey{}).(*zerolog.Logger); ok {
		return l
	}
	l := zerolog.Nop()
	return &l
}

// accessLog writes one structured line per request: method, path, status,
// duration and the key's public fingerprint. The Authorization header itself
// is never logged; the fingerprint is taken only from a well-formed key.
func accessLog(base zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			l := base.With().Str("method", clip(r.Method, maxLoggedPath)).Str("path", clip(r.URL.Path, maxLoggedPath)).Logger()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), logKey{}, &l)))
			ev := l.Info().Int("status", ww.Status()).Float64("duration_ms", float64(time.Since(start).Microseconds())/1000)
			if k, err := keys.FromBearer(r.Header.Get("Authorization")); err == nil {
				ev = ev.Str("key_fingerprint", k.Fingerprint)
			}
			ev.Msg("request")
		})
	}
}
