// Package ledger is crosscheck's credits: what a query is estimated to cost,
// the reservation that admits it, the metered debit of every model call, the
// settlement that returns the unused reservation, and the administrator's
// grants, adjustments and caps. Every change is an event on the account's
// subject, appended with the account's expected last sequence.
package ledger

import (
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/modes"
)

// Estimation constants: the framing a call adds around its input, the
// heading of each answer quoted in a prompt, and the margin a reservation
// keeps above the estimate so that a real cost rarely exceeds it.
const (
	framingTokens       = 4
	perAnswerHeadingTok = 12
	// MarginPercent is the margin a reservation keeps above the estimate.
	MarginPercent = 25
)

// Call is one model call of an estimate.
type Call struct {
	Role         string // a step of the mode: answer, synthesize, revise, research, …
	Model        events.ModelRef
	InputTokens  int
	OutputTokens int
	Micros       int64
}

// Estimate is the pre-flight cost of a query.
type Estimate struct {
	Calls []Call
	// Micros is the sum of the calls plus the margin: what is reserved.
	Micros int64
}

// Estimator prices queries from the catalog.
type Estimator struct {
	Catalog *catalog.Catalog
}

// Estimate prices a query of mode over the selected models: every call the
// mode's pipeline makes (modes.Plan), each model answering at its expected
// length, the calls of the whole query made by the first selected model.
// Input tokens are counted with tiktoken for OpenAI-family models and
// approximated as one token per four bytes for the others. A
// customer-owned model costs nothing.
func (e *Estimator) Estimate(mode, prompt string, selected []events.ModelRef) Estimate {
	var out Estimate
	if len(selected) == 0 {
		return out
	}
	var answerLen float64 // the mean expected answer of the selected models
	for _, m := range selected {
		model, _ := e.Catalog.Model(m.Provider, m.ModelID)
		answerLen += float64(model.ExpectedOutput) / float64(len(selected))
	}
	for _, step := range modes.Plan(mode, len(selected)) {
		callers := selected[:1]
		if step.Each {
			callers = selected
		}
		for _, m := range callers {
			model, _ := e.Catalog.Model(m.Provider, m.ModelID)
			in := framingTokens + step.Context + int(step.Answers*(answerLen+perAnswerHeadingTok))
			if step.Instructions != "" {
				in += countTokens(model.Tokenizer, step.Instructions)
			}
			if step.Prompt {
				in += countTokens(model.Tokenizer, prompt)
			}
			c := Call{Role: step.Role, Model: m, InputTokens: in, OutputTokens: int(step.Output * float64(model.ExpectedOutput))}
			c.Micros = price(m, model, c.InputTokens, c.OutputTokens)
			out.Calls = append(out.Calls, c)
		}
	}
	var sum int64
	for _, c := range out.Calls {
		sum += c.Micros
	}
	out.Micros = sum + sum*MarginPercent/100
	return out
}

// Cost is the metered price of a call's reported usage.
func (e *Estimator) Cost(m events.ModelRef, usage events.Usage) int64 {
	model, _ := e.Catalog.Model(m.Provider, m.ModelID)
	return price(m, model, usage.InputTokens, usage.OutputTokens)
}

func price(m events.ModelRef, model catalog.Model, in, out int) int64 {
	if m.CustomModel != "" {
		return 0 // BYOM: the customer pays their host; no variable credits
	}
	return model.Pricing.MicroCredits(in, out)
}

var (
	loaderOnce sync.Once
	encodings  sync.Map // name → *tiktoken.Tiktoken
)

// countTokens counts text's tokens with the named tiktoken encoding (offline
// BPE files shipped in the module), or approximates one per four bytes.
func countTokens(encoding, text string) int {
	if encoding != "" {
		loaderOnce.Do(func() { tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader()) })
		enc, ok := encodings.Load(encoding)
		if !ok {
			if e, err := tiktoken.GetEncoding(encoding); err == nil {
				enc, _ = encodings.LoadOrStore(encoding, e)
			}
		}
		if enc != nil {
			return len(enc.(*tiktoken.Tiktoken).Encode(text, nil, nil))
		}
	}
	return (len(text) + 3) / 4
}
