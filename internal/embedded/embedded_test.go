package embedded

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A server for this process alone listens on loopback only, and takes no
// client but this process's (its bulk connection, ConnectLoopback): a client without its token, or with another,
// is refused; connections that never authenticate are closed within the
// auth timeout and are bounded in number.
func TestAPrivateServerServesItsProcessAlone(t *testing.T) {
	s, err := Start(Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	url := s.ClientURL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") {
		t.Fatalf("listens on %s; want loopback only", url)
	}
	nc, err := s.ConnectLoopback("own")
	if err != nil {
		t.Fatalf("the process's own connection: %v", err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{"no token": nil, "another token": {nats.Token("guess")}} {
		if other, err := nats.Connect(url, append(opts, nats.MaxReconnects(0))...); err == nil {
			other.Close()
			t.Errorf("a client with %s connected", name)
		}
	}

	for deadline := time.Now().Add(5 * time.Second); s.NumClients() != 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the refused clients leave
	}
	addr := strings.TrimPrefix(url, "nats://")
	// The process's connection is one; the rest of the limit is open to
	// clients that never authenticate, and no more: of one more than that,
	// one is refused (the server registers them concurrently, so not
	// necessarily the last), and every one that is taken is closed by the
	// auth timeout.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range privateMaxConn {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	var refused, timedOut atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for r := bufio.NewReader(c); ; {
				line, err := r.ReadString('\n')
				switch {
				case strings.Contains(line, "maximum connections exceeded"):
					refused.Add(1)
				case strings.Contains(line, "Authentication Timeout"):
					timedOut.Add(1)
				}
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if refused.Load() != 1 || timedOut.Load() != privateMaxConn-1 || time.Since(start) > 4*time.Second {
		t.Errorf("of %d connections that never authenticate, %d refused and %d timed out in %v; want 1 refused, the rest timed out within seconds",
			privateMaxConn, refused.Load(), timedOut.Load(), time.Since(start))
	}
	if err := nc.Flush(); err != nil {
		t.Errorf("the process's own connection after the refusals: %v", err)
	}
}
