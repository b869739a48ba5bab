// Package embedded runs a nats-server with JetStream inside the process: the
// default that needs nothing installed.
package embedded

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Options configure the embedded server.
type Options struct {
	// DataDir holds the JetStream store, in DataDir/jetstream.
	DataDir string
	// SyncAlways fsyncs every write before it is acknowledged.
	SyncAlways bool
	// SyncInterval is the fsync interval when SyncAlways is off; zero keeps
	// the server's default.
	SyncInterval time.Duration
	// Port, when non-zero, also listens for clients on 127.0.0.1:Port (-1 picks
	// a free port). Zero serves in-process connections only.
	Port int
	// Token, when set, is required of every client.
	Token string
	// Log receives the server's warnings and errors (its notices at debug
	// level); the zero Logger discards them.
	Log zerolog.Logger
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	token string
	lock  *DirLock
	// js is the JetStream configuration the server started with, which a
	// restart of JetStream starts it with again.
	js server.JetStreamConfig
}

// Start takes the exclusive lock of the data dir (an error wrapping
// ErrLocked names the process that holds it), starts the server and waits
// until it is ready for connections.
func Start(o Options) (*Server, error) {
	lock, err := Lock(o.DataDir)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:         "crosscheck-embedded",
		JetStream:          true,
		StoreDir:           filepath.Join(o.DataDir, "jetstream"),
		SyncAlways:         o.SyncAlways,
		SyncInterval:       o.SyncInterval,
		NoSigs:             true,
		NoLog:              true,
		DontListen:         o.Port == 0,
		Host:               "127.0.0.1",
		Port:               o.Port,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
		Authorization:      o.Token,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	s.SetLoggerV2(serverLog{o.Log.With().Str("component", "nats-server").Logger()}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		lock.Unlock()
		return nil, fmt.Errorf("embedded nats-server: not ready after 30s on %s", o.DataDir)
	}
	js := server.JetStreamConfig{
		StoreDir: opts.StoreDir, MaxMemory: opts.JetStreamMaxMemory, MaxStore: opts.JetStreamMaxStore,
		SyncAlways: opts.SyncAlways, SyncInterval: opts.SyncInterval, Strict: !opts.NoJetStreamStrict,
	}
	return &Server{Server: s, token: o.Token, lock: lock, js: js}, nil
}

// Health returns nil when JetStream is enabled and takes writes, and
// otherwise an error with the server's own reason: JetStream disabled, or a
// stream (a bucket's stream among them) that failed a write and refuses
// every write since, as a stream of a full disk does.
func (s *Server) Health() error {
	h := s.Healthz(nil)
	if h == nil || h.Error == "" && h.StatusCode < 300 {
		return nil
	}
	if h.Error == "" {
		return fmt.Errorf("nats-server health: %s (%d)", h.Status, h.StatusCode)
	}
	return errors.New(h.Error)
}

// RestartJetStream stops JetStream and starts it again on the same store,
// as the server started it: every stream and consumer is recovered from
// disk, and a stream that had failed a write (the disk was full) takes
// writes again. Client connections stay open; their consumers resume once
// the server knows them again (ordered consumers recreate themselves).
func (s *Server) RestartJetStream() error {
	if s.JetStreamEnabled() {
		if err := s.ShutdownJetStream(); err != nil {
			return fmt.Errorf("stop JetStream: %w", err)
		}
	}
	cfg := s.js
	if err := s.EnableJetStream(&cfg); err != nil {
		return fmt.Errorf("start JetStream: %w", err)
	}
	return nil
}

// FreeBytes returns the bytes free for the server's store on its file
// system (those an unprivileged process may use).
func (s *Server) FreeBytes() (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.js.StoreDir, &st); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", s.js.StoreDir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// Connect opens an in-process client connection to the server.
func (s *Server) Connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect("", nats.InProcessServer(s.Server), nats.Name(name), nats.MaxReconnects(-1), nats.Token(s.token))
	if err != nil {
		return nil, fmt.Errorf("connect to embedded nats-server: %w", err)
	}
	return nc, nil
}

// Stop shuts the server down and waits for it to finish, flushing its store.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
	s.lock.Unlock()
}
