package modes

import (
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/pricing"
)

// Context sizes of verify, in tokens: the search results of a research
// prompt, and the evidence of the claims one model judges.
const (
	researchContextTokens = 450
	evidenceContextTokens = 600
)

// Plan returns the calls mode makes with n models selected, the same
// pipeline Run follows when every call succeeds. It is the Planner the
// estimate prices (pricing.PlanFunc(Plan)).
func Plan(mode string, n int) []pricing.Step {
	all := float64(n)
	switch mode {
	case events.ModeJustify:
		calls := []pricing.Step{{Role: events.StepAnswer, Each: true, Prompt: true, Files: true, Tools: true, Output: 1}}
		if n < 2 {
			return calls
		}
		return append(calls,
			pricing.Step{Role: events.StepRevise, Each: true, Instructions: reviseInstructions, Prompt: true, Files: true, Answers: all, Output: 1},
			pricing.Step{Role: events.StepFindDisagreements, Instructions: disagreementsInstructions, Prompt: true, Answers: 2 * all, Output: 1.5},
			pricing.Step{Role: events.StepRewrite, Instructions: justifiedAnswerInstructions, Prompt: true, Answers: all + 1, Output: 1},
		)
	case events.ModeVerify:
		calls := []pricing.Step{
			{Role: events.StepResearch, Each: true, Instructions: researchInstructions, Prompt: true, Files: true, Tools: true, Context: researchContextTokens, Output: 1},
			{Role: events.StepExtractClaims, Each: true, Instructions: extractInstructions, Prompt: true, Answers: 1, Output: 1.3},
		}
		if n > 1 {
			calls = append(calls, pricing.Step{Role: events.StepMergeClaims, Instructions: mergeInstructions, Answers: all, Output: 3})
		}
		return append(calls,
			pricing.Step{Role: events.StepAssessClaims, Each: true, Instructions: assessInstructions, Prompt: true, Files: true, Answers: 1, Context: evidenceContextTokens, Output: 1.2},
			pricing.Step{Role: events.StepRewrite, Instructions: rewriteInstructions, Prompt: true, Answers: all + 1, Output: 1},
		)
	}
	calls := []pricing.Step{{Role: events.StepAnswer, Each: true, Prompt: true, Files: true, Tools: true, Output: 1}}
	if n > 1 {
		calls = append(calls, pricing.Step{Role: events.StepSynthesis, Instructions: synthesisInstructions, Prompt: true, Answers: all, Output: 0.5 * all})
	}
	return calls
}
