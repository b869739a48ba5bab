// Package queries admits and reads queries: the request decoder and its rules
// (spec 2.1), Idempotency-Key claims, the per-key in-flight limit, and the
// query read path.
package queries

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
)

// MaxPromptBytes is the prompt limit of spec 2.1: 32 KB.
const MaxPromptBytes = 32 * 1024

// MaxCustomModels bounds the custom_models entries of one query.
const MaxCustomModels = 8

// MaxBodyBytes bounds a request body; a prompt at its limit, JSON-escaped, fits.
const MaxBodyBytes = 256 * 1024

// Request is a decoded, valid query request.
type Request struct {
	Mode         string             `json:"mode"`
	Prompt       string             `json:"prompt"`
	Models       map[string]*string `json:"models,omitempty"`
	CustomModels []string           `json:"custom_models,omitempty"`
	// Files are the file ids the query attaches, in the request's order.
	Files []string `json:"files,omitempty"`
	// Selected are the models that run, resolved by the rules of spec 2.1:
	// the first-party ones by Decode, the customer-owned ones (after them,
	// in custom_models order) by the Service, which also fills CustomReads,
	// the file kinds each of those reads natively, by BYOM id.
	Selected    []events.ModelRef        `json:"-"`
	CustomReads map[string]catalog.Reads `json:"-"`
	// Tools are the functions the query offers its models; ToolChoice how
	// it asks them to call one.
	Tools      []events.Tool `json:"-"`
	ToolChoice string        `json:"-"`
}

// Hash identifies the request's content for Idempotency-Key comparison: two
// bodies that select the same models for the same mode and prompt, and
// attach the same files in the same order, have the same hash, whatever
// their key order, white space, or spelling of the selection (models
// omitted, or listing each default, or adding null entries).
func (r Request) Hash() string {
	v := struct {
		Mode         string            `json:"mode"`
		Prompt       string            `json:"prompt"`
		Selected     []events.ModelRef `json:"selected"`
		CustomModels []string          `json:"custom_models"`
		Files        []string          `json:"files,omitempty"`
		Tools        []events.Tool     `json:"tools,omitempty"`
		ToolChoice   string            `json:"tool_choice,omitempty"`
	}{r.Mode, r.Prompt, r.Selected, r.CustomModels, r.Files, r.Tools, r.ToolChoice}
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var knownFields = map[string]bool{"mode": true, "prompt": true, "models": true, "custom_models": true, "files": true, "tools": true, "tool_choice": true}

// Decode parses and validates a POST /v1/queries body against the catalog and
// the modes this server runs. Every failure is an *apperr.Error naming the
// field at fault.
func Decode(body []byte, cat *catalog.Catalog, modes map[string]bool) (Request, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return Request{}, apperr.New(apperr.InvalidRequest, "the request body must be a JSON object")
	}
	if dec.More() {
		return Request{}, apperr.New(apperr.InvalidRequest, "the request body must hold one JSON object and nothing after it")
	}
	for name := range fields {
		if !knownFields[name] {
			return Request{}, apperr.New(apperr.InvalidRequest, "unknown field %q: the fields are mode, prompt, models, custom_models, files, tools and tool_choice", truncate(name))
		}
	}
	var r Request
	if err := decodeMode(fields["mode"], modes, &r); err != nil {
		return Request{}, err
	}
	if err := decodePrompt(fields["prompt"], &r); err != nil {
		return Request{}, err
	}
	if err := decodeModels(fields["models"], cat, &r); err != nil {
		return Request{}, err
	}
	if err := decodeCustom(fields["custom_models"], &r); err != nil {
		return Request{}, err
	}
	if err := decodeFiles(fields["files"], &r); err != nil {
		return Request{}, err
	}
	if err := decodeTools(fields["tools"], fields["tool_choice"], &r); err != nil {
		return Request{}, err
	}
	if len(r.Selected) == 0 && len(r.CustomModels) == 0 {
		return Request{}, apperr.New(apperr.InvalidModels, "no model selected: every provider is null or left out of models, and custom_models is empty")
	}
	return r, nil
}

func isNull(raw json.RawMessage) bool {
	return raw == nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func decodeMode(raw json.RawMessage, modes map[string]bool, r *Request) error {
	if isNull(raw) {
		return apperr.New(apperr.InvalidMode, "mode is required: one of unify, justify, verify")
	}
	if err := json.Unmarshal(raw, &r.Mode); err != nil {
		return apperr.New(apperr.InvalidMode, "mode must be a string: one of unify, justify, verify")
	}
	switch r.Mode {
	case events.ModeUnify, events.ModeJustify, events.ModeVerify:
		if !modes[r.Mode] {
			return apperr.New(apperr.InvalidMode, "mode %s is not available on this server yet; use unify", r.Mode)
		}
		return nil
	}
	return apperr.New(apperr.InvalidMode, "mode must be one of unify, justify, verify; got %q", truncate(r.Mode))
}

func decodePrompt(raw json.RawMessage, r *Request) error {
	if isNull(raw) {
		return apperr.New(apperr.InvalidPrompt, "prompt is required")
	}
	if err := json.Unmarshal(raw, &r.Prompt); err != nil {
		return apperr.New(apperr.InvalidPrompt, "prompt must be a string")
	}
	if strings.TrimSpace(r.Prompt) == "" {
		return apperr.New(apperr.InvalidPrompt, "prompt must not be empty")
	}
	if len(r.Prompt) > MaxPromptBytes {
		return apperr.New(apperr.InvalidPrompt, "prompt is %d bytes; the limit is %d bytes (32 KB)", len(r.Prompt), MaxPromptBytes)
	}
	return nil
}

func decodeModels(raw json.RawMessage, cat *catalog.Catalog, r *Request) error {
	if isNull(raw) {
		// Rule 1: every provider runs its default model.
		for _, p := range cat.Providers {
			r.Selected = append(r.Selected, events.ModelRef{Provider: p.Key, ModelID: p.Default().ID, Simulated: p.Simulated()})
		}
		return nil
	}
	var sel map[string]json.RawMessage
	if err := json.Unmarshal(raw, &sel); err != nil || sel == nil {
		return apperr.New(apperr.InvalidModels, "models must be an object of provider key to model_id or null, for example {\"provider_a\": \"%s\"}", cat.Providers[0].Default().ID)
	}
	r.Models = map[string]*string{}
	for key, v := range sel {
		if _, ok := cat.Provider(key); !ok {
			return apperr.New(apperr.InvalidModels, "models has an unknown provider key %q: use %s", truncate(key), strings.Join(catalog.ProviderKeys, ", "))
		}
		if isNull(v) {
			r.Models[key] = nil
			continue
		}
		var id string
		if err := json.Unmarshal(v, &id); err != nil {
			return apperr.New(apperr.InvalidModels, "models.%s must be a model_id string or null", key)
		}
		r.Models[key] = &id
	}
	// Rule 2: only providers with a non-null value run, in catalog order.
	for _, p := range cat.Providers {
		id := r.Models[p.Key]
		if id == nil {
			continue
		}
		if _, ok := cat.Model(p.Key, *id); !ok {
			return apperr.New(apperr.InvalidModel, "model_id %q is not a model of %s; see GET /v1/models", truncate(*id), p.Key)
		}
		r.Selected = append(r.Selected, events.ModelRef{Provider: p.Key, ModelID: *id, Simulated: p.Simulated()})
	}
	return nil
}

func decodeCustom(raw json.RawMessage, r *Request) error {
	if isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, &r.CustomModels); err != nil {
		return apperr.New(apperr.InvalidModels, "custom_models must be an array of byom_<id> strings")
	}
	if len(r.CustomModels) > MaxCustomModels {
		return apperr.New(apperr.InvalidModels, "custom_models has %d entries; a query runs at most %d", len(r.CustomModels), MaxCustomModels)
	}
	seen := map[string]bool{}
	for _, id := range r.CustomModels {
		if !strings.HasPrefix(id, "byom_") || len(id) == len("byom_") {
			return apperr.New(apperr.InvalidModels, "custom_models entry %q does not have the form byom_<id>", truncate(id))
		}
		if seen[id] {
			return apperr.New(apperr.InvalidModels, "custom_models lists %q twice", truncate(id))
		}
		seen[id] = true
	}
	if len(r.CustomModels) == 0 {
		r.CustomModels = nil
	}
	// Whether each is a usable model of the caller's account is the
	// Service's check (CustomModels).
	return nil
}

// truncate keeps echoed client input short and valid UTF-8.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
