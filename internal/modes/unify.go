// Package modes holds the mode pipelines. Each runs a query from its events
// onward: steps already recorded are not run again, so a redelivered job
// resumes where the last worker stopped.
package modes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/simulated"
)

// Emit appends one event of the query being run.
type Emit func(ctx context.Context, ev events.Event) error

// Unify runs all selected models in parallel, then has one model synthesize a
// single answer and list the conflicts it found and how each was resolved.
type Unify struct {
	// Providers serve the calls; retries and timeouts are theirs.
	Providers providers.Set
	// Price is the metered cost of a call's usage, in micro-credits.
	Price func(events.ModelRef, events.Usage) int64
}

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
	if !q.Started {
		if err := emit(ctx, events.QueryStarted{}); err != nil {
			return nil, err
		}
	}
	answers, failures, err := u.runModels(ctx, q, emit)
	if err != nil {
		return nil, err
	}
	if len(answers) == 0 {
		return events.QueryFailed{Code: apperr.ProviderError, Message: "every selected model failed: " + strings.Join(failures, "; ")}, nil
	}
	if q.Synthesis == nil {
		if err := emit(ctx, events.ProgressReported{Stage: events.StageAggregating, Percent: 85, Message: synthesizingMessage(len(answers))}); err != nil {
			return nil, err
		}
		syn, err := u.synthesize(ctx, q.Submitted.Prompt, answers)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return events.QueryFailed{Code: apperr.AggregationFailed, Message: "the synthesis failed: " + err.Error()}, nil
		}
		if err := emit(ctx, syn); err != nil {
			return nil, err
		}
	}
	return events.QueryCompleted{}, nil
}

// runModels calls every model that has neither answered nor failed, in
// parallel, recording each outcome as it comes. It returns all answers in
// selection order and a description of each failure.
func (u *Unify) runModels(ctx context.Context, q *events.Query, emit Emit) ([]events.ModelAnswered, []string, error) {
	answered := map[string]events.ModelAnswered{}
	failed := map[string]events.ModelFailed{}
	for k, v := range q.Answers {
		answered[k] = v
	}
	for k, v := range q.Failures {
		failed[k] = v
	}
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		emitErr error
	)
	pending := q.Pending()
	for i, m := range pending {
		run := func() {
			// Every retried failure is recorded, not only the last outcome.
			ctx := providers.WithAttemptObserver(ctx, func(attempt int, f *providers.Error, wait time.Duration) {
				_ = emit(ctx, events.ModelRetried{Model: m, Attempt: attempt, Class: f.Class, Message: f.Message, UpstreamStatus: f.Status, RetryInMS: wait.Milliseconds()})
			})
			ev := u.call(ctx, m, q.Submitted.Prompt)
			ectx := ctx
			if ctx.Err() != nil {
				if _, answered := ev.(events.ModelAnswered); !answered {
					return // cancelled: the call did not complete
				}
				// An answer already received is recorded even as the job is
				// stopped, so it is neither called again nor left uncharged.
				var cancel context.CancelFunc
				ectx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
			}
			err := emit(ectx, ev)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				emitErr = errors.Join(emitErr, err)
				return
			}
			switch e := ev.(type) {
			case events.ModelAnswered:
				answered[m.Key()] = e
			case events.ModelFailed:
				failed[m.Key()] = e
			}
		}
		if i == len(pending)-1 {
			run() // the last call runs on this goroutine: one fewer per query
		} else {
			wg.Go(run)
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if emitErr != nil {
		return nil, nil, emitErr
	}
	var answers []events.ModelAnswered
	var failures []string
	for _, m := range q.Submitted.Models {
		if a, ok := answered[m.Key()]; ok {
			answers = append(answers, a)
		} else if f, ok := failed[m.Key()]; ok {
			failures = append(failures, fmt.Sprintf("%s: %s", m.Key(), f.Class))
		}
	}
	return answers, failures, nil
}

func (u *Unify) call(ctx context.Context, m events.ModelRef, prompt string) events.Event {
	resp, err := u.complete(ctx, m, providers.Request{
		Model:    m.ModelID,
		Messages: []providers.Message{{Role: providers.RoleUser, Content: prompt}},
	})
	if err != nil {
		e := providers.Classify(err)
		return events.ModelFailed{Model: m, Class: e.Class, Message: e.Message, UpstreamStatus: e.Status, LatencyMS: resp.Latency.Milliseconds()}
	}
	return events.ModelAnswered{Model: m, Answer: resp.Text, Citations: resp.Citations, Usage: resp.Usage, LatencyMS: resp.Latency.Milliseconds(), CostMicros: u.price(m, resp.Usage)}
}

func (u *Unify) complete(ctx context.Context, m events.ModelRef, req providers.Request) (providers.Response, error) {
	p, ok := u.Providers[m.Provider]
	if !ok {
		return providers.Response{}, &providers.Error{Class: providers.ClassBadRequest, Message: "no backend is configured for " + m.Provider}
	}
	start := time.Now()
	resp, err := p.Complete(ctx, req)
	if resp.Latency == 0 {
		resp.Latency = time.Since(start)
	}
	return resp, err
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
	resp, err := u.complete(ctx, first.Model, providers.Request{
		Model: first.Model.ModelID,
		Messages: []providers.Message{
			{Role: providers.RoleSystem, Content: synthesisInstructions},
			{Role: providers.RoleUser, Content: b.String()},
		},
		Schema: &providers.Schema{Name: simulated.SchemaSynthesis, JSON: SynthesisSchema},
	})
	if err != nil {
		return events.Synthesized{}, fmt.Errorf("%s: %w", first.Model.Key(), err)
	}
	var out struct {
		Answer    string            `json:"answer"`
		Conflicts []events.Conflict `json:"conflicts"`
	}
	raw := resp.JSON
	if raw == nil {
		raw = json.RawMessage(resp.Text)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return events.Synthesized{}, fmt.Errorf("%s returned output that is not the synthesis JSON: %w", first.Model.Key(), err)
	}
	if strings.TrimSpace(out.Answer) == "" {
		return events.Synthesized{}, fmt.Errorf("%s returned an empty answer", first.Model.Key())
	}
	if out.Conflicts == nil {
		out.Conflicts = []events.Conflict{}
	}
	return events.Synthesized{
		Model:      first.Model,
		Answer:     events.Answer{Text: out.Answer, Conflicts: out.Conflicts},
		Usage:      resp.Usage,
		LatencyMS:  resp.Latency.Milliseconds(),
		CostMicros: u.price(first.Model, resp.Usage),
	}, nil
}

func (u *Unify) price(m events.ModelRef, usage events.Usage) int64 {
	if u.Price == nil {
		return 0
	}
	return u.Price(m, usage)
}

func synthesizingMessage(n int) string {
	if n == 1 {
		return "one model answered; its answer is the answer"
	}
	return fmt.Sprintf("synthesizing one answer from %d model answers", n)
}
