package catalog

import "testing"

// The catalog must follow spec 2.2: four models per provider, one default which
// is the standard one; a, b, c have 1 standard, 1 budget, 2 premium; d has 1
// standard, 2 budget, 1 premium.
func TestSimulatedCatalogShape(t *testing.T) {
	want := map[string][3]int{
		ProviderA: {1, 1, 2}, ProviderB: {1, 1, 2}, ProviderC: {1, 1, 2}, ProviderD: {1, 2, 1},
	}
	for name, c := range map[string]*Catalog{"simulated": Simulated(), "vendor": Vendor()} {
		checkShape(t, name, c, want)
	}
}

func checkShape(t *testing.T, name string, c *Catalog, want map[string][3]int) {
	t.Helper()
	if len(c.Providers) != 4 {
		t.Fatalf("got %d providers, want 4", len(c.Providers))
	}
	ids := map[string]bool{}
	for _, p := range c.Providers {
		var got [3]int
		defaults := 0
		for _, m := range p.Models {
			if ids[m.ID] {
				t.Errorf("model id %s appears twice", m.ID)
			}
			ids[m.ID] = true
			switch m.Tier {
			case TierStandard:
				got[0]++
			case TierBudget:
				got[1]++
			case TierPremium:
				got[2]++
			}
			if m.Default {
				defaults++
				if m.Tier != TierStandard {
					t.Errorf("%s: default %s is %s, want standard", p.Key, m.ID, m.Tier)
				}
			}
		}
		if got != want[p.Key] || len(p.Models) != 4 || defaults != 1 {
			t.Errorf("%s: tiers %v, %d models, %d defaults; want %v, 4, 1", p.Key, got, len(p.Models), defaults, want[p.Key])
		}
		if name == "simulated" && !p.Simulated() {
			t.Errorf("%s: not labelled simulated", p.Key)
		}
	}
}
