// Package netlimit bounds the connections a listener hands out: in all, and
// per client address. A connection over a bound is refused at once (after a
// short answer the caller chooses) instead of being held, so a client that
// opens connections without end cannot exhaust the process's memory or file
// descriptors.
package netlimit

import (
	"net"
	"sync"
	"time"
)

// Reason says which bound refused a connection.
type Reason int

const (
	// TooManyConns: the listener holds MaxConns connections already.
	TooManyConns Reason = iota + 1
	// TooManyFromAddr: the listener holds MaxPerAddr connections from the
	// client's address already.
	TooManyFromAddr
)

// Listener is a net.Listener whose Accept returns only connections within
// its bounds; a connection counts until it is closed.
type Listener struct {
	net.Listener
	// MaxConns bounds the open connections; zero is no bound.
	MaxConns int
	// MaxPerAddr bounds the open connections from one IP address; zero is
	// no bound.
	MaxPerAddr int
	// Refusal returns the bytes written to a refused connection before it is
	// closed; nil writes nothing. The write is bounded by a short deadline.
	Refusal func(Reason) []byte

	mu     sync.Mutex
	open   int
	byAddr map[string]int
}

// refusalWrite bounds the write of a refusal: it goes into an empty socket
// buffer, so it only waits on a client that is gone.
const refusalWrite = 100 * time.Millisecond

// Accept waits for the next connection within the bounds. It refuses and
// closes every connection over a bound on its way, and returns the
// underlying listener's errors.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		if reason := l.take(addr); reason != 0 {
			if l.Refusal != nil {
				if b := l.Refusal(reason); len(b) > 0 {
					_ = c.SetWriteDeadline(time.Now().Add(refusalWrite))
					_, _ = c.Write(b)
				}
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, release: sync.OnceFunc(func() { l.release(addr) })}, nil
	}
}

// Open returns the number of open connections, and of those from addr (an
// IP address).
func (l *Listener) Open(addr string) (all, fromAddr int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.byAddr[addr]
}

func (l *Listener) take(addr string) Reason {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.MaxConns > 0 && l.open >= l.MaxConns {
		return TooManyConns
	}
	if l.MaxPerAddr > 0 && l.byAddr[addr] >= l.MaxPerAddr {
		return TooManyFromAddr
	}
	if l.byAddr == nil {
		l.byAddr = map[string]int{}
	}
	l.open++
	l.byAddr[addr]++
	return 0
}

func (l *Listener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

func hostOf(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn gives its slot back when it is closed, once.
type conn struct {
	net.Conn
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// CloseWrite half-closes the connection where the underlying one can, so an
// HTTP server's last answer reaches a client that is still sending.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn returns the underlying connection.
func (c *conn) NetConn() net.Conn { return c.Conn }
