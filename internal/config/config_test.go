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

func TestExtractLimitsFromEnv(t *testing.T) {
	if got, want := Defaults().Extract, (ExtractLimits{ChildMemoryMB: 256, CPUSeconds: 10, AccountCPUSeconds: 300}); got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	t.Setenv("CROSSCHECK_EXTRACT_MEMORY_MB", "512")
	t.Setenv("CROSSCHECK_EXTRACT_CHILD_MEMORY_MB", "200")
	t.Setenv("CROSSCHECK_EXTRACT_CPU_SECONDS", "4")
	t.Setenv("CROSSCHECK_EXTRACT_ACCOUNT_CPU_SECONDS", "0")
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if want := (ExtractLimits{MemoryMB: 512, ChildMemoryMB: 200, CPUSeconds: 4}); c.Extract != want {
		t.Fatalf("got %+v, want %+v", c.Extract, want)
	}
	for name, value := range map[string]string{
		"CROSSCHECK_EXTRACT_MEMORY_MB":       "100", // below one child
		"CROSSCHECK_EXTRACT_CHILD_MEMORY_MB": "64",
		"CROSSCHECK_EXTRACT_CPU_SECONDS":     "0",
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%s: err = %v, want one naming the setting", name, value, err)
			}
		})
	}
}
