package registry

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
)

// A settings file that binds no provider (only search:) keeps the
// simulated catalog, as no file does: its model ids are the simulated ones,
// not vendor ids served by the simulated backend. Its search section is
// kept.
func TestSearchOnlyConfigKeepsTheSimulatedCatalog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crosscheck.yaml")
	if err := os.WriteFile(path, []byte("search:\n  backend: searxng\n  base_url: http://127.0.0.1:8888\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Build(context.Background(), config.Config{ConfigFile: path}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	want := catalog.Simulated()
	for i, p := range b.Catalog.Providers {
		if p.Backend != catalog.BackendSimulated || len(p.Models) != len(want.Providers[i].Models) || p.Models[0].ID != want.Providers[i].Models[0].ID {
			t.Errorf("%s: backend %s, first model %q; want the simulated catalog's %q", p.Key, p.Backend, p.Models[0].ID, want.Providers[i].Models[0].ID)
		}
		if b.Providers[p.Key] == nil {
			t.Errorf("%s: no backend", p.Key)
		}
	}
	if b.Search.Backend != config.SearchSearXNG {
		t.Errorf("search %+v, want the file's searxng", b.Search)
	}
}
