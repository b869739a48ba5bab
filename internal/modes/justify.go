package modes

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// Justify runs a deliberation: every model answers (round 1); each reads the
// others' round-1 answers, anonymised and in shuffled order, and revises
// (round 2); one model extracts the disagreements of the rounds as data;
// one writes the answer from the revised answers and those resolutions.
type Justify struct {
	Models
}

// Schemas of the justify steps.
const (
	SchemaRevision      = "revision"
	SchemaDisagreements = "disagreements"
	SchemaAnswer        = "answer"
)

// RevisionSchema is a round-2 answer.
var RevisionSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["answer", "changed"],
  "properties": {
    "answer": {"type": "string", "minLength": 1},
    "changed": {"type": "boolean"}
  }
}`)

// DisagreementsSchema is the disagreements of a deliberation.
var DisagreementsSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["disagreements"],
  "properties": {
    "disagreements": {"type": "array", "items": {
      "type": "object",
      "additionalProperties": false,
      "required": ["topic", "positions", "resolved", "resolution"],
      "properties": {
        "topic": {"type": "string", "minLength": 1},
        "positions": {"type": "array", "items": {
          "type": "object",
          "additionalProperties": false,
          "required": ["model", "before", "after"],
          "properties": {"model": {"type": "string"}, "before": {"type": "string"}, "after": {"type": "string"}}
        }},
        "resolved": {"type": "boolean"},
        "resolution": {"type": "string"}
      }
    }}
  }
}`)

// AnswerSchema is a final answer.
var AnswerSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["answer"],
  "properties": {"answer": {"type": "string", "minLength": 1}}
}`)

const reviseInstructions = `You are one of several independent models that answered the same question. You are shown the question, your own first answer, and the other models' first answers, anonymised and in random order. Reconsider your answer in their light: keep every position you still hold, change a position only where another answer gives you a better reason or better evidence, and never defer to a view only because others hold it. Reply with JSON only: {"answer": your complete revised answer, "changed": true if you changed any position}.`

const disagreementsInstructions = `You review a deliberation between models. For each model you are shown its first answer (round 1) and its revised answer (round 2). List every topic on which the first answers differed. For each topic give each model's position before (round 1) and after (round 2), whether the revised answers now agree (resolved), and how it was resolved or why it was not. Use the model labels exactly as given. Reply with JSON only, matching the schema; an empty list when the first answers agreed on everything.`

const justifiedAnswerInstructions = `You write the final answer of a deliberation between models. You are shown the question, the models' revised answers and the disagreements found, each with its resolution. Write one answer that keeps what the revised answers agree on, follows each resolution, and where a disagreement is unresolved reports each position rather than choosing one. Reply with JSON only: {"answer": the answer}.`

// Run runs q from its recorded events to its end and returns the terminal
// event.
func (m *Justify) Run(ctx context.Context, q *events.Query, emit Emit) (events.Event, error) {
	j := newJob(q, emit)
	prompt := q.Submitted.Prompt
	if err := j.start(ctx); err != nil {
		return nil, err
	}
	if err := j.answerAll(ctx, func(ctx context.Context, ref events.ModelRef) events.Event {
		return m.answer(ctx, j, ref, prompt)
	}); err != nil {
		return nil, err
	}
	answers, ending := j.answered()
	if ending != nil {
		return ending, nil
	}
	if err := m.deliberate(ctx, j, answers); err != nil {
		return nil, err
	}
	return j.finish(ctx, "writing the answer from the revised answers and the resolutions", events.StepRewrite, answers[0].Model, func() (events.Synthesized, error) {
		return m.conclude(ctx, j, answers)
	})
}

// deliberate runs round 2 and the extraction of the disagreements, each
// step once.
func (m *Justify) deliberate(ctx context.Context, j *job, answers []events.ModelAnswered) error {
	if len(answers) < 2 {
		return j.note(ctx, events.StepFailed{Step: events.StepRevise, Class: "not_enough_answers",
			Message: "only " + answers[0].Model.Key() + " answered, so there was no deliberation"})
	}
	var pending []events.ModelAnswered
	for _, a := range answers {
		if _, revised := j.q.Revisions[a.Model.Key()]; !revised && !j.failed(events.StepRevise, &a.Model) {
			pending = append(pending, a)
		}
	}
	if len(pending) > 0 {
		if err := j.progress(ctx, events.StageDeliberating, 45, "each model reads the others' answers, anonymised, and revises"); err != nil {
			return err
		}
		if err := each(pending, func(a events.ModelAnswered) error {
			ev, ok := m.revise(ctx, j, a, answers)
			return j.recordOutcome(ctx, ev, ok)
		}); err != nil {
			return err
		}
	}
	if j.q.Disagreements != nil || j.failed(events.StepFindDisagreements, &answers[0].Model) {
		return nil
	}
	if err := j.progress(ctx, events.StageDeliberating, 75, "extracting the disagreements and how they were resolved"); err != nil {
		return err
	}
	ev, ok := m.findDisagreements(ctx, j, answers)
	return j.recordOutcome(ctx, ev, ok)
}

// revise asks a's model to revise its answer after reading the others'. It
// returns the ModelRevised event, or a StepFailed and false.
// The query's files go with the call again, as in round 1.
func (m *Justify) revise(ctx context.Context, j *job, a events.ModelAnswered, answers []events.ModelAnswered) (events.Event, bool) {
	sub := j.q.Submitted
	var others []string
	for _, o := range answers {
		if o.Model.Key() != a.Model.Key() {
			others = append(others, anonymise(o.Answer, sub.Models))
		}
	}
	// Shuffled per model and query, the same on a resumed run.
	h := fnv.New64a()
	_, _ = h.Write([]byte(sub.RequestID + "/" + a.Model.Key()))
	rand.New(rand.NewPCG(h.Sum64(), 0)).Shuffle(len(others), func(i, k int) { others[i], others[k] = others[k], others[i] })

	var b strings.Builder
	fmt.Fprintf(&b, "Question:\n%s\n\nYour first answer:\n%s\n\nThe other answers, anonymised and in random order:\n", sub.Prompt, a.Answer)
	for i, o := range others {
		fmt.Fprintf(&b, "\n### Answer %d\n%s\n", i+1, o)
	}
	var out struct {
		Answer  string `json:"answer"`
		Changed bool   `json:"changed"`
	}
	mt, err := m.askFiles(ctx, j, a.Model, events.StepRevise, reviseInstructions, b.String(),
		&providers.Schema{Name: SchemaRevision, JSON: RevisionSchema}, &out)
	if err != nil {
		ref := a.Model
		return stepFailed(events.StepRevise, &ref, err), false
	}
	return events.ModelRevised{Model: a.Model, Round: 2, Answer: out.Answer, Changed: out.Changed,
		Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros}, true
}

// brands are the names of model families and their vendors that an answer
// may give of itself.
var brands = regexp.MustCompile(`(?i)\b(?:chatgpt|gpt-?[\w.-]*|claude[\w.-]*|gemini[\w.-]*|mistral[\w.-]*|llama[\w.-]*|openai|anthropic|deepmind)\b`)

// anonymise removes from text the names of the participating models (their
// ids, BYOM ids and provider keys, in any case, longest first) and of the
// common model families and vendors: a model that names itself in its answer
// is not named to the others.
func anonymise(text string, models []events.ModelRef) string {
	var names []string
	for _, m := range models {
		for _, name := range []string{m.ModelID, m.CustomModel, m.Provider} {
			if name != "" {
				names = append(names, regexp.QuoteMeta(name))
			}
		}
	}
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	if len(names) > 0 {
		text = regexp.MustCompile(`(?i)`+strings.Join(names, "|")).ReplaceAllString(text, "another model")
	}
	return brands.ReplaceAllString(text, "another model")
}

// finalAnswers returns each model's last answer: its revision, or its
// round-1 answer when it did not revise.
func finalAnswers(q *events.Query, answers []events.ModelAnswered) []string {
	out := make([]string, 0, len(answers))
	for _, a := range answers {
		if r, ok := q.Revisions[a.Model.Key()]; ok {
			out = append(out, r.Answer)
		} else {
			out = append(out, a.Answer)
		}
	}
	return out
}

// findDisagreements has the first model that answered extract the
// disagreements of the two rounds.
func (m *Justify) findDisagreements(ctx context.Context, j *job, answers []events.ModelAnswered) (events.Event, bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "Question:\n%s\n", j.q.Submitted.Prompt)
	final := finalAnswers(j.q, answers)
	known := map[string]bool{}
	for i, a := range answers {
		known[a.Model.Key()] = true
		fmt.Fprintf(&b, "\n### %s round 1\n%s\n\n### %s round 2\n%s\n", a.Model.Key(), a.Answer, a.Model.Key(), final[i])
	}
	ref := answers[0].Model
	var out struct {
		Disagreements []events.Disagreement `json:"disagreements"`
	}
	mt, err := m.ask(ctx, ref, events.StepFindDisagreements, disagreementsInstructions, b.String(),
		&providers.Schema{Name: SchemaDisagreements, JSON: DisagreementsSchema}, &out)
	if err != nil {
		return stepFailed(events.StepFindDisagreements, &ref, err), false
	}
	found := make([]events.Disagreement, 0, len(out.Disagreements))
	topics := map[string]bool{}
	for _, d := range out.Disagreements {
		var positions []events.Stance
		for _, p := range d.Positions {
			// A label the model made up is dropped, and so is a repeat.
			if known[p.Model] && !slices.ContainsFunc(positions, func(s events.Stance) bool { return s.Model == p.Model }) {
				positions = append(positions, p)
			}
		}
		if len(positions) == 0 || topics[d.Topic] {
			continue
		}
		topics[d.Topic] = true
		d.Positions = positions
		found = append(found, d)
	}
	return events.DisagreementsFound{Model: ref, Disagreements: found, Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros}, true
}

// conclude has the first model that answered write the answer from the
// revised answers and the resolutions. The answer's conflicts are the
// disagreements, so the two always agree.
func (m *Justify) conclude(ctx context.Context, j *job, answers []events.ModelAnswered) (events.Synthesized, error) {
	conflicts := []events.Conflict{}
	var disagreements []events.Disagreement
	if j.q.Disagreements != nil {
		disagreements = j.q.Disagreements.Disagreements
	}
	for _, d := range disagreements {
		c := events.Conflict{Topic: d.Topic, Resolution: d.Resolution}
		for _, p := range d.Positions {
			c.Positions = append(c.Positions, events.Position{Model: p.Model, Position: p.After})
		}
		conflicts = append(conflicts, c)
	}
	final := finalAnswers(j.q, answers)
	first := answers[0].Model
	if len(answers) == 1 {
		return events.Synthesized{Model: first, Answer: events.Answer{Text: final[0], Conflicts: conflicts}}, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Question:\n%s\n\nRevised answers:\n", j.q.Submitted.Prompt)
	for i, a := range final {
		fmt.Fprintf(&b, "\n### Answer %d\n%s\n", i+1, a)
	}
	b.WriteString("\nDisagreements:\n")
	if len(disagreements) == 0 {
		b.WriteString("(none found)\n")
	}
	for _, d := range disagreements {
		state := "unresolved"
		if d.Resolved {
			state = "resolved"
		}
		fmt.Fprintf(&b, "- %s: %s — %s\n", d.Topic, state, d.Resolution)
	}
	return m.writeAnswer(ctx, first, justifiedAnswerInstructions, b.String(), conflicts)
}
