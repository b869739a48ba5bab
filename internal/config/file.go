package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Backends a provider can be bound to.
const (
	BackendOpenAI           = "openai"
	BackendOpenAICompatible = "openai-compatible"
	BackendAnthropic        = "anthropic"
	BackendGemini           = "gemini"
	BackendSimulated        = "simulated"
)

var backends = map[string]bool{BackendOpenAI: true, BackendOpenAICompatible: true, BackendAnthropic: true, BackendGemini: true, BackendSimulated: true}

// File is the YAML file named by CROSSCHECK_CONFIG.
type File struct {
	Providers map[string]Binding `yaml:"providers"`
	// Search is the search backend of verify; unset is the offline index
	// of the sample corpus.
	Search Search `yaml:"search"`
}

// Credential names where a secret is: APIKeyEnv names the environment
// variable that holds it; APIKeyFile names a file that does. At most one is
// set.
type Credential struct {
	APIKeyEnv  string `yaml:"api_key_env"`
	APIKeyFile string `yaml:"api_key_file"`
}

// Binding binds one provider key of the API to a backend.
type Binding struct {
	Backend    string `yaml:"backend"`
	BaseURL    string `yaml:"base_url"`
	Credential `yaml:",inline"`
	// Models, when set, replace the provider's default catalog rows.
	Models []Model `yaml:"models"`
	// WebSearch turns the vendor's own web search on or off for verify's
	// research (openai, anthropic and gemini have one); unset is on. A
	// provider without it researches with the service's search backend.
	WebSearch *bool `yaml:"web_search"`
}

// Search backends of verify (events.Search*).
const (
	SearchOffline = events.SearchOffline
	SearchSearXNG = events.SearchSearXNG
	SearchBrave   = events.SearchBrave
	SearchTavily  = events.SearchTavily
)

// Search chooses verify's search backend.
type Search struct {
	// Backend is offline (the default), searxng, brave or tavily.
	Backend    string `yaml:"backend"`
	BaseURL    string `yaml:"base_url"`
	Credential `yaml:",inline"`
	// CorpusDir is the folder the offline backend indexes (text, Markdown,
	// HTML, PDF); unset is the built-in sample corpus.
	CorpusDir string `yaml:"corpus_dir"`
	// Timeout bounds one search; unset is 10 s.
	Timeout time.Duration `yaml:"timeout"`
}

// Model is one catalog row of a binding.
type Model struct {
	ID               string `yaml:"model_id"`
	Name             string `yaml:"name"`
	Tier             string `yaml:"tier"`
	Default          bool   `yaml:"default"`
	Upstream         string `yaml:"upstream"`
	InputPerMillion  int64  `yaml:"input_per_million"`
	OutputPerMillion int64  `yaml:"output_per_million"`
	Tokenizer        string `yaml:"tokenizer"`
	ExpectedOutput   int    `yaml:"expected_output_tokens"`
	// ContextWindow and MaxOutputTokens are the model's context window and
	// the most output it writes in one call, in tokens; 0 takes
	// DefaultContextWindow and DefaultMaxOutputTokens.
	ContextWindow   int `yaml:"context_window"`
	MaxOutputTokens int `yaml:"max_output_tokens"`
	// Reads lists what the model reads natively besides text: "images",
	// "pdf". A file of another kind reaches it as extracted text.
	Reads []string `yaml:"reads"`
}

// The context window and maximum output of a catalog row of the
// configuration file that sets neither: those of a small local model, so
// that a prompt is cut rather than refused; a host that refuses it still
// gets it once more, cut to the window it names.
const (
	DefaultContextWindow   = 32_768
	DefaultMaxOutputTokens = 4_096
)

var providerKeys = map[string]bool{"provider_a": true, "provider_b": true, "provider_c": true, "provider_d": true}

// LoadFile reads and validates the configuration file. Unknown fields are
// errors, so a typo is reported rather than ignored.
func LoadFile(path string) (*File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CROSSCHECK_CONFIG: %w", err)
	}
	return ParseFile(raw)
}

// ParseFile parses and validates configuration YAML.
func ParseFile(raw []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("CROSSCHECK_CONFIG: %w", err)
	}
	var errs []string
	for key, b := range f.Providers {
		if !providerKeys[key] {
			errs = append(errs, fmt.Sprintf("providers.%s: unknown provider key; use provider_a, provider_b, provider_c or provider_d", key))
			continue
		}
		if !backends[b.Backend] {
			errs = append(errs, fmt.Sprintf("providers.%s.backend: %q; use openai, openai-compatible, anthropic, gemini or simulated", key, b.Backend))
		}
		if b.APIKeyEnv != "" && b.APIKeyFile != "" {
			errs = append(errs, fmt.Sprintf("providers.%s: set api_key_env or api_key_file, not both", key))
		}
		if b.Backend == BackendOpenAICompatible && b.BaseURL == "" {
			errs = append(errs, fmt.Sprintf("providers.%s.base_url: required for an openai-compatible backend", key))
		}
		defaults := 0
		for i, m := range b.Models {
			if m.ID == "" || m.Tier == "" {
				errs = append(errs, fmt.Sprintf("providers.%s.models[%d]: model_id and tier are required", key, i))
			}
			if m.Default {
				defaults++
			}
			if m.ContextWindow < 0 || m.MaxOutputTokens < 0 {
				errs = append(errs, fmt.Sprintf("providers.%s.models[%d]: context_window and max_output_tokens must not be negative (0 takes the defaults, %d and %d)", key, i, DefaultContextWindow, DefaultMaxOutputTokens))
			}
			if w, o := m.ContextWindow, m.MaxOutputTokens; w > 0 && o >= w {
				errs = append(errs, fmt.Sprintf("providers.%s.models[%d]: max_output_tokens (%d) must be below context_window (%d)", key, i, o, w))
			}
			for _, r := range m.Reads {
				if r != "images" && r != "pdf" {
					errs = append(errs, fmt.Sprintf("providers.%s.models[%d].reads: %q is not one of images, pdf", key, i, r))
				}
			}
		}
		if len(b.Models) > 0 && defaults != 1 {
			errs = append(errs, fmt.Sprintf("providers.%s.models: exactly one model must be the default, %d are", key, defaults))
		}
	}
	errs = append(errs, f.Search.check()...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("CROSSCHECK_CONFIG: %s", strings.Join(errs, "; "))
	}
	return &f, nil
}

func (s Search) check() []string {
	var errs []string
	switch s.Backend {
	case "", SearchOffline:
	case SearchSearXNG:
		if s.BaseURL == "" {
			errs = append(errs, "search.base_url: required for the searxng backend (the address of the SearXNG instance)")
		}
	case SearchBrave, SearchTavily:
		if !s.NamesCredential() {
			errs = append(errs, fmt.Sprintf("search: the %s backend needs api_key_env or api_key_file", s.Backend))
		}
	default:
		errs = append(errs, fmt.Sprintf("search.backend: %q; use offline, searxng, brave or tavily", s.Backend))
	}
	if s.APIKeyEnv != "" && s.APIKeyFile != "" {
		errs = append(errs, "search: set api_key_env or api_key_file, not both")
	}
	if s.Timeout < 0 {
		errs = append(errs, "search.timeout: must not be negative")
	}
	return errs
}

// Secret returns the credential: from its environment variable or file; ""
// when it names neither or the source is empty.
func (c Credential) Secret() (string, error) {
	switch {
	case c.APIKeyEnv != "":
		return strings.TrimSpace(os.Getenv(c.APIKeyEnv)), nil
	case c.APIKeyFile != "":
		raw, err := os.ReadFile(c.APIKeyFile)
		if err != nil {
			return "", fmt.Errorf("api_key_file: %w", err)
		}
		return strings.TrimSpace(string(raw)), nil
	}
	return "", nil
}

// NamesCredential reports whether a credential source is named.
func (c Credential) NamesCredential() bool { return c.APIKeyEnv != "" || c.APIKeyFile != "" }
