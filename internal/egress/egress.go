// Package egress guards the outbound connections to customer-owned model
// hosts against server-side request forgery: a base URL must be http(s), and
// every connection is checked against the address its host name resolves to
// at that moment (so a name that changes its answer after the check, DNS
// rebinding, gains nothing), redirects included. Cloud metadata addresses are
// always refused; loopback, link-local, private and other non-public ranges
// only pass when the operator's allow list names them.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrRefused is in the chain of every error the guard returns for a
// destination it will not reach.
var ErrRefused = errors.New("destination refused")

// MaxAllowEntries bounds the entries of an allow list.
const MaxAllowEntries = 256

// metadataHosts are cloud metadata host names, refused whatever the allow list says.
var metadataHosts = map[string]bool{
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"metadata":                   true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
	"metadata.azure.com":         true,
	"metadata.tencentyun.com":    true,
}

// metadataAddrs are cloud metadata addresses (AWS, GCP, Azure, OpenStack,
// DigitalOcean, Oracle: 169.254.169.254; AWS IPv6 fd00:ec2::254; AWS ECS task
// metadata 169.254.170.2; Alibaba 100.100.100.200; Azure wire server
// 168.63.129.16), refused whatever the allow list says.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true,
	netip.MustParseAddr("169.254.170.2"):   true,
	netip.MustParseAddr("169.254.169.123"): true,
	netip.MustParseAddr("fd00:ec2::254"):   true,
	netip.MustParseAddr("100.100.100.200"): true,
	netip.MustParseAddr("168.63.129.16"):   true,
}

// nonPublic are ranges beside the ones netip classifies (loopback, private,
// link-local, multicast, unspecified) that no public host lives in.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("::/96"),          // IPv4-compatible (deprecated)
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64: the IPv4 address it carries depends on the network's prefix length
	netip.MustParsePrefix("2001::/32"),      // Teredo
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
}

// Policy is an allow list of non-public destinations. The zero Policy allows
// public addresses only.
type Policy struct {
	nets []allowedNet
	// hosts are the allowed host names and their ports (0: every port).
	hosts map[string][]uint16
}

// allowedNet is a range of addresses allowed on one port, or on every port
// when port is 0.
type allowedNet struct {
	prefix netip.Prefix
	port   uint16
}

// LocalRunnerPorts are the ports local model runners listen on by default:
// LM Studio 1234, vLLM 8000, llama.cpp's server and LocalAI 8080, Ollama
// 11434.
var LocalRunnerPorts = []uint16{1234, 8000, 8080, 11434}

// LoopbackOn returns the allow list of the machine's own loopback addresses
// and the name localhost on ports, and on no other port.
func LoopbackOn(ports ...uint16) string {
	var entries []string
	for _, host := range []string{"127.0.0.0/8", "[::1]", "localhost"} {
		for _, port := range ports {
			entries = append(entries, host+":"+strconv.Itoa(int(port)))
		}
	}
	return strings.Join(entries, ",")
}

// Loopback is the allow list of the embedded development default: a model
// runner on the same machine, on the ports of LocalRunnerPorts. The other
// ports of the machine (its databases, its admin interfaces) stay refused,
// so that connection tests cannot scan them.
var Loopback = LoopbackOn(LocalRunnerPorts...)

// ParseAllow parses a comma-separated allow list of CIDRs (10.0.0.0/8),
// single addresses (192.168.1.20) and host names (ollama.lan), each allowed
// on every port, or on one port when the entry names it
// (10.0.0.0/8:8000, 192.168.1.20:11434, ollama.lan:11434, and an IPv6
// address or range in brackets: [::1]:11434, [fd00::/8]:8000). Host names
// are compared case-insensitively, without a trailing dot. It fails on an
// entry that is none of these, on a port outside 1-65535, on a metadata
// address or name, and on more than MaxAllowEntries entries.
func ParseAllow(s string) (*Policy, error) {
	p := &Policy{hosts: map[string][]uint16{}}
	entries := strings.Split(s, ",")
	if len(entries) > MaxAllowEntries {
		return nil, fmt.Errorf("the allow list has %d entries; at most %d are allowed", len(entries), MaxAllowEntries)
	}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if err := p.add(e, e, 0); err == nil {
			continue
		} else if host, portText, serr := net.SplitHostPort(e); serr != nil {
			return nil, err
		} else {
			port, perr := strconv.ParseUint(portText, 10, 16)
			if perr != nil || port == 0 {
				return nil, fmt.Errorf("allow list entry %q: the port must be a number from 1 to 65535", e)
			}
			if err := p.add(e, host, uint16(port)); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

// add adds entry e, its host part h, allowed on port (0: every port).
func (p *Policy) add(e, h string, port uint16) error {
	if pre, err := netip.ParsePrefix(h); err == nil {
		p.nets = append(p.nets, allowedNet{prefix: pre.Masked(), port: port})
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		a = a.Unmap()
		if metadataAddrs[a] {
			return fmt.Errorf("allow list entry %q is a cloud metadata address, which is never allowed", e)
		}
		p.nets = append(p.nets, allowedNet{prefix: netip.PrefixFrom(a, a.BitLen()), port: port})
		return nil
	}
	h = normalHost(h)
	if !validHostName(h) {
		return fmt.Errorf("allow list entry %q is neither a CIDR, an IP address nor a host name, with or without a port", e)
	}
	if metadataHosts[h] {
		return fmt.Errorf("allow list entry %q is a cloud metadata host, which is never allowed", e)
	}
	p.hosts[h] = append(p.hosts[h], port)
	return nil
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Public reports whether a is a public unicast address.
func Public(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return false
	}
	if inner, ok := embedded(a); ok {
		return Public(inner)
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
	// ipv4Compatible are the deprecated ::a.b.c.d addresses.
	ipv4Compatible = netip.MustParsePrefix("::/96")
)

// embedded returns the IPv4 address a NAT64 or 6to4 address carries.
func embedded(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case a.Is6() && nat64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case a.Is6() && sixTo4.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// metadata reports whether a is (or carries) a cloud metadata address.
func metadata(a netip.Addr) bool {
	a = a.Unmap()
	if inner, ok := embedded(a); ok {
		a = inner
	} else if a.Is6() && ipv4Compatible.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return metadataAddrs[a]
}

// CheckAddr decides whether a connection to port of a, reached through host
// name host ("" for a literal address), may be made: a metadata address
// never; a public address always; any other when the allow list names its
// range or the host name, on every port or on this one. The error wraps
// ErrRefused and names the address and port.
func (p *Policy) CheckAddr(host string, a netip.Addr, port uint16) error {
	a = a.Unmap()
	if metadata(a) {
		return fmt.Errorf("%w: %s is a cloud metadata address", ErrRefused, a)
	}
	if Public(a) {
		return nil
	}
	onPort := func(allowed uint16) bool { return allowed == 0 || allowed == port }
	named := false
	if p != nil {
		if host != "" {
			for _, allowed := range p.hosts[normalHost(host)] {
				if onPort(allowed) {
					return nil
				}
				named = true
			}
		}
		for _, n := range p.nets {
			if n.prefix.Contains(a) {
				if onPort(n.port) {
					return nil
				}
				named = true
			}
		}
	}
	if named {
		return fmt.Errorf("%w: port %d of %s is not one the allow list opens on it; the operator can allow it with CROSSCHECK_BYOM_ALLOW (an entry such as %s)",
			ErrRefused, port, a, netip.AddrPortFrom(a, port))
	}
	return fmt.Errorf("%w: %s is a loopback, link-local or private address; the operator can allow it with CROSSCHECK_BYOM_ALLOW", ErrRefused, a)
}

// CheckURL parses a base URL and checks what it can without resolving it:
// the scheme is http or https, there is a host, no user information, and
// the host is not a metadata name. A literal address is checked as CheckAddr
// does.
func (p *Policy) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: the URL does not parse", ErrRefused)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: the URL scheme must be http or https", ErrRefused)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: the URL must not carry user information; send credentials as the API key or a header", ErrRefused)
	}
	host := u.Hostname()
	if host == "" {
		return nil, fmt.Errorf("%w: the URL has no host", ErrRefused)
	}
	if metadataHosts[normalHost(host)] {
		return nil, fmt.Errorf("%w: %s is a cloud metadata host", ErrRefused, host)
	}
	if err := checkPath(u); err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		if err := p.CheckAddr("", a, Port(u)); err != nil {
			return nil, err
		}
	} else if numericHost(host) {
		return nil, fmt.Errorf("%w: %s is not a host name and not an address in the usual form; write an IPv4 address as four decimal numbers (a.b.c.d)", ErrRefused, host)
	}
	return u, nil
}

// Port returns the port u connects to: its own, else its scheme's (80 for
// http, 443 for https); 0 when neither says.
func Port(u *url.URL) uint16 {
	if p, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		return uint16(p)
	}
	switch u.Scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// checkPath refuses a path a host may read as another than the one checked:
// one with a dot segment (. or ..), a backslash or a control character, or
// an encoded slash, backslash, dot, percent sign or NUL (%2F, %5C, %2E, %25,
// %00), which a host that decodes before it routes turns into a separator
// or a dot segment (/v1/..%2Fadmin).
func checkPath(u *url.URL) error {
	escaped := strings.ToLower(u.EscapedPath())
	for _, enc := range []string{"%2f", "%5c", "%2e", "%25", "%00"} {
		if strings.Contains(escaped, enc) {
			return fmt.Errorf("%w: the URL's path holds an encoded %s; write the path as it is, without encoded separators, dots or percent signs", ErrRefused, strings.ToUpper(enc))
		}
	}
	if strings.ContainsFunc(u.Path, func(r rune) bool { return r == '\\' || r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: the URL's path holds a backslash or a control character", ErrRefused)
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: the URL's path holds a dot segment (%s); write the path it stands for", ErrRefused, seg)
		}
	}
	return nil
}

// numericHost reports whether host, not a canonical address, ends in a
// number: the decimal, octal, hexadecimal or shortened spellings of an IPv4
// address (2852039166, 0xA9FEA9FE, 0251.0376.0251.0376, 127.1) that some
// resolvers turn into an address. No top-level domain is a number.
func numericHost(host string) bool {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := labels[len(labels)-1]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") || strings.HasPrefix(last, "0X") {
		last = last[2:]
		return strings.Trim(last, "0123456789abcdefABCDEF") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// Resolver looks up a host's addresses; net.DefaultResolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard dials only the destinations its Policy allows.
type Guard struct {
	Policy *Policy
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds each connection attempt; zero means 10 s.
	DialTimeout time.Duration
}

// DialContext resolves addr's host, checks every address it resolves to and
// connects to the first that passes. A name that resolves to any refused
// address is refused as a whole, so a host cannot mix a public answer with a
// private one.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if metadataHosts[normalHost(host)] {
		return nil, fmt.Errorf("%w: %s is a cloud metadata host", ErrRefused, host)
	}
	if _, err := netip.ParseAddr(host); err != nil && numericHost(host) {
		return nil, fmt.Errorf("%w: %s is an address in an unusual spelling", ErrRefused, host)
	}
	var addrs []netip.Addr
	name := host
	if a, err := netip.ParseAddr(host); err == nil {
		addrs, name = []netip.Addr{a}, ""
	} else {
		r := g.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		if addrs, err = r.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no address", host)
		}
	}
	portNum, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: port %q is not a port number", ErrRefused, port)
	}
	for _, a := range addrs {
		if err := g.Policy.CheckAddr(name, a, uint16(portNum)); err != nil {
			return nil, err
		}
	}
	d := net.Dialer{Timeout: g.DialTimeout}
	if d.Timeout == 0 {
		d.Timeout = 10 * time.Second
	}
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// MaxRedirects bounds the redirects a guarded client follows.
const MaxRedirects = 3

// Client returns an HTTP client whose every connection goes through g, with
// no proxy from the environment (a proxy would connect on the client's
// behalf, unchecked), redirects followed only within the same host, checked
// again, and at most MaxRedirects of them, response bodies bounded by
// MaxResponseBytes, and timeout bounding each request (zero: none beyond the caller's
// context).
func (g *Guard) Client(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            g.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  5 * time.Minute,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= MaxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrRefused, MaxRedirects)
			}
			// Another host would receive the headers that carry the
			// customer's key (x-api-key, api-key): only the same host.
			if req.URL.Host != via[0].URL.Host {
				return fmt.Errorf("%w: a redirect to another host (%s)", ErrRefused, req.URL.Hostname())
			}
			_, err := g.Policy.CheckURL(req.URL.String())
			return err
		},
	}
}
