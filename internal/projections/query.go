// Package projections folds events into read models: the pure folds, and the
// runners that feed them from JetStream into KV buckets. A read model can be
// deleted and rebuilt from its stream to the same bytes.
package projections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/events"
)

// QueryDoc is one entry of the query read model: the API result of the query
// plus what the service needs to authorise reads of it.
type QueryDoc struct {
	// Seq is the stream sequence of the last event applied.
	Seq            uint64 `json:"seq"`
	AccountID      string `json:"account_id"`
	KeyFingerprint string `json:"key_fingerprint"`
	Result         Result `json:"result"`
}

// Result is the query result of spec 2.3, as GET /v1/queries/{id} returns it.
type Result struct {
	RequestID       string         `json:"request_id"`
	Object          string         `json:"object"`
	Mode            string         `json:"mode"`
	Status          string         `json:"status"`
	Stage           string         `json:"stage"`
	ProgressPercent int            `json:"progress_percent"`
	Answer          *events.Answer `json:"answer,omitempty"`
	// ToolCalls are the calls of the query's tools its answer makes;
	// absent when it makes none.
	ToolCalls []events.ToolCall `json:"tool_calls,omitempty"`
	// Files are the files the query attaches; absent when none.
	Files     []AttachedFile `json:"files,omitempty"`
	Models    []ModelResult  `json:"models"`
	Synthesis *Synthesis     `json:"synthesis,omitempty"`
	// Justify and Verify are the blocks of their modes, null in the others.
	Justify *JustifyResult `json:"justify"`
	Verify  *VerifyResult  `json:"verify"`
	Credits QueryCredits   `json:"credits"`
	Error   *ResultError   `json:"error,omitempty"`
	// Missing says what the models did not receive: each attached file a
	// model could not see at all. Absent when nothing is missing.
	Missing     []string   `json:"missing,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// QueryCredits is what a query was estimated to cost and was charged, in
// credits. Charged is null until the query is settled.
type QueryCredits = apiv1.QueryCredits

// ModelResult is one participating model's own answer.
type ModelResult struct {
	Provider    string            `json:"provider"`
	ModelID     string            `json:"model_id"`
	CustomModel string            `json:"custom_model,omitempty"`
	Simulated   bool              `json:"simulated"`
	Status      string            `json:"status"`
	Answer      string            `json:"answer,omitempty"`
	Citations   []events.Citation `json:"citations"`
	Usage       *events.Usage     `json:"usage,omitempty"`
	// UsageSource says where Usage comes from: reported by the host, or
	// estimated (counted with the service's tokenizer, and charged by
	// that count) when the host reported none; absent in the results of
	// queries answered before it was recorded.
	UsageSource string `json:"usage_source,omitempty"`
	// Credits is the metered cost of this model's answer.
	Credits   float64     `json:"credits"`
	LatencyMS int64       `json:"latency_ms"`
	Error     *ModelError `json:"error,omitempty"`
	// Files says how the model received each attached file, in the
	// query's order; absent when the query attaches none.
	Files []ModelFile `json:"files,omitempty"`
	// ToolCalls are the tool calls the model proposed; absent when none.
	ToolCalls []events.ToolCall `json:"tool_calls,omitempty"`
}

// AttachedFile is a file a query attaches.
type AttachedFile = apiv1.AttachedFile

// ModelFile is how one model received one attached file: Seen is native
// (the vendor's own file or image input), text (the extracted text, under
// the file's name) or none (the model could not see it).
type ModelFile = apiv1.ModelFile

// Model statuses within a query.
const (
	ModelPending  = "pending"
	ModelAnswered = "answered"
	ModelFailed   = "failed"
)

// ModelError says why one model did not answer.
type ModelError = apiv1.ModelError

// Synthesis says which model wrote the one answer and what it used.
type Synthesis struct {
	Provider string `json:"provider"`
	ModelID  string `json:"model_id"`
	// CustomModel is the BYOM id of a customer-owned synthesizer.
	CustomModel string       `json:"custom_model,omitempty"`
	Simulated   bool         `json:"simulated"`
	Usage       events.Usage `json:"usage"`
	// UsageSource says where Usage comes from (as in ModelResult); absent
	// when no call wrote the answer (the only answer is the answer).
	UsageSource string  `json:"usage_source,omitempty"`
	Credits     float64 `json:"credits"`
	LatencyMS   int64   `json:"latency_ms"`
}

// JustifyResult is the justify block: each model's answer per round, and
// the disagreements of the rounds.
type JustifyResult struct {
	Rounds        []Round               `json:"rounds"`
	Disagreements []events.Disagreement `json:"disagreements"`
	// Missing says what the result lacks because a step failed.
	Missing []string `json:"missing"`
}

// Round is one round of a deliberation.
type Round = apiv1.Round

// RoundAnswer is one model's answer in a round. Changed, in the rounds
// after the first, is whether the model says it changed a position.
type RoundAnswer = apiv1.RoundAnswer

// VerifyResult is the verify block: a verdict per claim.
type VerifyResult struct {
	Claims []VerifiedClaim `json:"claims"`
	// Missing says what the result lacks because a step failed.
	Missing []string `json:"missing"`
}

// VerifiedClaim is one claim with its evidence, its judgements and its
// verdict. Verdict and Confidence are null until the cross-check ends.
type VerifiedClaim struct {
	ID          string            `json:"id"`
	Text        string            `json:"text"`
	Verdict     *string           `json:"verdict"`
	Confidence  *float64          `json:"confidence"`
	Sources     []events.Citation `json:"sources"`
	AssertedBy  []string          `json:"asserted_by"`
	Assessments []ClaimAssessment `json:"assessments"`
}

// ClaimAssessment is one model's judgement of a claim.
type ClaimAssessment = apiv1.ClaimAssessment

// ResultError is the error of a failed query.
type ResultError = apiv1.QueryError

// Apply folds one query event into d. Events at or below d.Seq were applied
// already and are ignored, so redelivery is harmless.
func (d *QueryDoc) Apply(r events.Record) {
	if r.Seq <= d.Seq {
		return
	}
	d.Seq = r.Seq
	res := &d.Result
	at := r.Envelope.Time
	switch e := r.Event.(type) {
	case events.QuerySubmitted:
		d.AccountID, d.KeyFingerprint = e.AccountID, e.KeyFingerprint
		*res = Result{
			RequestID: e.RequestID, Object: "query", Mode: e.Mode,
			Status: events.StatusQueued, Stage: events.StageQueued, CreatedAt: at,
			Models:  make([]ModelResult, 0, len(e.Models)),
			Credits: QueryCredits{Estimated: events.Credits(e.EstimatedMicros)},
		}
		for _, f := range e.Files {
			res.Files = append(res.Files, AttachedFile{FileID: f.ID, Name: f.Name, Kind: f.Kind, MediaType: f.MediaType, Bytes: f.Bytes})
		}
		for _, m := range e.Models {
			mr := ModelResult{
				Provider: m.Provider, ModelID: m.ModelID, CustomModel: m.CustomModel,
				Simulated: m.Simulated, Status: ModelPending, Citations: []events.Citation{},
			}
			for _, f := range e.Files {
				seen := f.SeenBy(m.Key())
				mr.Files = append(mr.Files, ModelFile{FileID: f.ID, Seen: seen})
				if seen == events.FileSeenNone {
					res.Missing = append(res.Missing, fmt.Sprintf("%s (%s) could not see the file %s (%s): it does not read %s files natively and no text was extracted", m.Key(), m.ModelID, f.Name, f.ID, f.Kind))
				}
			}
			res.Models = append(res.Models, mr)
		}
		switch e.Mode {
		case events.ModeJustify:
			res.Justify = &JustifyResult{Rounds: []Round{}, Disagreements: []events.Disagreement{}, Missing: []string{}}
		case events.ModeVerify:
			res.Verify = &VerifyResult{Claims: []VerifiedClaim{}, Missing: []string{}}
		}
	case events.QueryStarted:
		res.Status, res.StartedAt = events.StatusRunning, &at
		stage := events.StageRunningModels
		if res.Mode == events.ModeVerify {
			stage = events.StageResearching
		}
		res.advance(stage, 5)
	case events.ModelAnswered:
		if m := res.model(e.Model); m != nil {
			usage := e.Usage
			m.Status, m.Answer, m.Usage, m.UsageSource, m.LatencyMS = ModelAnswered, e.Answer, &usage, e.UsageSource, e.LatencyMS
			m.Credits = events.Credits(e.CostMicros)
			if e.Citations != nil {
				m.Citations = e.Citations
			}
			m.ToolCalls = e.ToolCalls
		}
		if res.Justify != nil {
			res.Justify.round(1).Answers = append(res.Justify.round(1).Answers, RoundAnswer{Model: e.Model.Key(), ModelID: e.Model.ModelID, Answer: e.Answer})
		}
		res.advanceModels()
	case events.ModelFailed:
		if m := res.model(e.Model); m != nil {
			m.Status, m.LatencyMS = ModelFailed, e.LatencyMS
			m.Error = &ModelError{Class: events.CurrentClass(e.Class, e.Message), Message: e.Message, UpstreamStatus: e.UpstreamStatus}
		}
		res.advanceModels()
	case events.ProgressReported:
		res.advance(e.Stage, e.Percent)
	default:
		res.applyStep(r)
	case events.Synthesized:
		answer := e.Answer
		res.Answer = &answer
		res.ToolCalls = e.ToolCalls
		res.Synthesis = &Synthesis{Provider: e.Model.Provider, ModelID: e.Model.ModelID, CustomModel: e.Model.CustomModel, Simulated: e.Model.Simulated, Usage: e.Usage, UsageSource: e.UsageSource, LatencyMS: e.LatencyMS, Credits: events.Credits(e.CostMicros)}
		res.advance(events.StageAggregating, 95)
	case events.CreditsSettled:
		charged := events.Credits(e.ChargedMicros)
		res.Credits.Charged = &charged
		res.advance(res.Stage, 98)
	case events.QueryCompleted:
		res.Status, res.CompletedAt, res.ProgressPercent = events.StatusCompleted, &at, 100
		res.charged(e.ChargedMicros)
	case events.QueryFailed:
		res.Status, res.CompletedAt = events.StatusFailed, &at
		res.Error = &ResultError{Code: e.Code, Message: e.Message}
		res.charged(e.ChargedMicros)
	}
}

// charged sets the credits charged from a terminal event that carries them
// (older ones do not: their credits_settled did).
func (r *Result) charged(micros *int64) {
	if micros != nil {
		c := events.Credits(*micros)
		r.Credits.Charged = &c
	}
}

// advance moves the stage and never lets progress go backwards.
func (r *Result) advance(stage string, percent int) {
	r.Stage = stage
	if percent > r.ProgressPercent {
		r.ProgressPercent = percent
	}
}

func (r *Result) model(ref events.ModelRef) *ModelResult {
	for i := range r.Models {
		m := &r.Models[i]
		if m.Provider == ref.Provider && m.CustomModel == ref.CustomModel {
			return m
		}
	}
	return nil
}

// advanceModels moves progress as the models answer: over 5..85 percent in
// unify, 5..40 in justify, and 5..35, researching, in verify. In unify the
// last model's outcome starts the aggregating stage.
func (r *Result) advanceModels() {
	stage, top := events.StageRunningModels, 85
	switch r.Mode {
	case events.ModeJustify:
		top = 40
	case events.ModeVerify:
		stage, top = events.StageResearching, 35
	}
	done, answered := 0, 0
	for _, m := range r.Models {
		if m.Status != ModelPending {
			done++
		}
		if m.Status == ModelAnswered {
			answered++
		}
	}
	if len(r.Models) == 0 {
		r.advance(stage, top)
		return
	}
	if events.AggregatingAfterAnswers(r.Mode, len(r.Models), done, answered) {
		stage = events.StageAggregating
	}
	r.advance(stage, 5+(top-5)*done/len(r.Models))
}

// Terminal reports whether the result is final.
func (r *Result) Terminal() bool {
	return r.Status == events.StatusCompleted || r.Status == events.StatusFailed
}

// Describe returns a short human message for a progress update about r.
func Describe(r events.Record) string {
	switch e := r.Event.(type) {
	case events.QuerySubmitted:
		return "query accepted"
	case events.QueryStarted:
		return "running the selected models"
	case events.ModelAnswered:
		return fmt.Sprintf("%s answered (%s)", e.Model.Key(), e.Model.ModelID)
	case events.ModelFailed:
		return fmt.Sprintf("%s failed (%s)", e.Model.Key(), events.CurrentClass(e.Class, e.Message))
	case events.ModelRetried:
		return fmt.Sprintf("%s attempt %d failed (%s); retrying in %.1fs", e.Model.Key(), e.Attempt, events.CurrentClass(e.Class, e.Message), float64(e.RetryInMS)/1000)
	case events.ProgressReported:
		return e.Message
	case events.Synthesized:
		return "one answer synthesized"
	case events.CreditsSettled:
		return "charged " + events.FormatCredits(e.ChargedMicros) + " credits"
	case events.QueryCancelRequested:
		return "cancel requested; the query stops"
	case events.AttemptStarted:
		return "the query resumes where its last run stopped"
	case events.AttemptHandedBack:
		return "the worker running the query stopped; another takes it over"
	case events.AttemptFailed:
		if e.RetryInMS == 0 {
			return fmt.Sprintf("attempt %d failed; the query cannot be run", e.Attempt)
		}
		return fmt.Sprintf("attempt %d failed; retrying in %.1fs", e.Attempt, float64(e.RetryInMS)/1000)
	case events.ModelRevised:
		if e.Changed {
			return e.Model.Key() + " revised its answer"
		}
		return e.Model.Key() + " kept its answer after reading the others"
	case events.DisagreementsFound:
		return count(len(e.Disagreements), "disagreement") + " found"
	case events.ClaimsExtracted:
		return fmt.Sprintf("%s extracted from %s's answer", count(len(e.Claims), "claim"), e.Model.Key())
	case events.ClaimsMerged:
		return count(len(e.Claims), "claim") + " to check"
	case events.EvidenceRetrieved:
		if e.Error != "" {
			return "a search failed: " + e.Error
		}
		if e.ClaimID == "" {
			return count(len(e.Sources), "search result") + " for the research"
		}
		return fmt.Sprintf("%s found for claim %s", count(len(e.Sources), "source"), e.ClaimID)
	case events.ClaimsAssessed:
		return fmt.Sprintf("%s cross-checked %s", e.Model.Key(), count(len(e.Assessments), "claim"))
	case events.VerdictsGiven:
		return "verdicts given on " + count(len(e.Verdicts), "claim")
	case events.StepFailed:
		return StepFailure(e)
	}
	return ""
}

// count returns n and the noun, in the plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// FoldQuery folds a query's records into a new document.
func FoldQuery(recs []events.Record) *QueryDoc {
	d := &QueryDoc{}
	for _, r := range recs {
		d.Apply(r)
	}
	return d
}

// StoredQuery is the stored form read back with the result kept as bytes, so a
// poll answers without re-encoding.
type StoredQuery struct {
	Seq       uint64          `json:"seq"`
	AccountID string          `json:"account_id"`
	Result    json.RawMessage `json:"result"`
}

// ParseStored reads a stored QueryDoc. Documents this package wrote are
// sliced, not decoded: Encode writes seq, account_id, key_fingerprint and
// result in that order, the result last. Anything else is decoded in full.
func ParseStored(raw []byte) (StoredQuery, error) {
	const acct, res = `,"account_id":"`, `,"result":`
	if i := bytes.Index(raw, []byte(acct)); i > 0 && bytes.HasPrefix(raw, []byte(`{"seq":`)) && bytes.HasSuffix(raw, []byte("}}")) {
		rest := raw[i+len(acct):]
		if j := bytes.IndexByte(rest, '"'); j > 0 {
			if k := bytes.Index(rest[j:], []byte(res)); k > 0 {
				seq, err := strconv.ParseUint(string(raw[len(`{"seq":`):i]), 10, 64)
				result := rest[j+k+len(res) : len(rest)-1]
				if err == nil && bytes.IndexByte(rest[:j], '\\') < 0 {
					return StoredQuery{Seq: seq, AccountID: string(rest[:j]), Result: result}, nil
				}
			}
		}
	}
	var doc StoredQuery
	err := json.Unmarshal(raw, &doc)
	return doc, err
}
