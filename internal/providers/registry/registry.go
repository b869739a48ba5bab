// Package registry builds the configured model backends, the catalog they
// serve and verify's search backend, from the settings (CROSSCHECK_CONFIG
// and the environment).
package registry

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/anthropic"
	"github.com/crosscheck/crosscheck/internal/providers/gemini"
	"github.com/crosscheck/crosscheck/internal/providers/openai"
	"github.com/crosscheck/crosscheck/internal/providers/openaicompat"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
	"github.com/crosscheck/crosscheck/internal/search"
	"github.com/crosscheck/crosscheck/internal/telemetry"
)

// Backends are the configured model backends and what goes with them.
type Backends struct {
	// Catalog lists the providers and their models as served.
	Catalog *catalog.Catalog
	// Providers holds one backend per provider key, each behind
	// providers.Upstream (the catalog's model ids mapped to the vendor's).
	Providers providers.Set
	// NativeSearch holds the providers whose backend searches the web
	// itself (web_search, on unless turned off).
	NativeSearch map[string]bool
	// Search is the settings file's search section.
	Search config.Search
}

// Build builds the catalog and one backend per provider key. Without
// CROSSCHECK_CONFIG, or with a file that binds no provider, every provider
// runs on the simulated backend with the simulated catalog. Otherwise each provider keeps the vendor catalog's models
// (or the binding's own) and runs on its bound backend when that backend's
// credential is present; a provider without one runs simulated, labelled so
// in GET /v1/models and in results, and the log says why. A provider with a
// credential never falls back. It fails when the settings file cannot be
// read, a credential file cannot be read, or a client cannot be built.
func Build(ctx context.Context, cfg config.Config, log zerolog.Logger) (Backends, error) {
	set := providers.Set{}
	native := map[string]bool{}
	file := &config.File{}
	if cfg.ConfigFile != "" {
		var err error
		if file, err = config.LoadFile(cfg.ConfigFile); err != nil {
			return Backends{}, err
		}
	}
	if len(file.Providers) == 0 {
		// A file that binds no provider (only search:) changes no model:
		// the simulated catalog, not vendor ids on the simulated backend.
		cat := catalog.Simulated()
		for _, p := range cat.Providers {
			set[p.Key] = simulated.New(p.Key, cfg.SimLatency)
		}
		return Backends{Catalog: cat, Providers: set, NativeSearch: native, Search: file.Search}, nil
	}
	cat := catalog.Vendor()
	for i := range cat.Providers {
		p := &cat.Providers[i]
		b, bound := file.Providers[p.Key]
		if bound && len(b.Models) > 0 {
			p.Models = p.Models[:0]
			for _, mc := range b.Models {
				p.Models = append(p.Models, catalog.Model{
					ID: mc.ID, Name: mc.Name, Tier: mc.Tier, Default: mc.Default, Upstream: mc.Upstream, Tokenizer: mc.Tokenizer,
					Pricing:        catalog.Pricing{InputPerMillion: mc.InputPerMillion, OutputPerMillion: mc.OutputPerMillion},
					ExpectedOutput: max(mc.ExpectedOutput, 1),
					ContextWindow:  cmp.Or(mc.ContextWindow, config.DefaultContextWindow),
					MaxOutput:      cmp.Or(mc.MaxOutputTokens, min(config.DefaultMaxOutputTokens, cmp.Or(mc.ContextWindow, config.DefaultContextWindow)/2)),
					Reads:          catalog.Reads{Images: slices.Contains(mc.Reads, "images"), PDF: slices.Contains(mc.Reads, "pdf")},
				})
			}
		}
		backend := config.BackendSimulated
		if bound {
			backend = b.Backend
		}
		key, err := b.Secret()
		if err != nil {
			return Backends{}, fmt.Errorf("%s: %w", p.Key, err)
		}
		needsKey := backend != config.BackendSimulated && (backend != config.BackendOpenAICompatible || b.NamesCredential())
		if needsKey && key == "" {
			log.Warn().Str("provider", p.Key).Str("backend", backend).Str("api_key_env", b.APIKeyEnv).Str("api_key_file", b.APIKeyFile).
				Msg("no credential for this provider: it runs on the SIMULATED backend")
			backend = config.BackendSimulated
		}
		var client providers.Provider
		switch backend {
		case config.BackendOpenAI:
			client = openai.New(openai.Config{APIKey: key, BaseURL: b.BaseURL})
		case config.BackendOpenAICompatible:
			client = openaicompat.New(openaicompat.Config{APIKey: key, BaseURL: b.BaseURL})
		case config.BackendAnthropic:
			client = anthropic.New(anthropic.Config{APIKey: key, BaseURL: b.BaseURL})
		case config.BackendGemini:
			if client, err = gemini.New(ctx, gemini.Config{APIKey: key, BaseURL: b.BaseURL}); err != nil {
				return Backends{}, fmt.Errorf("%s: %w", p.Key, err)
			}
		default:
			backend = config.BackendSimulated
			client = simulated.New(p.Key, cfg.SimLatency)
			for j := range p.Models {
				p.Models[j].Name += " (simulated)"
			}
		}
		p.Backend = backend
		switch backend {
		case config.BackendOpenAI, config.BackendAnthropic, config.BackendGemini:
			native[p.Key] = b.WebSearch == nil || *b.WebSearch
		}
		names := map[string]string{}
		for _, model := range p.Models {
			names[model.ID] = model.UpstreamName()
		}
		set[p.Key] = &providers.Upstream{Provider: client, Names: names}
		log.Info().Str("provider", p.Key).Str("backend", backend).Bool("web_search", native[p.Key]).Msg("provider bound")
	}
	return Backends{Catalog: cat, Providers: set, NativeSearch: native, Search: file.Search}, nil
}

// Calls wraps each backend of set the way a mode calls it: fitted into
// the model's context window and output bound that limits gives (a
// context overflow retried once tighter: providers.Budget), validated
// structured output (one repair), each attempt retried on retriable
// failures after delays, each bounded by timeout, each answered without
// usage counted with count (the service's tokenizer for a provider's
// model) and logged to log; every call counted and traced
// (providers.Metered), with its content in the span only when the operator
// turned content capture on.
func Calls(set providers.Set, delays []time.Duration, timeout time.Duration, count func(provider, model, text string) int, limits func(provider, model string) (window, maxOutput int), log zerolog.Logger) providers.Set {
	calls := providers.Set{}
	for key, p := range set {
		countFor := func(model, text string) int { return count(key, model, text) }
		estimated := &providers.Estimated{Provider: p, Name: key, Log: log, Count: countFor}
		metered := &providers.Metered{Name: key, CaptureContent: telemetry.CaptureContent(), Provider: &providers.Structured{Provider: &providers.Retry{Provider: estimated, Delays: delays, Timeout: timeout}}}
		calls[key] = &providers.Budget{Provider: metered, Count: countFor,
			Limits: func(model string) (int, int) { return limits(key, model) }}
	}
	return calls
}

// CatalogLimits returns the context window and maximum output of a
// catalog model, 0 each for a model cat does not have.
func CatalogLimits(cat *catalog.Catalog) func(provider, model string) (int, int) {
	return func(provider, model string) (int, int) {
		m, ok := cat.Model(provider, model)
		if !ok {
			return 0, 0
		}
		return m.ContextWindow, m.MaxOutput
	}
}

// Search returns verify's search backend for the settings s. A web backend
// whose credential is missing falls back to the offline index, and the log
// says so; a corpus folder that is not a folder is an error. The backend is
// built in the background (see search.Start).
func Search(s config.Search, log zerolog.Logger) (search.Backend, error) {
	key, err := s.Secret()
	if err == nil && (s.Backend == config.SearchBrave || s.Backend == config.SearchTavily) && key == "" {
		err = fmt.Errorf("no credential in %s%s", s.APIKeyEnv, s.APIKeyFile)
	}
	cfg := search.Config{Backend: s.Backend, BaseURL: s.BaseURL, APIKey: key, CorpusDir: s.CorpusDir, Timeout: s.Timeout}
	if err != nil {
		log.Warn().Err(err).Str("search", s.Backend).Msg("search backend unavailable: verify uses the offline sample corpus")
		cfg = search.Config{Backend: search.NameOffline}
	}
	if cfg.Backend == "" {
		cfg.Backend = search.NameOffline
	}
	if cfg.Backend == search.NameOffline && cfg.CorpusDir != "" {
		if info, err := os.Stat(cfg.CorpusDir); err != nil || !info.IsDir() {
			return nil, fmt.Errorf("search.corpus_dir %q is not a folder", cfg.CorpusDir)
		}
	}
	return search.Start(cfg, func(err error, took time.Duration) {
		if err != nil {
			log.Error().Err(err).Str("search", cfg.Backend).Msg("search backend failed to start: every verify search fails")
			return
		}
		log.Info().Str("search", cfg.Backend).Str("corpus_dir", cfg.CorpusDir).Dur("took", took).Msg("search backend ready")
	}), nil
}
