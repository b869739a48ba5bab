package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFile(t *testing.T) {
	f, err := ParseFile([]byte(`
providers:
  provider_a: {backend: openai, api_key_env: OPENAI_API_KEY}
  provider_d: {backend: openai-compatible, base_url: "http://127.0.0.1:11434/v1", api_key_env: OLLAMA_KEY}
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Providers["provider_a"].Backend != "openai" || f.Providers["provider_d"].BaseURL != "http://127.0.0.1:11434/v1" {
		t.Fatalf("parsed %+v", f.Providers)
	}
	if _, err := ParseFile(nil); err != nil {
		t.Fatalf("an empty file: %v", err)
	}
	for name, bad := range map[string]string{
		"unknown field":      "providers:\n  provider_a: {backend: openai, apikey: x}\n",
		"unknown provider":   "providers:\n  provider_z: {backend: openai}\n",
		"unknown backend":    "providers:\n  provider_a: {backend: bedrock}\n",
		"compat without url": "providers:\n  provider_d: {backend: openai-compatible}\n",
		"two sources":        "providers:\n  provider_a: {backend: openai, api_key_env: A, api_key_file: /k}\n",
		"two defaults":       "providers:\n  provider_a:\n    backend: openai\n    models: [{model_id: a, tier: standard, default: true}, {model_id: b, tier: budget, default: true}]\n",
		"negative window":    "providers:\n  provider_a:\n    backend: openai\n    models: [{model_id: a, tier: standard, default: true, context_window: -1}]\n",
		"output over window": "providers:\n  provider_a:\n    backend: openai\n    models: [{model_id: a, tier: standard, default: true, context_window: 4096, max_output_tokens: 4096}]\n",
	} {
		if _, err := ParseFile([]byte(bad)); err == nil || !strings.Contains(err.Error(), "CROSSCHECK_CONFIG") {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func TestCredentialSources(t *testing.T) {
	t.Setenv("XC_TEST_KEY", " secret-from-env \n")
	if k, _ := (Credential{APIKeyEnv: "XC_TEST_KEY"}).Secret(); k != "secret-from-env" {
		t.Fatalf("env credential %q", k)
	}
	path := filepath.Join(t.TempDir(), "key")
	_ = os.WriteFile(path, []byte("secret-from-file\n"), 0o600)
	if k, _ := (Credential{APIKeyFile: path}).Secret(); k != "secret-from-file" {
		t.Fatalf("file credential %q", k)
	}
	if k, _ := (Credential{}).Secret(); k != "" {
		t.Fatalf("no source gave %q", k)
	}
}

func TestParseSearch(t *testing.T) {
	f, err := ParseFile([]byte(`
providers:
  provider_a: {backend: openai, api_key_env: OPENAI_API_KEY, web_search: false}
search:
  backend: searxng
  base_url: "http://127.0.0.1:8888"
  timeout: 5s
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Search.Backend != SearchSearXNG || f.Search.BaseURL != "http://127.0.0.1:8888" || f.Search.Timeout.Seconds() != 5 {
		t.Fatalf("search %+v", f.Search)
	}
	if ws := f.Providers["provider_a"].WebSearch; ws == nil || *ws {
		t.Fatalf("web_search %v, want false", ws)
	}
	for name, bad := range map[string]string{
		"unknown backend":     "search: {backend: google}\n",
		"searxng without url": "search: {backend: searxng}\n",
		"brave without key":   "search: {backend: brave}\n",
		"two sources":         "search: {backend: tavily, api_key_env: T, api_key_file: /k}\n",
		"negative timeout":    "search: {timeout: -1s}\n",
		"unknown field":       "search: {backend: offline, folder: /docs}\n",
	} {
		if _, err := ParseFile([]byte(bad)); err == nil || !strings.Contains(err.Error(), "CROSSCHECK_CONFIG") {
			t.Errorf("%s: err %v", name, err)
		}
	}
}
