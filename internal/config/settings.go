package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Setting describes one CROSSCHECK_* variable for the commands' help: its
// name, its default as the operator would write it (taken from Defaults, so
// the two cannot drift apart) and what it does.
type Setting struct {
	Name string
	// Default writes the setting's value in d, the defaults; "" is unset.
	Default func(d Config) string
	Help    string
	// Store marks the settings of the event store, which the commands that
	// run beside the service (audit, events, keys rotate) read too.
	Store bool
}

func text(f func(Config) string) func(Config) string { return f }

func num(f func(Config) int) func(Config) string {
	return func(c Config) string { return strconv.Itoa(f(c)) }
}

func duration(f func(Config) time.Duration) func(Config) string {
	return func(c Config) string {
		s := f(c).String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	}
}

func unset(Config) string { return "" }

// Settings are every CROSSCHECK_* variable FromEnv reads, in the order the
// help lists them. README.md, "Settings", says the rest of each.
var Settings = []Setting{
	{"CROSSCHECK_HTTP_ADDR", text(func(c Config) string { return c.HTTPAddr }), "listen address of the public API", false},
	{"CROSSCHECK_ADMIN_ADDR", text(func(c Config) string { return c.AdminAddr }), "listen address of the admin API and /metrics (keep it private)", false},
	{"CROSSCHECK_ADMIN_TOKEN", unset, "admin API token (unset: data dir's admin-token, generated on first start)", false},
	{"CROSSCHECK_DATA_DIR", text(func(c Config) string { return c.DataDir }), "data directory of the embedded server", true},
	{"CROSSCHECK_NATS_URL", unset, "an external NATS (cluster) instead of the embedded server", true},
	{"CROSSCHECK_NATS_CREDS", unset, "NATS user credentials file", true},
	{"CROSSCHECK_NATS_NKEY", unset, "file holding a NATS user NKey seed", true},
	{"CROSSCHECK_NATS_TOKEN", unset, "NATS token", true},
	{"CROSSCHECK_NATS_TLS_CA", unset, "PEM file of the CAs of the NATS servers", true},
	{"CROSSCHECK_NATS_TLS_CERT", unset, "client certificate for NATS (with _KEY)", true},
	{"CROSSCHECK_NATS_TLS_KEY", unset, "client key for NATS (with _CERT)", true},
	{"CROSSCHECK_NATS_LISTEN", text(func(c Config) string { return c.NATSListen }), "embedded server only: auto, off or a loopback host:port for NATS clients (crosscheck events)", false},
	{"CROSSCHECK_REPLICAS", num(func(c Config) int { return c.Replicas }), "replicas of every stream and bucket", true},
	{"CROSSCHECK_SYNC_INTERVAL", func(c Config) string {
		if c.SyncAlways {
			return "always"
		}
		return duration(func(c Config) time.Duration { return c.SyncInterval })(c)
	}, "embedded server only: always, or a Go duration between fsyncs", true},
	{"CROSSCHECK_START_TIMEOUT", duration(func(c Config) time.Duration { return c.StartTimeout }), "wait at start for CROSSCHECK_NATS_URL", true},
	{"CROSSCHECK_STORE_MIN_FREE_MB", num(func(c Config) int { return c.StoreMinFreeMB }), "embedded server only: free MiB below which submissions are refused", false},
	{"CROSSCHECK_CONFIG", unset, "provider bindings and search backend (YAML); unset: simulated models", false},
	{"CROSSCHECK_SIM_LATENCY", duration(func(c Config) time.Duration { return c.SimLatency }), "latency added to every simulated model call", false},
	{"CROSSCHECK_MASTER_KEY", unset, "key-encryption keys of BYOM provider keys (unset: data dir's master-keys)", false},
	{"CROSSCHECK_DOCS_URL", unset, "base of every error's docs_url (unset: the public API's /docs)", false},
	{"CROSSCHECK_LOG_LEVEL", text(func(c Config) string { return c.LogLevel }), "trace, debug, info, warn or error", false},
	{"CROSSCHECK_PRINT_FIRST_KEY", text(func(c Config) string { return strconv.FormatBool(c.PrintFirstKey) }), "print the development key the first start creates", false},
	{"CROSSCHECK_WORKER_ACK_WAIT", duration(func(c Config) time.Duration { return c.WorkerAckWait }), "a running query's time without keep-alive before another worker takes it", false},
	{"CROSSCHECK_WORKER_MAX_JOBS", num(func(c Config) int { return c.WorkerMaxJobs }), "queries one worker runs at once", false},
	{"CROSSCHECK_WORKER_MAX_FAILURES", num(func(c Config) int { return c.WorkerMaxFailures }), "failed runs that end a query failed", false},
	{"CROSSCHECK_WORKER_MAX_CRASHES", num(func(c Config) int { return c.WorkerMaxCrashes }), "runs in a row ended with their worker before query_crashed", false},
	{"CROSSCHECK_QUERY_TIMEOUT", duration(func(c Config) time.Duration { return c.QueryTimeout }), "the most one query may run", false},
	{"CROSSCHECK_MODEL_TIMEOUT", duration(func(c Config) time.Duration { return c.ModelTimeout }), "the most one model call may take", false},
	{"CROSSCHECK_SHUTDOWN_GRACE", duration(func(c Config) time.Duration { return c.ShutdownGrace }), "time running queries get to finish on SIGTERM", false},
	{"CROSSCHECK_SHUTDOWN_DRAIN", duration(func(c Config) time.Duration { return c.ShutdownDrain }), "time an API process serves not ready on SIGTERM", false},
	{"CROSSCHECK_SSE_HEARTBEAT", duration(func(c Config) time.Duration { return c.SSEHeartbeat }), "interval of heartbeat comments on event streams", false},
	{"CROSSCHECK_SSE_MAX_STREAMS", num(func(c Config) int { return c.SSEMaxStreams }), "open event streams of one API process (0: no bound)", false},
	{"CROSSCHECK_SSE_MAX_STREAMS_PER_KEY", num(func(c Config) int { return c.SSEMaxStreamsPerKey }), "open event streams of one API key (0: no bound)", false},
	{"CROSSCHECK_SSE_MAX_STREAMS_PER_ACCOUNT", num(func(c Config) int { return c.SSEMaxStreamsPerAccount }), "open event streams of one account", false},
	{"CROSSCHECK_ACCOUNT_MAX_KEYS", num(func(c Config) int { return c.AccountMaxKeys }), "keys of one account that are not revoked", false},
	{"CROSSCHECK_ESTIMATE_RATE", duration(func(c Config) time.Duration { return c.EstimateRate }), "estimating time one API key may spend per second", false},
	{"CROSSCHECK_TRUST_TRACEPARENT", text(func(c Config) string { return strconv.FormatBool(c.TrustTraceparent) }), "let a request's traceparent decide its trace", false},
	{"CROSSCHECK_FILES_MAX_ACCOUNT_MB", num(func(c Config) int { return c.FilesMaxAccountMB }), "MiB of an account's live files (0: no bound)", false},
	{"CROSSCHECK_FILES_MAX_UPLOADS_PER_DAY", num(func(c Config) int { return c.FilesMaxUploadsPerDay }), "uploads of one account in 24 hours (0: no bound)", false},
	{"CROSSCHECK_INFLIGHT_PER_ACCOUNT", num(func(c Config) int { return c.InflightPerAccount }), "queries in flight of one account (0: no bound)", false},
	{"CROSSCHECK_SNAPSHOT_EVERY", num(func(c Config) int { return c.SnapshotEvery }), "account events between two snapshots of the account", false},
	{"CROSSCHECK_SNAPSHOT_INTERVAL", duration(func(c Config) time.Duration { return c.SnapshotInterval }), "time after which an account's next command writes its snapshot", false},
	{"CROSSCHECK_CANCEL_CHARGE_PERCENT", num(func(c Config) int { return c.CancelChargePercent }), "share of its reservation a cancelled query is charged at least", false},
	{"CROSSCHECK_EXTRACT_MEMORY_MB", num(func(c Config) int { return c.Extract.MemoryMB }), "MiB of all extraction children (0: a quarter of the process's)", false},
	{"CROSSCHECK_EXTRACT_CHILD_MEMORY_MB", num(func(c Config) int { return c.Extract.ChildMemoryMB }), "memory limit of one extraction child, MiB", false},
	{"CROSSCHECK_EXTRACT_CPU_SECONDS", num(func(c Config) int { return c.Extract.CPUSeconds }), "CPU time limit of one extraction child", false},
	{"CROSSCHECK_EXTRACT_ACCOUNT_CPU_SECONDS", num(func(c Config) int { return c.Extract.AccountCPUSeconds }), "extraction CPU seconds of one account per hour (0: no bound)", false},
	{"CROSSCHECK_HTTP_MAX_HEADER_BYTES", num(func(c Config) int { return c.HTTP.MaxHeaderBytes }), "largest request header block", false},
	{"CROSSCHECK_HTTP_MAX_CONNS", num(func(c Config) int { return c.HTTP.MaxConns }), "open connections of one HTTP server (0: no bound)", false},
	{"CROSSCHECK_HTTP_MAX_CONNS_PER_ADDR", num(func(c Config) int { return c.HTTP.MaxConnsPerAddr }), "open connections from one client address (0: no bound)", false},
	{"CROSSCHECK_HTTP_MAX_BODIES_PER_ACCOUNT", num(func(c Config) int { return c.HTTP.MaxBodiesPerAccount }), "request bodies of one account read at a time (0: no bound)", false},
	{"CROSSCHECK_HTTP_READ_HEADER_TIMEOUT", duration(func(c Config) time.Duration { return c.HTTP.ReadHeaderTimeout }), "time to send a request's headers", false},
	{"CROSSCHECK_HTTP_READ_TIMEOUT", duration(func(c Config) time.Duration { return c.HTTP.ReadTimeout }), "time to send a whole request", false},
	{"CROSSCHECK_HTTP_WRITE_TIMEOUT", duration(func(c Config) time.Duration { return c.HTTP.WriteTimeout }), "time to write a response", false},
	{"CROSSCHECK_HTTP_IDLE_TIMEOUT", duration(func(c Config) time.Duration { return c.HTTP.IdleTimeout }), "time a keep-alive connection waits for its next request", false},
	{"CROSSCHECK_BYOM_ALLOW", unset, "private addresses a BYOM may reach (unset: loopback runners' ports on the embedded server)", false},
	{"CROSSCHECK_BYOM_MAX_CALLS", num(func(c Config) int { return c.BYOMMaxCalls }), "BYOM calls of one worker at once", false},
	{"CROSSCHECK_BYOM_MAX_CALLS_PER_ACCOUNT", num(func(c Config) int { return c.BYOMMaxCallsPerAccount }), "BYOM calls of one account at once", false},
}

// SettingsHelp lists settings with their defaults, one a line, for a
// command's help: every setting, or with storeOnly those of the event store.
func SettingsHelp(storeOnly bool) string {
	d := Defaults()
	var b strings.Builder
	width := 0
	for _, s := range Settings {
		width = max(width, len(s.Name))
	}
	for _, s := range Settings {
		if storeOnly && !s.Store {
			continue
		}
		def := s.Default(d)
		if def == "" {
			def = "unset"
		}
		fmt.Fprintf(&b, "  %-*s  %s [%s]\n", width, s.Name, s.Help, def)
	}
	return b.String()
}
