package projections

import (
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
)

// The progress messages count in words that agree with the number: one
// disagreement, two disagreements.
func TestDescribeCountsAgree(t *testing.T) {
	m := events.ModelRef{Provider: "provider_a", ModelID: "sim-alpha-standard"}
	for _, tt := range []struct {
		e    events.Event
		want string
	}{
		{events.DisagreementsFound{Disagreements: make([]events.Disagreement, 1)}, "1 disagreement found"},
		{events.DisagreementsFound{Disagreements: make([]events.Disagreement, 2)}, "2 disagreements found"},
		{events.DisagreementsFound{}, "0 disagreements found"},
		{events.ClaimsExtracted{Model: m, Claims: make([]events.ExtractedClaim, 1)}, "1 claim extracted from provider_a's answer"},
		{events.ClaimsMerged{Claims: make([]events.Claim, 1)}, "1 claim to check"},
		{events.ClaimsMerged{Claims: make([]events.Claim, 3)}, "3 claims to check"},
		{events.EvidenceRetrieved{Sources: make([]events.Citation, 1)}, "1 search result for the research"},
		{events.EvidenceRetrieved{ClaimID: "c1", Sources: make([]events.Citation, 1)}, "1 source found for claim c1"},
		{events.ClaimsAssessed{Model: m, Assessments: make([]events.Assessment, 1)}, "provider_a cross-checked 1 claim"},
		{events.VerdictsGiven{Verdicts: make([]events.Verdict, 1)}, "verdicts given on 1 claim"},
	} {
		if got := Describe(events.Record{Event: tt.e}); got != tt.want {
			t.Errorf("%T: %q, want %q", tt.e, got, tt.want)
		}
	}
}
