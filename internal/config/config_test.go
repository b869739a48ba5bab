package config

import (
	"strings"
	"testing"
	"time"
)

// TestAdminTokenRefused: a token shorter than the minimum, or the example
// secret file's placeholder, stops the start with a message that does not
// repeat the token.
func TestAdminTokenRefused(t *testing.T) {
	for name, token := range map[string]string{
		"one character": "x",
		"15 characters": "abcdefghijklmno",
		"placeholder":   "replace with: openssl rand -hex 32",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("CROSSCHECK_ADMIN_TOKEN", token)
			_, err := FromEnv()
			if err == nil {
				t.Fatalf("FromEnv accepted the admin token %q", token)
			}
			if !strings.Contains(err.Error(), "CROSSCHECK_ADMIN_TOKEN") || (len(token) > 1 && strings.Contains(err.Error(), token)) {
				t.Fatalf("error %q should name the setting and not repeat the token", err)
			}
		})
	}
	t.Setenv("CROSSCHECK_ADMIN_TOKEN", "0123456789abcdef0123456789abcdef")
	if _, err := FromEnv(); err != nil {
		t.Fatalf("a 32-character random token: %v", err)
	}
}

func TestHTTPLimitsFromEnv(t *testing.T) {
	t.Setenv("CROSSCHECK_HTTP_MAX_HEADER_BYTES", "16384")
	t.Setenv("CROSSCHECK_HTTP_MAX_CONNS", "100")
	t.Setenv("CROSSCHECK_HTTP_MAX_CONNS_PER_ADDR", "0")
	t.Setenv("CROSSCHECK_HTTP_IDLE_TIMEOUT", "5s")
	t.Setenv("CROSSCHECK_PRINT_FIRST_KEY", "false")
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults().HTTP
	want.MaxHeaderBytes, want.MaxConns, want.MaxConnsPerAddr, want.IdleTimeout = 16384, 100, 0, 5*time.Second
	if c.HTTP != want || c.PrintFirstKey {
		t.Fatalf("got %+v print=%v, want %+v print=false", c.HTTP, c.PrintFirstKey, want)
	}
	t.Setenv("CROSSCHECK_HTTP_READ_TIMEOUT", "0s")
	if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), "CROSSCHECK_HTTP_READ_TIMEOUT") {
		t.Fatalf("a zero read timeout: err = %v", err)
	}
}

// The account snapshots' settings: read, defaulted, and refused when they
// would write a snapshot never or at every event's whim.
func TestSnapshotSettings(t *testing.T) {
	c, err := FromEnv()
	if err != nil || c.SnapshotEvery != 250 || c.SnapshotInterval != time.Minute {
		t.Fatalf("defaults: every %d, interval %s, %v", c.SnapshotEvery, c.SnapshotInterval, err)
	}
	t.Setenv("CROSSCHECK_SNAPSHOT_EVERY", "1000")
	t.Setenv("CROSSCHECK_SNAPSHOT_INTERVAL", "30s")
	if c, err = FromEnv(); err != nil || c.SnapshotEvery != 1000 || c.SnapshotInterval != 30*time.Second {
		t.Fatalf("set: every %d, interval %s, %v", c.SnapshotEvery, c.SnapshotInterval, err)
	}
	for name, v := range map[string]string{"CROSSCHECK_SNAPSHOT_EVERY": "0", "CROSSCHECK_SNAPSHOT_INTERVAL": "10ms"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, v)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%s: %v, want a refusal naming it", name, v, err)
			}
		})
	}
}
