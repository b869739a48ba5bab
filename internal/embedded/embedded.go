// Package embedded runs a nats-server with JetStream inside the process: the
// default that needs nothing installed.
package embedded

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	token string
	lock  *DirLock
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
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		lock.Unlock()
		return nil, fmt.Errorf("embedded nats-server: not ready after 30s on %s", o.DataDir)
	}
	return &Server{Server: s, token: o.Token, lock: lock}, nil
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
