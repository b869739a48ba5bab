package app

import (
	"testing"
)

// The embedded default reaches a runner on the same machine on the ports
// local runners use, never the process's own ports (its API: a BYOM that
// calls the service itself) nor any other of the machine's; set, the
// variable decides alone.
func TestBYOMDefaultPolicy(t *testing.T) {
	p, err := byomPolicy("", false, true, "127.0.0.1:8080", "0.0.0.0:8081")
	if err != nil {
		t.Fatal(err)
	}
	for url, ok := range map[string]bool{
		"http://127.0.0.1:11434/v1": true, "http://[::1]:8000/v1": true, "http://127.0.0.1:1234/v1": true,
		"http://127.0.0.1:8080/v1": false, "http://127.0.0.1:8081/admin/v1": false, "http://127.0.0.1:22/": false,
		"http://127.0.0.1:4222/": false, "https://api.example.com/v1": true,
	} {
		if _, err := p.CheckURL(url); (err == nil) != ok {
			t.Errorf("default: CheckURL(%q) = %v, want allowed %v", url, err, ok)
		}
	}
	p, _ = byomPolicy("", false, false)
	if _, err := p.CheckURL("http://127.0.0.1:11434/v1"); err == nil {
		t.Error("on a shared NATS, loopback is allowed by default")
	}
	p, _ = byomPolicy("127.0.0.0/8", true, true, "127.0.0.1:8080")
	if _, err := p.CheckURL("http://127.0.0.1:8080/v1"); err != nil {
		t.Errorf("an allow list set by the operator: %v", err)
	}
}
