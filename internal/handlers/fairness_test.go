package handlers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/chat"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/files"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// fakeAuth takes "Bearer <account>/<key>": the caller of account <account>
// with the key whose fingerprint is <key> (fingerprints are unique across
// accounts, as real ones are).
type fakeAuth struct{}

func (fakeAuth) Authenticate(_ context.Context, header string) (accounts.Caller, error) {
	acct, key, ok := strings.Cut(strings.TrimPrefix(header, "Bearer "), "/")
	if !ok || acct == "" || key == "" {
		return accounts.Caller{}, apperr.New(apperr.InvalidAPIKey, "the API key does not verify")
	}
	return accounts.Caller{AccountID: acct, Fingerprint: key}, nil
}

// fakeQueries admits every query and reads each as queued; estimates is
// called with each estimate's body, when set.
type fakeQueries struct {
	estimates func()
}

func (fakeQueries) Submit(context.Context, accounts.Caller, []byte, string, bool) (queries.Submission, error) {
	return queries.Submission{RequestID: "req_01M80000000000000000000001", Status: events.StatusQueued}, nil
}

func (fakeQueries) Get(context.Context, accounts.Caller, string) (json.RawMessage, error) {
	return json.RawMessage(`{"status":"queued"}`), nil
}

func (q fakeQueries) Estimate(context.Context, accounts.Caller, []byte) (queries.Quote, error) {
	if q.estimates != nil {
		q.estimates()
	}
	return queries.Quote{Mode: events.ModeUnify, Estimate: pricing.Estimate{}, Account: &accounts.AccountView{}}, nil
}

// silentEvents follows a query that never moves: a stream or a chat
// completion stays open until its client goes.
type silentEvents struct{}

func (silentEvents) FollowQuery(context.Context, string) (<-chan events.Record, <-chan error) {
	return make(chan events.Record), make(chan error)
}

// drainingFiles reads an upload's body to its end and stores nothing.
type drainingFiles struct{}

func (drainingFiles) Upload(_ context.Context, _ accounts.Caller, _, _ string, body io.Reader) (files.Meta, error) {
	_, err := io.Copy(io.Discard, body)
	if err != nil {
		return files.Meta{}, err
	}
	return files.Meta{ID: "file_x"}, nil
}
func (drainingFiles) Get(context.Context, string, string) (files.Meta, error) {
	return files.Meta{}, nil
}
func (drainingFiles) List(context.Context, string, int, string) (files.Page, error) {
	return files.Page{}, nil
}
func (drainingFiles) Delete(context.Context, string, string) error { return nil }

// doors serves s's public API on a loopback listener, and returns its base
// URL.
func doors(t *testing.T, s *Server) string {
	t.Helper()
	s.Auth, s.Events, s.Files, s.Log = fakeAuth{}, silentEvents{}, drainingFiles{}, zerolog.Nop()
	if s.Queries == nil {
		s.Queries = fakeQueries{}
	}
	s.Heartbeat = time.Minute
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// holdOpen sends a request on a connection of its own and reads its
// answer's head; the connection stays open (and the request served) until
// the test ends. It returns the status and, for a refusal, its error code.
func holdOpen(t *testing.T, base, method, path, bearer, body string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", method, path, bearer, len(body), body)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s as %s: %v", method, path, bearer, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if resp.StatusCode == 200 {
		return 200, ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	t.Logf("%s %s as %s: %d %s", method, path, bearer, resp.StatusCode, b)
	return resp.StatusCode, envelopeCodeOf(b)
}

// stalled starts a request whose body of size bytes never arrives whole,
// and returns its connection.
func stalled(t *testing.T, base, method, path, bearer, contentType string, size int, start string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", method, path, bearer, contentType, size, start)
	return c
}

// answerOf reads the answer on c within d: its status and error code, or
// 0 when none came.
func answerOf(c net.Conn, d time.Duration) (int, string) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, envelopeCodeOf(b)
}

func envelopeCodeOf(b []byte) string {
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	return env.Error.Code
}

// TestStreamsAreBoundedPerAccount: the keys of one account together hold
// at most MaxStreamsPerAccount of the process's event streams and chat
// completions; another account still gets one. Before, every key had its
// own bound only, and 16 keys of one account filled the process's 256.
func TestStreamsAreBoundedPerAccount(t *testing.T) {
	base := doors(t, &Server{MaxStreams: 8, MaxStreamsPerKey: 2, MaxStreamsPerAccount: 4})
	for _, key := range []string{"k1", "k2"} {
		for range 2 {
			if st, code := holdOpen(t, base, "GET", "/v1/queries/req_01M80000000000000000000001/stream", "acctA/"+key, ""); st != 200 {
				t.Fatalf("stream of %s within the bounds: %d %s", key, st, code)
			}
		}
	}
	if st, code := holdOpen(t, base, "GET", "/v1/queries/req_01M80000000000000000000001/stream", "acctA/k3", ""); st != 429 || code != "rate_limited" {
		t.Fatalf("a third key's stream past the account's bound: %d %s; want 429 rate_limited", st, code)
	}
	chat := `{"model":"svc-unify","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	if st, code := holdOpen(t, base, "POST", "/v1/chat/completions", "acctA/k4", chat); st != 429 || code != "rate_limited" {
		t.Fatalf("a chat completion past the account's bound: %d %s; want 429 rate_limited", st, code)
	}
	if st, code := holdOpen(t, base, "POST", "/v1/chat/completions", "acctB/b1", chat); st != 200 {
		t.Fatalf("another account's chat completion: %d %s", st, code)
	}
	if st, code := holdOpen(t, base, "GET", "/v1/queries/req_01M80000000000000000000001/stream", "acctB/b2", ""); st != 200 {
		t.Fatalf("another account's stream: %d %s", st, code)
	}
}

// TestBodiesBeingReadAreBoundedPerAccount: the keys of one account have at
// most MaxBodiesPerAccount request bodies being read at a time; the next is
// refused at once, and another account's request is read.
func TestBodiesBeingReadAreBoundedPerAccount(t *testing.T) {
	s := &Server{MaxBodiesPerAccount: 6}
	base := doors(t, s)
	var held []net.Conn
	for i := range 6 {
		held = append(held, stalled(t, base, "POST", "/v1/queries", fmt.Sprintf("acctA/k%d", i%3), "application/json", 200000, "{"))
	}
	waitHeld(t, &s.bodies, 6)
	if st, code := answerOf(stalled(t, base, "POST", "/v1/estimate-cost", "acctA/k9", "application/json", 200000, "{"), 3*time.Second); st != 429 || code != "rate_limited" {
		t.Fatalf("a body past the account's bound: %d %s; want 429 rate_limited", st, code)
	}
	for _, c := range held {
		if st, _ := answerOf(c, 50*time.Millisecond); st != 0 {
			t.Fatalf("a stalled body within the bound was answered %d", st)
		}
	}
	if st, code := holdOpen(t, base, "POST", "/v1/estimate-cost", "acctB/b1", `{"mode":"unify","prompt":"hi"}`); st != 200 {
		t.Fatalf("another account's estimate: %d %s", st, code)
	}
}

// TestLargeChatBodiesAreBoundedPerAccount: the keys of one account hold at
// most MaxLargeChatBodiesPerAccount of the process's large chat bodies.
func TestLargeChatBodiesAreBoundedPerAccount(t *testing.T) {
	s := &Server{}
	base := doors(t, s)
	start := func(bearer string) net.Conn {
		return stalled(t, base, "POST", "/v1/chat/completions", bearer, "application/json", 8000000, strings.Repeat(" ", 300<<10))
	}
	for i := range MaxLargeChatBodiesPerAccount {
		start(fmt.Sprintf("acctA/k%d", i))
	}
	waitHeld(t, &s.largeBodies, MaxLargeChatBodiesPerAccount)
	// Each key holds one: only the account's bound refuses the next.
	if st, code := answerOf(start("acctA/k99"), 3*time.Second); st != 429 || code != "rate_limited" {
		t.Fatalf("a large body past the account's bound: %d %s; want 429 rate_limited", st, code)
	}
	if st, _ := answerOf(start("acctB/b1"), time.Second); st != 0 {
		t.Fatalf("another account's large body was answered %d before it arrived", st)
	}
}

// TestUploadsAreBoundedPerAccount: the keys of one account have at most
// MaxUploadsPerAccount uploads in progress. Before, two keys held every one
// of the process's 4 upload slots.
func TestUploadsAreBoundedPerAccount(t *testing.T) {
	s := &Server{}
	base := doors(t, s)
	const boundary = "b0undary"
	head := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.py\"\r\n\r\nx = 1\n"
	start := func(bearer string) net.Conn {
		return stalled(t, base, "POST", "/v1/files", bearer, "multipart/form-data; boundary="+boundary, 10000000, head)
	}
	for i := range MaxUploadsPerAccount {
		start(fmt.Sprintf("acctA/k%d", i))
	}
	waitHeld(t, &s.uploads, MaxUploadsPerAccount)
	if st, code := answerOf(start("acctA/k99"), 3*time.Second); st != 429 || code != "rate_limited" {
		t.Fatalf("an upload past the account's bound: %d %s; want 429 rate_limited", st, code)
	}
	if st, _ := answerOf(start("acctB/b1"), time.Second); st != 0 {
		t.Fatalf("another account's upload was answered %d before it arrived", st)
	}
}

// waitHeld waits until sl holds n slots.
func waitHeld(t *testing.T, sl *keySlots, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		sl.mu.Lock()
		held := sl.total
		sl.mu.Unlock()
		if held == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d held, want %d", sl.what, held, n)
		}
	}
}

// TestDeclaredSizeRefusedAtOnce: a body whose Content-Length is over the
// endpoint's bound is refused before any of it is read, instead of being
// read up to the bound first.
func TestDeclaredSizeRefusedAtOnce(t *testing.T) {
	base := doors(t, &Server{})
	for path, size := range map[string]int{"/v1/chat/completions": chat.MaxBodyBytes + 1, "/v1/queries": queries.MaxBodyBytes + 1, "/v1/estimate-cost": queries.MaxBodyBytes + 1} {
		st, code := answerOf(stalled(t, base, "POST", path, "acctA/k1", "application/json", size, "{"), 3*time.Second)
		if st != 400 || code != "invalid_request" {
			t.Errorf("%s declaring %d bytes: %d %s; want 400 invalid_request at once", path, size, st, code)
		}
	}
}

// TestEstimatesAreRated: an estimate is free, so the work one API key (and
// one account) spends on them is rated: each spends its measured time from
// a bucket that refills at EstimateRate per second (an account's at 4
// keys' worth), and an estimate that finds its key's or account's bucket in
// debt is 429 rate_limited with Retry-After, while another account's are
// answered. Before, 16 threads of
// one key estimating worst-case bodies took every core.
func TestEstimatesAreRated(t *testing.T) {
	var mu sync.Mutex
	running, most := 0, 0
	work := func() {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
	}
	base := doors(t, &Server{Queries: fakeQueries{estimates: work}, EstimateRate: 10 * time.Millisecond})
	estimate := func(bearer string) (int, string, string) {
		req, _ := http.NewRequest("POST", base+"/v1/estimate-cost", strings.NewReader(`{"mode":"unify","prompt":"hi"}`))
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, envelopeCodeOf(b), resp.Header.Get("Retry-After")
	}
	// One key, back to back: its burst (10 × 10 ms) is spent within a
	// few, and so on for the next keys of the account.
	for _, key := range []string{"acctA/k1", "acctA/k2", "acctA/k3", "acctA/k4"} {
		refused := 0
		for range 10 {
			st, code, retry := estimate(key)
			if st == 429 {
				if code != "rate_limited" || retry == "" || retry == "0" {
					t.Fatalf("a refused estimate: %d %s Retry-After %q", st, code, retry)
				}
				refused++
				continue
			}
			if st != 200 {
				t.Fatalf("estimate: %d %s", st, code)
			}
		}
		if refused < 5 {
			t.Fatalf("%s: %d of 10 back-to-back estimates of 30 ms refused at 10 ms a second; want most", key, refused)
		}
	}
	// A fifth key finds the account's bucket (4 keys' worth) in debt.
	if st, code, _ := estimate("acctA/k5"); st != 429 || code != "rate_limited" {
		t.Fatalf("a fifth key of the account: %d %s; want 429 rate_limited", st, code)
	}
	// Another account is not.
	if st, code, _ := estimate("acctB/b1"); st != 200 {
		t.Fatalf("another account's estimate: %d %s", st, code)
	}
	// Many at once from one key: at most two run at a time.
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { estimate("acctC/c1") })
	}
	wg.Wait()
	if most > MaxEstimatesPerKey {
		t.Fatalf("%d estimates of one key ran at once; want at most %d", most, MaxEstimatesPerKey)
	}
}
