// Package catalog is the model catalog of spec section 2.2: four first-party
// providers, each with four models of a tier and exactly one default, the
// standard-tier one.
package catalog

import (
	"math"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Provider keys of the spec, in the order results list them.
const (
	ProviderA = "provider_a"
	ProviderB = "provider_b"
	ProviderC = "provider_c"
	ProviderD = "provider_d"
)

// ProviderKeys lists the first-party provider keys in order.
var ProviderKeys = []string{ProviderA, ProviderB, ProviderC, ProviderD}

// Tiers.
const (
	TierStandard = "standard"
	TierBudget   = "budget"
	TierPremium  = "premium"
)

// BackendSimulated names the built-in simulated backend.
const BackendSimulated = "simulated"

// Model is one catalog row.
type Model struct {
	ID      string  `json:"model_id"`
	Name    string  `json:"name"`
	Tier    string  `json:"tier"`
	Default bool    `json:"default"`
	Pricing Pricing `json:"pricing"`
	// Tokenizer names the tiktoken encoding of an OpenAI-family model, for
	// pre-flight estimates; empty means the approximation of one token per
	// four bytes.
	Tokenizer string `json:"-"`
	// ExpectedOutput is the number of output tokens a pre-flight estimate
	// assumes for one answer of this model.
	ExpectedOutput int `json:"-"`
	// Upstream is the vendor's name for the model; empty means the model_id.
	Upstream string `json:"-"`
	// ContextWindow is the model's context window in tokens (prompt and
	// output together); MaxOutput the most output tokens it writes in one
	// call. Every call's prompt is fitted into them (providers.Budget).
	ContextWindow int `json:"-"`
	MaxOutput     int `json:"-"`
	// Reads is what the model reads natively besides text. A file of a kind
	// it does not read reaches it as its extracted text, or, for an image,
	// as a note that the image is not visible to it.
	Reads Reads `json:"-"`
}

// Reads says which attached files a model reads natively.
type Reads struct {
	// Images: PNG, JPEG, GIF and WEBP images.
	Images bool
	// PDF: PDF documents, each page's text and image.
	PDF bool
	// InlineBytes, when not zero, bounds the bytes of the files one request
	// carries natively (before base64): a model whose requests carry them
	// inline within a size limit gets the files that do not fit as their
	// extracted text.
	InlineBytes int64
}

// GeminiInlineBytes is the bound of Gemini's inline data: a request is at
// most 20 MB with the files base64-encoded (4 bytes for 3), so 14 MiB of
// files leave room for the prompt.
const GeminiInlineBytes = 14 << 20

// Kinds of an attached file, as the files service classifies an upload:
// the names of the event vocabulary.
const (
	KindImage    = events.FileKindImage
	KindPDF      = events.FileKindPDF
	KindDocument = events.FileKindDocument
	KindText     = events.FileKindText
)

// Native reports whether the model reads a file of kind natively; documents
// (DOC, DOCX) and text always reach a model as text.
func (m Model) Native(kind string) bool {
	switch kind {
	case KindImage:
		return m.Reads.Images
	case KindPDF:
		return m.Reads.PDF
	}
	return false
}

// UpstreamName is the name the vendor knows the model by.
func (m Model) UpstreamName() string {
	if m.Upstream != "" {
		return m.Upstream
	}
	return m.ID
}

// Pricing is what a model's tokens cost, in credits per million tokens, which
// is also micro-credits per token: costs are exact integers of micro-credits.
type Pricing struct {
	InputPerMillion  int64 `json:"input_per_million"`
	OutputPerMillion int64 `json:"output_per_million"`
}

// MicroCredits is the cost of a call's usage in micro-credits (1e-6 credit).
// A count below zero costs nothing, and a cost past what an int64 holds is
// math.MaxInt64: it never wraps around.
func (p Pricing) MicroCredits(inputTokens, outputTokens int) int64 {
	in, out := tokensCost(inputTokens, p.InputPerMillion), tokensCost(outputTokens, p.OutputPerMillion)
	if in > math.MaxInt64-out {
		return math.MaxInt64
	}
	return in + out
}

// tokensCost is tokens × price, 0 for a negative count or price, and
// math.MaxInt64 when the product does not fit.
func tokensCost(tokens int, price int64) int64 {
	if tokens <= 0 || price <= 0 {
		return 0
	}
	if int64(tokens) > math.MaxInt64/price {
		return math.MaxInt64
	}
	return int64(tokens) * price
}

// Standard-tier prices of the simulated catalog, calibrated so that the four
// standard models cost about one credit for a unify query with the usage the
// simulated backend reports (docs/billing.md); budget costs a quarter,
// premium four times as much.
var (
	simulatedStandard = Pricing{InputPerMillion: 500, OutputPerMillion: 2000}
	tierFactor        = map[string]float64{TierStandard: 1, TierBudget: 0.25, TierPremium: 4}
)

func priced(tier string) Pricing {
	f := tierFactor[tier]
	return Pricing{InputPerMillion: int64(float64(simulatedStandard.InputPerMillion) * f), OutputPerMillion: int64(float64(simulatedStandard.OutputPerMillion) * f)}
}

// Provider is one first-party provider with the backend that serves it.
type Provider struct {
	Key     string
	Backend string
	Models  []Model
}

// Simulated reports whether the provider runs on the simulated backend.
func (p Provider) Simulated() bool { return p.Backend == BackendSimulated }

// Default returns the provider's default model.
func (p Provider) Default() Model {
	for _, m := range p.Models {
		if m.Default {
			return m
		}
	}
	return p.Models[0]
}

// Catalog is the set of providers a server offers.
type Catalog struct {
	Providers []Provider
}

// Provider returns the provider with key, if the catalog has it.
func (c *Catalog) Provider(key string) (Provider, bool) {
	for _, p := range c.Providers {
		if p.Key == key {
			return p, true
		}
	}
	return Provider{}, false
}

// Model returns the model with id of the provider with key, if both exist.
func (c *Catalog) Model(provider, id string) (Model, bool) {
	p, ok := c.Provider(provider)
	if !ok {
		return Model{}, false
	}
	for _, m := range p.Models {
		if m.ID == id {
			return m, true
		}
	}
	return Model{}, false
}

// Simulated returns the default catalog with every provider on the simulated
// backend: the embedded default that needs no credentials.
func Simulated() *Catalog {
	family := func(key, fam, name string, budgets, premiums []string) Provider {
		p := Provider{Key: key, Backend: BackendSimulated}
		model := func(suffix, label, tier string) Model {
			m := Model{ID: fam + "-" + suffix, Name: name + " " + label + " (simulated)", Tier: tier, Pricing: priced(tier), ExpectedOutput: 60,
				ContextWindow: 128_000, MaxOutput: 16_384}
			if key == ProviderA {
				m.Tokenizer = "o200k_base" // provider_a plays an OpenAI-family model
			}
			// Each plays what its vendor counterpart reads: provider_d an
			// OpenAI-compatible host without vision or PDF input.
			if key != ProviderD {
				m.Reads = Reads{Images: true, PDF: true}
			}
			return m
		}
		std := model("standard", "Standard", TierStandard)
		std.Default = true
		p.Models = append(p.Models, std)
		for _, b := range budgets {
			p.Models = append(p.Models, model(b, title(b), TierBudget))
		}
		for _, pr := range premiums {
			p.Models = append(p.Models, model(pr, title(pr), TierPremium))
		}
		return p
	}
	return &Catalog{Providers: []Provider{
		family(ProviderA, "sim-alpha", "Sim Alpha", []string{"lite"}, []string{"pro", "max"}),
		family(ProviderB, "sim-beta", "Sim Beta", []string{"lite"}, []string{"pro", "max"}),
		family(ProviderC, "sim-gamma", "Sim Gamma", []string{"lite"}, []string{"pro", "max"}),
		family(ProviderD, "sim-delta", "Sim Delta", []string{"lite", "nano"}, []string{"pro"}),
	}}
}

func title(s string) string { return string(s[0]-'a'+'A') + s[1:] }

// Vendor returns the default catalog for real vendors, with every provider's
// backend left for the configuration to set: provider_a OpenAI, provider_b
// Anthropic, provider_c Google Gemini, provider_d Mistral (an OpenAI-compatible
// host). It follows spec 2.2: four models per provider, one standard default;
// provider_d has one standard, two budget and one premium model. Prices follow
// the tiers of the simulated catalog.
//
// What each model reads natively follows its vendor's documentation: the
// OpenAI models take images (input_image) and PDFs (input_file) in the
// Responses API; the Claude models image and PDF document blocks; the Gemini
// models both as inline data, within GeminiInlineBytes a request. Over chat completions, Mistral Medium and Small
// take image parts (vision); Ministral 8B and Mistral Large read text only,
// and no Mistral model takes a PDF there.
func Vendor() *Catalog {
	all := Reads{Images: true, PDF: true}
	inline := Reads{Images: true, PDF: true, InlineBytes: GeminiInlineBytes}
	row := func(id, name, tier, tokenizer string, reads Reads, window, maxOut int) Model {
		return Model{ID: id, Name: name, Tier: tier, Default: tier == TierStandard, Pricing: priced(tier), Tokenizer: tokenizer, ExpectedOutput: 600, Reads: reads,
			ContextWindow: window, MaxOutput: maxOut}
	}
	const oai = "o200k_base"
	return &Catalog{Providers: []Provider{
		{Key: ProviderA, Models: []Model{
			row("gpt-4.1", "GPT-4.1", TierStandard, oai, all, 1_047_576, 32_768),
			row("gpt-4.1-mini", "GPT-4.1 mini", TierBudget, oai, all, 1_047_576, 32_768),
			row("gpt-5", "GPT-5", TierPremium, oai, all, 400_000, 128_000),
			row("o3", "o3", TierPremium, oai, all, 200_000, 100_000),
		}},
		{Key: ProviderB, Models: []Model{
			row("claude-sonnet-4-5", "Claude Sonnet 4.5", TierStandard, "", all, 200_000, 64_000),
			row("claude-haiku-4-5", "Claude Haiku 4.5", TierBudget, "", all, 200_000, 64_000),
			row("claude-opus-4-1", "Claude Opus 4.1", TierPremium, "", all, 200_000, 32_000),
			row("claude-opus-4-5", "Claude Opus 4.5", TierPremium, "", all, 200_000, 64_000),
		}},
		{Key: ProviderC, Models: []Model{
			row("gemini-2.5-flash", "Gemini 2.5 Flash", TierStandard, "", inline, 1_048_576, 65_536),
			row("gemini-2.5-flash-lite", "Gemini 2.5 Flash-Lite", TierBudget, "", inline, 1_048_576, 65_536),
			row("gemini-2.5-pro", "Gemini 2.5 Pro", TierPremium, "", inline, 1_048_576, 65_536),
			row("gemini-3-pro-preview", "Gemini 3 Pro (preview)", TierPremium, "", inline, 1_048_576, 65_536),
		}},
		{Key: ProviderD, Models: []Model{
			row("mistral-medium-latest", "Mistral Medium", TierStandard, "", Reads{Images: true}, 128_000, 16_384),
			row("mistral-small-latest", "Mistral Small", TierBudget, "", Reads{Images: true}, 128_000, 16_384),
			row("ministral-8b-latest", "Ministral 8B", TierBudget, "", Reads{}, 128_000, 16_384),
			row("mistral-large-latest", "Mistral Large", TierPremium, "", Reads{}, 128_000, 16_384),
		}},
	}}
}

// DefaultMistralBaseURL is provider_d's host when its openai-compatible
// binding names no base_url.
const DefaultMistralBaseURL = "https://api.mistral.ai/v1"
