package projections

import (
	"fmt"

	"github.com/crosscheck/crosscheck/internal/events"
)

// applyStep folds the events of the justify and verify steps.
func (r *Result) applyStep(rec events.Record) {
	switch e := rec.Event.(type) {
	case events.ModelRevised:
		if r.Justify == nil {
			return
		}
		changed := e.Changed
		round := r.Justify.round(e.Round)
		round.Answers = append(round.Answers, RoundAnswer{Model: e.Model.Key(), ModelID: e.Model.ModelID, Answer: e.Answer, Changed: &changed})
		r.advance(events.StageDeliberating, 45+30*len(round.Answers)/max(1, len(r.Models)))
	case events.DisagreementsFound:
		if r.Justify != nil {
			r.Justify.Disagreements = e.Disagreements
		}
		r.advance(events.StageDeliberating, 80)
	case events.ClaimsExtracted:
		r.advance(events.StageExtractingClaims, 42)
	case events.ClaimsMerged:
		if r.Verify != nil {
			r.Verify.Claims = make([]VerifiedClaim, 0, len(e.Claims))
			for _, c := range e.Claims {
				r.Verify.Claims = append(r.Verify.Claims, VerifiedClaim{ID: c.ID, Text: c.Text, Sources: []events.Citation{},
					AssertedBy: c.AssertedBy, Assessments: []ClaimAssessment{}})
			}
		}
		r.advance(events.StageExtractingClaims, 48)
	case events.EvidenceRetrieved:
		if r.Verify != nil {
			if e.Error != "" {
				r.Verify.Missing = append(r.Verify.Missing, searchFailure(e))
			} else if c := r.Verify.claim(e.ClaimID); c != nil {
				c.Sources = events.AddSources(c.Sources, e.Sources, events.SourcesPerClaim)
			}
		}
		if e.ClaimID != "" {
			r.advance(events.StageCrossChecking, 55)
		}
	case events.ClaimsAssessed:
		if r.Verify != nil {
			for _, a := range e.Assessments {
				if c := r.Verify.claim(a.ClaimID); c != nil {
					c.Assessments = append(c.Assessments, ClaimAssessment{Model: e.Model.Key(), Verdict: a.Verdict, Rationale: a.Rationale})
				}
			}
		}
		r.advance(events.StageCrossChecking, 75)
	case events.VerdictsGiven:
		if r.Verify != nil {
			for _, v := range e.Verdicts {
				if c := r.Verify.claim(v.ClaimID); c != nil {
					verdict, confidence := v.Verdict, v.Confidence
					c.Verdict, c.Confidence = &verdict, &confidence
					if len(c.Sources) == 0 {
						r.Verify.Missing = append(r.Verify.Missing, fmt.Sprintf("no source was found for claim %s; its verdict rests on the models' own knowledge", c.ID))
					}
				}
			}
		}
		r.advance(events.StageCrossChecking, 82)
	case events.StepFailed:
		switch {
		case r.Justify != nil:
			r.Justify.Missing = append(r.Justify.Missing, StepFailure(e))
		case r.Verify != nil:
			r.Verify.Missing = append(r.Verify.Missing, StepFailure(e))
		}
	}
}

// round returns round n, adding the rounds up to it.
func (j *JustifyResult) round(n int) *Round {
	for len(j.Rounds) < n {
		j.Rounds = append(j.Rounds, Round{Round: len(j.Rounds) + 1, Answers: []RoundAnswer{}})
	}
	return &j.Rounds[n-1]
}

func (v *VerifyResult) claim(id string) *VerifiedClaim {
	for i := range v.Claims {
		if v.Claims[i].ID == id {
			return &v.Claims[i]
		}
	}
	return nil
}

// StepFailure says in a sentence what a failed step leaves out.
func StepFailure(e events.StepFailed) string {
	who := "the service"
	if e.Model != nil {
		who = e.Model.Key()
	}
	what := map[string]string{
		events.StepRevise:            "did not revise its answer; its first answer stands",
		events.StepFindDisagreements: "could not extract the disagreements; none are reported",
		events.StepExtractClaims:     "could not extract the claims of its answer; they are not checked",
		events.StepMergeClaims:       "could not merge the claims; claims with the same text were merged",
		events.StepAssessClaims:      "could not cross-check the claims it was given; the verdicts stand on the other checks",
		events.StepSynthesis:         "could not write the synthesis; the query fails",
		events.StepRewrite:           "could not write the final answer; the query fails",
	}[e.Step]
	if e.Class == "not_enough_answers" || e.Class == "too_many_claims" || e.Class == "self_assessed" {
		return e.Message
	}
	if what == "" {
		what = "failed at step " + e.Step
	}
	return fmt.Sprintf("%s %s (%s: %s)", who, what, events.CurrentClass(e.Class, e.Message), e.Message)
}

func searchFailure(e events.EvidenceRetrieved) string {
	if e.ClaimID == "" {
		return fmt.Sprintf("the research search (%s) failed, so the models answered without search results: %s", e.Backend, e.Error)
	}
	return fmt.Sprintf("the evidence search (%s) for claim %s, query %q, failed: %s", e.Backend, e.ClaimID, e.Query, e.Error)
}
