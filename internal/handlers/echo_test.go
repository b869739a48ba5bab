package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/keys"
)

// messageOf returns the error message of an envelope.
func messageOf(t *testing.T, body []byte) string {
	t.Helper()
	var env struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("not an envelope: %s", body)
	}
	return env.Error.Message
}

// TestEchoesAreClippedAndEscaped: what a refusal echoes of the client's
// input is short and shows control characters escaped, so a message shown
// in a terminal or a log is what it says: the chat door's unknown model
// (a newline and an escape sequence were echoed raw), the error doc of an
// unknown code and the admin API's unknown route (both echoed input
// unbounded).
func TestEchoesAreClippedAndEscaped(t *testing.T) {
	base := doors(t, &Server{})
	admin := httptest.NewServer((&Admin{Log: zerolog.Nop(), Token: strings.Repeat("0123456789abcdef", 2)}).Handler())
	t.Cleanup(admin.Close)
	long := strings.Repeat("x", 5000)
	chat := `{"model":"evil\n\u001b[31mred` + long + `","messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		name, method, url, body string
		status                  int
	}{
		{"chat model", "POST", base + "/v1/chat/completions", chat, 404},
		{"model", "GET", base + "/v1/models/evil%0A%1B%5B31mred" + long, "", 404},
		{"error doc", "GET", base + "/docs/errors/" + long + "%0A%1B", "", 404},
		{"admin route", "GET", admin.URL + "/admin/v2/" + long + "%0A%1B", "", 404},
	} {
		req, _ := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer acctA/k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		msg := messageOf(t, b.Bytes())
		if resp.StatusCode != c.status || len(msg) > 400 || strings.ContainsAny(msg, "\n\x1b") {
			t.Errorf("%s: %d, message of %d bytes %.200q", c.name, resp.StatusCode, len(msg), msg)
		}
	}
}

// TestAdminBodyTooLarge: an admin request body over its 64 KiB bound is
// 413 with the envelope saying so; it was answered "unexpected EOF".
func TestAdminBodyTooLarge(t *testing.T) {
	token := strings.Repeat("0123456789abcdef", 2)
	admin := httptest.NewServer((&Admin{Log: zerolog.Nop(), Token: token}).Handler())
	t.Cleanup(admin.Close)
	body := `{"name":"` + strings.Repeat("n", 70<<10) + `","plan":"free"}`
	req, _ := http.NewRequest("POST", admin.URL+"/admin/v1/accounts", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != 413 || envelopeCodeOf(b.Bytes()) != apperr.RequestTooLarge || !strings.Contains(messageOf(t, b.Bytes()), "64 KiB") {
		t.Fatalf("a 70 KiB admin body: %d %s", resp.StatusCode, b.Bytes())
	}
}

// keyOf is a well-formed API key of fingerprint fp that verifies against
// nothing.
func keyOf(fp string) string { return "xchk_" + fp + strings.Repeat("A", 32) }

// realKeys authenticates one key: any other well-formed key is refused.
type realKeys struct{ key string }

func (k realKeys) Authenticate(_ context.Context, header string) (accounts.Caller, error) {
	if header != "Bearer "+k.key {
		return accounts.Caller{}, apperr.New(apperr.InvalidAPIKey, "the API key does not verify")
	}
	parsed, _ := keys.FromBearer(header)
	return accounts.Caller{AccountID: "acct_a", Fingerprint: parsed.Fingerprint}, nil
}

// TestAccessLogNamesOnlyAuthenticatedKeys: the access log names a key's
// fingerprint only when the key verified; a 401 for a real fingerprint with
// a guessed secret told the log's readers which fingerprints exist, and
// tied the guesses to them.
func TestAccessLogNamesOnlyAuthenticatedKeys(t *testing.T) {
	good := keyOf("goodgood")
	var logs bytes.Buffer
	s := &Server{Queries: fakeQueries{}, Events: silentEvents{}, Files: drainingFiles{}, Log: zerolog.New(&logs)}
	s.Auth = realKeys{good}
	h := s.Handler()
	for _, key := range []string{keyOf("realreal"), good} {
		req := httptest.NewRequest("GET", "/v1/queries/req_01M80000000000000000000001", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "realreal") || !strings.Contains(lines[0], `"status":401`) || !strings.Contains(lines[1], `"key_fingerprint":"goodgood"`) {
		t.Fatalf("access log:\n%s", logs.String())
	}
}

// TestCallerTraceOnlyLinked: a caller's traceparent neither chooses the
// trace id of its requests nor, with flags 00, keeps them out of the
// traces: the request's span starts a trace of its own, sampled by the
// service, linked to the caller's. An operator who trusts its callers
// (TrustCallerTrace) continues their traces.
func TestCallerTraceOnlyLinked(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prev); otel.SetTextMapPropagator(prevProp) })
	const callerTrace = "0af7651916cd43dd8448eb211c80319c"
	for _, trust := range []bool{false, true} {
		rec.Reset()
		s := &Server{TrustCallerTrace: trust}
		doorsURL := doors(t, s)
		req, _ := http.NewRequest("GET", doorsURL+"/healthz", nil)
		// An untrusted caller asks for its requests not to be traced (flags
		// 00); a trusted one's sampled trace is continued.
		flags := map[bool]string{false: "00", true: "01"}[trust]
		req.Header.Set("traceparent", "00-"+callerTrace+"-b7ad6b7169203331-"+flags)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		spans := rec.Ended()
		if len(spans) != 1 {
			t.Fatalf("trust %v: %d spans recorded; want the request's", trust, len(spans))
		}
		sp := spans[0]
		linked := len(sp.Links()) == 1 && sp.Links()[0].SpanContext.TraceID().String() == callerTrace
		switch {
		case !trust && (sp.SpanContext().TraceID().String() == callerTrace || !linked):
			t.Errorf("untrusted caller: trace %s, links %v; want a trace of its own linked to the caller's", sp.SpanContext().TraceID(), sp.Links())
		case trust && sp.SpanContext().TraceID().String() != callerTrace:
			t.Errorf("trusted caller: trace %s; want the caller's", sp.SpanContext().TraceID())
		}
	}
}
