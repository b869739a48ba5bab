package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/audit"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/export"
)

// Serve runs a process of role (RoleServe, RoleAPI or RoleWorker) with the
// settings of the environment until SIGINT or SIGTERM, then shuts it down in
// order. version is printed in the first-start banner. It returns the
// reason the process could not start.
func Serve(role, version string) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("CROSSCHECK_LOG_LEVEL: %w", err)
	}
	m := &Main{Config: cfg, Role: role, Version: version, Log: zerolog.New(os.Stderr).Level(level).With().Timestamp().Str("role", role).Logger(), Out: os.Stdout}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := m.Open(ctx); err != nil {
		m.Close()
		return err
	}
	if role == RoleServe {
		if err := m.Bootstrap(ctx); err != nil {
			m.Close()
			return err
		}
	}
	<-ctx.Done()
	m.Log.Info().Msg("shutting down")
	return m.Close()
}

// Audit audits the store of cfg and prints the report to w; ok is false
// on any difference, err says why the audit could not run.
func Audit(ctx context.Context, cfg config.Config, w io.Writer) (ok bool, err error) {
	store, closeStore, err := OpenStore(ctx, cfg)
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

// Events runs `crosscheck events <args>` against the store of cfg and
// returns the exit code (see export.Run). A data dir without an event store
// is refused rather than created empty.
func Events(ctx context.Context, cfg config.Config, args []string, out, errOut io.Writer) int {
	return export.Run(ctx, args, openEventsStore(cfg), out, errOut)
}
