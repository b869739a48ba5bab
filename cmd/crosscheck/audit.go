package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/audit"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// openStore opens the event store of cfg: CROSSCHECK_NATS_URL, or the
// embedded data dir (which no running serve may hold). close releases it.
func openStore(ctx context.Context, cfg config.Config) (store *eventstore.Store, close func(), err error) {
	if cfg.NATSURL != "" {
		nc, store, err := openShared(ctx, cfg, "crosscheck-offline", zerolog.New(os.Stderr).With().Timestamp().Logger())
		if err != nil {
			return nil, nil, err
		}
		return store, nc.Close, nil
	}
	srv, err := embedded.Start(embedded.Options{DataDir: cfg.DataDir, SyncAlways: cfg.SyncAlways, SyncInterval: cfg.SyncInterval})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (stop `crosscheck serve` on this data dir first, or set CROSSCHECK_NATS_URL)", err)
	}
	nc, err := srv.Connect("crosscheck-audit")
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	close = func() {
		nc.Close()
		srv.Stop()
	}
	if store, err = eventstore.Open(ctx, nc, cfg.Replicas); err != nil {
		close()
		return nil, nil, err
	}
	return store, close, nil
}

// runAudit audits the store of cfg and prints the report to w; ok is false
// on any difference.
func runAudit(ctx context.Context, cfg config.Config, w io.Writer) (ok bool, err error) {
	store, closeStore, err := openStore(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer closeStore()
	rep, err := audit.Run(ctx, store)
	if err != nil {
		return false, err
	}
	rep.Print(w)
	return rep.OK(), nil
}
