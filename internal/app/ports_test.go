package app

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fixedPorts hands out the ports tests name before their servers listen: a
// cluster's nodes name each other's routes, and a child process is told
// where to listen. A port probed on 127.0.0.1:0 lies in the kernel's
// ephemeral range, and between the probe's close and the server's bind any
// outgoing connection of the tests running beside it may take it as its
// local port: the server then cannot listen, and nats-server says so only
// to its logger. Ports below that range are never handed out for outgoing
// connections, and the set keeps two tests of this process from sharing one.
var fixedPorts struct {
	sync.Mutex
	taken map[int]bool
}

// The ports handed out lie in [fixedPortsFrom, ephemeralLow()).
const fixedPortsFrom = 20000

// ephemeralLow is the first port of the kernel's ephemeral range: Linux's
// setting, or its default where that cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil {
				return low
			}
		}
	}
	return 32768
}

// freePort returns a loopback port, free when probed, below the ephemeral
// range and not handed out before in this process.
func freePort(t *testing.T) int {
	t.Helper()
	low := ephemeralLow()
	if low <= fixedPortsFrom+100 {
		t.Fatalf("the ephemeral range starts at %d, leaving no room below it from %d", low, fixedPortsFrom)
	}
	fixedPorts.Lock()
	defer fixedPorts.Unlock()
	if fixedPorts.taken == nil {
		fixedPorts.taken = map[int]bool{}
	}
	for range 1000 {
		p := fixedPortsFrom + rand.IntN(low-fixedPortsFrom)
		if fixedPorts.taken[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		ln.Close()
		fixedPorts.taken[p] = true
		return p
	}
	t.Fatalf("no free port in [%d, %d) after 1000 tries", fixedPortsFrom, low)
	return 0
}

// freeAddr is freePort's port as a loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

// A port a test names before its server listens lies below the kernel's
// ephemeral range, so that no outgoing connection of the tests running
// beside it can take it as its local port in the meantime; and no two such
// ports are the same.
func TestFreePortsAreOutsideTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		p := freePort(t)
		must(t, p < low, "port %d is in the ephemeral range, which starts at %d", p, low)
		must(t, !seen[p], "port %d handed out twice", p)
		seen[p] = true
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		must(t, err == nil, "listen on %d: %v", p, err)
		ln.Close()
	}
}
