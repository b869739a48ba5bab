package modes

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// Unify runs all selected models in parallel, then has one model synthesize a
// single answer and list the conflicts it found and how each was resolved.
type Unify struct {
	Models
}

// SchemaSynthesis names the unify synthesis schema.
const SchemaSynthesis = "synthesis"

// SynthesisSchema is the structured output the synthesizer must return.
var SynthesisSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["answer", "conflicts"],
  "properties": {
    "answer": {"type": "string"},
    "conflicts": {"type": "array", "items": {
      "type": "object",
      "additionalProperties": false,
      "required": ["topic", "positions", "resolution"],
      "properties": {
        "topic": {"type": "string"},
        "positions": {"type": "array", "items": {
          "type": "object",
          "additionalProperties": false,
          "required": ["model", "position"],
          "properties": {"model": {"type": "string"}, "position": {"type": "string"}}
        }},
        "resolution": {"type": "string"}
      }
    }}
  }
}`)

const synthesisInstructions = `You are the synthesizer of a multi-model verification service. Several models answered the same question independently. Write one answer that keeps what they agree on. Find every topic on which they disagree; for each, list each model's position and say how you resolved it (majority, stronger evidence, or unresolved, in which case the answer reports each position). Answer with JSON only, matching the schema.`

// Run runs q from its recorded events to its end and returns the terminal
// event, which the caller appends once the query's credits are settled.
func (u *Unify) Run(ctx context.Context, q *events.Query, emit Emit) (events.Event, error) {
	j := newJob(q, emit)
	if err := j.start(ctx); err != nil {
		return nil, err
	}
	if err := j.answerAll(ctx, func(ctx context.Context, m events.ModelRef) events.Event {
		return u.answer(ctx, j, m, q.Submitted.Prompt)
	}); err != nil {
		return nil, err
	}
	answers, ending := j.answered()
	if ending != nil {
		return ending, nil
	}
	// The last answer started the aggregating stage: no progress event.
	return j.finish(ctx, "", events.StepSynthesis, answers[0].Model, func() (events.Synthesized, error) {
		return u.synthesize(ctx, q.Submitted.Prompt, answers)
	})
}

// synthesize asks the first model that answered, in selection order, for the
// one answer. A single answer needs no synthesis and is the answer.
func (u *Unify) synthesize(ctx context.Context, prompt string, answers []events.ModelAnswered) (events.Synthesized, error) {
	first := answers[0]
	if len(answers) == 1 {
		return events.Synthesized{Model: first.Model, Answer: events.Answer{Text: first.Answer, Conflicts: []events.Conflict{}}}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Question:\n%s\n\nAnswers:\n", prompt)
	for _, a := range answers {
		fmt.Fprintf(&b, "\n### %s (%s)\n%s\n", a.Model.Key(), a.Model.ModelID, a.Answer)
	}
	var out struct {
		Answer    string            `json:"answer"`
		Conflicts []events.Conflict `json:"conflicts"`
	}
	mt, err := u.ask(ctx, first.Model, events.StepSynthesis, synthesisInstructions, b.String(),
		&providers.Schema{Name: SchemaSynthesis, JSON: SynthesisSchema}, &out)
	if err != nil {
		return events.Synthesized{}, err
	}
	if strings.TrimSpace(out.Answer) == "" {
		return events.Synthesized{}, &providers.Error{Class: providers.ClassEmpty, Message: "the answer is empty"}
	}
	if out.Conflicts == nil {
		out.Conflicts = []events.Conflict{}
	}
	return events.Synthesized{
		Model: first.Model, Answer: events.Answer{Text: out.Answer, Conflicts: out.Conflicts},
		Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros,
	}, nil
}
