package config

import (
	"os"
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
		// Long enough, but one character 16 times: guessed at once.
		"one repeated character": "aaaaaaaaaaaaaaaa",
		"two characters":         "abababababababababababababababab",
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

// The storage and fairness bounds: their defaults, a value read, and a
// value out of range refused with the setting named.
func TestStorageBoundsFromEnv(t *testing.T) {
	c, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c.InflightPerAccount != 64 || c.CancelChargePercent != 10 || c.FilesMaxUploadsPerDay != 10000 {
		t.Fatalf("defaults: in flight per account %d, cancel charge %d %%, uploads per day %d", c.InflightPerAccount, c.CancelChargePercent, c.FilesMaxUploadsPerDay)
	}
	t.Setenv("CROSSCHECK_INFLIGHT_PER_ACCOUNT", "0")
	t.Setenv("CROSSCHECK_CANCEL_CHARGE_PERCENT", "25")
	t.Setenv("CROSSCHECK_FILES_MAX_UPLOADS_PER_DAY", "3")
	if c, err = FromEnv(); err != nil || c.InflightPerAccount != 0 || c.CancelChargePercent != 25 || c.FilesMaxUploadsPerDay != 3 {
		t.Fatalf("read: %+v, %v", c, err)
	}
	for name, v := range map[string]string{"CROSSCHECK_CANCEL_CHARGE_PERCENT": "101", "CROSSCHECK_INFLIGHT_PER_ACCOUNT": "-1", "CROSSCHECK_FILES_MAX_UPLOADS_PER_DAY": "many"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, v)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("%s=%s: err = %v", name, v, err)
			}
		})
	}
}

// TestAccountBoundsFromEnv: the per-account bounds are settings with
// defaults below the process's own bounds, and a per-account stream bound
// that would let one account hold every stream of the process stops the
// start.
func TestAccountBoundsFromEnv(t *testing.T) {
	d := Defaults()
	if d.SSEMaxStreamsPerAccount <= 0 || d.SSEMaxStreamsPerAccount >= d.SSEMaxStreams || d.HTTP.MaxBodiesPerAccount <= 0 || d.AccountMaxKeys <= 0 {
		t.Fatalf("defaults: %d streams per account of %d, %d bodies per account, %d keys per account",
			d.SSEMaxStreamsPerAccount, d.SSEMaxStreams, d.HTTP.MaxBodiesPerAccount, d.AccountMaxKeys)
	}
	t.Setenv("CROSSCHECK_SSE_MAX_STREAMS_PER_ACCOUNT", "32")
	t.Setenv("CROSSCHECK_HTTP_MAX_BODIES_PER_ACCOUNT", "48")
	t.Setenv("CROSSCHECK_ACCOUNT_MAX_KEYS", "5")
	t.Setenv("CROSSCHECK_ESTIMATE_RATE", "50ms")
	if c, err := FromEnv(); err != nil || c.TrustTraceparent {
		t.Fatalf("traceparent trusted by default (%v)", err)
	}
	t.Setenv("CROSSCHECK_TRUST_TRACEPARENT", "true")
	c, err := FromEnv()
	if err != nil || !c.TrustTraceparent {
		t.Fatalf("CROSSCHECK_TRUST_TRACEPARENT=true: %v, %v", c.TrustTraceparent, err)
	}
	if c.SSEMaxStreamsPerAccount != 32 || c.HTTP.MaxBodiesPerAccount != 48 || c.AccountMaxKeys != 5 || c.EstimateRate != 50*time.Millisecond {
		t.Fatalf("got %d, %d, %d, %s; want 32, 48, 5, 50ms", c.SSEMaxStreamsPerAccount, c.HTTP.MaxBodiesPerAccount, c.AccountMaxKeys, c.EstimateRate)
	}
	// Under a lower process bound, the default is a quarter of it.
	t.Setenv("CROSSCHECK_SSE_MAX_STREAMS", "20")
	os.Unsetenv("CROSSCHECK_SSE_MAX_STREAMS_PER_ACCOUNT")
	if c, err := FromEnv(); err != nil || c.SSEMaxStreamsPerAccount != 5 {
		t.Fatalf("20 streams a process: %d per account, %v; want 5", c.SSEMaxStreamsPerAccount, err)
	}
	for name, env := range map[string][2]string{
		"every stream":   {"CROSSCHECK_SSE_MAX_STREAMS_PER_ACCOUNT", "20"},
		"no key at all":  {"CROSSCHECK_ACCOUNT_MAX_KEYS", "0"},
		"no bodies":      {"CROSSCHECK_HTTP_MAX_BODIES_PER_ACCOUNT", "-1"},
		"free estimates": {"CROSSCHECK_ESTIMATE_RATE", "0s"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(env[0], env[1])
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), env[0]) {
				t.Fatalf("%s=%s: err = %v", env[0], env[1], err)
			}
		})
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
