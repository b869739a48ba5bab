package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// startEmbedded starts the embedded nats-server on cfg's data dir, its
// warnings and errors logged to log, connects to it as name and opens the
// event store. With listen, the server also listens for NATS clients where
// cfg.NATSListenAddr says, with a token of its own, and advertises both in
// the data dir for crosscheck events. On an error nothing is left running.
func startEmbedded(ctx context.Context, cfg config.Config, name string, log zerolog.Logger, listen bool) (*embedded.Server, *nats.Conn, *eventstore.Store, error) {
	opts := embedded.Options{DataDir: cfg.DataDir, SyncAlways: cfg.SyncAlways, SyncInterval: cfg.SyncInterval, Log: log}
	if addr, ok := cfg.NATSListenAddr(); listen && ok {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("CROSSCHECK_NATS_LISTEN: %w", err)
		}
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return nil, nil, nil, fmt.Errorf("CROSSCHECK_NATS_LISTEN: %w", err)
		}
		if opts.Port == 0 {
			opts.Port = -1 // a free port
		}
		opts.Token, opts.Advertise = "xnats_"+rand.Text(), true
	}
	srv, err := embedded.Start(opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if opts.Advertise {
		log.Info().Str("nats_url", srv.ClientURL()).Str("token_file", filepath.Join(cfg.DataDir, embedded.TokenFile)).Msg("the embedded NATS server listens for clients (crosscheck events)")
	}
	nc, err := srv.Connect(name)
	if err != nil {
		srv.Stop()
		return nil, nil, nil, err
	}
	store, err := eventstore.Open(ctx, nc, cfg.Replicas)
	if err != nil {
		nc.Close()
		srv.Stop()
		return nil, nil, nil, err
	}
	return srv, nc, store, nil
}

// OpenStore opens the event store of cfg for a command that runs beside
// the service (audit, events, the benchmark): CROSSCHECK_NATS_URL, or the
// embedded data dir, which no running serve may hold. close releases it.
func OpenStore(ctx context.Context, cfg config.Config) (store *eventstore.Store, close func(), err error) {
	log := zerolog.New(os.Stderr).With().Timestamp().Logger().Level(zerolog.WarnLevel)
	if cfg.NATSURL != "" {
		nc, store, err := openShared(ctx, cfg, "crosscheck-offline", log)
		if err != nil {
			return nil, nil, err
		}
		return store, nc.Close, nil
	}
	srv, nc, store, err := startEmbedded(ctx, cfg, "crosscheck-audit", log, false)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (stop `crosscheck serve` on this data dir first, or set CROSSCHECK_NATS_URL)", err)
	}
	return store, func() {
		nc.Close()
		srv.Stop()
	}, nil
}

// openEventsStore opens the store of cfg for `crosscheck events`: it refuses
// a data dir without an event store, and its errors name no credential of
// CROSSCHECK_NATS_URL.
func openEventsStore(cfg config.Config) func(ctx context.Context) (*eventstore.Store, func(), error) {
	return func(ctx context.Context) (*eventstore.Store, func(), error) {
		if cfg.NATSURL == "" {
			// A running serve holds the data dir: read its store through the
			// port and token it advertises there.
			url, token, err := embedded.Advertised(cfg.DataDir)
			switch {
			case err == nil:
				cfg.NATSURL, cfg.NATSAuth.Token = url, token
				cfg.StartTimeout = min(cfg.StartTimeout, 10*time.Second)
			case errors.Is(err, embedded.ErrLocked):
				return nil, nil, fmt.Errorf("%w\n  it listens for NATS clients on no port (CROSSCHECK_NATS_LISTEN=off, or its HTTP addresses are not loopback ones): stop it first, or restart it with CROSSCHECK_NATS_LISTEN=127.0.0.1:4222 and set CROSSCHECK_NATS_URL=nats://127.0.0.1:4222 and CROSSCHECK_NATS_TOKEN=$(cat %s) here", err, filepath.Join(cfg.DataDir, embedded.TokenFile))
			}
		}
		if cfg.NATSURL == "" {
			// Opening a data dir that does not exist would create an empty
			// store and export nothing: a mistyped CROSSCHECK_DATA_DIR must
			// not pass for an empty history.
			if _, err := os.Stat(filepath.Join(cfg.DataDir, "jetstream")); err != nil {
				return nil, nil, fmt.Errorf("no event store in %s (set CROSSCHECK_DATA_DIR, or CROSSCHECK_NATS_URL)", cfg.DataDir)
			}
		}
		store, closeStore, err := OpenStore(ctx, cfg)
		if err != nil {
			return nil, nil, errors.New(eventstore.RedactURLs(err.Error(), cfg.NATSURL))
		}
		return store, closeStore, nil
	}
}

// openShared connects to CROSSCHECK_NATS_URL and opens the event store,
// waiting up to CROSSCHECK_START_TIMEOUT for a NATS that is not reachable
// yet or a JetStream that cannot answer yet (a cluster starting, or getting
// its quorum back, before it has elected its leaders). A refused login is
// not waited for.
func openShared(ctx context.Context, cfg config.Config, name string, log zerolog.Logger) (*nats.Conn, *eventstore.Store, error) {
	deadline := time.Now().Add(cfg.StartTimeout)
	delay := 500 * time.Millisecond
	var nc *nats.Conn
	for {
		var err error
		if nc == nil {
			nc, err = eventstore.Connect(cfg.NATSURL, name, cfg.NATSAuth)
		}
		if err == nil {
			attempt, cancel := context.WithTimeout(ctx, 15*time.Second)
			var store *eventstore.Store
			store, err = eventstore.Open(attempt, nc, cfg.Replicas)
			cancel()
			if err == nil {
				eventstore.CheckMaxPayload(nc, log)
				return nc, store, nil
			}
		}
		if errors.Is(err, nats.ErrAuthorization) || ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			if nc != nil {
				nc.Close()
			}
			return nil, nil, err
		}
		log.Warn().Err(err).Dur("retry_in", delay).Msg("NATS JetStream is not ready yet")
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			if nc != nil {
				nc.Close()
			}
			return nil, nil, err
		}
		delay = min(2*delay, 5*time.Second)
	}
}
