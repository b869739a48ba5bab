// Command crosscheck is the multi-model verification service. `crosscheck
// serve` runs the API, the workers and the projectors in one process over an
// embedded nats-server with JetStream, or over CROSSCHECK_NATS_URL; `crosscheck
// api` and `crosscheck worker` run the parts as separate processes on a
// shared NATS JetStream.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/handlers"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/projections"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/queries"
	"github.com/crosscheck/crosscheck/internal/search"
	"github.com/crosscheck/crosscheck/internal/worker"
)

const usage = `crosscheck — multi-model verification service

Usage:
  crosscheck serve     run the API, workers and projectors in one process
                       (embedded NATS JetStream unless CROSSCHECK_NATS_URL is set)
  crosscheck api       run the public and admin APIs and the projectors on
                       CROSSCHECK_NATS_URL, beside other api and worker processes
  crosscheck worker    run the mode pipelines on CROSSCHECK_NATS_URL
  crosscheck audit     replay the ledger and check it (exit 1 on any difference)
  crosscheck events    export or tail the event streams as NDJSON (crosscheck events -h)
  crosscheck bench     measure the service beside the raw JetStream limit
                       (writes JSON to $BENCH_OUT, default bench/results.json)
  crosscheck version   print the version

Settings are CROSSCHECK_* environment variables; see README.md.
`

// Version is set at build time.
var Version = "dev"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case RoleServe, RoleAPI, RoleWorker:
		if err := serve(os.Args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck:", err)
			os.Exit(1)
		}
	case "audit":
		cfg, err := config.FromEnv()
		if err == nil {
			var ok bool
			if ok, err = runAudit(context.Background(), cfg, os.Stdout); err == nil && !ok {
				os.Exit(1)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck audit:", err)
			os.Exit(2)
		}
	case "events":
		cfg, err := config.FromEnv()
		if err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck events:", err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		code := runEvents(ctx, cfg, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	case "bench":
		if err := benchCommand(); err != nil {
			fmt.Fprintln(os.Stderr, "crosscheck bench:", err)
			os.Exit(1)
		}
	case "version":
		fmt.Println(Version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "crosscheck: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

// serve runs a process of role until SIGINT or SIGTERM.
func serve(role string) error {
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	level, err := zerolog.ParseLevel(cfg.LogLevel)
	if err != nil {
		return fmt.Errorf("CROSSCHECK_LOG_LEVEL: %w", err)
	}
	m := &Main{Config: cfg, Role: role, Log: zerolog.New(os.Stderr).Level(level).With().Timestamp().Str("role", role).Logger(), Out: os.Stdout}
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

// Roles of a process.
const (
	// RoleServe runs everything: the APIs, the projectors and the workers,
	// on the embedded NATS server unless CROSSCHECK_NATS_URL is set.
	RoleServe = "serve"
	// RoleAPI runs the public and admin APIs and the projectors (one
	// process at a time applies each projection) on CROSSCHECK_NATS_URL.
	RoleAPI = "api"
	// RoleWorker runs the mode pipelines on CROSSCHECK_NATS_URL, with only
	// /healthz and /readyz on CROSSCHECK_HTTP_ADDR.
	RoleWorker = "worker"
)

func (m *Main) role() string {
	if m.Role == "" {
		return RoleServe
	}
	return m.Role
}

// runsAPI and runsWorker say which parts this process runs.
func (m *Main) runsAPI() bool    { return m.role() != RoleWorker }
func (m *Main) runsWorker() bool { return m.role() != RoleAPI }

// Main owns the wiring of one process. End-to-end tests use it as serve does.
type Main struct {
	Config config.Config
	Log    zerolog.Logger
	// Out receives the start-up banner; nil discards it.
	Out io.Writer
	// Providers overrides the backends; nil runs every provider simulated.
	Providers providers.Set
	// Search overrides verify's search backend; nil takes it from the
	// settings.
	Search search.Backend
	// Role is what this process runs: RoleServe (the default), RoleAPI or
	// RoleWorker.
	Role string
	// Now overrides the clock.
	Now func() time.Time
	// RetryDelays override providers.DefaultRetryDelays.
	RetryDelays []time.Duration

	Store    *eventstore.Store
	Accounts *accounts.Service
	Ledger   *ledger.Service
	Queries  *queries.Service
	Catalog  *catalog.Catalog

	nats       *embedded.Server
	nc         *nats.Conn
	public     *http.Server
	admin      *http.Server
	publicLn   net.Listener
	adminLn    net.Listener
	cancel     context.CancelFunc
	stopWorker context.CancelFunc
	workerDone chan struct{}
	stopping   atomic.Bool
	wg         sync.WaitGroup
	closeOnce  sync.Once
}

// Open starts everything and returns once the APIs listen.
func (m *Main) Open(ctx context.Context) error {
	if m.Now == nil {
		m.Now = time.Now
	}
	if m.Out == nil {
		m.Out = io.Discard
	}
	cfg := m.Config
	var err error
	if cfg.NATSURL == "" && m.role() != RoleServe {
		return fmt.Errorf("crosscheck %s runs beside other processes on a shared NATS JetStream: set CROSSCHECK_NATS_URL (or run crosscheck serve)", m.role())
	}
	if cfg.NATSURL == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if m.nats, err = embedded.Start(embedded.Options{DataDir: cfg.DataDir, SyncAlways: cfg.SyncAlways, SyncInterval: cfg.SyncInterval}); err != nil {
			return err
		}
		if m.nc, err = m.nats.Connect("crosscheck"); err != nil {
			return err
		}
		if m.Store, err = eventstore.Open(ctx, m.nc, cfg.Replicas); err != nil {
			return err
		}
	} else if m.nc, m.Store, err = openShared(ctx, cfg, "crosscheck-"+m.role(), m.Log); err != nil {
		return err
	}
	if err := m.loadAdminToken(); err != nil {
		return err
	}
	cat, backends, native, searchCfg, err := m.backends(ctx)
	if err != nil {
		return err
	}
	m.Catalog = cat
	if m.Providers != nil {
		backends = m.Providers
	}
	if m.Search == nil {
		if m.Search, err = m.searchBackend(searchCfg); err != nil {
			return err
		}
	}
	if m.RetryDelays == nil {
		m.RetryDelays = providers.DefaultRetryDelays
	}
	// A call: validated structured output (one repair), each attempt retried
	// on retriable failures after 1 s and 5 s, each bounded by the timeout.
	calls := providers.Set{}
	for key, p := range backends {
		calls[key] = &providers.Structured{Provider: &providers.Retry{Provider: p, Delays: m.RetryDelays, Timeout: cfg.ModelTimeout}}
	}
	m.Accounts = &accounts.Service{Store: m.Store, Now: m.Now}
	estimator := &ledger.Estimator{Catalog: m.Catalog}
	models := modes.Models{Providers: calls, Price: estimator.Cost}
	m.Ledger = &ledger.Service{Accounts: m.Accounts, Estimator: estimator, Now: m.Now}
	m.Queries = &queries.Service{
		Store: m.Store, Catalog: m.Catalog, Modes: map[string]bool{queries.ModeUnify: true, queries.ModeJustify: true, queries.ModeVerify: true}, Now: m.Now,
		Estimator: estimator, Credits: m.Ledger, Accounts: m.Accounts,
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	if m.runsAPI() {
		m.wg.Go(func() { m.Accounts.WatchKeys(runCtx, m.Log) })
		m.runProjections(runCtx)
	}
	if m.runsWorker() {
		workerCtx, stopWorker := context.WithCancel(runCtx)
		m.stopWorker = stopWorker
		m.workerDone = make(chan struct{})
		w := &worker.Worker{
			Store: m.Store, Log: m.Log, Now: m.Now,
			AckWait: cfg.WorkerAckWait, MaxJobs: cfg.WorkerMaxJobs, MaxFailures: cfg.WorkerMaxFailures, Grace: cfg.ShutdownGrace, Finished: m.Queries.Release,
			Ledger: m.Ledger,
			Modes: map[string]worker.Mode{
				queries.ModeUnify:   &modes.Unify{Models: models},
				queries.ModeJustify: &modes.Justify{Models: models},
				queries.ModeVerify:  &modes.Verify{Models: models, Search: m.Search, NativeSearch: func(ref events.ModelRef) bool { return native[ref.Provider] }},
			},
		}
		go func() {
			defer close(m.workerDone)
			if err := w.Run(workerCtx); err != nil {
				m.Log.Error().Err(err).Msg("worker stopped")
			}
		}()
	}
	return m.listen(runCtx)
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

func (m *Main) runProjections(ctx context.Context) {
	status := &projections.QueryStatus{Store: m.Store}
	runners := []*projections.Runner{
		{Name: projections.ConsumerQueryStatus, Stream: m.Store.Queries, Filters: []string{"ev.query.>"}, HandleBatch: status.HandleBatch},
		{Name: projections.ConsumerAccounts, Stream: m.Store.Accounts, Filters: []string{"ev.account.>"},
			HandleBatch: projections.Accounts(&projections.Keys{Store: m.Store}, &projections.Balances{Store: m.Store})},
	}
	// On the embedded server this process is the only one. On a shared
	// JetStream every API process runs the projectors and a lease lets one
	// at a time apply each projection.
	host, _ := os.Hostname()
	for _, r := range runners {
		r.Log, r.Checkpoints = m.Log, m.Store.Projections
		if m.Config.NATSURL == "" {
			m.wg.Go(func() {
				if err := r.Run(ctx); err != nil {
					m.Log.Error().Err(err).Str("consumer", r.Name).Msg("projection stopped")
				}
			})
			continue
		}
		lease := &projections.Lease{KV: m.Store.Leases, Name: r.Name, TTL: eventstore.LeaseTTL, Log: m.Log,
			Holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), events.NewID())}
		m.wg.Go(func() { lease.Run(ctx, r.Run) })
	}
}

func (m *Main) listen(ctx context.Context) error {
	var err error
	if m.publicLn, err = net.Listen("tcp", m.Config.HTTPAddr); err != nil {
		return fmt.Errorf("public API on %s: %w", m.Config.HTTPAddr, err)
	}
	if !m.runsAPI() {
		// A worker answers only its health checks.
		health := &handlers.Server{Log: m.Log, Ready: m.ready, Stopping: m.stopping.Load}
		m.public, m.publicLn = handlers.NewServer(m.publicLn, health.HealthHandler(), m.Config.HTTP, m.Config.DocsURL, ctx)
		m.wg.Go(func() {
			if err := m.public.Serve(m.publicLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				m.Log.Error().Err(err).Msg("http server stopped")
			}
		})
		m.Log.Info().Str("health", m.URL()).Str("role", m.role()).Msg("crosscheck worker is running")
		return nil
	}
	if m.adminLn, err = net.Listen("tcp", m.Config.AdminAddr); err != nil {
		return fmt.Errorf("admin API on %s: %w", m.Config.AdminAddr, err)
	}
	docs := m.Config.DocsURL
	if docs == "" {
		docs = m.URL() + "/docs"
	}
	api := &handlers.Server{
		Auth: m.Accounts, Queries: m.Queries, Events: m.Store, Catalog: m.Catalog,
		Log: m.Log, DocsURL: docs, Ready: m.ready, Heartbeat: m.Config.SSEHeartbeat, Stopping: m.stopping.Load,
	}
	adm := &handlers.Admin{Accounts: m.Accounts, Ledger: m.Ledger, Token: m.Config.AdminToken, Log: m.Log, DocsURL: docs}
	m.public, m.publicLn = handlers.NewServer(m.publicLn, api.Handler(), m.Config.HTTP, docs, ctx)
	m.admin, m.adminLn = handlers.NewServer(m.adminLn, adm.Handler(), m.Config.HTTP, docs, ctx)
	for srv, ln := range map[*http.Server]net.Listener{m.public: m.publicLn, m.admin: m.adminLn} {
		m.wg.Go(func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				m.Log.Error().Err(err).Msg("http server stopped")
			}
		})
	}
	m.Log.Info().Str("public", m.URL()).Str("admin", m.AdminURL()).Str("role", m.role()).Bool("embedded_nats", m.nats != nil).Msg("crosscheck is serving")
	return nil
}

func (m *Main) ready(ctx context.Context) error {
	if m.nc == nil || !m.nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := m.Store.JS.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	return nil
}

// URL is the public API's base URL.
func (m *Main) URL() string { return "http://" + m.publicLn.Addr().String() }

// AdminURL is the admin API's base URL; empty in a worker.
func (m *Main) AdminURL() string {
	if m.adminLn == nil {
		return ""
	}
	return "http://" + m.adminLn.Addr().String()
}

// Close shuts down in order: refuse submissions and report not ready for the
// drain period, stop taking requests, let running jobs finish for the grace
// period and hand the rest back, stop the projectors, flush and stop NATS.
// Accepted queries are in the stream and resume on the next start.
func (m *Main) Close() error {
	m.closeOnce.Do(func() {
		m.stopping.Store(true)
		if m.runsAPI() && m.public != nil && m.Config.ShutdownDrain > 0 {
			m.Log.Info().Dur("drain", m.Config.ShutdownDrain).Msg("draining: not ready, refusing submissions")
			time.Sleep(m.Config.ShutdownDrain)
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownGrace+5*time.Second)
		defer cancel()
		if m.cancel != nil {
			// Ends SSE streams, whose requests use the run context.
			defer m.cancel()
		}
		for _, srv := range []*http.Server{m.public, m.admin} {
			if srv != nil {
				srv.RegisterOnShutdown(func() {
					if m.cancel != nil {
						m.cancel()
					}
				})
				_ = srv.Shutdown(ctx)
			}
		}
		if m.stopWorker != nil {
			m.stopWorker()
			<-m.workerDone
		}
		if m.cancel != nil {
			m.cancel()
		}
		m.wg.Wait()
		if m.nc != nil {
			_ = m.nc.Drain()
			for m.nc.IsDraining() {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if m.nats != nil {
			m.nats.Stop()
		}
	})
	return nil
}

// Crash stops the process abruptly, as kill -9 would as far as the data is
// concerned: nothing is acknowledged or handed back, connections just end.
func (m *Main) Crash() {
	m.closeOnce.Do(func() {
		for _, srv := range []*http.Server{m.public, m.admin} {
			if srv != nil {
				_ = srv.Close()
			}
		}
		if m.nc != nil {
			m.nc.Close()
		}
		if m.cancel != nil {
			m.cancel()
		}
		if m.nats != nil {
			m.nats.Stop()
		}
		m.wg.Wait()
		if m.workerDone != nil {
			<-m.workerDone
		}
	})
}
