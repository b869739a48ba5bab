// Package embedded runs a nats-server with JetStream inside the process: the
// default that needs nothing installed.
package embedded

import (
	"crypto/rand"
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
	// Port, when non-zero, listens for clients of other processes on
	// 127.0.0.1:Port (-1 picks a free port), with Token. Zero serves this
	// process alone: see Start.
	Port int
	// Token, when set, is required of every client.
	Token string
}

// Limits of a server that serves its own process alone (Options.Port
// zero): the process opens a connection in process and one on the
// listener, and both count; a client of another process, which cannot know
// the token, is refused within privateAuthTimeout, and together they hold
// at most privateMaxConn connections.
const (
	privateMaxConn     = 16
	privateAuthTimeout = 1 // second
)

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	token string
	lock  *DirLock
}

// Start takes the exclusive lock of the data dir (an error wrapping
// ErrLocked names the process that holds it), starts the server and waits
// until it is ready for connections.
//
// A server for this process alone (Port zero) listens on a free port of
// 127.0.0.1 with a random token that never leaves the process, for
// ConnectLoopback.
func Start(o Options) (*Server, error) {
	lock, err := Lock(o.DataDir)
	if err != nil {
		return nil, err
	}
	private := o.Port == 0
	if private {
		o.Port = -1
		if o.Token == "" {
			o.Token = rand.Text()
		}
	}
	opts := &server.Options{
		ServerName:         "crosscheck-embedded",
		JetStream:          true,
		StoreDir:           filepath.Join(o.DataDir, "jetstream"),
		SyncAlways:         o.SyncAlways,
		SyncInterval:       o.SyncInterval,
		NoSigs:             true,
		NoLog:              true,
		Host:               "127.0.0.1",
		Port:               o.Port,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
		Authorization:      o.Token,
	}
	if private {
		opts.MaxConn, opts.AuthTimeout = privateMaxConn, privateAuthTimeout
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

// Connect opens an in-process client connection to the server: for the
// process's requests, each of which waits for its answer (an append, a
// read). Its round trip is about a millisecond shorter per query than over
// the loopback socket.
func (s *Server) Connect(name string) (*nats.Conn, error) {
	return s.connect("", nats.InProcessServer(s.Server), name)
}

// ConnectLoopback opens a client connection to the server on its loopback
// listener: for reading the streams in bulk (the projections, a rebuild,
// an audit, an export). The in-process pipe hands every write to the
// reader in turn; over the socket, the server writes on while the client
// decodes, and a rebuild of the query read model runs about a tenth
// faster (docs/BENCHMARKS.md).
func (s *Server) ConnectLoopback(name string) (*nats.Conn, error) {
	return s.connect(s.ClientURL(), nats.Name(name), name)
}

func (s *Server) connect(url string, via nats.Option, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, via, nats.Name(name), nats.MaxReconnects(-1), nats.Token(s.token))
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
