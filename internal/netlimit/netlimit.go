// Package netlimit bounds the connections a listener hands out: in all, and
// per client address (an IPv6 client by its /64). A connection over a bound
// is refused at once (after a short answer the caller chooses) instead of
// being held, so a client that opens connections without end cannot exhaust
// the process's memory or file descriptors; and a listener near its bound
// asks its owner to close connections that wait for nothing, so that idle
// ones cannot keep new clients out.
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
	// MaxPerAddr bounds the open connections from one client: one IPv4
	// address, or one IPv6 /64 (the block one subscriber gets, whose 2^64
	// addresses the client chooses among); zero is no bound.
	MaxPerAddr int
	// Refusal returns the bytes written to a refused connection before it is
	// closed; nil writes nothing. The write is bounded by a short deadline.
	Refusal func(Reason) []byte
	// Crowded, when set, is called when a connection arrives while the
	// listener holds CrowdedPercent or more of MaxConns, before the
	// connection is counted, with the number of connections above that
	// mark (the new one included). It may close connections that wait for
	// nothing: their slots are free once Close returns. It is called on the
	// accepting goroutine, so it must not block.
	Crowded func(excess int)

	mu     sync.Mutex
	open   int
	byAddr map[string]int
}

// CrowdedPercent is the share of MaxConns from which a listener is
// crowded: the share real traffic stays under, and the room new clients
// still find when idle connections hold the rest.
const CrowdedPercent = 80

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
		addr := clientOf(c.RemoteAddr())
		if excess := l.excess(); excess > 0 && l.Crowded != nil {
			l.Crowded(excess)
		}
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

// Open returns the number of open connections, and of those counted with
// addr (an IP address: an IPv6 one's whole /64).
func (l *Listener) Open(addr string) (all, fromAddr int) {
	key := addr
	if ip := net.ParseIP(addr); ip != nil {
		key = clientKey(ip)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.byAddr[key]
}

// excess returns how many connections a new one would hold above the
// crowded mark, or 0 when the listener is not crowded.
func (l *Listener) excess() int {
	if l.MaxConns <= 0 {
		return 0
	}
	mark := l.MaxConns * CrowdedPercent / 100
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(0, l.open-mark+1)
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

// clientOf returns the key a connection from a counts under.
func clientOf(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return clientKey(tcp.IP)
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip != nil {
		return clientKey(ip)
	}
	return host
}

// ipv6Client is the block of IPv6 addresses counted as one client.
var ipv6Client = net.CIDRMask(64, 128)

// clientKey is an IPv4 address as it is, an IPv6 address as its /64.
func clientKey(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(ipv6Client).String() + "/64"
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
