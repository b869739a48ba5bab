// Package search holds the search backends the verify mode grounds claims in:
// an offline index of a folder of documents (the default, with a built-in
// sample corpus), a self-hosted SearXNG instance, and the Brave and Tavily web
// search APIs. New chooses one from the settings; every backend answers the
// same Backend contract.
package search

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Result is one source a search found.
type Result struct {
	URL     string
	Title   string
	Snippet string
}

// Backend is one search engine.
type Backend interface {
	// Name is the backend's name as the settings spell it: offline, searxng, brave, tavily.
	Name() string
	// Search returns at most limit results for query, best first. An engine that
	// finds nothing returns an empty slice and a nil error; an engine that fails
	// returns an error saying what failed (never including an API key).
	Search(ctx context.Context, query string, limit int) ([]Result, error)
}

// Config chooses and sets up a backend.
type Config struct {
	Backend   string        // offline (default when empty), searxng, brave, tavily
	BaseURL   string        // searxng: required; brave, tavily: overrides the public endpoint (tests point it at a local server)
	APIKey    string        // brave, tavily
	CorpusDir string        // offline: a folder of the user's documents; empty = the built-in sample corpus
	Timeout   time.Duration // per search; zero = 10 s
}

// Backend names, as the settings spell them and evidence events record them
// (events.Search*).
const (
	NameOffline = events.SearchOffline
	NameSearXNG = events.SearchSearXNG
	NameBrave   = events.SearchBrave
	NameTavily  = events.SearchTavily
)

// DefaultTimeout bounds one search when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// ErrConfig is wrapped by every error New returns for a bad setting; the
// error's message names the setting.
var ErrConfig = errors.New("search: bad configuration")

// StatusError is a web search engine's answer with a status outside 2xx.
type StatusError struct {
	Backend string // searxng, brave or tavily
	Status  int    // the HTTP status code
	Body    string // the start of the response body, with the API key removed
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d %s", e.Backend, e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Retriable reports whether the same search may pass later: the engine was
// rate limited or failed on its side.
func (e *StatusError) Retriable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500
}

// New returns the configured backend, or an error wrapping ErrConfig and
// naming the bad setting. The offline backend indexes its folder here, once;
// the web backends make no call until Search.
func New(cfg Config) (Backend, error) {
	timeout := cfg.Timeout
	switch {
	case timeout < 0:
		return nil, fmt.Errorf("%w: timeout %s is negative", ErrConfig, timeout)
	case timeout == 0:
		timeout = DefaultTimeout
	}
	switch name := strings.TrimSpace(cfg.Backend); name {
	case "", NameOffline:
		var o *Offline
		var err error
		if strings.TrimSpace(cfg.CorpusDir) == "" {
			o, err = OpenSample()
		} else {
			o, err = OpenOffline(cfg.CorpusDir)
		}
		if err != nil {
			return nil, err
		}
		o.timeout = timeout
		return o, nil
	case NameSearXNG:
		if strings.TrimSpace(cfg.BaseURL) == "" {
			return nil, fmt.Errorf("%w: backend searxng needs base_url, the address of the SearXNG instance", ErrConfig)
		}
		return newSearXNG(cfg.BaseURL, timeout)
	case NameBrave:
		if strings.TrimSpace(cfg.APIKey) == "" {
			return nil, fmt.Errorf("%w: backend brave needs api_key", ErrConfig)
		}
		return newBrave(cfg.BaseURL, cfg.APIKey, timeout)
	case NameTavily:
		if strings.TrimSpace(cfg.APIKey) == "" {
			return nil, fmt.Errorf("%w: backend tavily needs api_key", ErrConfig)
		}
		return newTavily(cfg.BaseURL, cfg.APIKey, timeout)
	default:
		return nil, fmt.Errorf("%w: backend %q: want offline, searxng, brave or tavily", ErrConfig, name)
	}
}

// checkArgs is the argument check every backend's Search starts with.
func checkArgs(backend, query string, limit int) error {
	if strings.TrimSpace(query) == "" {
		return fmt.Errorf("%s: empty query", backend)
	}
	if limit < 1 {
		return fmt.Errorf("%s: limit %d, want at least 1", backend, limit)
	}
	return nil
}
