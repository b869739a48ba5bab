package contract

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
)

// Received is one request a fake upstream received.
type Received struct {
	Method string
	Path   string
	Header http.Header
	Raw    string
	Body   map[string]any
}

// Script is the part every fake upstream shares: it records the requests it
// receives and hands out the scenario to play for each, one per request, the
// last repeating. A fixture embeds it and answers in its vendor's format.
// Done is closed when the test ends, to release stalled handlers.
type Script struct {
	Done chan struct{}

	mu        sync.Mutex
	scenarios []Scenario
	played    int
	requests  []Received
}

// NewScript returns a script for t. Call it after registering the fake
// server's Close with t.Cleanup: cleanups run last-first, so Done is closed
// before the server waits for its handlers.
func NewScript(t testing.TB) *Script {
	s := &Script{Done: make(chan struct{})}
	t.Cleanup(func() { close(s.Done) })
	return s
}

// Play sets the scenarios of the next requests.
func (s *Script) Play(scenarios ...Scenario) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scenarios, s.played = scenarios, 0
}

// Requests is the number of requests received.
func (s *Script) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// Last is the last request received; the test fails when there is none.
func (s *Script) Last(t testing.TB) Received {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("the upstream received no request")
	}
	return s.requests[len(s.requests)-1]
}

// LastBody is the decoded body of the last request received, nil when
// there is none.
func (s *Script) LastBody() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		return nil
	}
	return s.requests[len(s.requests)-1].Body
}

// Receive records r and returns the scenario to answer it with (the zero
// Scenario when none is set).
func (s *Script) Receive(r *http.Request) Scenario {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: string(raw), Body: body})
	var sc Scenario
	if n := len(s.scenarios); n > 0 {
		sc = s.scenarios[min(s.played, n-1)]
		s.played++
	}
	return sc
}
