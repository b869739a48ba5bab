// Package modes holds the mode pipelines: unify, justify and verify. Each
// runs a query from its events onward: steps already recorded are not run
// again, so a redelivered job resumes where the last worker stopped.
package modes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// Emit appends one event of the query being run.
type Emit func(ctx context.Context, ev events.Event) error

// Models makes the model calls of every mode.
type Models struct {
	// Providers serve the calls; retries, timeouts and the validation of
	// structured output are theirs.
	Providers providers.Set
	// Price is the metered cost of a call's usage, in micro-credits.
	Price func(events.ModelRef, events.Usage) int64
	// Files reads the files queries attach; nil when none can be read.
	Files FileSource
	// Custom returns the backend of a customer-owned model (ref.CustomModel
	// set), decorated as Providers are; nil when none can run. Its error
	// fails that model alone: no other model runs in its place.
	Custom func(ctx context.Context, ref events.ModelRef) (providers.Provider, error)
}

// meter is what a call reported and cost.
type meter struct {
	Usage events.Usage
	// UsageSource is events.UsageReported, or events.UsageEstimated when
	// the host reported no usage and the service counted it.
	UsageSource string
	LatencyMS   int64
	CostMicros  int64
}

// MaxOutputTokens bounds the output of every model call, reasoning included
// where a vendor counts it as output (OpenAI's reasoning models, Gemini's
// thinking). Left to the vendors, the bound is the model's whole output
// window for OpenAI and Gemini (tens of thousands of tokens), so one long
// answer could cost many times its estimate. 16,384 leaves reasoning models
// room to think and answer (Anthropic's calls had 4,096 before, the bound
// its API requires), and keeps a call's worst cost to what the write-off
// rule of docs/billing.md can bear.
const MaxOutputTokens = 16384

// complete runs req on ref's backend, as ref's model (it sets req.Model),
// with at most MaxOutputTokens of output when req asks for no fewer. The
// response is never nil, failed or not; its Latency is the call's when the
// backend reported none.
func (m *Models) complete(ctx context.Context, ref *events.ModelRef, req *providers.Request) (*providers.Response, error) {
	// The call waits in p.Complete for as long as the model takes, holding
	// this frame: the backend's lookup is in backend, so the frame stays
	// small.
	p, err := m.backend(ctx, ref)
	if err != nil {
		return &providers.Response{}, err
	}
	req.Model = ref.ModelID
	if req.MaxOutputTokens <= 0 || req.MaxOutputTokens > MaxOutputTokens {
		req.MaxOutputTokens = MaxOutputTokens
	}
	start := time.Now()
	resp, err := p.Complete(ctx, req)
	return providers.WithLatency(resp, start), err
}

// backend returns the backend that serves ref.
//
//go:noinline
func (m *Models) backend(ctx context.Context, ref *events.ModelRef) (providers.Provider, error) {
	if ref.CustomModel != "" {
		if m.Custom == nil {
			return nil, providers.Unusable("no customer-owned model can run here: %s", ref.CustomModel)
		}
		return m.Custom(ctx, *ref)
	}
	p, ok := m.Providers[ref.Provider]
	if !ok {
		return nil, providers.Unusable("no backend is configured for %s", ref.Provider)
	}
	return p, nil
}

func (m *Models) meter(ref events.ModelRef, resp *providers.Response) meter {
	var cost int64
	if m.Price != nil {
		cost = m.Price(ref, resp.Usage)
	}
	countCredits(ref, cost)
	return meter{Usage: resp.Usage, UsageSource: providers.SourceOf(resp), LatencyMS: resp.Latency.Milliseconds(), CostMicros: cost}
}

// ask runs a call that must answer with a JSON object valid for schema and
// decodes it into out.
func (m *Models) ask(ctx context.Context, ref events.ModelRef, purpose, instructions, input string, schema *providers.Schema, out any) (meter, error) {
	return m.askFiles(ctx, nil, ref, purpose, instructions, input, schema, out)
}

// askFiles is ask with the files of j's query, as ref receives them, when j
// is not nil.
func (m *Models) askFiles(ctx context.Context, j *job, ref events.ModelRef, purpose, instructions, input string, schema *providers.Schema, out any) (meter, error) {
	req := providers.Request{
		Purpose: purpose,
		Messages: []providers.Message{
			{Role: providers.RoleSystem, Content: instructions},
			{Role: providers.RoleUser, Content: input},
		},
		Schema: schema,
	}
	if j != nil {
		var err error
		if req, err = j.withFiles(ctx, m.Files, ref, req); err != nil {
			return meter{}, err
		}
	}
	resp, err := m.complete(ctx, &ref, &req)
	if err != nil {
		return meter{}, err
	}
	raw := resp.JSON
	if raw == nil {
		raw = json.RawMessage(resp.Text)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return meter{}, &providers.Error{Class: providers.ClassSchemaMismatch, Message: fmt.Sprintf("the output is not the %s JSON: %v", schema.Name, err),
			Usage: resp.Usage, UsageSource: providers.SourceOf(resp)}
	}
	return m.meter(ref, resp), nil
}

// stepFailed records why a step of model ref is missing, and what the
// failed call's host processed, if it answered (never charged).
func stepFailed(step string, ref *events.ModelRef, err error) events.StepFailed {
	e := providers.Classify(err)
	usage, source := unbilled(e)
	return events.StepFailed{Step: step, Model: ref, Class: e.Class, Message: e.Message, UpstreamStatus: e.Status, Usage: usage, UsageSource: source}
}

// unbilled is the usage a failed call's host processed, and its source;
// nil when it answered none.
func unbilled(e *providers.Error) (*events.Usage, string) {
	if e.Usage == (events.Usage{}) {
		return nil, ""
	}
	u := e.Usage
	return &u, e.UsageSource
}

// job is one run of a query: the query as recorded so far, this run's
// events included, shared by the goroutines of the run.
type job struct {
	emit  Emit
	files fileSet

	mu sync.Mutex
	q  *events.Query
}

func newJob(q *events.Query, emit Emit) *job {
	return &job{q: q.Clone(), emit: emit}
}

// record appends ev and applies it to the job's query.
func (j *job) record(ctx context.Context, ev events.Event) error {
	if err := j.emit(ctx, ev); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.q.Apply(events.Record{Event: ev})
	return nil
}

// recordOutcome records what a call made under ctx produced. A call that
// completed is recorded even when ctx has ended meanwhile, so that it is
// neither made again nor left uncharged; an outcome that ctx cut short is
// not recorded, and ctx's error is returned.
func (j *job) recordOutcome(ctx context.Context, ev events.Event, completed bool) error {
	if ctx.Err() != nil {
		if !completed {
			return ctx.Err()
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	return j.record(ctx, ev)
}

// failed reports whether step (of model ref, when not nil) was recorded as
// failed.
func (j *job) failed(step string, ref *events.ModelRef) bool {
	_, ok := j.failure(step, ref)
	return ok
}

// failure returns the recorded failure of step (of model ref, when not nil).
func (j *job) failure(step string, ref *events.ModelRef) (f events.StepFailed, ok bool) {
	j.read(func(q *events.Query) { f, ok = q.StepFailures[events.StepFailed{Step: step, Model: ref}.Key()] })
	return f, ok
}

// note records a step failure once: a resumed job that recorded it already
// does not record it again.
func (j *job) note(ctx context.Context, ev events.StepFailed) error {
	if j.failed(ev.Step, ev.Model) {
		return nil
	}
	return j.recordOutcome(ctx, ev, true)
}

// read runs fn on the query under the job's lock.
func (j *job) read(fn func(q *events.Query)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	fn(j.q)
}

// progress records a stage change.
func (j *job) progress(ctx context.Context, stage string, percent int, message string) error {
	return j.record(ctx, events.ProgressReported{Stage: stage, Percent: percent, Message: message})
}

// start records that the query runs, once.
func (j *job) start(ctx context.Context) error {
	if j.q.Started {
		return nil
	}
	return j.record(ctx, events.QueryStarted{})
}

// each runs fn for every item at once, the last on this goroutine (one
// goroutine fewer per step), and joins the errors.
func each[T any](items []T, fn func(T) error) error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs error
	)
	for i, it := range items {
		run := func() {
			// A panic fails the item, not the process that runs every job.
			defer func() {
				if p := recover(); p != nil {
					mu.Lock()
					errs = errors.Join(errs, fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
					mu.Unlock()
				}
			}()
			if err := fn(it); err != nil {
				mu.Lock()
				errs = errors.Join(errs, err)
				mu.Unlock()
			}
		}
		if i == len(items)-1 {
			run()
		} else {
			wg.Go(run)
		}
	}
	wg.Wait()
	return errs
}

// answerAll has every model that has neither answered nor failed answer at
// once through call, recording each outcome as it comes, every retried
// attempt included.
func (j *job) answerAll(ctx context.Context, call func(ctx context.Context, m events.ModelRef) events.Event) error {
	var pending []events.ModelRef
	j.read(func(q *events.Query) { pending = q.Pending() })
	err := each(pending, func(m events.ModelRef) error {
		ctx := providers.WithAttemptObserver(ctx, func(attempt int, f *providers.Error, wait time.Duration) {
			_ = j.record(ctx, events.ModelRetried{Model: m, Attempt: attempt, Class: f.Class, Message: f.Message, UpstreamStatus: f.Status, RetryInMS: wait.Milliseconds()})
		})
		ev := call(ctx, m)
		_, answered := ev.(events.ModelAnswered)
		return j.recordOutcome(ctx, ev, answered)
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// answered returns the answers in selection order, or the provider_error
// ending when no model answered.
func (j *job) answered() (answers []events.ModelAnswered, ending events.Event) {
	j.read(func(q *events.Query) { answers, ending = answered(q) })
	return answers, ending
}

// answered is job.answered of q.
func answered(q *events.Query) ([]events.ModelAnswered, events.Event) {
	answers := q.Answered()
	if len(answers) > 0 {
		return answers, nil
	}
	var failures []string
	for _, m := range q.Submitted.Models {
		if f, ok := q.Failures[m.Key()]; ok {
			failures = append(failures, fmt.Sprintf("%s: %s", m.Key(), f.Class))
		}
	}
	return nil, events.QueryFailed{Code: apperr.ProviderError, Message: "every selected model failed: " + strings.Join(failures, "; ")}
}

// Decided returns the ending q's recorded events decide, whatever would
// run next: completed once the one answer is recorded (synthesized),
// aggregation_failed once its writing is recorded as failed, provider_error
// once every model is recorded as failed. Every mode ends such a query so
// without calling a model; so does a give-up, which must not undo what is
// recorded and charged.
func Decided(q *events.Query) (events.Event, bool) {
	if q.Submitted == nil {
		return nil, false
	}
	if q.Synthesis != nil {
		return events.QueryCompleted{}, true
	}
	for _, f := range q.StepFailures {
		if f.Step == events.StepSynthesis || f.Step == events.StepRewrite {
			return notWritten(f), true
		}
	}
	if len(q.Pending()) > 0 {
		return nil, false
	}
	if _, ending := answered(q); ending != nil {
		return ending, true
	}
	return nil, false
}

// finish records the query's one answer, once: a progress event with the
// message progress (none when progress is empty: the events before mark
// the stage, see events.AggregatingAfterAnswers), then the answer write
// makes, a call of step by ref. A write that fails is recorded (step_failed)
// and ends the query with aggregation_failed, naming what failed; a run
// that finds that failure recorded ends the query the same way without
// calling again. Recording it fences the job: another run of it that makes
// the same call on the same events cannot record an answer the settlement
// would not charge. A job stopped meanwhile returns ctx's error.
func (j *job) finish(ctx context.Context, progress, step string, ref events.ModelRef, write func() (events.Synthesized, error)) (events.Event, error) {
	if j.q.Synthesis != nil {
		return events.QueryCompleted{}, nil
	}
	if f, ok := j.failure(step, &ref); ok {
		return notWritten(f), nil
	}
	if progress != "" {
		if err := j.progress(ctx, events.StageAggregating, 85, progress); err != nil {
			return nil, err
		}
	}
	syn, err := write()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		f := stepFailed(step, &ref, err)
		if err := j.recordOutcome(ctx, f, true); err != nil {
			return nil, err
		}
		return notWritten(f), nil
	}
	j.read(func(q *events.Query) { syn.ToolCalls = events.AgreeToolCalls(q) })
	if err := j.recordOutcome(ctx, syn, true); err != nil {
		return nil, err
	}
	return events.QueryCompleted{}, nil
}

// notWritten is the ending of a query whose one answer could not be
// written: f, its recorded failure.
func notWritten(f events.StepFailed) events.QueryFailed {
	what := "the final answer"
	if f.Step == events.StepSynthesis {
		what = "the synthesis"
	}
	who := "the service"
	if f.Model != nil {
		who = f.Model.Key()
	}
	cause := &providers.Error{Class: f.Class, Status: f.UpstreamStatus, Message: f.Message}
	return events.QueryFailed{Code: apperr.AggregationFailed, Message: fmt.Sprintf("%s failed: %s: %s", what, who, cause)}
}

// writeAnswer has ref write the final answer from input (the `answer`
// schema); the answer carries conflicts, which the mode derived itself.
func (m *Models) writeAnswer(ctx context.Context, ref events.ModelRef, instructions, input string, conflicts []events.Conflict) (events.Synthesized, error) {
	var out struct {
		Answer string `json:"answer"`
	}
	mt, err := m.ask(ctx, ref, events.StepRewrite, instructions, input, &providers.Schema{Name: SchemaAnswer, JSON: AnswerSchema}, &out)
	if err != nil {
		return events.Synthesized{}, err
	}
	return events.Synthesized{Model: ref, Answer: events.Answer{Text: out.Answer, Conflicts: conflicts},
		Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros}, nil
}

// answer is a model's plain answer to the question, with the query's files.
func (m *Models) answer(ctx context.Context, j *job, ref events.ModelRef, prompt string) events.Event {
	// The call waits in m.complete for as long as the model takes, holding
	// this frame: building the request and the event are in helpers, so the
	// frame (and the stack of every goroutine waiting on a model) stays small.
	req, err := j.answerRequest(ctx, m.Files, ref, prompt)
	if err != nil {
		return m.answered(ref, nil, err)
	}
	resp, err := m.complete(ctx, &ref, req)
	return m.answered(ref, resp, err)
}

// answerRequest is the request of a model's answer to prompt.
//
//go:noinline
func (j *job) answerRequest(ctx context.Context, files FileSource, ref events.ModelRef, prompt string) (*providers.Request, error) {
	req, err := j.withFiles(ctx, files, ref, j.withTools(providers.Request{
		Purpose:  events.StepAnswer,
		Messages: []providers.Message{{Role: providers.RoleUser, Content: prompt}},
	}))
	return &req, err
}

// answered is the event of a model's answer: resp and err as the call
// returned them (resp nil when the call was never made).
//
//go:noinline
func (m *Models) answered(ref events.ModelRef, resp *providers.Response, err error) events.Event {
	if err != nil {
		return failed(ref, resp, err)
	}
	mt := m.meter(ref, resp)
	return events.ModelAnswered{Model: ref, Answer: resp.Text, Citations: resp.Citations, Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros, ToolCalls: resp.ToolCalls}
}

// failed is the event of a model's failed call: resp as the call returned
// it, nil when the call was never made.
func failed(ref events.ModelRef, resp *providers.Response, err error) events.ModelFailed {
	var latency time.Duration
	if resp != nil {
		latency = resp.Latency
	}
	e := providers.Classify(err)
	usage, source := unbilled(e)
	return events.ModelFailed{Model: ref, Class: e.Class, Message: e.Message, UpstreamStatus: e.Status, LatencyMS: latency.Milliseconds(), Usage: usage, UsageSource: source}
}
