package netlimit

import (
	"io"
	"net"
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
