// Package config reads the operator settings from the environment.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of the service. FromEnv documents each variable.
type Config struct {
	HTTPAddr   string
	AdminAddr  string
	AdminToken string
	DataDir    string
	// NATSURL is an external NATS (comma-separated URLs of a cluster);
	// empty runs the embedded server. NATSAuth is how to log in to it.
	NATSURL  string
	NATSAuth NATSAuth
	// NATSListen is CROSSCHECK_NATS_LISTEN: whether the embedded server of
	// crosscheck serve also listens for NATS clients on a loopback port,
	// so that crosscheck events can read a running service: "auto" (when
	// the HTTP and admin addresses are loopback ones), "off", or the
	// loopback host:port to listen on (port 0: a free one).
	NATSListen string
	ConfigFile string
	SimLatency time.Duration
	Replicas   int
	// SyncAlways makes the embedded server fsync every write before it acks
	// (the default); otherwise it fsyncs every SyncInterval (zero: the
	// server's default, 2 min).
	SyncAlways   bool
	SyncInterval time.Duration
	// DocsURL is the base of error docs_url values; empty means the service's
	// own /docs on its public address.
	DocsURL  string
	LogLevel string
	// WorkerAckWait is how long a job may go without an in-progress ack
	// before another worker takes it over.
	WorkerAckWait time.Duration
	// WorkerMaxJobs bounds the queries one worker runs at once.
	WorkerMaxJobs int
	// WorkerMaxFailures is how many failed runs end a job as failed.
	WorkerMaxFailures int
	// WorkerMaxCrashes is how many runs of a query in a row may end with
	// their worker before it ends failed with query_crashed.
	WorkerMaxCrashes int
	// QueryTimeout bounds one query's time from its start, across runs.
	QueryTimeout time.Duration
	// StartTimeout is how long a process waits at start for a shared NATS
	// JetStream that is not reachable or not ready yet.
	StartTimeout time.Duration
	// ShutdownGrace is how long a stopping process lets running jobs finish.
	ShutdownGrace time.Duration
	// ShutdownDrain is how long a stopping API process keeps serving, not
	// ready and refusing submissions with service_restarting, before its
	// HTTP servers stop taking connections.
	ShutdownDrain time.Duration
	// ModelTimeout bounds one model call.
	ModelTimeout time.Duration
	// SSEHeartbeat is the interval of heartbeat comments on event streams.
	SSEHeartbeat time.Duration
	// SSEMaxStreams bounds the open event streams of one API process, and
	// SSEMaxStreamsPerKey those of one API key in it; zero is no bound. Each
	// open stream holds one of the QUERIES stream's consumers on the NATS
	// server (1,000 by default, shared by every process), so the sum over
	// the API processes must stay well below that.
	SSEMaxStreams, SSEMaxStreamsPerKey int
	// SSEMaxStreamsPerAccount bounds the open event streams (and chat
	// completions) of all the keys of one account in one API process; it is
	// below SSEMaxStreams (a quarter of it when not set), and zero (no
	// bound) only when SSEMaxStreams is.
	SSEMaxStreamsPerAccount int
	// AccountMaxKeys bounds the API keys of one account that are not
	// revoked: every per-key bound is multiplied by it.
	AccountMaxKeys int
	// EstimateRate is the time one API key may spend estimating per second
	// (POST /v1/estimate-cost is free); an account four keys' worth.
	EstimateRate time.Duration
	// TrustTraceparent makes the HTTP servers continue the trace of a
	// request's traceparent (sampling and trace id); otherwise a request
	// starts a trace of the service's own, linked to the caller's.
	TrustTraceparent bool
	// FilesMaxAccountMB bounds the MiB of an account's live files (uploaded,
	// neither deleted nor expired); zero is no bound.
	FilesMaxAccountMB int
	// FilesMaxUploadsPerDay bounds the files one account uploads in any 24
	// hours, so that what the FILES stream keeps of an account is bounded
	// (it keeps a file's events for a day after the file's 48 h); zero is
	// no bound.
	FilesMaxUploadsPerDay int
	// InflightPerAccount bounds the queries in flight of one account, all
	// its API keys together (each key has its own 8 besides); zero is no
	// bound.
	InflightPerAccount int
	// CancelChargePercent is the share of its reservation, in percent,
	// that a cancelled query is charged at least: 0 charges only the model
	// calls it recorded.
	CancelChargePercent int
	// StoreMinFreeMB is the free space, in MiB, of the embedded store's
	// file system below which submissions and uploads are refused, and
	// above which a store that failed a write for want of space is
	// restarted; zero is no floor.
	StoreMinFreeMB int
	// Extract bounds the extraction children of uploads.
	Extract ExtractLimits
	// SnapshotEvery and SnapshotInterval are when a process writes the
	// snapshot of an account it holds: after that many of the account's
	// events since the last one, or at its first command that long after
	// the last one.
	SnapshotEvery    int
	SnapshotInterval time.Duration
	// HTTP bounds what one client can hold of the HTTP servers.
	HTTP HTTPLimits
	// PrintFirstKey makes the first start of crosscheck serve print the
	// development key it creates; off, it creates no key and prints how to
	// make one with the admin API.
	PrintFirstKey bool
	// MasterKey is CROSSCHECK_MASTER_KEY: the key-encryption keys of BYOM
	// provider keys, comma-separated base64 of 32 bytes each, the first the
	// current one. Empty: the keys kept in the data dir (generated on first
	// start, mode 0600).
	MasterKey string
	// BYOMAllow is CROSSCHECK_BYOM_ALLOW: the CIDRs, addresses and host
	// names a BYOM may reach besides public addresses; BYOMAllowSet says
	// whether the variable was set at all (unset, the embedded server's
	// default allows loopback).
	BYOMAllow    string
	BYOMAllowSet bool
	// BYOMMaxCalls bounds the calls to customer-owned models one worker
	// process makes at once, BYOMMaxCallsPerAccount those of one account
	// in it.
	BYOMMaxCalls, BYOMMaxCallsPerAccount int
}

// HTTPLimits bound the connections, headers and time a client can hold on the
// public and admin HTTP servers.
type HTTPLimits struct {
	// MaxHeaderBytes bounds a request's header block.
	MaxHeaderBytes int
	// MaxConns bounds the open connections of one server; MaxConnsPerAddr
	// those from one client address. Zero is no bound.
	MaxConns, MaxConnsPerAddr int
	// ReadHeaderTimeout bounds the reading of a request's headers,
	// ReadTimeout the reading of the whole request, WriteTimeout the writing
	// of a response (an event stream extends it at each write), IdleTimeout
	// how long a keep-alive connection waits for its next request.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxBodiesPerAccount bounds the request bodies being read at a time
	// for the keys of one account (the query and chat endpoints of the
	// public API); zero is no bound.
	MaxBodiesPerAccount int
}

// ExtractLimits bound the child processes that extract uploads' text.
type ExtractLimits struct {
	// MemoryMB is the MiB all the children running at once may take
	// together; zero: a quarter of the process's memory (its cgroup's
	// limit or GOMEMLIMIT, else the machine's).
	MemoryMB int
	// ChildMemoryMB is one child's memory limit in MiB.
	ChildMemoryMB int
	// CPUSeconds is one child's CPU time limit.
	CPUSeconds int
	// AccountCPUSeconds is the CPU time one account's children may use in
	// an hour, per process; zero is no bound.
	AccountCPUSeconds int
}

// MinAdminTokenLen is the shortest admin token accepted.
const MinAdminTokenLen = 16

// MinAdminTokenDistinct is the fewest distinct characters an admin token
// holds: 16 of one character are as long as a random token and guessed at
// once. A random hex token of 16 characters has fewer than 6 distinct ones
// about once in 20,000; of 64 (openssl rand -hex 32), never.
const MinAdminTokenDistinct = 6

// CheckAdminToken returns an error for an admin token that is too short or
// too repetitive to resist guessing, or that still holds the example
// secret file's placeholder text. The error never contains the token.
func CheckAdminToken(token string) error {
	if len(token) < MinAdminTokenLen {
		return fmt.Errorf("CROSSCHECK_ADMIN_TOKEN is %d characters; it must be at least %d (for example: openssl rand -hex 32)", len(token), MinAdminTokenLen)
	}
	distinct := map[rune]bool{}
	for _, c := range token {
		distinct[c] = true
	}
	if len(distinct) < MinAdminTokenDistinct {
		return fmt.Errorf("CROSSCHECK_ADMIN_TOKEN holds %d distinct characters; it must hold at least %d: set a random token (for example: openssl rand -hex 32)", len(distinct), MinAdminTokenDistinct)
	}
	if strings.ContainsAny(token, " \t\r\n") || strings.Contains(strings.ToLower(token), "replace with") {
		return errors.New("CROSSCHECK_ADMIN_TOKEN holds white space or the example's placeholder text; set a random token (for example: openssl rand -hex 32)")
	}
	return nil
}

// NATSAuth is how the service authenticates to an external NATS; every
// field is optional.
type NATSAuth struct {
	// CredsFile is a user credentials file (JWT and NKey seed);
	// NKeySeedFile a file holding a user NKey seed; Token a token.
	CredsFile, NKeySeedFile, Token string
	// TLSCA verifies the servers; TLSCert and TLSKey are the client's
	// certificate, for servers that require one.
	TLSCA, TLSCert, TLSKey string
}

// Defaults returns the settings with nothing set.
func Defaults() Config {
	return Config{
		HTTPAddr:            "127.0.0.1:8080",
		AdminAddr:           "127.0.0.1:8081",
		DataDir:             "./data",
		NATSListen:          NATSListenAuto,
		Replicas:            1,
		SyncAlways:          true,
		LogLevel:            "info",
		WorkerAckWait:       10 * time.Second,
		WorkerMaxJobs:       16384,
		WorkerMaxFailures:   10,
		WorkerMaxCrashes:    3,
		QueryTimeout:        8 * time.Minute,
		ShutdownGrace:       10 * time.Second,
		StartTimeout:        2 * time.Minute,
		ModelTimeout:        120 * time.Second,
		SSEHeartbeat:        15 * time.Second,
		SSEMaxStreams:       256,
		SSEMaxStreamsPerKey: 16,
		// A quarter of the process's streams: one account never holds them
		// all, whatever the number of its keys.
		SSEMaxStreamsPerAccount: 64,
		AccountMaxKeys:          16,
		// A tenth of a core per key: about 100 ordinary estimates a second,
		// under one of the largest (0.14 s).
		EstimateRate:          100 * time.Millisecond,
		FilesMaxAccountMB:     2048,
		FilesMaxUploadsPerDay: 10000,
		InflightPerAccount:    64,
		CancelChargePercent:   10,
		StoreMinFreeMB:        512,
		Extract:               ExtractLimits{ChildMemoryMB: 256, CPUSeconds: 10, AccountCPUSeconds: 300},
		SnapshotEvery:         250,
		SnapshotInterval:      time.Minute,
		HTTP: HTTPLimits{
			MaxHeaderBytes:    32 << 10,
			MaxConns:          4096,
			MaxConnsPerAddr:   256,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       60 * time.Second,
			// Four keys' worth (16 each): 16 MiB of bodies of 256 KiB.
			MaxBodiesPerAccount: 64,
		},
		PrintFirstKey:          true,
		BYOMMaxCalls:           64,
		BYOMMaxCallsPerAccount: 16,
	}
}

// FromEnv reads the CROSSCHECK_* variables over the defaults.
func FromEnv() (Config, error) {
	c := Defaults()
	str := func(name string, dst *string) {
		if v, ok := os.LookupEnv(name); ok && v != "" {
			*dst = v
		}
	}
	str("CROSSCHECK_HTTP_ADDR", &c.HTTPAddr)
	str("CROSSCHECK_ADMIN_ADDR", &c.AdminAddr)
	str("CROSSCHECK_ADMIN_TOKEN", &c.AdminToken)
	str("CROSSCHECK_DATA_DIR", &c.DataDir)
	str("CROSSCHECK_NATS_URL", &c.NATSURL)
	str("CROSSCHECK_NATS_LISTEN", &c.NATSListen)
	str("CROSSCHECK_NATS_CREDS", &c.NATSAuth.CredsFile)
	str("CROSSCHECK_NATS_NKEY", &c.NATSAuth.NKeySeedFile)
	str("CROSSCHECK_NATS_TOKEN", &c.NATSAuth.Token)
	str("CROSSCHECK_NATS_TLS_CA", &c.NATSAuth.TLSCA)
	str("CROSSCHECK_NATS_TLS_CERT", &c.NATSAuth.TLSCert)
	str("CROSSCHECK_NATS_TLS_KEY", &c.NATSAuth.TLSKey)
	str("CROSSCHECK_CONFIG", &c.ConfigFile)
	str("CROSSCHECK_DOCS_URL", &c.DocsURL)
	str("CROSSCHECK_MASTER_KEY", &c.MasterKey)
	c.BYOMAllow, c.BYOMAllowSet = os.LookupEnv("CROSSCHECK_BYOM_ALLOW")
	str("CROSSCHECK_LOG_LEVEL", &c.LogLevel)
	var errs []string
	dur := func(name string, dst *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Sprintf("%s=%q is not a Go duration such as 250ms", name, v))
				return
			}
			*dst = d
		}
	}
	dur("CROSSCHECK_SIM_LATENCY", &c.SimLatency)
	dur("CROSSCHECK_WORKER_ACK_WAIT", &c.WorkerAckWait)
	dur("CROSSCHECK_SHUTDOWN_GRACE", &c.ShutdownGrace)
	dur("CROSSCHECK_SHUTDOWN_DRAIN", &c.ShutdownDrain)
	dur("CROSSCHECK_START_TIMEOUT", &c.StartTimeout)
	dur("CROSSCHECK_MODEL_TIMEOUT", &c.ModelTimeout)
	dur("CROSSCHECK_QUERY_TIMEOUT", &c.QueryTimeout)
	dur("CROSSCHECK_SSE_HEARTBEAT", &c.SSEHeartbeat)
	dur("CROSSCHECK_ESTIMATE_RATE", &c.EstimateRate)
	dur("CROSSCHECK_HTTP_READ_HEADER_TIMEOUT", &c.HTTP.ReadHeaderTimeout)
	dur("CROSSCHECK_HTTP_READ_TIMEOUT", &c.HTTP.ReadTimeout)
	dur("CROSSCHECK_HTTP_WRITE_TIMEOUT", &c.HTTP.WriteTimeout)
	dur("CROSSCHECK_HTTP_IDLE_TIMEOUT", &c.HTTP.IdleTimeout)
	dur("CROSSCHECK_SNAPSHOT_INTERVAL", &c.SnapshotInterval)
	integer := func(name string, dst *int, lo int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo {
				errs = append(errs, fmt.Sprintf("%s=%q must be a whole number of at least %d", name, v, lo))
				return
			}
			*dst = n
		}
	}
	integer("CROSSCHECK_REPLICAS", &c.Replicas, 1)
	integer("CROSSCHECK_WORKER_MAX_JOBS", &c.WorkerMaxJobs, 1)
	integer("CROSSCHECK_WORKER_MAX_FAILURES", &c.WorkerMaxFailures, 1)
	integer("CROSSCHECK_WORKER_MAX_CRASHES", &c.WorkerMaxCrashes, 1)
	integer("CROSSCHECK_HTTP_MAX_HEADER_BYTES", &c.HTTP.MaxHeaderBytes, 4096)
	integer("CROSSCHECK_SSE_MAX_STREAMS", &c.SSEMaxStreams, 0)
	integer("CROSSCHECK_SSE_MAX_STREAMS_PER_KEY", &c.SSEMaxStreamsPerKey, 0)
	integer("CROSSCHECK_SSE_MAX_STREAMS_PER_ACCOUNT", &c.SSEMaxStreamsPerAccount, 0)
	integer("CROSSCHECK_HTTP_MAX_BODIES_PER_ACCOUNT", &c.HTTP.MaxBodiesPerAccount, 0)
	integer("CROSSCHECK_ACCOUNT_MAX_KEYS", &c.AccountMaxKeys, 1)
	integer("CROSSCHECK_FILES_MAX_ACCOUNT_MB", &c.FilesMaxAccountMB, 0)
	integer("CROSSCHECK_FILES_MAX_UPLOADS_PER_DAY", &c.FilesMaxUploadsPerDay, 0)
	integer("CROSSCHECK_INFLIGHT_PER_ACCOUNT", &c.InflightPerAccount, 0)
	integer("CROSSCHECK_CANCEL_CHARGE_PERCENT", &c.CancelChargePercent, 0)
	if c.CancelChargePercent > 100 {
		errs = append(errs, fmt.Sprintf("CROSSCHECK_CANCEL_CHARGE_PERCENT=%d must be a percentage from 0 to 100", c.CancelChargePercent))
	}
	integer("CROSSCHECK_STORE_MIN_FREE_MB", &c.StoreMinFreeMB, 0)
	integer("CROSSCHECK_EXTRACT_MEMORY_MB", &c.Extract.MemoryMB, 0)
	integer("CROSSCHECK_EXTRACT_CHILD_MEMORY_MB", &c.Extract.ChildMemoryMB, 128)
	integer("CROSSCHECK_EXTRACT_CPU_SECONDS", &c.Extract.CPUSeconds, 1)
	integer("CROSSCHECK_EXTRACT_ACCOUNT_CPU_SECONDS", &c.Extract.AccountCPUSeconds, 0)
	integer("CROSSCHECK_SNAPSHOT_EVERY", &c.SnapshotEvery, 1)
	integer("CROSSCHECK_HTTP_MAX_CONNS", &c.HTTP.MaxConns, 0)
	integer("CROSSCHECK_HTTP_MAX_CONNS_PER_ADDR", &c.HTTP.MaxConnsPerAddr, 0)
	if v := os.Getenv("CROSSCHECK_TRUST_TRACEPARENT"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("CROSSCHECK_TRUST_TRACEPARENT=%q must be true or false", v))
		}
		c.TrustTraceparent = b
	}
	integer("CROSSCHECK_BYOM_MAX_CALLS", &c.BYOMMaxCalls, 1)
	integer("CROSSCHECK_BYOM_MAX_CALLS_PER_ACCOUNT", &c.BYOMMaxCallsPerAccount, 1)
	if v := os.Getenv("CROSSCHECK_PRINT_FIRST_KEY"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("CROSSCHECK_PRINT_FIRST_KEY=%q must be true or false", v))
		}
		c.PrintFirstKey = b
	}
	if c.AdminToken != "" {
		if err := CheckAdminToken(c.AdminToken); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"CROSSCHECK_HTTP_READ_HEADER_TIMEOUT", c.HTTP.ReadHeaderTimeout}, {"CROSSCHECK_HTTP_READ_TIMEOUT", c.HTTP.ReadTimeout},
		{"CROSSCHECK_HTTP_WRITE_TIMEOUT", c.HTTP.WriteTimeout}, {"CROSSCHECK_HTTP_IDLE_TIMEOUT", c.HTTP.IdleTimeout}} {
		if d.d == 0 {
			errs = append(errs, d.name+" must be a positive duration: a connection is never held without a bound")
		}
	}
	if v := os.Getenv("CROSSCHECK_SYNC_INTERVAL"); v != "" {
		if strings.EqualFold(v, "always") {
			c.SyncAlways = true
		} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
			c.SyncAlways, c.SyncInterval = false, d
		} else {
			errs = append(errs, fmt.Sprintf("CROSSCHECK_SYNC_INTERVAL=%q must be \"always\" or a positive Go duration", v))
		}
	}
	if err := checkNATSListen(c.NATSListen); err != nil {
		errs = append(errs, err.Error())
	}
	if (c.NATSAuth.TLSCert == "") != (c.NATSAuth.TLSKey == "") {
		errs = append(errs, "CROSSCHECK_NATS_TLS_CERT and CROSSCHECK_NATS_TLS_KEY go together")
	}
	if c.NATSURL == "" && c.NATSAuth != (NATSAuth{}) {
		errs = append(errs, "CROSSCHECK_NATS_CREDS, _NKEY, _TOKEN and _TLS_* apply to CROSSCHECK_NATS_URL, which is not set")
	}
	if c.SSEMaxStreams > 0 && (c.SSEMaxStreamsPerAccount == 0 || c.SSEMaxStreamsPerAccount >= c.SSEMaxStreams) {
		if os.Getenv("CROSSCHECK_SSE_MAX_STREAMS_PER_ACCOUNT") == "" {
			// The default, under a lower process bound: a quarter of it.
			c.SSEMaxStreamsPerAccount = max(1, c.SSEMaxStreams/4)
		} else {
			errs = append(errs, fmt.Sprintf("CROSSCHECK_SSE_MAX_STREAMS_PER_ACCOUNT (%d) must be between 1 and CROSSCHECK_SSE_MAX_STREAMS (%d) less one: one account must not hold every stream of the process", c.SSEMaxStreamsPerAccount, c.SSEMaxStreams))
		}
	}
	if c.EstimateRate < time.Millisecond || c.EstimateRate > time.Second {
		errs = append(errs, "CROSSCHECK_ESTIMATE_RATE must be from 1ms to 1s: the time of estimating one API key may spend per second")
	}
	if c.Extract.MemoryMB != 0 && c.Extract.MemoryMB < c.Extract.ChildMemoryMB {
		errs = append(errs, fmt.Sprintf("CROSSCHECK_EXTRACT_MEMORY_MB=%d must be 0 (a quarter of the process's memory) or at least CROSSCHECK_EXTRACT_CHILD_MEMORY_MB (%d): room for one extraction", c.Extract.MemoryMB, c.Extract.ChildMemoryMB))
	}
	if c.SnapshotInterval < time.Second {
		errs = append(errs, "CROSSCHECK_SNAPSHOT_INTERVAL must be at least 1s")
	}
	if c.WorkerAckWait < time.Second {
		errs = append(errs, "CROSSCHECK_WORKER_ACK_WAIT must be at least 1s")
	}
	if c.QueryTimeout < time.Second {
		errs = append(errs, "CROSSCHECK_QUERY_TIMEOUT must be at least 1s: every query's time is bounded")
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("settings: %s", strings.Join(errs, "; "))
	}
	return c, nil
}

// The values of CROSSCHECK_NATS_LISTEN besides a host:port.
const (
	NATSListenAuto = "auto"
	NATSListenOff  = "off"
)

func checkNATSListen(v string) error {
	if v == NATSListenAuto || v == NATSListenOff {
		return nil
	}
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil || !IsLoopback(host) {
		return fmt.Errorf("CROSSCHECK_NATS_LISTEN=%q must be auto, off or a loopback host:port such as 127.0.0.1:4222: the embedded server takes no TLS, so it never listens beyond this machine", v)
	}
	return nil
}

// IsLoopback reports whether host (a name or an address, without a port)
// is localhost or a loopback address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NATSListenAddr returns the address the embedded server of crosscheck
// serve listens on for NATS clients, and false when it listens on none:
// CROSSCHECK_NATS_LISTEN's host:port, or with "auto" a free loopback port
// when both HTTP addresses are loopback ones.
func (c Config) NATSListenAddr() (string, bool) {
	switch c.NATSListen {
	case NATSListenOff:
		return "", false
	case NATSListenAuto, "":
		for _, addr := range []string{c.HTTPAddr, c.AdminAddr} {
			host, _, err := net.SplitHostPort(addr)
			if err != nil || !IsLoopback(host) {
				return "", false
			}
		}
		return "127.0.0.1:0", true
	}
	return c.NATSListen, true
}
