package egress

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// fakeResolver answers from a table; a name it does not know fails.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range f[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if out == nil {
		return nil, errors.New("no such host")
	}
	return out, nil
}

func TestCheckAddr(t *testing.T) {
	none, _ := ParseAllow("")
	private, err := ParseAllow("10.0.0.0/8, 172.16.0.0/12,192.168.0.0/16,127.0.0.0/8,::1/128,fc00::/7,169.254.0.0/16,fe80::/10,ollama.lan")
	if err != nil {
		t.Fatal(err)
	}
	loop, _ := ParseAllow(Loopback)
	compat, err := ParseAllow("::/96")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		addr, host string
		policy     *Policy
		name       string
		ok         bool
	}{
		{"8.8.8.8", "", none, "none", true},
		{"2606:4700:4700::1111", "", none, "none", true},
		{"127.0.0.1", "", none, "none", false},
		{"::1", "", none, "none", false},
		{"10.1.2.3", "", none, "none", false},
		{"172.20.0.1", "", none, "none", false},
		{"192.168.1.10", "", none, "none", false},
		{"169.254.10.10", "", none, "none", false},
		{"fe80::1", "", none, "none", false},
		{"fc00::1", "", none, "none", false},
		{"0.0.0.0", "", none, "none", false},
		{"::", "", none, "none", false},
		{"100.64.0.1", "", none, "none", false},
		{"224.0.0.1", "", none, "none", false},
		{"::ffff:127.0.0.1", "", none, "none", false},
		{"::ffff:10.0.0.1", "", none, "none", false},
		{"64:ff9b::a00:1", "", none, "none", false}, // NAT64 of 10.0.0.1
		{"2002:7f00:1::", "", none, "none", false},  // 6to4 of 127.0.0.1
		{"169.254.169.254", "", none, "none", false},
		{"169.254.169.254", "", private, "private", false},
		{"::ffff:169.254.169.254", "", private, "private", false},
		{"64:ff9b::a9fe:a9fe", "", private, "private", false}, // NAT64 of 169.254.169.254
		{"fd00:ec2::254", "", private, "private", false},
		{"169.254.170.2", "", private, "private", false},
		{"100.100.100.200", "", private, "private", false},
		{"10.1.2.3", "", private, "private", true},
		{"192.168.1.10", "", private, "private", true},
		{"127.0.0.1", "", private, "private", true},
		{"169.254.10.10", "", private, "private", true},
		{"fe80::1", "", private, "private", true},
		{"127.0.0.1", "", loop, "loopback", true},
		{"::1", "", loop, "loopback", true},
		{"10.0.0.1", "", loop, "loopback", false},
		{"192.168.5.5", "ollama.lan", private, "private", true},
		{"100.64.0.9", "ollama.lan", private, "private", true},
		{"100.64.0.9", "other.lan", private, "private", false},
		// IPv6 ranges that carry or reach an IPv4 address, or are not routed publicly.
		{"::a9fe:a9fe", "", private, "private", false}, // IPv4-compatible 169.254.169.254
		{"::a9fe:a9fe", "", compat, "::/96", false},    // a metadata address whatever the allow list says
		{"::a00:1", "", compat, "::/96", true},
		{"::808:808", "", none, "none", false},                            // IPv4-compatible 8.8.8.8
		{"64:ff9b:1::a9fe:a9fe", "", none, "none", false},                 // local-use NAT64
		{"64:ff9b:1:a9fe:a9:fe00::", "", private, "private", false},       // local-use NAT64, /48
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "", none, "none", false}, // Teredo
		{"fec0::1", "", none, "none", false},                              // site-local
	}
	for _, c := range cases {
		err := c.policy.CheckAddr(c.host, netip.MustParseAddr(c.addr), 11434)
		if (err == nil) != c.ok {
			t.Errorf("CheckAddr(%q via %q) with %s allow list: err = %v, want allowed %v", c.addr, c.host, c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrRefused) {
			t.Errorf("CheckAddr(%q): %v is not ErrRefused", c.addr, err)
		}
	}
}

func TestCheckURL(t *testing.T) {
	private, _ := ParseAllow("10.0.0.0/8,127.0.0.0/8")
	cases := []struct {
		url string
		ok  bool
	}{
		{"https://api.example.com/v1", true},
		{"http://10.0.0.5:11434/v1", true},
		{"http://127.0.0.1:11434/v1", true},
		{"http://192.168.0.1/v1", false},
		{"ftp://api.example.com", false},
		{"file:///etc/passwd", false},
		{"gopher://127.0.0.1", false},
		{"https://user:pw@api.example.com", false},
		{"https:///v1", false},
		{"http://169.254.169.254/latest/meta-data", false},
		{"http://[fd00:ec2::254]/", false},
		{"http://metadata.google.internal/computeMetadata/v1", false},
		{"http://METADATA.GOOGLE.INTERNAL./", false},
		{"::not a url", false},
		// Other spellings of an IPv4 address, which some resolvers read as one.
		{"http://2852039166/latest/meta-data", false},
		{"http://0251.0376.0251.0376/", false},
		{"http://0xA9FEA9FE/", false},
		{"http://0xa9.0xfe.0xa9.0xfe/", false},
		{"http://169.254.43518/", false},
		{"http://127.1:11434/v1", false},
		{"http://10.0.0.5.:11434/v1", false},
		{"https://1password.example.com/v1", true},
		{"https://api.0x1.example/v1", true},
	}
	for _, c := range cases {
		_, err := private.CheckURL(c.url)
		if (err == nil) != c.ok {
			t.Errorf("CheckURL(%q) = %v, want allowed %v", c.url, err, c.ok)
		}
	}
}

func TestParseAllowRefuses(t *testing.T) {
	for _, s := range []string{"169.254.169.254", "metadata.google.internal", "not a host!", "10.0.0.0/99"} {
		if _, err := ParseAllow(s); err == nil {
			t.Errorf("ParseAllow(%q) accepted", s)
		}
	}
	if _, err := ParseAllow(strings.Repeat("a.b,", MaxAllowEntries+1)); err == nil {
		t.Error("ParseAllow accepted more than MaxAllowEntries entries")
	}
}

// TestDialRebinding: the check is made on every connection against the
// address the name resolves to then, so a name that turns private after
// passing once is refused.
func TestDialRebinding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	res := fakeResolver{"model.example": {"127.0.0.1"}}
	loop, _ := ParseAllow("model.example")
	g := &Guard{Policy: loop, Resolver: res}
	c := g.Client(0)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	resp, err := c.Get("http://model.example:" + port + "/")
	if err != nil {
		t.Fatalf("allowed host name: %v", err)
	}
	resp.Body.Close()
	// The same name now answers with an address the policy refuses.
	g.Policy, _ = ParseAllow("")
	if _, err := c.Get("http://model.example:" + port + "/"); !errors.Is(err, ErrRefused) {
		t.Fatalf("rebound name: err = %v, want ErrRefused", err)
	}
	res["meta.example"] = []string{"169.254.169.254"}
	if _, err := c.Get("http://meta.example/"); !errors.Is(err, ErrRefused) {
		t.Fatalf("name of a metadata address: err = %v, want ErrRefused", err)
	}
	res["mixed.example"] = []string{"93.184.216.34", "10.0.0.1"}
	if _, err := c.Get("http://mixed.example/"); !errors.Is(err, ErrRefused) {
		t.Fatalf("name with one private answer: err = %v, want ErrRefused", err)
	}
}

// TestRedirects: a redirect to another host, or to a refused address, is
// not followed.
func TestRedirects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/meta":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/other":
			http.Redirect(w, r, "http://localhost:1/", http.StatusFound)
		case "/same":
			http.Redirect(w, r, "/ok", http.StatusFound)
		default:
			w.WriteHeader(204)
		}
	}))
	defer srv.Close()
	loop, _ := ParseAllow("127.0.0.0/8,localhost") // every port: the test server's is random
	c := (&Guard{Policy: loop}).Client(0)
	for _, p := range []string{"/meta", "/other"} {
		if _, err := c.Get(srv.URL + p); !errors.Is(err, ErrRefused) {
			t.Errorf("GET %s: err = %v, want ErrRefused", p, err)
		}
	}
	resp, err := c.Get(srv.URL + "/same")
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("same-host redirect: %v", err)
	}
	resp.Body.Close()
}

func FuzzParseAllow(f *testing.F) {
	for _, s := range []string{"", Loopback, "10.0.0.0/8,ollama.lan", "169.254.169.254", "::1", "a..b", "x/33"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseAllow(s)
		if err != nil {
			return
		}
		if p.CheckAddr("", netip.MustParseAddr("169.254.169.254"), 80) == nil {
			t.Fatalf("allow list %q lets the metadata address through", s)
		}
	})
}

// TestLoopbackPorts: the embedded default reaches loopback only on the
// ports local model runners listen on, not every port of the machine (a
// port scan through connection tests); an allow list entry with a port
// allows that port alone, one without a port every port.
func TestLoopbackPorts(t *testing.T) {
	loop, err := ParseAllow(Loopback)
	if err != nil {
		t.Fatal(err)
	}
	ported, err := ParseAllow("10.0.0.0/8:8000,[fd00::/8]:8000,192.168.1.20:11434,[::1]:1234,ollama.lan:11434,172.16.0.0/12")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		policy *Policy
		name   string
		url    string
		ok     bool
	}{
		{loop, "loopback", "http://127.0.0.1:11434/v1", true},
		{loop, "loopback", "http://localhost:1234/v1", true},
		{loop, "loopback", "http://[::1]:8000/v1", true},
		{loop, "loopback", "http://127.0.0.1:8080/v1", true},
		{loop, "loopback", "http://127.0.0.1:22/", false},
		{loop, "loopback", "http://127.0.0.1:8081/admin/v1", false},
		{loop, "loopback", "http://127.0.0.1/v1", false}, // port 80
		{loop, "loopback", "https://api.example.com/v1", true},
		{ported, "ported", "http://10.1.2.3:8000/v1", true},
		{ported, "ported", "http://10.1.2.3:8001/v1", false},
		{ported, "ported", "http://[fd00::5]:8000/v1", true},
		{ported, "ported", "http://[fd00::5]:22/v1", false},
		{ported, "ported", "http://192.168.1.20:11434/v1", true},
		{ported, "ported", "http://192.168.1.20:11435/v1", false},
		{ported, "ported", "http://[::1]:1234/v1", true},
		{ported, "ported", "http://[::1]:1235/v1", false},
		{ported, "ported", "http://172.20.0.1:9999/v1", true},
	} {
		if _, err := c.policy.CheckURL(c.url); (err == nil) != c.ok {
			t.Errorf("%s: CheckURL(%q) = %v, want allowed %v", c.name, c.url, err, c.ok)
		}
		u, _ := url.Parse(c.url)
		if a, err := netip.ParseAddr(u.Hostname()); err != nil || !a.IsLoopback() {
			continue // only loopback is dialled
		}
		// The dialer decides the same for the address and port it connects to.
		g := &Guard{Policy: c.policy, DialTimeout: 50 * time.Millisecond}
		_, err = g.DialContext(context.Background(), "tcp", u.Host)
		if refused := errors.Is(err, ErrRefused); refused == c.ok {
			t.Errorf("%s: dial %s: %v, want refused %v", c.name, u.Host, err, !c.ok)
		}
	}
	// A host name is checked when it is dialled: localhost on the
	// runners' ports alone, and a name allowed with a port on that port alone.
	g := &Guard{Policy: loop, Resolver: fakeResolver{"localhost": {"127.0.0.1"}}, DialTimeout: 50 * time.Millisecond}
	if _, err := g.DialContext(context.Background(), "tcp", "localhost:6379"); !errors.Is(err, ErrRefused) {
		t.Errorf("localhost:6379: %v, want refused", err)
	}
	if _, err := g.DialContext(context.Background(), "tcp", "localhost:11434"); errors.Is(err, ErrRefused) {
		t.Errorf("localhost:11434: %v, want allowed", err)
	}
	named, _ := ParseAllow("ollama.lan:11434")
	g = &Guard{Policy: named, Resolver: fakeResolver{"ollama.lan": {"127.0.0.1"}}, DialTimeout: 50 * time.Millisecond}
	if _, err := g.DialContext(context.Background(), "tcp", "ollama.lan:22"); !errors.Is(err, ErrRefused) {
		t.Errorf("ollama.lan:22: %v, want refused", err)
	}
	if _, err := g.DialContext(context.Background(), "tcp", "ollama.lan:11434"); errors.Is(err, ErrRefused) {
		t.Errorf("ollama.lan:11434: %v, want allowed", err)
	}
	for _, s := range []string{"10.0.0.0/8:0", "10.0.0.0/8:65536", "ollama.lan:x", "[::1]", "[fd00::/8]"} {
		if _, err := ParseAllow(s); err == nil {
			t.Errorf("ParseAllow(%q) accepted", s)
		}
	}
}

// TestCheckURLPathSteering: a base URL whose path holds an encoded
// separator or a dot segment, which a host may read as another path than
// the one checked, is refused.
func TestCheckURLPathSteering(t *testing.T) {
	p, _ := ParseAllow("127.0.0.0/8")
	for url, ok := range map[string]bool{
		"http://127.0.0.1:11434/v1":                         true,
		"http://127.0.0.1:11434/openai/deployments/d-1.2/x": true,
		"http://127.0.0.1:11434/v1/..%2fadmin/v1":           false,
		"http://127.0.0.1:11434/v1/..%2Fadmin":              false,
		"http://127.0.0.1:11434/v1%2f..%2f":                 false,
		"http://127.0.0.1:11434/v1/%2e%2e/admin":            false,
		"http://127.0.0.1:11434/v1/../admin":                false,
		"http://127.0.0.1:11434/./v1":                       false,
		"http://127.0.0.1:11434/v1/..%5cadmin":              false,
		"http://127.0.0.1:11434/v1\\..\\admin":              false,
		"http://127.0.0.1:11434/v1/%252e%252e/admin":        false,
		"http://127.0.0.1:11434/v1/a%00b":                   false,
	} {
		if _, err := p.CheckURL(url); (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v, want allowed %v", url, err, ok)
		}
	}
}
