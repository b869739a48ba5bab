package pricing_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/pricing"
)

// tokenizer is the tiktoken encoding of the simulated catalog's
// OpenAI-family provider.
const tokenizer = "o200k_base"

func estimator() *pricing.Estimator {
	return &pricing.Estimator{Catalog: catalog.Simulated(), Planner: pricing.PlanFunc(modes.Plan)}
}

// selected is the default model of each first-party provider of the
// simulated catalog: one of them counts with tiktoken.
func selected(t testing.TB, n int) []events.ModelRef {
	t.Helper()
	c := catalog.Simulated()
	var out []events.ModelRef
	for _, key := range catalog.ProviderKeys[:n] {
		p, ok := c.Provider(key)
		if !ok {
			t.Fatalf("provider %s not in the catalog", key)
		}
		out = append(out, events.ModelRef{Provider: key, ModelID: p.Default().ID})
	}
	return out
}

// pathological are prompts whose byte-pair encoding in one piece costs time
// quadratic in their length.
var pathological = map[string]string{
	"32 KB of a":    strings.Repeat("a", 32<<10),
	"32 KB of 0xFF": strings.Repeat("\xff", 32<<10),
	"32 KB of é":    strings.Repeat("é", 16<<10),
}

// An estimate hands tiktoken the prompt once per tokenizer, however many of
// the plan's calls send it, in pieces of at most MaxPieceBytes bytes.
func TestEstimateCountsThePromptOnceInBoundedPieces(t *testing.T) {
	for name, prompt := range pathological {
		for _, mode := range []string{events.ModeUnify, events.ModeJustify, events.ModeVerify} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				var promptBytes, longest int
				restore := pricing.ObserveEncode(func(piece string) {
					longest = max(longest, len(piece))
					if strings.Trim(piece, prompt[:1]) == "" || strings.Trim(piece, "é") == "" {
						promptBytes += len(piece)
					}
				})
				defer restore()
				est := estimator().Estimate(mode, prompt, nil, selected(t, 4), nil)
				if est.Micros <= 0 {
					t.Fatalf("estimate %d micro-credits", est.Micros)
				}
				if longest > pricing.MaxPieceBytes {
					t.Errorf("tiktoken encoded a piece of %d bytes, want at most %d", longest, pricing.MaxPieceBytes)
				}
				if promptBytes != len(prompt) {
					t.Errorf("tiktoken encoded %d bytes of the %d-byte prompt, want each byte once (one tokenizer)", promptBytes, len(prompt))
				}
			})
		}
	}
}

// Counting in pieces gives the count of the whole text for ordinary prose and
// for one character repeated.
func TestCountTokensInPiecesMatchesTheWholeText(t *testing.T) {
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog; is it true that it does?\n", 40)
	texts := map[string]string{
		"prose":  prose,
		"a":      strings.Repeat("a", 4<<10),
		"é":      strings.Repeat("é", 2<<10),
		"spaces": strings.Repeat("word   ", 600),
	}
	for name, text := range texts {
		if got, whole := pricing.CountTokens(tokenizer, text), pricing.CountWhole(tokenizer, text); got != whole {
			t.Errorf("%s: %d tokens in pieces, %d in one piece", name, got, whole)
		}
	}
}

// BenchmarkCountTokens counts one character repeated, in pieces and (whole)
// in one piece as before.
func BenchmarkCountTokens(b *testing.B) {
	for _, size := range []int{8 << 10, 16 << 10, 32 << 10} {
		for _, c := range []string{"a", "\xff"} {
			text := strings.Repeat(c, size)
			b.Run(fmt.Sprintf("pieces/%dKB/%q", size>>10, c), func(b *testing.B) {
				for b.Loop() {
					pricing.CountTokens(tokenizer, text)
				}
			})
			b.Run(fmt.Sprintf("whole/%dKB/%q", size>>10, c), func(b *testing.B) {
				for b.Loop() {
					pricing.CountWhole(tokenizer, text)
				}
			})
		}
	}
}

// BenchmarkEstimateVerify prices a verify query of a 32 KB prompt of one
// character with the OpenAI-family provider alone.
func BenchmarkEstimateVerify(b *testing.B) {
	prompt := strings.Repeat("a", 32<<10)
	e, sel := estimator(), selected(b, 1)
	for b.Loop() {
		e.Estimate(events.ModeVerify, prompt, nil, sel, nil)
	}
}

// The instructions of a plan's steps are the same text in every estimate:
// tiktoken counts each once per tokenizer in a process, and only the
// prompt in each estimate after that.
func TestEstimatesCountTheStepsInstructionsOnce(t *testing.T) {
	const prompt = "how far is the moon"
	est := estimator()
	for _, mode := range []string{events.ModeJustify, events.ModeUnify} {
		est.Estimate(mode, "first "+prompt, nil, selected(t, 4), nil) // counts the instructions
	}
	var others []string
	restore := pricing.ObserveEncode(func(piece string) {
		if !strings.Contains(piece, prompt) {
			others = append(others, piece)
		}
	})
	defer restore()
	for i := range 3 {
		for _, mode := range []string{events.ModeJustify, events.ModeUnify} {
			if e := est.Estimate(mode, fmt.Sprintf("%d %s", i, prompt), nil, selected(t, 4), nil); e.Micros <= 0 {
				t.Fatalf("estimate %d micro-credits", e.Micros)
			}
		}
	}
	if len(others) > 0 {
		t.Errorf("tiktoken encoded %d pieces of text other than the prompts, want none (the instructions were counted before): %q", len(others), others)
	}
}

// The query's tools are input of the calls that carry them (each model's
// answer, or its research in verify) and of no other call: an estimate
// without them reserved too little for a query whose tools are long.
func TestEstimateCountsTheToolsWhereTheyAreSent(t *testing.T) {
	const prompt = "what is the weather in Paris"
	tools := []events.Tool{{Name: "get_weather", Description: strings.Repeat("Looks up the weather of a city. ", 200),
		Parameters: `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`}}
	carries := map[string]bool{events.StepAnswer: true, events.StepResearch: true}
	for _, mode := range []string{events.ModeUnify, events.ModeJustify, events.ModeVerify} {
		t.Run(mode, func(t *testing.T) {
			without := estimator().Estimate(mode, prompt, nil, selected(t, 4), nil)
			with := estimator().Estimate(mode, prompt, tools, selected(t, 4), nil)
			if len(with.Calls) != len(without.Calls) {
				t.Fatalf("%d calls with tools, %d without", len(with.Calls), len(without.Calls))
			}
			for i, c := range with.Calls {
				added := c.InputTokens - without.Calls[i].InputTokens
				switch {
				case carries[c.Role] && added < 1200:
					t.Errorf("%s by %s: the tools added %d input tokens, want their ~1,400", c.Role, c.Model.Key(), added)
				case !carries[c.Role] && added != 0:
					t.Errorf("%s by %s: the tools added %d input tokens to a call that does not send them", c.Role, c.Model.Key(), added)
				}
			}
			if with.Micros <= without.Micros {
				t.Errorf("estimate %d with the tools, %d without", with.Micros, without.Micros)
			}
		})
	}
}

// TestTokensCountsWithATokenizer: a call whose host reported no usage is
// counted with the model's tiktoken encoding, or o200k_base for a model
// that names none (a customer's own among them), never by its bytes.
func TestTokensCountsWithATokenizer(t *testing.T) {
	e := &pricing.Estimator{Catalog: catalog.Simulated()}
	text := strings.Repeat("The Eiffel Tower was completed in 1889 and stands in Paris. ", 20)
	want := pricing.CountTokens(pricing.UsageEncoding, text)
	for _, c := range [][2]string{{"provider_a", "sim-alpha-standard"}, {"provider_b", "sim-beta-standard"}, {"custom", "llama-3-8b"}} {
		if got := e.Tokens(c[0], c[1], text); got != want {
			t.Errorf("%s/%s: %d tokens, want %d", c[0], c[1], got, want)
		}
	}
	if bytes := (len(text) + 3) / 4; want == bytes {
		t.Fatalf("%d tokens is the bytes/4 approximation", want)
	}
}
