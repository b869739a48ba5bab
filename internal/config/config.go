// Package config reads the operator settings from the environment.
package config

import (
	"fmt"
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
	NATSURL    string
	NATSAuth   NATSAuth
	ConfigFile string
	SimLatency time.Duration
	Replicas   int
	// SyncAlways makes the embedded server fsync every write before it acks;
	// otherwise it fsyncs every SyncInterval (zero: the server's default, 2 min).
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
		HTTPAddr:          "127.0.0.1:8080",
		AdminAddr:         "127.0.0.1:8081",
		DataDir:           "./data",
		Replicas:          1,
		LogLevel:          "info",
		WorkerAckWait:     10 * time.Second,
		WorkerMaxJobs:     16384,
		WorkerMaxFailures: 10,
		ShutdownGrace:     10 * time.Second,
		StartTimeout:      2 * time.Minute,
		ModelTimeout:      120 * time.Second,
		SSEHeartbeat:      15 * time.Second,
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
	str("CROSSCHECK_NATS_CREDS", &c.NATSAuth.CredsFile)
	str("CROSSCHECK_NATS_NKEY", &c.NATSAuth.NKeySeedFile)
	str("CROSSCHECK_NATS_TOKEN", &c.NATSAuth.Token)
	str("CROSSCHECK_NATS_TLS_CA", &c.NATSAuth.TLSCA)
	str("CROSSCHECK_NATS_TLS_CERT", &c.NATSAuth.TLSCert)
	str("CROSSCHECK_NATS_TLS_KEY", &c.NATSAuth.TLSKey)
	str("CROSSCHECK_CONFIG", &c.ConfigFile)
	str("CROSSCHECK_DOCS_URL", &c.DocsURL)
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
	dur("CROSSCHECK_SSE_HEARTBEAT", &c.SSEHeartbeat)
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
	if v := os.Getenv("CROSSCHECK_SYNC_INTERVAL"); v != "" {
		if strings.EqualFold(v, "always") {
			c.SyncAlways = true
		} else if d, err := time.ParseDuration(v); err == nil && d > 0 {
			c.SyncInterval = d
		} else {
			errs = append(errs, fmt.Sprintf("CROSSCHECK_SYNC_INTERVAL=%q must be \"always\" or a positive Go duration", v))
		}
	}
	if (c.NATSAuth.TLSCert == "") != (c.NATSAuth.TLSKey == "") {
		errs = append(errs, "CROSSCHECK_NATS_TLS_CERT and CROSSCHECK_NATS_TLS_KEY go together")
	}
	if c.NATSURL == "" && c.NATSAuth != (NATSAuth{}) {
		errs = append(errs, "CROSSCHECK_NATS_CREDS, _NKEY, _TOKEN and _TLS_* apply to CROSSCHECK_NATS_URL, which is not set")
	}
	if c.WorkerAckWait < time.Second {
		errs = append(errs, "CROSSCHECK_WORKER_ACK_WAIT must be at least 1s")
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("settings: %s", strings.Join(errs, "; "))
	}
	return c, nil
}
