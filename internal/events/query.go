package events

import (
	"maps"
	"slices"
	"time"
)

// AggregateQuery is the aggregate name of query events: ev.query.<request_id>.<event>.
const AggregateQuery = "query"

// Modes of spec 1.4.
const (
	ModeUnify   = "unify"
	ModeJustify = "justify"
	ModeVerify  = "verify"
)

// Query statuses. A query moves queued → running → completed | failed.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// Progress stages, the SSE progress.stage values.
const (
	StageQueued           = "queued"
	StageRunningModels    = "running_models"
	StageDeliberating     = "deliberating"
	StageResearching      = "researching"
	StageExtractingClaims = "extracting_claims"
	StageCrossChecking    = "cross_checking"
	StageAggregating      = "aggregating"
)

// ModelRef names one model that takes part in a query.
type ModelRef struct {
	Provider    string `json:"provider"`
	ModelID     string `json:"model_id"`
	CustomModel string `json:"custom_model,omitempty"`
	Simulated   bool   `json:"simulated,omitempty"`
}

// Key identifies the participant within its query: the provider key, or the
// BYOM id for a customer-owned model.
func (m ModelRef) Key() string {
	if m.CustomModel != "" {
		return m.CustomModel
	}
	return m.Provider
}

// Usage is the token usage one model call reported.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Where a call's usage comes from: the usage_source of the event that
// records the call. Events of earlier builds have none: their usage is
// what the host reported.
const (
	// UsageReported: the host reported the usage.
	UsageReported = "reported"
	// UsageEstimated: the host reported none; the service counted what the
	// call sent and got with its tokenizer, and charges by that count.
	UsageEstimated = "estimated"
)

// Citation is one source a model cited.
type Citation struct {
	URL     string `json:"url"`
	Title   string `json:"title,omitempty"`
	Snippet string `json:"snippet,omitempty"`
}

// Position is one model's stance on a conflict topic.
type Position struct {
	Model    string `json:"model"`
	Position string `json:"position"`
}

// Conflict is a topic on which the models disagreed, with how it was resolved.
type Conflict struct {
	Topic      string     `json:"topic"`
	Positions  []Position `json:"positions"`
	Resolution string     `json:"resolution"`
}

// Answer is the final aggregated answer of a query.
type Answer struct {
	Text      string     `json:"text"`
	Conflicts []Conflict `json:"conflicts"`
}

// QuerySubmitted is the first event of every query: it was accepted.
type QuerySubmitted struct {
	RequestID      string     `json:"request_id"`
	AccountID      string     `json:"account_id"`
	KeyFingerprint string     `json:"key_fingerprint"`
	Mode           string     `json:"mode"`
	Prompt         string     `json:"prompt"`
	Models         []ModelRef `json:"models"`
	// EstimatedMicros is the pre-flight estimate reserved for the query.
	EstimatedMicros int64 `json:"estimated_micros"`
	// Files are the files attached to the query, in the request's order,
	// each with the models that read it natively: the routing decided at
	// admission, which every run of the query follows. Never the content.
	Files []FileRef `json:"files,omitempty"`
	// Tools are the functions the query offers its models, and ToolChoice
	// how it asks them to call one: auto (or empty), none, required, or the
	// name of one tool.
	Tools      []Tool `json:"tools,omitempty"`
	ToolChoice string `json:"tool_choice,omitempty"`
}

// FileRef is a file attached to a query: what identifies it and how each
// model receives it. A model listed in NativeFor receives the file in its
// vendor's native form; any other model receives its extracted text (when
// TextChars > 0) with its name as a heading, or, for an image or a file
// without text, a note that it cannot see the file.
type FileRef struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Kind      string `json:"kind"` // image, pdf, document, text
	MediaType string `json:"media_type"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	// Pages is the page count of a PDF or document, 0 when unknown.
	Pages int `json:"pages,omitempty"`
	// TextChars is the length of the extracted text in characters.
	TextChars int `json:"text_chars"`
	// NativeFor are the keys (ModelRef.Key) of the models that read the
	// file natively.
	NativeFor []string `json:"native_for,omitempty"`
}

// How a model received an attached file.
const (
	FileSeenNative = "native"
	FileSeenText   = "text"
	FileSeenNone   = "none"
)

// SeenBy says how the model with key receives f: natively, as extracted
// text, or not at all.
func (f FileRef) SeenBy(key string) string {
	switch {
	case slices.Contains(f.NativeFor, key):
		return FileSeenNative
	case f.TextChars > 0:
		return FileSeenText
	}
	return FileSeenNone
}

// QueryStarted says a worker began running the query.
type QueryStarted struct{}

// ModelAnswered records one model's answer.
type ModelAnswered struct {
	Model     ModelRef   `json:"model"`
	Answer    string     `json:"answer"`
	Citations []Citation `json:"citations,omitempty"`
	Usage     Usage      `json:"usage"`
	// UsageSource says where Usage comes from (UsageReported,
	// UsageEstimated); empty in events of earlier builds.
	UsageSource string `json:"usage_source,omitempty"`
	LatencyMS   int64  `json:"latency_ms"`
	// CostMicros is the call's metered price: its usage at its model's price.
	CostMicros int64 `json:"cost_micros"`
	// ToolCalls are the calls of the query's tools the model proposes.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ModelFailed records that one model could not answer.
type ModelFailed struct {
	Model          ModelRef `json:"model"`
	Class          string   `json:"class"`
	Message        string   `json:"message"`
	UpstreamStatus int      `json:"upstream_status,omitempty"`
	LatencyMS      int64    `json:"latency_ms"`
	// Usage is what the failed call's host processed, as it reported it or
	// as the service counted it (UsageSource), when the host answered:
	// never charged to the customer (crosscheck_model_tokens_unbilled_total).
	Usage       *Usage `json:"usage,omitempty"`
	UsageSource string `json:"usage_source,omitempty"`
}

// ModelRetried records a failed attempt of a model call that is retried.
type ModelRetried struct {
	Model          ModelRef `json:"model"`
	Attempt        int      `json:"attempt"`
	Class          string   `json:"class"`
	Message        string   `json:"message"`
	UpstreamStatus int      `json:"upstream_status,omitempty"`
	RetryInMS      int64    `json:"retry_in_ms"`
}

// ProgressReported marks a stage change that no other event marks (see
// AggregatingAfterAnswers for one that the events before mark).
type ProgressReported struct {
	Stage   string `json:"stage"`
	Percent int    `json:"progress_percent"`
	Message string `json:"message,omitempty"`
}

// Synthesized records the synthesizer's one answer and the conflicts it found.
type Synthesized struct {
	Model  ModelRef `json:"model"`
	Answer Answer   `json:"answer"`
	Usage  Usage    `json:"usage"`
	// UsageSource says where Usage comes from; empty when no call wrote
	// the answer (the only answer is the answer) and in events of earlier
	// builds.
	UsageSource string `json:"usage_source,omitempty"`
	LatencyMS   int64  `json:"latency_ms"`
	CostMicros  int64  `json:"cost_micros"`
	// ToolCalls are the calls of the query's tools that its answer makes:
	// the ones the models agreed on (AgreeToolCalls).
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// CreditsSettled records what the query was charged and how it ends:
// Failed is its failure, nil when it completes. Builds before the terminal
// event carried the charge appended it between the settlement and the
// terminal event; a job resumed after it appends that ending and runs
// nothing again. It is read, never written, now.
type CreditsSettled struct {
	ChargedMicros int64    `json:"charged_micros"`
	Failed        *Failure `json:"failed,omitempty"`
}

// Failure is how a query failed, as a credits_settled recorded it.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Terminal is the terminal event the settlement decided.
func (s CreditsSettled) Terminal() Event {
	if s.Failed != nil {
		return QueryFailed{Code: s.Failed.Code, Message: s.Failed.Message}
	}
	return QueryCompleted{}
}

// AttemptFailed records a worker's run of the query that failed for a reason
// of the service's own (a panic, a step that cannot handle the query's state,
// a mode the worker does not run) and that is retried; the query ends failed
// with internal_error when the worker's limit of failed attempts is reached.
// One with RetryInMS 0 is the query's give-up, also recorded without a failed
// run when JetStream stopped delivering the job or a worker's own limit is
// reached. Models failing are not attempts failing: they are model_failed and
// model_retried.
type AttemptFailed struct {
	// Attempt counts the query's failed attempts, from 1.
	Attempt int    `json:"attempt"`
	Message string `json:"message"`
	// RetryInMS is the delay before the next attempt; 0 when this was the
	// last one.
	RetryInMS int64 `json:"retry_in_ms"`
}

// AttemptStarted records that a run of the query other than its first
// starts running its steps: the query was started before (started), and an
// earlier run ended without its ending (its worker died, was cut off, handed
// it back, or failed). With started, it marks where each run begins, so
// that the runs that ended with their worker are counted (Query.CrashedRuns).
type AttemptStarted struct {
	// Delivery is the job's delivery by JetStream that runs it, from 2.
	Delivery int `json:"delivery"`
}

// AttemptHandedBack records that a run of the query stopped before its end
// because its worker was stopping (SIGTERM, past the shutdown grace) and
// handed the job back: that run did not crash.
type AttemptHandedBack struct{}

// QueryCompleted is the terminal event of a query that succeeded.
type QueryCompleted struct {
	// ChargedMicros is what the query was charged: the charge of its
	// settlement in the account's ledger, which comes before this event.
	// Nil in events of builds whose credits_settled carried the charge.
	ChargedMicros *int64 `json:"charged_micros,omitempty"`
}

// QueryFailed is the terminal event of a query that failed.
type QueryFailed struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// ChargedMicros is as QueryCompleted's.
	ChargedMicros *int64 `json:"charged_micros,omitempty"`
}

// WithCharge returns the terminal event ev carrying the query's charge.
func WithCharge(ev Event, micros int64) Event {
	switch e := ev.(type) {
	case QueryCompleted:
		e.ChargedMicros = &micros
		return e
	case QueryFailed:
		e.ChargedMicros = &micros
		return e
	}
	return ev
}

// QueryEnding is how a query ends, as its settlement records it: the
// query's terminal event, decided before the settlement and appended after
// it. Code and Message are the failure's.
type QueryEnding struct {
	Status  string `json:"status"` // completed or failed
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// EndingOf returns the ending that the terminal event ev makes; nil when ev
// is not a terminal event.
func EndingOf(ev Event) *QueryEnding {
	switch e := ev.(type) {
	case QueryCompleted:
		return &QueryEnding{Status: StatusCompleted}
	case QueryFailed:
		return &QueryEnding{Status: StatusFailed, Code: e.Code, Message: e.Message}
	}
	return nil
}

// Terminal returns the terminal event of the ending, without a charge.
func (e QueryEnding) Terminal() Event {
	if e.Status == StatusFailed {
		return QueryFailed{Code: e.Code, Message: e.Message}
	}
	return QueryCompleted{}
}

func (QuerySubmitted) EventName() string   { return "submitted" }
func (QueryStarted) EventName() string     { return "started" }
func (ModelAnswered) EventName() string    { return "model_answered" }
func (ModelFailed) EventName() string      { return "model_failed" }
func (ModelRetried) EventName() string     { return "model_retried" }
func (ProgressReported) EventName() string { return "progress" }
func (Synthesized) EventName() string      { return "synthesized" }
func (CreditsSettled) EventName() string   { return "credits_settled" }
func (AttemptFailed) EventName() string    { return "attempt_failed" }
func (AttemptStarted) EventName() string   { return "attempt_started" }
func (AttemptHandedBack) EventName() string {
	return "attempt_handed_back"
}
func (QueryCompleted) EventName() string { return "completed" }
func (QueryFailed) EventName() string    { return "failed" }

func init() {
	register(AggregateQuery,
		func() Event { return &QuerySubmitted{} },
		func() Event { return &QueryStarted{} },
		func() Event { return &ModelAnswered{} },
		func() Event { return &ModelFailed{} },
		func() Event { return &ModelRetried{} },
		func() Event { return &ProgressReported{} },
		func() Event { return &Synthesized{} },
		func() Event { return &CreditsSettled{} },
		func() Event { return &AttemptFailed{} },
		func() Event { return &AttemptStarted{} },
		func() Event { return &AttemptHandedBack{} },
		func() Event { return &QueryCompleted{} },
		func() Event { return &QueryFailed{} },
	)
}

// TerminalEvents are the names of the events that end a query.
var TerminalEvents = []string{QueryCompleted{}.EventName(), QueryFailed{}.EventName()}

// Query is the query aggregate: the state a worker decides from.
type Query struct {
	Submitted *QuerySubmitted
	Started   bool
	Answers   map[string]ModelAnswered
	Failures  map[string]ModelFailed
	Synthesis *Synthesized
	// The steps of justify and verify.
	Revisions     map[string]ModelRevised
	Disagreements *DisagreementsFound
	Extracted     map[string]ClaimsExtracted
	Merged        *ClaimsMerged
	Evidence      []EvidenceRetrieved
	Assessed      map[string]ClaimsAssessed
	Verdicts      *VerdictsGiven
	// StepFailures are the recorded step failures, by StepFailed.Key.
	StepFailures map[string]StepFailed
	Status       string
	LastSeq      uint64
	FailureCode  string
	// Calls are the model calls that reported usage, identified by the id of
	// the event that recorded them: what the ledger charges.
	Calls []Call
	// Uncharged are the model calls that returned output and record no
	// usage, so that they were charged nothing (Uncharged): what
	// `crosscheck audit` reports.
	Uncharged []Call
	// Settled is the query's credits_settled, in queries of builds that
	// appended one.
	Settled *CreditsSettled
	// ChargedMicros is what the query was charged, as its terminal event
	// (or its credits_settled) records it; nil before.
	ChargedMicros *int64
	// FailedAttempts counts the attempt_failed events.
	FailedAttempts int
	// GivenUp says the last attempt_failed was the give-up (retry_in_ms 0):
	// the query ends failed with internal_error, unless its events decide
	// its ending (modes.Decided).
	GivenUp bool
	// CancelRequested is whether the query's owner asked to stop it
	// (cancel_requested): it then ends failed with code cancelled.
	CancelRequested bool
	// StartedAt is the time of the query's started event: when its first
	// run began.
	StartedAt time.Time
	// crashed counts the runs in a row, up to the last one closed, that
	// ended with no record of their end and no step recorded; runOpen says
	// the last run (started or attempt_started) has recorded no end
	// (attempt_failed, attempt_handed_back), runProgressed that it
	// recorded a step.
	crashed                int
	runOpen, runProgressed bool
}

// CrashedRuns returns how many of the query's runs in a row, up to the
// last, ended with their worker: each began (started, attempt_started),
// recorded no model call's or step's outcome, and no end of its own (a
// failure, a hand-back). A run that recorded an outcome moved the query on,
// and the count starts again after it. The last run counts when it has not
// ended: the caller is about to start another, so that one is over (its
// worker died, or was stalled past its ack wait).
func (q *Query) CrashedRuns() int {
	switch {
	case q.runProgressed:
		return 0
	case q.runOpen:
		return q.crashed + 1
	}
	return q.crashed
}

// startRun applies the beginning of a run: the run before it, if it never
// ended, crashed (unless it recorded a step).
func (q *Query) startRun() {
	q.crashed = q.CrashedRuns()
	q.runOpen, q.runProgressed = true, false
}

// Call is one metered model call of a query.
type Call struct {
	ID string
	// Step is the name of the event that recorded the call.
	Step  string
	Model ModelRef
	Usage Usage
	// CostMicros is the price recorded with the call.
	CostMicros int64
}

// Apply folds one stored event into the query.
func (q *Query) Apply(r Record) {
	q.LastSeq = r.Seq
	if model, usage, cost, ok := Charged(r.Event); ok {
		q.Calls = append(q.Calls, Call{ID: r.Envelope.ID, Step: r.Event.EventName(), Model: model, Usage: usage, CostMicros: cost})
	}
	if model, ok := Uncharged(r.Event); ok {
		q.Uncharged = append(q.Uncharged, Call{ID: r.Envelope.ID, Step: r.Event.EventName(), Model: model})
	}
	switch e := r.Event.(type) {
	case QuerySubmitted:
		q.Submitted = &e
		q.Status = StatusQueued
		q.Answers = map[string]ModelAnswered{}
		q.Failures = map[string]ModelFailed{}
		q.Revisions = map[string]ModelRevised{}
		q.Extracted = map[string]ClaimsExtracted{}
		q.Assessed = map[string]ClaimsAssessed{}
		q.StepFailures = map[string]StepFailed{}
	case QueryStarted:
		q.Started = true
		q.Status = StatusRunning
		q.StartedAt = r.Envelope.Time
		q.startRun()
	case AttemptStarted:
		q.startRun()
	case AttemptHandedBack:
		q.runOpen = false
	case ModelAnswered:
		q.Answers[e.Model.Key()] = e
		q.runProgressed = true
	case ModelFailed:
		q.Failures[e.Model.Key()] = e
		q.runProgressed = true
	case ModelRevised:
		q.Revisions[e.Model.Key()] = e
		q.runProgressed = true
	case DisagreementsFound:
		q.Disagreements = &e
		q.runProgressed = true
	case ClaimsExtracted:
		q.Extracted[e.Model.Key()] = e
		q.runProgressed = true
	case ClaimsMerged:
		q.Merged = &e
		q.runProgressed = true
	case EvidenceRetrieved:
		q.Evidence = append(q.Evidence, e)
		q.runProgressed = true
	case ClaimsAssessed:
		q.Assessed[e.Model.Key()] = e
		q.runProgressed = true
	case VerdictsGiven:
		q.Verdicts = &e
		q.runProgressed = true
	case StepFailed:
		q.StepFailures[e.Key()] = e
		q.runProgressed = true
	case Synthesized:
		q.Synthesis = &e
		q.runProgressed = true
	case CreditsSettled:
		q.Settled = &e
		q.ChargedMicros = &e.ChargedMicros
	case AttemptFailed:
		q.FailedAttempts, q.GivenUp = e.Attempt, e.RetryInMS == 0
		q.runOpen = false
	case QueryCancelRequested:
		q.CancelRequested = true
	case QueryCompleted:
		q.Status = StatusCompleted
		if e.ChargedMicros != nil {
			q.ChargedMicros = e.ChargedMicros
		}
	case QueryFailed:
		q.Status = StatusFailed
		q.FailureCode = e.Code
		if e.ChargedMicros != nil {
			q.ChargedMicros = e.ChargedMicros
		}
	}
}

// Terminal reports whether the query has completed or failed.
func (q *Query) Terminal() bool { return q.Status == StatusCompleted || q.Status == StatusFailed }

// AggregatingAfterAnswers reports whether a query of mode, done of whose n
// selected models have answered or failed, answered of them with an
// answer, is in the aggregating stage with no event of its own marking it:
// unify writes its one answer right after the models' answers, so the last
// of them (answer or failure) starts that stage. Justify and verify have
// steps in between, and a progress event marks their stages.
func AggregatingAfterAnswers(mode string, n, done, answered int) bool {
	return mode == ModeUnify && n > 0 && done == n && answered > 0
}

// Aggregating reports whether q's models' outcomes alone put it in the
// aggregating stage (AggregatingAfterAnswers).
func (q *Query) Aggregating() bool {
	if q.Submitted == nil {
		return false
	}
	done := 0
	for _, m := range q.Submitted.Models {
		_, answered := q.Answers[m.Key()]
		_, failed := q.Failures[m.Key()]
		if answered || failed {
			done++
		}
	}
	return AggregatingAfterAnswers(q.Submitted.Mode, len(q.Submitted.Models), done, len(q.Answers))
}

// Pending returns the selected models that have neither answered nor failed, in
// selection order.
func (q *Query) Pending() []ModelRef {
	var out []ModelRef
	for _, m := range q.Submitted.Models {
		_, answered := q.Answers[m.Key()]
		_, failed := q.Failures[m.Key()]
		if !answered && !failed {
			out = append(out, m)
		}
	}
	return out
}

// Answered returns the answers in selection order.
func (q *Query) Answered() []ModelAnswered {
	var out []ModelAnswered
	for _, m := range q.Submitted.Models {
		if a, ok := q.Answers[m.Key()]; ok {
			out = append(out, a)
		}
	}
	return out
}

// Clone returns a copy of q that applying events to leaves q as it is.
func (q *Query) Clone() *Query {
	c := *q
	c.Answers = maps.Clone(q.Answers)
	c.Failures = maps.Clone(q.Failures)
	c.Revisions = maps.Clone(q.Revisions)
	c.Extracted = maps.Clone(q.Extracted)
	c.Assessed = maps.Clone(q.Assessed)
	c.StepFailures = maps.Clone(q.StepFailures)
	c.Evidence = slices.Clone(q.Evidence)
	c.Calls = slices.Clone(q.Calls)
	c.Uncharged = slices.Clone(q.Uncharged)
	return &c
}
