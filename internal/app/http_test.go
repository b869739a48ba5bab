package app

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/handlers"
)

// rawConn opens a TCP connection to base (http://host:port).
func rawConn(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readAnswer reads one HTTP response from c, waiting at most within (a
// deadline for a test that must end, not a measurement), and returns it
// with its body; the error reports a connection closed or held without one.
func readAnswer(c net.Conn, within time.Duration) (*http.Response, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// envelopeCode returns error.code of an envelope body, or "" when the body
// is not the envelope.
func envelopeCode(body []byte) string {
	var v struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	return v.Error.Code
}

// TestHeaderFloodRefused: header lines that never end are refused with 431
// and the envelope once they pass the header limit (a few tens of KiB),
// instead of being buffered up to 1 MB per connection.
func TestHeaderFloodRefused(t *testing.T) {
	h := newHarness(t)
	c := rawConn(t, h.m.URL())
	go func() {
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for range 200 { // 200 KB, without the closing blank line
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	}()
	resp, body, err := readAnswer(c, 20*time.Second)
	if err != nil {
		t.Fatalf("no answer to 200 KB of unfinished headers: %v", err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || envelopeCode(body) != "invalid_request" {
		t.Fatalf("got %d %s; want 431 with the invalid_request envelope", resp.StatusCode, body)
	}
}

// TestConnectionsPerAddrBounded: one address cannot hold more connections
// than CROSSCHECK_HTTP_MAX_CONNS_PER_ADDR; the others are refused with the
// envelope at once, and the slots come back when the connections close.
func TestConnectionsPerAddrBounded(t *testing.T) {
	const limit, opened = 20, 60
	h := newHarness(t, withConfig(func(c *config.Config) { c.HTTP.MaxConnsPerAddr = limit }))
	var conns []net.Conn
	for range opened {
		c := rawConn(t, h.m.URL())
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Unfinished: ") // never finished
		conns = append(conns, c)
	}
	refused := 0
	for _, c := range conns {
		resp, body, err := readAnswer(c, 200*time.Millisecond)
		if err == nil {
			if resp.StatusCode != http.StatusTooManyRequests || envelopeCode(body) != "rate_limited" {
				t.Fatalf("a connection over the bound: %d %s; want 429 rate_limited", resp.StatusCode, body)
			}
			refused++
		}
	}
	if refused != opened-limit {
		t.Fatalf("%d of %d connections refused; want %d (the bound is %d)", refused, opened, opened-limit, limit)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	eventually(t, 20*time.Second, "a new connection once the held ones closed", func() bool {
		resp, err := http.Get(h.m.URL() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestIncompleteBodiesAnswered: a body shorter than its Content-Length, or
// a chunked body without its last chunk, is answered once the read timeout
// passes, not held for ever.
func TestIncompleteBodiesAnswered(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) { c.HTTP.ReadTimeout = 500 * time.Millisecond }))
	key := h.newKey()
	for name, req := range map[string]string{
		"short":   "POST /v1/queries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"mode\":",
		"chunked": "POST /v1/queries HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{\"mode\":\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := rawConn(t, h.m.URL())
			_, _ = io.WriteString(c, req)
			resp, body, err := readAnswer(c, 20*time.Second)
			if err != nil {
				t.Fatalf("an incomplete body was not answered: %v", err)
			}
			if resp.StatusCode != 400 || envelopeCode(body) != "invalid_request" {
				t.Fatalf("got %d %s; want 400 invalid_request", resp.StatusCode, body)
			}
		})
	}
}

// TestRefusedBeforeBody: a request without a valid key is answered at once,
// before its body arrives, even with a long read timeout.
func TestRefusedBeforeBody(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) { c.HTTP.ReadTimeout = time.Hour }))
	c := rawConn(t, h.m.URL())
	_, _ = io.WriteString(c, "POST /v1/queries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"mode\":")
	resp, body, err := readAnswer(c, 20*time.Second)
	if err != nil {
		t.Fatalf("a request without a key was not answered before its body: %v", err)
	}
	if resp.StatusCode != 401 || envelopeCode(body) != "invalid_api_key" {
		t.Fatalf("got %d %s; want 401 invalid_api_key", resp.StatusCode, body)
	}
}

// TestIdleConnectionClosed: a keep-alive connection that sends no next
// request is closed after the idle timeout.
func TestIdleConnectionClosed(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) { c.HTTP.IdleTimeout = 300 * time.Millisecond }))
	c := rawConn(t, h.m.URL())
	_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the idle connection was not closed by the server: %v", err)
	}
}

// TestStreamOutlivesDeadlines: an event stream lives on its heartbeats well
// past the read and write timeouts of ordinary requests, and delivers its
// result.
func TestStreamOutlivesDeadlines(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) {
		c.HTTP.ReadTimeout, c.HTTP.WriteTimeout = 2*time.Second, 2*time.Second
		c.SSEHeartbeat = 100 * time.Millisecond
		c.SimLatency = 5 * time.Second
	}))
	key := h.newKey()
	id := h.submitOK(key, "a stream that outlives the deadlines")
	resp := h.openStream(key, id, nil)
	defer resp.Body.Close()
	evs, comments := readStream(t, resp.Body)
	if len(evs) == 0 || evs[len(evs)-1].name != "result" {
		t.Fatalf("the stream ended without its result: %v", evs)
	}
	if len(comments) < 2 {
		t.Fatalf("want heartbeats on the stream, got %v", comments)
	}
}

// TestProtocolErrorsEnveloped: requests that Go's server refuses before any
// handler runs are answered with the error envelope under Go's status.
func TestProtocolErrorsEnveloped(t *testing.T) {
	h := newHarness(t)
	for name, c := range map[string]struct {
		req    string
		status int
	}{
		"duplicate Content-Length": {"POST /v1/queries HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", 400},
		"control character":        {"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n", 400},
		"unknown version":          {"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 505},
		"no Host":                  {"GET /healthz HTTP/1.1\r\n\r\n", 400},
	} {
		t.Run(name, func(t *testing.T) {
			conn := rawConn(t, h.m.URL())
			_, _ = io.WriteString(conn, c.req)
			resp, body, err := readAnswer(conn, 20*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" || envelopeCode(body) != "invalid_request" {
				t.Fatalf("got %d %q %s; want %d with the invalid_request envelope", resp.StatusCode, resp.Header.Get("Content-Type"), body, c.status)
			}
			// The message says what to check, not only Go's status text.
			if !strings.Contains(string(body), "check the request line") {
				t.Errorf("message says nothing to do: %s", body)
			}
		})
	}
}

// TestPromptNotUTF8: a prompt that is not valid UTF-8 is refused with
// invalid_prompt and a message that says so, never changed to U+FFFD.
func TestPromptNotUTF8(t *testing.T) {
	h := newHarness(t)
	key := h.newKey()
	for name, prompt := range map[string]string{
		"one bad byte":     "caf\xe9 au lait",
		"32 KB of 0xff":    strings.Repeat("\xff", 32768),
		"truncated rune":   "abc\xe2\x82",
		"surrogate half":   "\xed\xa0\x80",
		"overlong slash":   "\xc0\xaf",
		"valid after junk": "\xffabc",
	} {
		t.Run(name, func(t *testing.T) {
			r := h.submit(key, []byte(`{"mode":"unify","prompt":"`+prompt+`"}`))
			if r.status != 400 || r.errCode(t) != "invalid_prompt" {
				t.Fatalf("got %d %s; want 400 invalid_prompt", r.status, r.body)
			}
			msg := jsonPath(r.json(t), "error", "message").(string)
			if !strings.Contains(msg, "UTF-8") || strings.Contains(msg, "98304") {
				t.Fatalf("message %q should say the prompt is not UTF-8", msg)
			}
		})
	}
	r := h.api("POST", "/v1/estimate-cost", key, []byte("{\"mode\":\"unify\",\"prompt\":\"caf\xe9\"}"))
	if r.status != 400 || r.errCode(t) != "invalid_prompt" {
		t.Fatalf("estimate: got %d %s; want 400 invalid_prompt", r.status, r.body)
	}
}

// TestNamesBounded: account and key names are bounded and hold no control
// characters (a terminal escape, a line break).
func TestNamesBounded(t *testing.T) {
	h := newHarness(t)
	acc := h.account()
	for name, bad := range map[string]string{
		"60 KB":       strings.Repeat("n", 60<<10),
		"ANSI escape": "evil\x1b[31mred",
		"line break":  "two\nlines",
		"bidi":        "abc\u202edcba",
		"101 chars":   strings.Repeat("é", 101),
	} {
		t.Run(name, func(t *testing.T) {
			for _, path := range []string{"/admin/v1/accounts", "/admin/v1/accounts/" + acc + "/keys"} {
				r := h.admin("POST", path, map[string]any{"name": bad, "plan": "free", "accept_aup": true})
				if path == "/admin/v1/accounts" {
					r = h.admin("POST", path, map[string]any{"name": bad, "plan": "free"})
				}
				if r.status != 400 || r.errCode(t) != "invalid_request" {
					t.Fatalf("POST %s with name %.40q: got %d %s; want 400 invalid_request", path, bad, r.status, r.body)
				}
			}
		})
	}
	if r := h.admin("POST", "/admin/v1/accounts", map[string]any{"name": strings.Repeat("é", 100) + " ✓", "plan": "free"}); r.status != 400 {
		t.Fatalf("102 characters: got %d; want 400", r.status)
	}
	if r := h.admin("POST", "/admin/v1/accounts", map[string]any{"name": "Zoë's team ✓", "plan": "free"}); r.status != 201 {
		t.Fatalf("a printable name: got %d %s; want 201", r.status, r.body)
	}
}

// TestUnknownErrorDoc: /docs/errors/<unknown> answers as the OpenAPI
// document says (h.api checks the exchange against it).
func TestUnknownErrorDoc(t *testing.T) {
	h := newHarness(t)
	r := h.api("GET", "/docs/errors/no_such_code", "", nil)
	if r.status != 404 || r.errCode(t) != "not_found" {
		t.Fatalf("got %d %s; want 404 not_found", r.status, r.body)
	}
}

var _ = fmt.Sprint

// TestChatBodiesHeldAreBounded: the chat door reads bodies of up to 8 MiB
// (inline files), so a process reads and holds at most
// handlers.MaxLargeChatBodies bodies over 256 KiB at a time, and one API key
// at most handlers.MaxLargeChatBodiesPerKey of them; beyond, the request is
// refused at once (503, or 429 for the key) instead of its body being read.
// Stalled 8 MB bodies on 500 connections held 4.4 GB before.
func TestChatBodiesHeldAreBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	start := func(key string) net.Conn {
		c := rawConn(t, h.m.URL())
		head := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 8000000\r\n\r\n", key)
		if _, err := io.WriteString(c, head+strings.Repeat(" ", 300<<10)); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// answers reads what each of conns is answered within a few seconds:
	// "none" while its body is still being waited for.
	answers := func(conns []net.Conn) map[string]int {
		out := make(chan string, len(conns))
		for _, c := range conns {
			go func() {
				resp, body, err := readAnswer(c, 3*time.Second)
				if err != nil {
					out <- "none"
					return
				}
				out <- fmt.Sprint(resp.StatusCode, " ", envelopeCode(body))
			}()
		}
		got := map[string]int{}
		for range conns {
			got[<-out]++
		}
		return got
	}
	key := h.newKey()
	var conns []net.Conn
	for range handlers.MaxLargeChatBodiesPerKey + 1 {
		conns = append(conns, start(key))
	}
	got := answers(conns)
	must(t, got["429 rate_limited"] == 1 && got["none"] == handlers.MaxLargeChatBodiesPerKey, "one key's stalled large bodies, by answer: %v", got)

	conns = nil
	for range handlers.MaxLargeChatBodies - handlers.MaxLargeChatBodiesPerKey + 1 {
		conns = append(conns, start(h.newKey()))
	}
	got = answers(conns)
	must(t, got["503 service_restarting"] == 1 && got["none"] == len(conns)-1, "stalled large bodies of other keys, by answer: %v", got)
}

// TestBodiesReadPerKeyAreBounded: one API key has at most
// handlers.MaxBodiesPerKey request bodies being read at a time, on the
// query and chat endpoints together; the next is refused at once. Only the
// connection limits bounded them before: one key stalled 1,920 bodies of
// just under 256 KiB from 8 addresses and held 840 MB.
func TestBodiesReadPerKeyAreBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	stall := func(key, path string) net.Conn {
		c := rawConn(t, h.m.URL())
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{", path, key)
		return c
	}
	for i := range handlers.MaxBodiesPerKey {
		stall(key, []string{"/v1/queries", "/v1/chat/completions"}[i%2])
	}
	time.Sleep(200 * time.Millisecond) // the stalled bodies are being read
	for _, path := range []string{"/v1/queries", "/v1/chat/completions", "/v1/estimate-cost"} {
		resp, body, err := readAnswer(stall(key, path), 5*time.Second)
		must(t, err == nil && resp.StatusCode == 429 && envelopeCode(body) == "rate_limited", "%s past the key's bodies: %v %v %s", path, resp, err, body)
	}
	r := h.submit(h.newKey(), map[string]any{"mode": "unify", "prompt": "another key"})
	must(t, r.status == 202, "another key's submission: %d %s", r.status, r.body)
}
