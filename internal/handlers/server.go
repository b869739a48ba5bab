package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/netlimit"
)

// NewServer returns the http.Server that serves h within limits, and the
// listener to serve it on: ln bounded to limits.MaxConns open connections
// in all and limits.MaxConnsPerAddr from one client address. A connection
// over a bound is answered with the error envelope (rate_limited for one
// address, service_restarting for the process) and closed; the protocol
// errors that Go's server answers itself (a malformed request line or
// header, headers over limits.MaxHeaderBytes, an unknown HTTP version) are
// answered with the envelope too, code invalid_request, under Go's status.
// Every request's context derives from ctx. docsURL is the base of the
// envelopes' docs_url. When a connection arrives while the server holds
// netlimit.CrowdedPercent of limits.MaxConns, keep-alive connections
// waiting for their next request (and connections that have not sent a
// whole first request within firstRequestGrace) are closed to come back
// under that mark, so that idle connections cannot keep new clients out for
// the idle timeout.
func NewServer(ln net.Listener, h http.Handler, limits config.HTTPLimits, docsURL string, ctx context.Context) (*http.Server, net.Listener) {
	waiting := &waitingConns{}
	srv := &http.Server{
		ConnState:         waiting.track,
		Handler:           h,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		MaxHeaderBytes:    limits.MaxHeaderBytes,
		ReadHeaderTimeout: limits.ReadHeaderTimeout,
		ReadTimeout:       limits.ReadTimeout,
		WriteTimeout:      limits.WriteTimeout,
		IdleTimeout:       limits.IdleTimeout,
	}
	bounded := &netlimit.Listener{Listener: ln, MaxConns: limits.MaxConns, MaxPerAddr: limits.MaxConnsPerAddr, Crowded: waiting.close, Refusal: func(r netlimit.Reason) []byte {
		if r == netlimit.TooManyFromAddr {
			return rawError(&apperr.Error{Code: apperr.RateLimited, RetryAfter: 1,
				Message: fmt.Sprintf("too many open connections from your address (at most %d); close idle ones or retry", limits.MaxConnsPerAddr)}, docsURL)
		}
		return rawError(&apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: 1,
			Message: fmt.Sprintf("this server holds its maximum of %d open connections; retry shortly", limits.MaxConns)}, docsURL)
	}}
	return srv, &envelopeListener{Listener: bounded, docsURL: docsURL}
}

// firstRequestGrace is how long a new connection may take to send its
// first request's headers before a crowded server may close it (the read
// header timeout bounds it otherwise).
const firstRequestGrace = time.Second

// waitingConns tracks the connections of a server that wait for a request:
// idle keep-alive connections, and new ones that have sent no whole
// request yet.
type waitingConns struct {
	mu    sync.Mutex
	idle  map[net.Conn]struct{}
	fresh map[net.Conn]time.Time
}

// track is the server's ConnState hook.
func (wc *waitingConns) track(c net.Conn, st http.ConnState) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if wc.idle == nil {
		wc.idle, wc.fresh = map[net.Conn]struct{}{}, map[net.Conn]time.Time{}
	}
	delete(wc.idle, c)
	delete(wc.fresh, c)
	switch st {
	case http.StateNew:
		wc.fresh[c] = time.Now()
	case http.StateIdle:
		wc.idle[c] = struct{}{}
	}
}

// close closes up to n waiting connections: idle ones first, then new ones
// older than firstRequestGrace. A closed connection's slot is free on
// return. A client whose idle connection is closed reconnects; HTTP
// clients retry an idempotent request (or one with an Idempotency-Key)
// that met a connection the server had closed.
func (wc *waitingConns) close(n int) {
	var closing []net.Conn
	wc.mu.Lock()
	for c := range wc.idle {
		if len(closing) == n {
			break
		}
		closing = append(closing, c)
		delete(wc.idle, c)
	}
	old := time.Now().Add(-firstRequestGrace)
	for c, since := range wc.fresh {
		if len(closing) == n {
			break
		}
		if since.Before(old) {
			closing = append(closing, c)
			delete(wc.fresh, c)
		}
	}
	wc.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
	if len(closing) > 0 {
		crowdedClosed.Add(float64(len(closing)))
	}
}

// rawError is a whole HTTP/1.1 response carrying e's envelope, closing the
// connection: what a connection gets when no handler runs for it.
func rawError(e *apperr.Error, docsURL string) []byte {
	return rawResponse(Status(e.Code), http.StatusText(Status(e.Code)), e, docsURL)
}

func rawResponse(status int, reason string, e *apperr.Error, docsURL string) []byte {
	body, _ := json.Marshal(Envelope(e, "", docsURL))
	body = append(body, '\n')
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n", status, reason, len(body))
	if ra := e.RetryAfterSeconds(); ra > 0 {
		b.WriteString("Retry-After: " + strconv.Itoa(ra) + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// envelopeListener hands out connections that turn the plain-text answers
// of Go's server to requests it cannot parse into the error envelope.
type envelopeListener struct {
	net.Listener
	docsURL string
}

func (l *envelopeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &envelopeConn{Conn: c, docsURL: l.docsURL}, nil
}

// protocolErrorHeaders follow the status line of every answer that Go's
// server writes itself, before any handler runs, and of no answer that goes
// through a handler (those carry Date first, and a handler's own headers in
// sorted order, where Connection comes before Content-Type).
const protocolErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

type envelopeConn struct {
	net.Conn
	docsURL string
}

// Write passes p on, unless p is a protocol error answer of Go's server:
// that is written as the same status with the envelope as its body.
func (c *envelopeConn) Write(p []byte) (int, error) {
	if out, ok := c.rewrite(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *envelopeConn) rewrite(p []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 "
	if !bytes.HasPrefix(p, []byte(proto)) {
		return nil, false
	}
	line, rest, ok := bytes.Cut(p, []byte("\r\n"))
	if !ok || !bytes.HasPrefix(rest, []byte(protocolErrorHeaders[2:])) || len(line) < len(proto)+3 {
		return nil, false
	}
	status, err := strconv.Atoi(string(line[len(proto) : len(proto)+3]))
	if err != nil || status < 400 {
		return nil, false
	}
	text := string(rest[len(protocolErrorHeaders)-2:])
	// Go's text says little more than the status ("400 Bad Request"), so
	// the message lists what it refuses.
	msg := "the request is not valid HTTP/1.1 (" + strings.TrimSpace(text) + "): check the request line (method, path and its % escapes, version), the Host header, a single Content-Length, and header names and values without control characters"
	if status == http.StatusRequestHeaderFieldsTooLarge {
		msg = "the request's header lines are larger than this server accepts"
	}
	return rawResponse(status, http.StatusText(status), apperr.New(apperr.InvalidRequest, "%s", msg), c.docsURL), true
}

// CloseWrite half-closes the connection where the underlying one can, so
// the server's last answer reaches a client that is still sending.
func (c *envelopeConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// longLived serves a response that streams for as long as the client
// follows it: a request without a body has no read deadline (a client that
// goes is still noticed, and ends the request's context), and every write
// moves the write deadline to window from then, so a stream lives on its
// heartbeats while a client that stops reading is cut off within window.
func longLived(window func() time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			if r.ContentLength == 0 {
				_ = rc.SetReadDeadline(time.Time{})
			}
			dw := &deadlineWriter{ResponseWriter: w, rc: rc, window: window()}
			dw.extend()
			next.ServeHTTP(dw, r)
		})
	}
}

// deadlineWriter moves the connection's write deadline before each write.
type deadlineWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController
	window time.Duration
}

func (d *deadlineWriter) extend() { _ = d.rc.SetWriteDeadline(time.Now().Add(d.window)) }

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.extend()
	return d.ResponseWriter.Write(p)
}

func (d *deadlineWriter) WriteHeader(status int) {
	d.extend()
	d.ResponseWriter.WriteHeader(status)
}

// Flush sends what is buffered, within the write deadline.
func (d *deadlineWriter) Flush() {
	d.extend()
	_ = d.rc.Flush()
}

// Unwrap returns the underlying writer, for http.ResponseController.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// streamBounds are the bounds of the event streams and chat completions.
func (s *Server) streamBounds() slotBounds {
	return slotBounds{max: s.MaxStreams, perKey: s.MaxStreamsPerKey, perAccount: s.MaxStreamsPerAccount}
}

// streamWindow is how long an event stream may go without a write getting
// through: two heartbeats and some slack.
func (s *Server) streamWindow() time.Duration { return 2*s.heartbeat() + 10*time.Second }

// closeUnread marks the answer to r as the connection's last when r has a
// body that was not read, and ends the reading of that body: the answer goes
// out at once and the connection closes after it, instead of after the
// server has waited (up to the read timeout) to read and discard the body of
// a request it refused.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// keySlots counts what a process holds open of one kind (event streams,
// uploads in progress), in all, per API key and per account.
type keySlots struct {
	// what names the kind in refusals; hint says what the client can do.
	what, hint string

	mu         sync.Mutex
	total      int
	perKey     map[string]int
	perAccount map[string]int
}

// slotBounds are the bounds of one kind of slot: in the process, per API
// key and per account (the sum over its keys). A bound of zero is no bound.
type slotBounds struct {
	max, perKey, perAccount int
}

// acquire takes a slot for c, or returns the refusal: rate_limited when
// c's key holds b.perKey slots or its account b.perAccount,
// service_restarting when the process holds b.max. A taken slot is given
// back by release.
func (sl *keySlots) acquire(c accounts.Caller, b slotBounds) *apperr.Error {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if b.perKey > 0 && sl.perKey[c.Fingerprint] >= b.perKey {
		return &apperr.Error{Code: apperr.RateLimited, RetryAfter: 5,
			Message: fmt.Sprintf("this API key holds its maximum of %d %s; %s", b.perKey, sl.what, sl.hint)}
	}
	if b.perAccount > 0 && sl.perAccount[c.AccountID] >= b.perAccount {
		return &apperr.Error{Code: apperr.RateLimited, RetryAfter: 5,
			Message: fmt.Sprintf("the API keys of this account hold its maximum of %d %s on this server; %s", b.perAccount, sl.what, sl.hint)}
	}
	if b.max > 0 && sl.total >= b.max {
		return &apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: 1,
			Message: fmt.Sprintf("this server holds its maximum of %d %s; retry shortly", b.max, sl.what)}
	}
	if sl.perKey == nil {
		sl.perKey, sl.perAccount = map[string]int{}, map[string]int{}
	}
	sl.total++
	sl.perKey[c.Fingerprint]++
	sl.perAccount[c.AccountID]++
	return nil
}

// take is acquire returning the function that gives the slot back, which
// may be called more than once.
func (sl *keySlots) take(c accounts.Caller, b slotBounds) (release func(), refused *apperr.Error) {
	if e := sl.acquire(c, b); e != nil {
		return nil, e
	}
	var once sync.Once
	return func() { once.Do(func() { sl.release(c) }) }, nil
}

func (sl *keySlots) release(c accounts.Caller) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.total--
	if sl.perKey[c.Fingerprint]--; sl.perKey[c.Fingerprint] <= 0 {
		delete(sl.perKey, c.Fingerprint)
	}
	if sl.perAccount[c.AccountID]--; sl.perAccount[c.AccountID] <= 0 {
		delete(sl.perAccount, c.AccountID)
	}
}

// boundStreams holds each event stream to the process's bounds, before the
// stream sends anything: at most MaxStreamsPerKey open streams per API key
// and MaxStreamsPerAccount per account, refused with 429 rate_limited, and
// at most MaxStreams in all, refused with 503 service_restarting. Each open
// stream holds one of the event stream's consumers on the NATS server,
// which are shared by every process and tenant.
func (s *Server) boundStreams(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := caller(r)
		if e := s.streams.acquire(c, s.streamBounds()); e != nil {
			s.writeError(w, r, e, "")
			return
		}
		defer s.streams.release(c)
		defer streamOpened()()
		next.ServeHTTP(w, r)
	})
}
