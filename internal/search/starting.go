package search

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// Starting is a backend being built in the background, as indexing a large
// corpus takes a while: a search waits for it as long as its context and
// the search timeout allow.
type Starting struct {
	name    string
	wait    time.Duration
	ready   chan struct{}
	backend Backend
	err     error
}

var _ Backend = (*Starting)(nil)

// Start builds the backend of cfg in the background and returns at once.
// When the build ends, done (if not nil) is called with its error and how
// long it took; a backend that failed to build fails every search with that
// error.
func Start(cfg Config, done func(err error, took time.Duration)) *Starting {
	s := &Starting{name: cfg.Backend, wait: cmp.Or(cfg.Timeout, DefaultTimeout), ready: make(chan struct{})}
	go func() {
		defer close(s.ready)
		start := time.Now()
		s.backend, s.err = New(cfg)
		if done != nil {
			done(s.err, time.Since(start))
		}
	}()
	return s
}

// Name returns the name of the backend being built.
func (s *Starting) Name() string { return s.name }

// Search waits for the backend, as long as ctx and the search timeout
// allow, then searches. It fails with the build's error when the build
// failed, and says the backend is still starting when the wait ends first.
func (s *Starting) Search(ctx context.Context, query string, limit int) ([]Result, error) {
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
