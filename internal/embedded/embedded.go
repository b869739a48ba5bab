// Package embedded runs a nats-server with JetStream inside the process: the
// default that needs nothing installed.
package embedded

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	// Port, when non-zero, also listens for clients on Host:Port (-1 picks
	// a free port). Zero serves in-process connections only.
	Port int
	// Host is the address Port listens on; empty is 127.0.0.1.
	Host string
	// Token, when set, is required of every client.
	Token string
	// Advertise, with Port and Token, writes the server's client URL and
	// token into the data dir (URLFile, TokenFile) for the commands that
	// run beside it, and removes them at Stop.
	Advertise bool
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
	// running is the data dir's RunningFile; unclean says it was there
	// when the server started, recovered that its owner recovered from
	// that.
	running            string
	unclean, recovered bool
	// advertised is the data dir the server advertised its port in.
	advertised string
}

// RunningFile is the file of the data dir that says a server runs on it:
// written at start, removed when the server stops. Found at a start, it
// says the last server on the data dir did not stop (its process crashed,
// or the machine lost power): see Unclean.
const RunningFile = "RUNNING"

// Start takes the exclusive lock of the data dir (an error wrapping
// ErrLocked names the process that holds it), marks the data dir as in use
// (RunningFile), starts the server and waits until it is ready for
// connections.
func Start(o Options) (*Server, error) {
	lock, err := Lock(o.DataDir)
	if err != nil {
		return nil, err
	}
	// What a server killed before its Stop advertised is not true now.
	_ = os.Remove(filepath.Join(o.DataDir, URLFile))
	_ = os.Remove(filepath.Join(o.DataDir, TokenFile))
	running := filepath.Join(o.DataDir, RunningFile)
	_, statErr := os.Stat(running)
	unclean := statErr == nil
	if err := writeSynced(running, []byte(strconv.Itoa(os.Getpid())+"\n")); err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("data dir: %w", err)
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
		Host:               cmp.Or(o.Host, "127.0.0.1"),
		Port:               o.Port,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
		Authorization:      o.Token,
	}
	// A start that fails leaves the mark as it found it.
	unmark := func() {
		if !unclean {
			_ = os.Remove(running)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		unmark()
		lock.Unlock()
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	s.SetLoggerV2(serverLog{o.Log.With().Str("component", "nats-server").Logger()}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		unmark()
		lock.Unlock()
		return nil, fmt.Errorf("embedded nats-server: not ready after 30s on %s", o.DataDir)
	}
	js := server.JetStreamConfig{
		StoreDir: opts.StoreDir, MaxMemory: opts.JetStreamMaxMemory, MaxStore: opts.JetStreamMaxStore,
		SyncAlways: opts.SyncAlways, SyncInterval: opts.SyncInterval, Strict: !opts.NoJetStreamStrict,
	}
	srv := &Server{Server: s, token: o.Token, lock: lock, js: js, running: running, unclean: unclean}
	if o.Advertise && o.Port != 0 {
		if o.Token == "" {
			s.Shutdown()
			unmark()
			lock.Unlock()
			return nil, errors.New("embedded nats-server: a port advertised in the data dir needs a token")
		}
		srv.advertised = o.DataDir
		if err := srv.advertise(o.DataDir); err != nil {
			srv.unadvertise()
			s.Shutdown()
			unmark()
			lock.Unlock()
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	return srv, nil
}

// writeSynced writes data to the file path and syncs it and its directory,
// so that it is there after a power cut.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// Unclean reports whether the last server on the data dir did not stop
// (its process crashed, or the machine lost power): streams synced each on
// its own timer may then disagree. The data dir stays marked unclean, for
// every later start, until a server's owner calls Recovered.
func (s *Server) Unclean() bool { return s.unclean }

// Recovered says that the owner has brought the store back to agreement
// after an unclean stop: the next Stop leaves the data dir marked clean.
func (s *Server) Recovered() { s.recovered = true }

// ErrRefusesWrites is in the chain of Health's error when JetStream refuses
// writes until it restarts: it is disabled, or a stream (a bucket's stream
// among them) failed a write and keeps refusing every write since, as a
// stream of a full disk does.
var ErrRefusesWrites = errors.New("JetStream refuses writes")

// Health returns nil when JetStream is enabled and every stream was
// recovered and takes writes, and otherwise an error with the server's own
// reason, wrapping ErrRefusesWrites when a restart of JetStream is what
// lets it write again.
func (s *Server) Health() error {
	h := s.Healthz(nil)
	if h == nil || h.Error == "" && h.StatusCode < 300 {
		return nil
	}
	reason := h.Error
	if reason == "" {
		reason = fmt.Sprintf("nats-server health: %s (%d)", h.Status, h.StatusCode)
	}
	if !s.JetStreamEnabled() || strings.Contains(reason, "write error") {
		return fmt.Errorf("%w: %s", ErrRefusesWrites, reason)
	}
	return errors.New(reason)
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
	// Every client's goroutine is waited past the messages it has read
	// (Connz takes each client's lock, which its read loop takes after
	// each read): the server's JetStream API dispatch, which read the
	// request queues of the JetStream that stopped, is then done with
	// them before EnableJetStream replaces them (nats-server does not
	// order the two itself; the race detector saw it).
	if _, err := s.Connz(&server.ConnzOptions{Limit: 1 << 16}); err != nil {
		return fmt.Errorf("wait for the server's clients: %w", err)
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

// Stop shuts the server down and waits for it to finish, flushing its
// store; the data dir is then marked clean, unless it was found unclean
// and not Recovered.
func (s *Server) Stop() {
	s.unadvertise()
	s.Shutdown()
	s.WaitForShutdown()
	if !s.unclean || s.recovered {
		_ = os.Remove(s.running)
	}
	s.lock.Unlock()
}
