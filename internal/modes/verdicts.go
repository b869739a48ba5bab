package modes

import (
	"math"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Aggregate turns the judgements of each claim into its verdict:
//
//   - no judgement: unverifiable, confidence 0;
//   - only "unverifiable" judgements: unverifiable;
//   - supported and refuted both present: disputed, unless one side has at
//     least three times the other's votes, when that side wins;
//   - otherwise the one verdict the judges gave.
//
// Confidence is the share of all judgements that back the verdict (for
// disputed, the share that took a side; for a verdict won over dissent, the
// winning margin), halved when no source was found for the claim, since the
// judges then judged from their own knowledge. It is rounded to two places.
func Aggregate(claims []events.Claim, evidence []events.EvidenceRetrieved, assessed map[string]events.ClaimsAssessed) []events.Verdict {
	sourced := map[string]bool{}
	for _, e := range evidence {
		if e.ClaimID != "" && len(e.Sources) > 0 {
			sourced[e.ClaimID] = true
		}
	}
	votes := map[string]map[string]int{}
	for _, a := range assessed {
		for _, as := range a.Assessments {
			if votes[as.ClaimID] == nil {
				votes[as.ClaimID] = map[string]int{}
			}
			votes[as.ClaimID][as.Verdict]++
		}
	}
	out := make([]events.Verdict, 0, len(claims))
	for _, c := range claims {
		v := votes[c.ID]
		s, r, u := v[events.VerdictSupported], v[events.VerdictRefuted], v[events.VerdictUnverifiable]
		n := float64(s + r + u)
		verdict, conf := events.VerdictUnverifiable, 0.0
		switch {
		case n == 0:
		case s == 0 && r == 0:
			conf = float64(u) / n
		case r == 0:
			verdict, conf = events.VerdictSupported, float64(s)/n
		case s == 0:
			verdict, conf = events.VerdictRefuted, float64(r)/n
		case s >= 3*r:
			verdict, conf = events.VerdictSupported, float64(s-r)/n
		case r >= 3*s:
			verdict, conf = events.VerdictRefuted, float64(r-s)/n
		default:
			verdict, conf = events.VerdictDisputed, float64(s+r)/n
		}
		if !sourced[c.ID] {
			conf /= 2
		}
		out = append(out, events.Verdict{ClaimID: c.ID, Verdict: verdict, Confidence: math.Round(conf*100) / 100})
	}
	return out
}
