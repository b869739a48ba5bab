package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
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
}

// Binding binds one provider key of the API to a backend.
type Binding struct {
	Backend string `yaml:"backend"`
	BaseURL string `yaml:"base_url"`
	// APIKeyEnv names the environment variable that holds the credential;
	// APIKeyFile names a file that does. At most one is set.
	APIKeyEnv  string `yaml:"api_key_env"`
	APIKeyFile string `yaml:"api_key_file"`
	// Models, when set, replace the provider's default catalog rows.
	Models []Model `yaml:"models"`
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
}

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
		}
		if len(b.Models) > 0 && defaults != 1 {
			errs = append(errs, fmt.Sprintf("providers.%s.models: exactly one model must be the default, %d are", key, defaults))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("CROSSCHECK_CONFIG: %s", strings.Join(errs, "; "))
	}
	return &f, nil
}

// Credential returns the binding's credential: from its environment
// variable or file; "" when it names neither or the source is empty.
func (b Binding) Credential() (string, error) {
	switch {
	case b.APIKeyEnv != "":
		return strings.TrimSpace(os.Getenv(b.APIKeyEnv)), nil
	case b.APIKeyFile != "":
		raw, err := os.ReadFile(b.APIKeyFile)
		if err != nil {
			return "", fmt.Errorf("api_key_file: %w", err)
		}
		return strings.TrimSpace(string(raw)), nil
	}
	return "", nil
}

// NamesCredential reports whether the binding names a credential source.
func (b Binding) NamesCredential() bool { return b.APIKeyEnv != "" || b.APIKeyFile != "" }
