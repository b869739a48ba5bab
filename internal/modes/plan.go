package modes

import "github.com/crosscheck/crosscheck/internal/events"

// Call is one model call a mode makes, as a pre-flight estimate sees it:
// what goes into it and what comes out, counted in the models' expected
// answers where the size follows theirs.
type Call struct {
	// Role names the step: answer, synthesis, revise, find_disagreements,
	// rewrite, research, extract_claims, merge_claims, assess_claims.
	Role string
	// Each is true for a call every model makes, false for one the first
	// selected model makes.
	Each bool
	// Instructions is the system text the call sends.
	Instructions string
	// Prompt is whether the user's prompt is in its input.
	Prompt bool
	// Answers is how many model answers its input holds.
	Answers float64
	// Context is the rest of its input in tokens: search results, evidence.
	Context int
	// Output is its output, in expected answers.
	Output float64
}

// Context sizes of verify, in tokens: the search results of a research
// prompt, and the evidence of the claims one model judges.
const (
	researchContextTokens = 450
	evidenceContextTokens = 600
)

// Plan returns the calls mode makes with n models selected, the same
// pipeline Run follows when every call succeeds.
func Plan(mode string, n int) []Call {
	all := float64(n)
	switch mode {
	case events.ModeJustify:
		calls := []Call{{Role: "answer", Each: true, Prompt: true, Output: 1}}
		if n < 2 {
			return calls
		}
		return append(calls,
			Call{Role: "revise", Each: true, Instructions: reviseInstructions, Prompt: true, Answers: all, Output: 1},
			Call{Role: "find_disagreements", Instructions: disagreementsInstructions, Prompt: true, Answers: 2 * all, Output: 1.5},
			Call{Role: "rewrite", Instructions: justifiedAnswerInstructions, Prompt: true, Answers: all + 1, Output: 1},
		)
	case events.ModeVerify:
		calls := []Call{
			{Role: "research", Each: true, Instructions: researchInstructions, Prompt: true, Context: researchContextTokens, Output: 1},
			{Role: "extract_claims", Each: true, Instructions: extractInstructions, Prompt: true, Answers: 1, Output: 1.3},
		}
		if n > 1 {
			calls = append(calls, Call{Role: "merge_claims", Instructions: mergeInstructions, Answers: all, Output: 3})
		}
		return append(calls,
			Call{Role: "assess_claims", Each: true, Instructions: assessInstructions, Prompt: true, Answers: 1, Context: evidenceContextTokens, Output: 1.2},
			Call{Role: "rewrite", Instructions: rewriteInstructions, Prompt: true, Answers: all + 1, Output: 1},
		)
	}
	calls := []Call{{Role: "answer", Each: true, Prompt: true, Output: 1}}
	if n > 1 {
		calls = append(calls, Call{Role: "synthesis", Instructions: synthesisInstructions, Prompt: true, Answers: all, Output: 0.5 * all})
	}
	return calls
}
