package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/anthropic"
	"github.com/crosscheck/crosscheck/internal/providers/gemini"
	"github.com/crosscheck/crosscheck/internal/providers/openai"
	"github.com/crosscheck/crosscheck/internal/providers/openaicompat"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
	"github.com/crosscheck/crosscheck/internal/search"
)

// backends builds the catalog and one backend per provider key. Without
// CROSSCHECK_CONFIG every provider runs on the simulated backend with the
// simulated catalog. With it, each provider keeps the vendor catalog's models
// (or the binding's own) and runs on its bound backend when that backend's
// credential is present; a provider without one runs simulated, labelled so
// in GET /v1/models and in results, and the start-up log says why. A provider
// with a credential never falls back.
//
// It also returns the providers whose backend searches the web itself
// (web_search, on unless turned off), and the file's search settings.
func (m *Main) backends(ctx context.Context) (*catalog.Catalog, providers.Set, map[string]bool, config.Search, error) {
	cfg := m.Config
	set := providers.Set{}
	native := map[string]bool{}
	if cfg.ConfigFile == "" {
		cat := catalog.Simulated()
		for _, p := range cat.Providers {
			set[p.Key] = simulated.New(p.Key, cfg.SimLatency)
		}
		return cat, set, native, config.Search{}, nil
	}
	file, err := config.LoadFile(cfg.ConfigFile)
	if err != nil {
		return nil, nil, nil, config.Search{}, err
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
				})
			}
		}
		backend := config.BackendSimulated
		if bound {
			backend = b.Backend
		}
		key, err := b.Secret()
		if err != nil {
			return nil, nil, nil, config.Search{}, fmt.Errorf("%s: %w", p.Key, err)
		}
		needsKey := backend != config.BackendSimulated && (backend != config.BackendOpenAICompatible || b.NamesCredential())
		if needsKey && key == "" {
			m.Log.Warn().Str("provider", p.Key).Str("backend", backend).Str("api_key_env", b.APIKeyEnv).Str("api_key_file", b.APIKeyFile).
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
				return nil, nil, nil, config.Search{}, fmt.Errorf("%s: %w", p.Key, err)
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
		m.Log.Info().Str("provider", p.Key).Str("backend", backend).Bool("web_search", native[p.Key]).Msg("provider bound")
	}
	return cat, set, native, file.Search, nil
}

// searchBackend returns verify's search backend. A web backend whose
// credential is missing falls back to the offline index, and the log says
// so; a corpus folder that is not a folder stops the start. The backend is
// built in the background (indexing a large folder takes a while) and a
// search waits for it up to the search timeout.
func (m *Main) searchBackend(s config.Search) (search.Backend, error) {
	key, err := s.Secret()
	if err == nil && (s.Backend == config.SearchBrave || s.Backend == config.SearchTavily) && key == "" {
		err = fmt.Errorf("no credential in %s%s", s.APIKeyEnv, s.APIKeyFile)
	}
	cfg := search.Config{Backend: s.Backend, BaseURL: s.BaseURL, APIKey: key, CorpusDir: s.CorpusDir, Timeout: s.Timeout}
	if err != nil {
		m.Log.Warn().Err(err).Str("search", s.Backend).Msg("search backend unavailable: verify uses the offline sample corpus")
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
	b := &startingSearch{name: cfg.Backend, wait: cmp.Or(cfg.Timeout, search.DefaultTimeout), ready: make(chan struct{})}
	go func() {
		defer close(b.ready)
		start := time.Now()
		if b.backend, b.err = search.New(cfg); b.err != nil {
			m.Log.Error().Err(b.err).Str("search", cfg.Backend).Msg("search backend failed to start: every verify search fails")
			return
		}
		m.Log.Info().Str("search", cfg.Backend).Str("corpus_dir", cfg.CorpusDir).Dur("took", time.Since(start)).Msg("search backend ready")
	}()
	return b, nil
}

// startingSearch is a search backend being built in the background.
type startingSearch struct {
	name    string
	wait    time.Duration
	ready   chan struct{}
	backend search.Backend
	err     error
}

func (s *startingSearch) Name() string { return s.name }

// Search waits for the backend, as long as ctx and the search timeout
// allow, then searches.
func (s *startingSearch) Search(ctx context.Context, query string, limit int) ([]search.Result, error) {
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: still starting: %w", s.name, ctx.Err())
	case <-t.C:
		return nil, fmt.Errorf("%s: still starting (indexing the corpus) after %s", s.name, s.wait)
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.backend.Search(ctx, query, limit)
}
