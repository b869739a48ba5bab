package netlimit

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// serve accepts on l and keeps every accepted connection open until the
// client closes it; it reports each accepted connection on the channel.
func serve(t *testing.T, l *Listener) <-chan net.Conn {
	t.Helper()
	accepted := make(chan net.Conn, 100)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go func() {
				_, _ = io.Copy(io.Discard, c)
				_ = c.Close()
			}()
		}
	}()
	return accepted
}

func listen(t *testing.T, maxConns, maxPerAddr int) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{Listener: ln, MaxConns: maxConns, MaxPerAddr: maxPerAddr, Refusal: func(r Reason) []byte {
		if r == TooManyFromAddr {
			return []byte("addr")
		}
		return []byte("all")
	}}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// refusal reads what the server sent before it closed the connection.
func refusal(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the refused connection was not closed: %v", err)
	}
	return string(b)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestPerAddrBound(t *testing.T) {
	l := listen(t, 0, 3)
	accepted := serve(t, l)
	held := []net.Conn{dial(t, l), dial(t, l), dial(t, l)}
	for range held {
		<-accepted
	}
	if got := refusal(t, dial(t, l)); got != "addr" {
		t.Fatalf("a 4th connection from one address: got %q, want the per-address refusal", got)
	}
	if all, from := l.Open("127.0.0.1"); all != 3 || from != 3 {
		t.Fatalf("open = %d, %d from the address; want 3, 3", all, from)
	}
	// A slot comes back when its connection closes.
	_ = held[0].Close()
	eventually(t, "the closed connection's slot", func() bool { all, _ := l.Open("127.0.0.1"); return all == 2 })
	dial(t, l)
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("a connection within the bound was not accepted")
	}
}

func TestTotalBound(t *testing.T) {
	l := listen(t, 2, 0)
	accepted := serve(t, l)
	dial(t, l)
	dial(t, l)
	<-accepted
	<-accepted
	if got := refusal(t, dial(t, l)); got != "all" {
		t.Fatalf("a 3rd connection: got %q, want the process-wide refusal", got)
	}
}

// TestCloseTwice: closing a connection twice gives its slot back once.
func TestCloseTwice(t *testing.T) {
	l := listen(t, 0, 0)
	accepted := serve(t, l)
	dial(t, l)
	dial(t, l)
	c := <-accepted
	<-accepted
	_ = c.Close()
	_ = c.Close()
	if all, _ := l.Open("127.0.0.1"); all != 1 {
		t.Fatalf("open = %d after closing one of two connections twice; want 1", all)
	}
}

// fakeListener hands out one end of a pipe per connection, with the remote
// address given, as if clients had connected from it.
type fakeListener struct {
	conns chan net.Conn
}

func (f *fakeListener) Accept() (net.Conn, error) {
	c, ok := <-f.conns
	if !ok {
		return nil, net.ErrClosed
	}
	return c, nil
}
func (f *fakeListener) Close() error   { return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv6loopback} }

type fromAddr struct {
	net.Conn
	remote net.Addr
}

func (c fromAddr) RemoteAddr() net.Addr { return c.remote }

// arrive makes a connection arrive on f from ip, and returns the client's end.
func (f *fakeListener) arrive(t *testing.T, ip string) net.Conn {
	t.Helper()
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	f.conns <- fromAddr{Conn: server, remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
	return client
}

// TestIPv6CountedBySlash64: the per-address bound counts an IPv6 client by
// its /64, the block one subscriber gets: a client choosing among the 2^64
// addresses of its own block is one client. IPv4 addresses count alone.
func TestIPv6CountedBySlash64(t *testing.T) {
	f := &fakeListener{conns: make(chan net.Conn)}
	l := &Listener{Listener: f, MaxPerAddr: 2, Refusal: func(Reason) []byte { return []byte("addr") }}
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { close(f.conns) })
	for _, ip := range []string{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9"} {
		f.arrive(t, ip)
		<-accepted
	}
	// A third address of the same /64: refused.
	c := f.arrive(t, "2001:db8:1:2:abcd::1")
	b := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := io.ReadFull(c, b); string(b[:n]) != "addr" {
		t.Fatalf("a third connection from the same /64: got %q, want the per-address refusal", b[:n])
	}
	// Another /64, and IPv4 addresses, count on their own.
	for _, ip := range []string{"2001:db8:1:3::1", "192.0.2.1", "192.0.2.2", "192.0.2.2"} {
		f.arrive(t, ip)
		select {
		case <-accepted:
		case <-time.After(5 * time.Second):
			t.Fatalf("a connection from %s was not accepted", ip)
		}
	}
	if _, from := l.Open("2001:db8:1:2::77"); from != 2 {
		t.Fatalf("Open counts %d connections from the /64, want 2", from)
	}
}

// TestCrowdedMakesRoom: a connection that arrives while the listener holds
// 80% or more of MaxConns calls Crowded first, with how many connections
// to close to come back under the mark; the slots of the connections it
// closes are free for the new one at once.
func TestCrowdedMakesRoom(t *testing.T) {
	l := listen(t, 5, 0)
	var mu sync.Mutex
	var idle []net.Conn
	var asked []int
	makeRoom := false
	l.Crowded = func(excess int) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, excess)
		for ; makeRoom && excess > 0 && len(idle) > 0; excess-- {
			_ = idle[0].Close()
			idle = idle[1:]
		}
	}
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 5 {
		dial(t, l)
		c := <-accepted
		mu.Lock()
		idle = append(idle, c)
		mu.Unlock()
	}
	// At the bound: the crowded call closes two, and the new one is in.
	mu.Lock()
	makeRoom = true
	mu.Unlock()
	dial(t, l)
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a connection at the bound was not accepted after room was made")
	}
	if all, _ := l.Open("127.0.0.1"); all != 4 {
		t.Fatalf("%d open; want 4", all)
	}
	// 4 is the 80% mark: the 5th connection was crowded (1 over), the 6th
	// found 5 open (2 over).
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0] != 1 || asked[1] != 2 {
		t.Fatalf("Crowded was asked %v; want [1 2]", asked)
	}
}

// TestIPv6Loopback: a real IPv6 connection counts under its /64 too.
func TestIPv6Loopback(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	l := &Listener{Listener: ln, MaxPerAddr: 1, Refusal: func(Reason) []byte { return []byte("addr") }}
	t.Cleanup(func() { _ = l.Close() })
	accepted := serve(t, l)
	dial(t, l)
	<-accepted
	if got := refusal(t, dial(t, l)); got != "addr" {
		t.Fatalf("a second connection from ::1: got %q, want the per-address refusal", got)
	}
	if _, from := l.Open("::1"); from != 1 {
		t.Fatalf("Open(::1) = %d, want 1", from)
	}
}
