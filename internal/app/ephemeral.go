package app

import (
	"time"

	"github.com/crosscheck/crosscheck/internal/config"
)

// EphemeralConfig returns the settings of a throwaway process, as tests and
// examples run it: its data in dataDir, both APIs on free loopback ports, a
// fixed admin token, short waits for redelivery and shutdown, and no SSE
// heartbeat to speak of.
func EphemeralConfig(dataDir string) config.Config {
	cfg := config.Defaults()
	cfg.DataDir = dataDir
	cfg.HTTPAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.AdminToken = "test-admin-token"
	cfg.WorkerAckWait = time.Second
	cfg.ShutdownGrace = 2 * time.Second
	cfg.WorkerMaxJobs = 1024
	cfg.SSEHeartbeat = time.Hour
	// Loopback on every port: a test's model hosts listen on random ones.
	cfg.BYOMAllow, cfg.BYOMAllowSet = "127.0.0.0/8,::1,localhost", true
	return cfg
}
