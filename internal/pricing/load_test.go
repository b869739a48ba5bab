package pricing_test

import (
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/modes"
	"github.com/crosscheck/crosscheck/internal/pricing"
)

// TestLoadTokenizersNamesTheEncodingsItCannotLoad checks that loading the
// catalog's tokenizers succeeds for the shipped encodings, names the model
// of an encoding that does not exist, and leaves that model's estimate on
// the approximation of one token per four bytes.
func TestLoadTokenizersNamesTheEncodingsItCannotLoad(t *testing.T) {
	if err := estimator().LoadTokenizers(); err != nil {
		t.Fatalf("LoadTokenizers on the simulated catalog: %v", err)
	}
	c := catalog.Simulated()
	for i := range c.Providers {
		if c.Providers[i].Key == catalog.ProviderB {
			for j := range c.Providers[i].Models {
				c.Providers[i].Models[j].Tokenizer = "no_such_encoding"
			}
		}
	}
	est := &pricing.Estimator{Catalog: c, Planner: pricing.PlanFunc(modes.Plan)}
	err := est.LoadTokenizers()
	if err == nil || !strings.Contains(err.Error(), `"no_such_encoding"`) || !strings.Contains(err.Error(), catalog.ProviderB+"/") {
		t.Fatalf("LoadTokenizers with an unknown encoding: got %v, want an error naming it and its model", err)
	}
	p, _ := c.Provider(catalog.ProviderB)
	ref := events.ModelRef{Provider: catalog.ProviderB, ModelID: p.Default().ID}
	prompt := strings.Repeat("abcd", 100)
	withUnknown := est.Estimate(events.ModeUnify, prompt, nil, []events.ModelRef{ref}, nil)
	plain := estimator().Estimate(events.ModeUnify, prompt, nil, []events.ModelRef{ref}, nil)
	if withUnknown.Calls[0].InputTokens != plain.Calls[0].InputTokens {
		t.Fatalf("input tokens with an unknown encoding: got %d, want the approximation's %d", withUnknown.Calls[0].InputTokens, plain.Calls[0].InputTokens)
	}
}
