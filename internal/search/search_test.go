package search

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewRefusesBadSettings(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		setting string // the error must name it
	}{
		{"unknown backend", Config{Backend: "bing"}, `"bing"`},
		{"searxng without base_url", Config{Backend: "searxng"}, "base_url"},
		{"searxng with a blank base_url", Config{Backend: "searxng", BaseURL: "  "}, "base_url"},
		{"searxng with a relative base_url", Config{Backend: "searxng", BaseURL: "search.local"}, "base_url"},
		{"searxng with an ftp base_url", Config{Backend: "searxng", BaseURL: "ftp://search.local"}, "base_url"},
		{"searxng with a query in base_url", Config{Backend: "searxng", BaseURL: "http://search.local/?q=x"}, "base_url"},
		{"brave without api_key", Config{Backend: "brave"}, "api_key"},
		{"tavily without api_key", Config{Backend: "tavily", BaseURL: "http://127.0.0.1:1"}, "api_key"},
		{"brave with a bad base_url", Config{Backend: "brave", APIKey: testKey, BaseURL: "://"}, "base_url"},
		{"negative timeout", Config{Timeout: -time.Second}, "timeout"},
		{"missing corpus folder", Config{CorpusDir: "/nonexistent/corpus"}, "/nonexistent/corpus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.cfg)
			if err == nil {
				t.Fatalf("New = %T, want an error", b)
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.setting) {
				t.Errorf("New = %v, want ErrConfig naming %s", err, tt.setting)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Errorf("error quotes the key: %v", err)
			}
		})
	}
}

func TestNewChoosesTheBackend(t *testing.T) {
	tests := []struct {
		cfg  Config
		name string
	}{
		{Config{}, NameOffline},
		{Config{Backend: "offline"}, NameOffline},
		{Config{Backend: "searxng", BaseURL: "http://searx.local:8080"}, NameSearXNG},
		{Config{Backend: "brave", APIKey: testKey}, NameBrave},
		{Config{Backend: "tavily", APIKey: testKey}, NameTavily},
	}
	for _, tt := range tests {
		b, err := New(tt.cfg)
		if err != nil {
			t.Fatalf("New(%+v): %v", tt.cfg, err)
		}
		if b.Name() != tt.name {
			t.Errorf("New(%+v).Name() = %q, want %q", tt.cfg, b.Name(), tt.name)
		}
	}
	b, err := New(Config{Backend: "brave", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.(*brave).endpoint.String(); got != "https://api.search.brave.com/res/v1/web/search" {
		t.Errorf("brave endpoint %s, want the public API", got)
	}
	b, err = New(Config{Backend: "tavily", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.(*tavily).endpoint.String(); got != "https://api.tavily.com/search" {
		t.Errorf("tavily endpoint %s, want the public API", got)
	}
}

// TestBackendContract runs the Backend contract against every backend: the
// offline one over the sample corpus, the web ones against fakes of their APIs.
func TestBackendContract(t *testing.T) {
	backends := map[string]func(t *testing.T) Backend{
		NameOffline: func(t *testing.T) Backend {
			b, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.(*Offline).Close() })
			return b
		},
	}
	for _, v := range vendors {
		backends[v.name] = func(t *testing.T) Backend { return newFakeEngine(t, v).backend(t, 0) }
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			ctx := context.Background()
			if b.Name() != name {
				t.Errorf("Name() = %q, want %q", b.Name(), name)
			}

			got, err := b.Search(ctx, "Mount Everest height", 2)
			if err != nil {
				t.Fatalf("Search: %v", err)
			}
			if len(got) == 0 || len(got) > 2 {
				t.Errorf("%d results for limit 2", len(got))
			}
			for _, r := range got {
				if r.URL == "" || r.Title == "" || r.Snippet == "" || length(r.Snippet) > maxSnippet {
					t.Errorf("result %+v lacks a URL, title or snippet, or its snippet is too long", r)
				}
			}
			if len(got) > 0 && !strings.Contains(got[0].Snippet, "Everest") {
				t.Errorf("first result %+v is not about Everest", got[0])
			}

			got, err = b.Search(ctx, nothing, 5)
			if err != nil || got == nil || len(got) != 0 {
				t.Errorf("Search(nothing) = %#v, %v; want an empty slice and no error", got, err)
			}

			for _, bad := range []struct {
				query string
				limit int
			}{{"", 5}, {"  \t", 5}, {"everest", 0}, {"everest", -1}} {
				if _, err := b.Search(ctx, bad.query, bad.limit); err == nil {
					t.Errorf("Search(%q, %d) succeeded", bad.query, bad.limit)
				}
			}

			ended, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := b.Search(ended, "everest", 3); !errors.Is(err, context.Canceled) {
				t.Errorf("Search with an ended context = %v, want context.Canceled", err)
			}

			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if _, err := b.Search(ctx, "Everest summit", 3); err != nil {
						t.Errorf("concurrent Search: %v", err)
					}
				})
			}
			wg.Wait()
		})
	}
}
