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
// to its logger. Ports outside that range are never given to outgoing
// connections, and the set keeps two tests of this process from sharing
// one.
var fixedPorts struct {
	sync.Mutex
	taken map[int]bool
}

// fixedPortsFrom is the lowest port handed out: above the well-known and
// most registered services' ports.
const fixedPortsFrom = 20000

// ephemeralRange is the kernel's range of ports for outgoing connections:
// Linux's setting, or its default where that cannot be read.
func ephemeralRange() (low, high int) {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			low, errLow := strconv.Atoi(f[0])
			high, errHigh := strconv.Atoi(f[1])
			if errLow == nil && errHigh == nil {
				return low, high
			}
		}
	}
	return 32768, 60999
}

// fixedPortWindow is where freePort looks: below the ephemeral range, or
// above it, whichever is wider; ok is false when neither holds 1,000
// ports (a kernel that gives nearly every port to outgoing connections).
func fixedPortWindow() (from, to int, ok bool) {
	low, high := ephemeralRange()
	from, to = fixedPortsFrom, low
	if 65536-(high+1) > to-from {
		from, to = high+1, 65536
	}
	return from, to, to-from >= 1000
}

// freePort returns a loopback port, free when probed, outside the
// ephemeral range where the kernel leaves room, and not handed out before
// in this process.
func freePort(t *testing.T) int {
	t.Helper()
	fixedPorts.Lock()
	defer fixedPorts.Unlock()
	if fixedPorts.taken == nil {
		fixedPorts.taken = map[int]bool{}
	}
	from, to, ok := fixedPortWindow()
	for range 1000 {
		addr := "127.0.0.1:0"
		if ok {
			addr = "127.0.0.1:" + strconv.Itoa(from+rand.IntN(to-from))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !fixedPorts.taken[p] {
			fixedPorts.taken[p] = true
			return p
		}
	}
	t.Fatalf("no free port in [%d, %d) after 1000 tries", from, to)
	return 0
}

// freeAddr is freePort's port as a loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

// A port a test names before its server listens lies outside the kernel's
// ephemeral range, so that no outgoing connection of the tests running
// beside it can take it as its local port in the meantime; and no two such
// ports are the same.
func TestFreePortsAreOutsideTheEphemeralRange(t *testing.T) {
	low, high := ephemeralRange()
	if _, _, ok := fixedPortWindow(); !ok {
		t.Skipf("the ephemeral range %d-%d leaves no room outside it", low, high)
	}
	seen := map[int]bool{}
	for range 50 {
		p := freePort(t)
		must(t, p < low || p > high, "port %d is in the ephemeral range %d-%d", p, low, high)
		must(t, !seen[p], "port %d handed out twice", p)
		seen[p] = true
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		must(t, err == nil, "listen on %d: %v", p, err)
		ln.Close()
	}
}
