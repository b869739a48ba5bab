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

// The embedded store syncs every write before acknowledging it unless the
// operator opts into an interval: what was acknowledged survives a power
// cut by default.
func TestSyncDefaultsToAlways(t *testing.T) {
	for _, tc := range []struct {
		env        string
		always     bool
		interval   time.Duration
		wantErrFor bool
	}{
		{env: "", always: true},
		{env: "always", always: true},
		{env: "ALWAYS", always: true},
		{env: "1s", interval: time.Second},
		{env: "2m", interval: 2 * time.Minute},
		{env: "0s", wantErrFor: true},
		{env: "often", wantErrFor: true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("CROSSCHECK_SYNC_INTERVAL", tc.env)
			c, err := FromEnv()
			if tc.wantErrFor {
				if err == nil || !strings.Contains(err.Error(), "CROSSCHECK_SYNC_INTERVAL") {
					t.Fatalf("CROSSCHECK_SYNC_INTERVAL=%q: err = %v, want one naming the setting", tc.env, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.SyncAlways != tc.always || c.SyncInterval != tc.interval {
				t.Fatalf("CROSSCHECK_SYNC_INTERVAL=%q: always %v interval %v, want always %v interval %v", tc.env, c.SyncAlways, c.SyncInterval, tc.always, tc.interval)
			}
		})
	}
}
