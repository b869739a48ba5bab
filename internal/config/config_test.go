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

// TestBoundsFromEnv: the bounds on customer-owned models' calls, on a
// query's time and on the runs that crash their worker are read, with their
// defaults, and a value below the least stops the start naming it.
func TestBoundsFromEnv(t *testing.T) {
	c, err := FromEnv()
	if err != nil || c.BYOMMaxCalls != 64 || c.BYOMMaxCallsPerAccount != 16 || c.QueryTimeout != 8*time.Minute || c.WorkerMaxCrashes != 3 {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	t.Setenv("CROSSCHECK_QUERY_TIMEOUT", "90s")
	t.Setenv("CROSSCHECK_WORKER_MAX_CRASHES", "5")
	if c, err = FromEnv(); err != nil || c.QueryTimeout != 90*time.Second || c.WorkerMaxCrashes != 5 {
		t.Fatalf("set: %s %d, %v", c.QueryTimeout, c.WorkerMaxCrashes, err)
	}
	for name, v := range map[string]string{"CROSSCHECK_QUERY_TIMEOUT": "0s", "CROSSCHECK_WORKER_MAX_CRASHES": "0"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, v)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%s: %v", name, v, err)
			}
		})
	}
	t.Setenv("CROSSCHECK_BYOM_MAX_CALLS", "8")
	t.Setenv("CROSSCHECK_BYOM_MAX_CALLS_PER_ACCOUNT", "2")
	if c, err = FromEnv(); err != nil || c.BYOMMaxCalls != 8 || c.BYOMMaxCallsPerAccount != 2 {
		t.Fatalf("set: %d %d, %v", c.BYOMMaxCalls, c.BYOMMaxCallsPerAccount, err)
	}
	t.Setenv("CROSSCHECK_BYOM_MAX_CALLS_PER_ACCOUNT", "0")
	if _, err = FromEnv(); err == nil || !strings.Contains(err.Error(), "CROSSCHECK_BYOM_MAX_CALLS_PER_ACCOUNT") {
		t.Fatalf("0: %v", err)
	}
}
