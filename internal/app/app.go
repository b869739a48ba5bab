// Package app wires one crosscheck process: the roles (serve, api, worker),
// their lifecycle from start to an orderly stop, the admin token, the
// first-start bootstrap, and the opening of the event store for the
// commands that run beside the service (audit, events, the benchmark).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/byom"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/files"
	"github.com/crosscheck/crosscheck/internal/handlers"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/pricing"
	"github.com/crosscheck/crosscheck/internal/projections"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/registry"
	"github.com/crosscheck/crosscheck/internal/queries"
	"github.com/crosscheck/crosscheck/internal/search"
	"github.com/crosscheck/crosscheck/internal/telemetry"
	"github.com/crosscheck/crosscheck/internal/worker"
)

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

// Main owns the wiring of one process. Serve uses it, and so do the
// end-to-end tests and the benchmark.
type Main struct {
	Config config.Config
	Log    zerolog.Logger
	// Out receives the start-up banner; nil discards it.
	Out io.Writer
	// Version is the build's version, printed in the banner; empty is "dev".
	Version string
	// Providers overrides the backends; nil builds them from the settings.
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
	// Attached overrides what queries read of the files they attach (their
	// metadata at admission, their bytes and text in the workers); nil reads
	// the uploads of Files.
	Attached FileStore

	Store    *eventstore.Store
	Accounts *accounts.Service
	Ledger   *ledger.Service
	Queries  *queries.Service
	Files    *files.Service
	Catalog  *catalog.Catalog
	BYOM     *byom.Service

	nats        *embedded.Server
	storeWatch  *storeWatch
	nc          *nats.Conn
	public      *http.Server
	admin       *http.Server
	publicLn    net.Listener
	adminLn     net.Listener
	cancel      context.CancelFunc
	stopWorker  context.CancelFunc
	workerDone  chan struct{}
	stopping    atomic.Bool
	projections projectionHealth
	wg          sync.WaitGroup
	closeOnce   sync.Once
	// traces flushes and stops the trace exporter; nil before Open.
	traces func(context.Context) error
}

// FileStore is what queries need of the uploaded files.
type FileStore interface {
	queries.FileLookup
	modes.FileSource
}

// uploads is the FileStore of the files service: the uploads' metadata as
// admission reads it, their bytes and extracted text.
type uploads struct{ *files.Service }

// storage gathers what the store keeps of an account, for the admin API:
// each figure from the service that keeps it.
type storage struct{ m *Main }

// Storage returns the account's figures; not_found for an unknown account.
func (s storage) Storage(ctx context.Context, accountID string) (handlers.AccountStorage, error) {
	out := handlers.AccountStorage{AccountID: accountID}
	var err error
	if out.AccountEvents, out.AccountEventBytes, err = s.m.Accounts.StoredEvents(ctx, accountID); err != nil {
		return out, err
	}
	if out.Queries, err = s.m.Queries.Count(ctx, accountID); err != nil {
		return out, err
	}
	if out.QueriesInFlight, err = s.m.Queries.InFlight(ctx, accountID); err != nil {
		return out, err
	}
	f, err := s.m.Files.Usage(ctx, accountID)
	out.FilesLive, out.FilesLiveBytes, out.FileEvents, out.FileEventBytes = f.Live, f.LiveBytes, f.Events, f.EventBytes
	return out, err
}

// File returns the metadata of an account's live upload.
func (u uploads) File(ctx context.Context, accountID, fileID string) (queries.FileInfo, error) {
	meta, err := u.Get(ctx, accountID, fileID)
	if err != nil {
		return queries.FileInfo{}, err
	}
	return queries.FileInfo{
		ID: meta.ID, AccountID: meta.AccountID, Name: meta.Name, Kind: meta.Kind, MediaType: meta.MediaType,
		Bytes: meta.Bytes, SHA256: meta.SHA256, Pages: meta.Pages, TextChars: meta.Chars, ExpiresAt: meta.ExpiresAt,
	}, nil
}

// Open starts everything and returns once the APIs listen. After an error,
// Close releases what was started.
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
	// The addresses are taken before the store is opened: a second start on
	// the same ports fails without touching the data.
	if err := m.bind(); err != nil {
		return err
	}
	if cfg.NATSURL == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if m.nats, m.nc, m.Store, err = startEmbedded(ctx, cfg, "crosscheck", m.Log, m.role() == RoleServe); err != nil {
			return err
		}
		m.storeWatch = newStoreWatch(m.nats, cfg.StoreMinFreeMB, m.Log)
		m.storeWatch.check()
	} else if m.nc, m.Store, err = openShared(ctx, cfg, "crosscheck-"+m.role(), m.Log); err != nil {
		return err
	}
	m.Store.ObserveSizes()
	if err := m.loadAdminToken(); err != nil {
		return err
	}
	if m.traces, err = telemetry.Setup(ctx); err != nil {
		return fmt.Errorf("OTEL_* settings: %w", err)
	}
	built, err := registry.Build(ctx, cfg, m.Log)
	if err != nil {
		return err
	}
	m.Catalog = built.Catalog
	backends := built.Providers
	if m.Providers != nil {
		backends = m.Providers
	}
	runner := m.extractRunner()
	if m.Search == nil {
		if m.Search, err = registry.Search(built.Search, m.Log); err != nil {
			return err
		}
	}
	if m.RetryDelays == nil {
		m.RetryDelays = providers.DefaultRetryDelays
	}
	m.Accounts = &accounts.Service{Store: m.Store, Now: m.Now, MaxKeys: cfg.AccountMaxKeys, SnapshotEvery: cfg.SnapshotEvery, SnapshotInterval: cfg.SnapshotInterval}
	if err := m.openBYOM(); err != nil {
		return err
	}
	estimator := &pricing.Estimator{Catalog: m.Catalog, Planner: pricing.PlanFunc(modes.Plan)}
	// The tokenizers are loaded before the process serves: no query pays
	// the load, and the memory they hold is part of the process's start.
	if err := estimator.LoadTokenizers(); err != nil {
		m.Log.Warn().Err(err).Msg("pre-flight estimates of these models count one token per four bytes")
	}
	models := modes.Models{Providers: registry.Calls(backends, m.RetryDelays, cfg.ModelTimeout, estimator.Tokens, registry.CatalogLimits(m.Catalog), m.Log), Price: estimator.Cost}
	m.Files = &files.Service{Store: m.Store, Extract: runner, Now: m.Now, Log: m.Log, MaxAccountBytes: int64(m.Config.FilesMaxAccountMB) << 20,
		MaxUploadsPerDay: m.Config.FilesMaxUploadsPerDay}
	if m.storeWatch != nil {
		m.Files.Space = m.storeWatch
	}
	if m.Attached == nil {
		m.Attached = uploads{m.Files}
	}
	models.Files = m.Attached
	models.Custom = m.BYOM.Provider
	// The modes: the API accepts exactly those the workers run.
	pipelines := map[string]worker.Mode{
		events.ModeUnify:   accountScoped{&modes.Unify{Models: models}},
		events.ModeJustify: accountScoped{&modes.Justify{Models: models}},
		// A customer-owned model researches with the service's search: its
		// provider, custom, is never in NativeSearch.
		events.ModeVerify: accountScoped{&modes.Verify{Models: models, Search: m.Search,
			NativeSearch: func(ref events.ModelRef) bool { return built.NativeSearch[ref.Provider] }}},
	}
	accepted := map[string]bool{}
	for mode := range pipelines {
		accepted[mode] = true
	}
	m.Ledger = &ledger.Service{Accounts: m.Accounts, Estimator: estimator, Now: m.Now, CancelPercent: cfg.CancelChargePercent}
	m.Queries = &queries.Service{
		Store: m.Store, Catalog: m.Catalog, Modes: accepted, Now: m.Now,
		Estimator: estimator, Credits: m.Ledger, Accounts: m.Accounts, Files: m.Attached,
		Custom: customModels{m.BYOM}, AccountLimit: cfg.InflightPerAccount,
	}
	if m.storeWatch != nil {
		m.Queries.Space = m.storeWatch
	}

	var runners []*projections.Runner
	var rebuilt map[*projections.Runner]uint64
	if m.runsAPI() {
		runners = m.projectionRunners()
	}
	if m.nats != nil {
		// Nothing appends yet: the embedded store's read models are checked
		// against its streams, and after an unclean stop the ledger against
		// the queries.
		if rebuilt, err = m.checkReadModels(ctx, runners); err != nil {
			return err
		}
		if err := m.reconcile(ctx); err != nil {
			return err
		}
	}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	if m.storeWatch != nil {
		m.wg.Go(func() { m.storeWatch.run(runCtx) })
	}
	if m.runsAPI() {
		m.wg.Go(func() { m.Accounts.WatchKeys(runCtx, m.Log) })
		m.wg.Go(func() { m.sweepFiles(runCtx) })
		m.runProjections(runCtx, runners)
		// API keys are known again once a rebuilt keys read model has
		// caught up: the APIs open after that.
		for r, seq := range rebuilt {
			if r.Name == projections.ConsumerAccounts {
				m.awaitRebuild(ctx, r, seq)
			}
		}
	}
	if m.runsWorker() {
		workerCtx, stopWorker := context.WithCancel(runCtx)
		m.stopWorker = stopWorker
		m.workerDone = make(chan struct{})
		w := &worker.Worker{
			Store: m.Store, Log: m.Log, Now: m.Now,
			AckWait: cfg.WorkerAckWait, MaxJobs: cfg.WorkerMaxJobs, MaxFailures: cfg.WorkerMaxFailures, Grace: cfg.ShutdownGrace, Finished: m.Queries.Release,
			MaxCrashes: cfg.WorkerMaxCrashes, QueryTimeout: cfg.QueryTimeout,
			Ledger: m.Ledger, Modes: pipelines,
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

// reconcile brings the ledger to what QUERIES records after an unclean stop
// of the embedded store (ledger.Service.Reconcile), and then marks the data
// dir recovered.
func (m *Main) reconcile(ctx context.Context) error {
	if !m.nats.Unclean() {
		return nil
	}
	start := time.Now()
	rec, err := m.Ledger.Reconcile(ctx)
	if err != nil {
		return fmt.Errorf("reconcile the ledger with the queries after an unclean stop: %w", err)
	}
	ev := m.Log.Info()
	if rec.Changed() {
		ev = m.Log.Warn()
	}
	ev.Int("checked", rec.Checked).Strs("restored", rec.Restored).Strs("settled", rec.Settled).Strs("reversed", rec.Reversed).Strs("released", rec.Released).
		Dur("took", time.Since(start)).Msg("ledger: reconciled with the queries after an unclean stop")
	m.nats.Recovered()
	return nil
}

// sweepFiles removes, every sweepEvery, the stored objects of uploads that
// ended before they were recorded (a process that crashed mid-upload), until
// ctx ends. Several API processes may sweep at once: a removal is idempotent.
func (m *Main) sweepFiles(ctx context.Context) {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n, err := m.Files.Sweep(ctx); err != nil && ctx.Err() == nil {
			m.Log.Warn().Err(err).Msg("files: sweep of unrecorded uploads")
		} else if n > 0 {
			m.Log.Info().Int("removed", n).Msg("files: removed the objects of unrecorded uploads")
		}
	}
}

// sweepEvery is how often an API process sweeps unrecorded uploads.
const sweepEvery = 10 * time.Minute

// bind listens on the public address, and on the admin address in a
// process that runs the APIs.
func (m *Main) bind() error {
	var err error
	if m.publicLn, err = net.Listen("tcp", m.Config.HTTPAddr); err != nil {
		return fmt.Errorf("public API on %s: %w", m.Config.HTTPAddr, err)
	}
	if !m.runsAPI() {
		// A worker serves only /metrics there, and runs without it when
		// the address is taken.
		if m.adminLn, err = net.Listen("tcp", m.Config.AdminAddr); err != nil {
			m.Log.Warn().Err(err).Str("admin", m.Config.AdminAddr).Msg("worker: /metrics is not served: the admin address is taken")
		}
		return nil
	}
	if m.adminLn, err = net.Listen("tcp", m.Config.AdminAddr); err != nil {
		return fmt.Errorf("admin API on %s: %w", m.Config.AdminAddr, err)
	}
	return nil
}

// listen serves the APIs (a worker: its health checks) on the bound
// addresses.
func (m *Main) listen(ctx context.Context) error {
	if !m.runsAPI() {
		// A worker answers only its health checks.
		health := &handlers.Server{Log: m.Log, Ready: m.ready, Stopping: m.stopping.Load}
		m.public, m.publicLn = handlers.NewServer(m.publicLn, health.HealthHandler(), m.Config.HTTP, m.Config.DocsURL, ctx)
		m.wg.Go(func() {
			if err := m.public.Serve(m.publicLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				m.Log.Error().Err(err).Msg("http server stopped")
			}
		})
		if m.adminLn != nil {
			m.admin, m.adminLn = handlers.NewServer(m.adminLn, health.MetricsHandler(), m.Config.HTTP, m.Config.DocsURL, ctx)
			m.wg.Go(func() {
				if err := m.admin.Serve(m.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
					m.Log.Error().Err(err).Msg("metrics server stopped")
				}
			})
		}
		m.Log.Info().Str("health", m.URL()).Str("metrics", m.AdminURL()).Str("role", m.role()).Msg("crosscheck worker is running")
		return nil
	}
	docs := m.Config.DocsURL
	if docs == "" {
		docs = m.URL() + "/docs"
	}
	api := &handlers.Server{
		Auth: m.Accounts, Queries: m.Queries, Control: m.Queries, Events: m.Store, Files: m.Files, Catalog: m.Catalog, Custom: m.BYOM,
		Log: m.Log, DocsURL: docs, Ready: m.ready, Heartbeat: m.Config.SSEHeartbeat, Stopping: m.stopping.Load,
		MaxStreams: m.Config.SSEMaxStreams, MaxStreamsPerKey: m.Config.SSEMaxStreamsPerKey, MaxStreamsPerAccount: m.Config.SSEMaxStreamsPerAccount,
		MaxBodiesPerAccount: m.Config.HTTP.MaxBodiesPerAccount, EstimateRate: m.Config.EstimateRate, TrustCallerTrace: m.Config.TrustTraceparent,
		UploadIdle: m.Config.HTTP.ReadTimeout,
	}
	adm := &handlers.Admin{Accounts: m.Accounts, Ledger: m.Ledger, BYOM: m.BYOM, Storage: storage{m}, Token: m.Config.AdminToken, Log: m.Log, DocsURL: docs,
		Ready: m.ready, Stopping: m.stopping.Load, TrustCallerTrace: m.Config.TrustTraceparent}
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

// ready reports why the process cannot take requests: NATS or JetStream
// out of reach, the embedded JetStream refusing writes (its reason, as a
// full disk leaves it), or a projection this process runs that is down.
func (m *Main) ready(ctx context.Context) error {
	if m.nc == nil || !m.nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	if m.nats != nil {
		if err := m.nats.Health(); err != nil {
			// The whole reason, with the store's paths, is in the log.
			reason := err.Error()
			if i := strings.LastIndex(reason, ": "); i >= 0 {
				reason = reason[i+2:]
			}
			if errors.Is(err, embedded.ErrRefusesWrites) {
				return fmt.Errorf("JetStream cannot take writes (%s); the log says why", reason)
			}
			return fmt.Errorf("JetStream is not healthy (%s)", reason)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := m.Store.Ping(ctx); err != nil {
		return fmt.Errorf("JetStream: %w", err)
	}
	return m.projections.check()
}

// URL is the public API's base URL.
func (m *Main) URL() string { return "http://" + m.publicLn.Addr().String() }

// AdminURL is the admin API's base URL (a worker's: of its /metrics);
// empty when the process does not serve it.
func (m *Main) AdminURL() string {
	if m.adminLn == nil {
		return ""
	}
	return "http://" + m.adminLn.Addr().String()
}

// Conn is the process's NATS connection; nil before Open.
func (m *Main) Conn() *nats.Conn { return m.nc }

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
		// Addresses bound by an Open that failed before serving on them.
		if m.public == nil && m.publicLn != nil {
			_ = m.publicLn.Close()
		}
		if m.admin == nil && m.adminLn != nil {
			_ = m.adminLn.Close()
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
		if m.traces != nil {
			_ = m.traces(ctx)
		}
	})
	return nil
}
