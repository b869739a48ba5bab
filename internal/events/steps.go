package events

// The steps of the justify and verify modes. Each step is one event on the
// query's subject, so the SSE stream, a resumed job and the audit see it.

// Verdicts of a claim: what the cross-checks, taken together, say of it.
const (
	VerdictSupported    = "supported"
	VerdictRefuted      = "refuted"
	VerdictDisputed     = "disputed"
	VerdictUnverifiable = "unverifiable"
)

// Steps of the modes: the one vocabulary of what a model call is for. A
// provider request names its step (providers.Request.Purpose), the
// estimate's calls name theirs (the role of POST /v1/estimate-cost), and
// step_failed events name the steps that can fail without failing the query
// (revise, find_disagreements, extract_claims, merge_claims and
// assess_claims) and the steps that write the one answer (synthesis,
// rewrite), whose failure ends the query with aggregation_failed.
// The values are persisted and on the wire: never change one.
const (
	StepAnswer            = "answer"
	StepResearch          = "research"
	StepRevise            = "revise"
	StepSynthesis         = "synthesis"
	StepFindDisagreements = "find_disagreements"
	StepExtractClaims     = "extract_claims"
	StepMergeClaims       = "merge_claims"
	StepAssessClaims      = "assess_claims"
	StepRewrite           = "rewrite"
)

// Search backends of verify, as the settings spell them and as
// EvidenceRetrieved.Backend records them. The values are persisted: never
// change one.
const (
	SearchOffline = "offline"
	SearchSearXNG = "searxng"
	SearchBrave   = "brave"
	SearchTavily  = "tavily"
)

// Metered is an event that records a model call: the model, the usage it
// reported and its metered cost. The ledger debits each one.
type Metered interface {
	Metering() (ModelRef, Usage, int64)
}

// Charged reports the call ev records for the ledger: every model answer
// (a host may report no usage, and earlier builds charged those at zero),
// and every other metered event that reports usage.
func Charged(ev Event) (model ModelRef, usage Usage, cost int64, ok bool) {
	m, metered := ev.(Metered)
	if !metered {
		return ModelRef{}, Usage{}, 0, false
	}
	model, usage, cost = m.Metering()
	_, answer := ev.(ModelAnswered)
	return model, usage, cost, answer || usage != (Usage{})
}

// Uncharged reports whether ev records a model call that returned output
// with no usage, so that it was charged nothing, and the call's model: an
// answer with text or tool calls, or another step's call that records
// where its usage comes from (usage_source, which only a call made has; a
// synthesis that no call wrote has none). A host that reports no usage is
// counted with the service's tokenizer (UsageEstimated), so no call
// recorded since is; an answer of an earlier build may be.
func Uncharged(ev Event) (ModelRef, bool) {
	m, metered := ev.(Metered)
	if !metered {
		return ModelRef{}, false
	}
	model, usage, _ := m.Metering()
	if usage != (Usage{}) {
		return ModelRef{}, false
	}
	switch e := ev.(type) {
	case ModelAnswered:
		return model, e.Answer != "" || len(e.ToolCalls) > 0
	case Synthesized:
		return model, e.UsageSource != ""
	case ModelRevised:
		return model, e.UsageSource != ""
	case DisagreementsFound:
		return model, e.UsageSource != ""
	case ClaimsExtracted:
		return model, e.UsageSource != ""
	case ClaimsMerged:
		return model, e.UsageSource != ""
	case ClaimsAssessed:
		return model, e.UsageSource != ""
	}
	return ModelRef{}, false
}

// Metering returns the answering call.
func (e ModelAnswered) Metering() (ModelRef, Usage, int64) { return e.Model, e.Usage, e.CostMicros }

// Metering returns the synthesis call.
func (e Synthesized) Metering() (ModelRef, Usage, int64) { return e.Model, e.Usage, e.CostMicros }

// ModelRevised records a model's answer in a deliberation round after the
// first: its revision after reading the other models' earlier answers.
type ModelRevised struct {
	Model  ModelRef `json:"model"`
	Round  int      `json:"round"`
	Answer string   `json:"answer"`
	// Changed is the model's own account of whether it changed its answer.
	Changed bool  `json:"changed"`
	Usage   Usage `json:"usage"`
	// UsageSource says where Usage comes from (UsageReported,
	// UsageEstimated); empty in events of earlier builds.
	UsageSource string `json:"usage_source,omitempty"`
	LatencyMS   int64  `json:"latency_ms"`
	CostMicros  int64  `json:"cost_micros"`
}

// Metering returns the revising call.
func (e ModelRevised) Metering() (ModelRef, Usage, int64) { return e.Model, e.Usage, e.CostMicros }

// Stance is one model's position on a disagreement, before and after the
// deliberation.
type Stance struct {
	Model  string `json:"model"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// Disagreement is a topic on which the models' first answers differed.
// Resolved says whether their revised answers agree; Resolution says how.
type Disagreement struct {
	Topic      string   `json:"topic"`
	Positions  []Stance `json:"positions"`
	Resolved   bool     `json:"resolved"`
	Resolution string   `json:"resolution"`
}

// DisagreementsFound records the disagreements one model extracted from the
// rounds of a justify query.
type DisagreementsFound struct {
	Model         ModelRef       `json:"model"`
	Disagreements []Disagreement `json:"disagreements"`
	Usage         Usage          `json:"usage"`
	UsageSource   string         `json:"usage_source,omitempty"`
	LatencyMS     int64          `json:"latency_ms"`
	CostMicros    int64          `json:"cost_micros"`
}

// Metering returns the extracting call.
func (e DisagreementsFound) Metering() (ModelRef, Usage, int64) {
	return e.Model, e.Usage, e.CostMicros
}

// ExtractedClaim is one claim a model found in its own answer.
type ExtractedClaim struct {
	Text string `json:"text"`
	// CheckWorthy is false for opinions, advice and statements no source
	// could confirm; those are kept here and not checked.
	CheckWorthy bool `json:"check_worthy"`
}

// ClaimsExtracted records the claims of one model's answer, extracted by
// that model.
type ClaimsExtracted struct {
	Model       ModelRef         `json:"model"`
	Claims      []ExtractedClaim `json:"claims"`
	Usage       Usage            `json:"usage"`
	UsageSource string           `json:"usage_source,omitempty"`
	LatencyMS   int64            `json:"latency_ms"`
	CostMicros  int64            `json:"cost_micros"`
}

// Metering returns the extracting call.
func (e ClaimsExtracted) Metering() (ModelRef, Usage, int64) { return e.Model, e.Usage, e.CostMicros }

// Claim is one check-worthy claim of a verify query, merged across the
// models that made it.
type Claim struct {
	ID         string   `json:"id"`
	Text       string   `json:"text"`
	AssertedBy []string `json:"asserted_by"`
	// Queries are the searches that look for its evidence.
	Queries []string `json:"queries"`
}

// Ways claims are merged.
const (
	MergedByModel     = "model"
	MergedByExactText = "exact_text"
)

// ClaimsMerged records the claims to check: the check-worthy claims of every
// answer, those that say the same thing merged into one. Method is
// MergedByModel (Model merged them) or MergedByExactText (the merging call
// failed; claims with the same normalised text were merged).
type ClaimsMerged struct {
	Method      string   `json:"method"`
	Model       ModelRef `json:"model"`
	Claims      []Claim  `json:"claims"`
	Usage       Usage    `json:"usage"`
	UsageSource string   `json:"usage_source,omitempty"`
	LatencyMS   int64    `json:"latency_ms"`
	CostMicros  int64    `json:"cost_micros"`
}

// Metering returns the merging call.
func (e ClaimsMerged) Metering() (ModelRef, Usage, int64) { return e.Model, e.Usage, e.CostMicros }

// EvidenceRetrieved records one search: for a claim (ClaimID) or, without
// one, for the research of the models that have no web search of their own.
// Error is set when the search failed.
type EvidenceRetrieved struct {
	ClaimID string     `json:"claim_id,omitempty"`
	Query   string     `json:"query"`
	Backend string     `json:"backend"`
	Sources []Citation `json:"sources"`
	Error   string     `json:"error,omitempty"`
}

// Assessment is one model's judgement of one claim against its evidence.
type Assessment struct {
	ClaimID   string `json:"claim_id"`
	Verdict   string `json:"verdict"` // supported, refuted or unverifiable
	Rationale string `json:"rationale"`
}

// ClaimsAssessed records one model's cross-check of the claims it was given.
type ClaimsAssessed struct {
	Model       ModelRef     `json:"model"`
	Assessments []Assessment `json:"assessments"`
	Usage       Usage        `json:"usage"`
	UsageSource string       `json:"usage_source,omitempty"`
	LatencyMS   int64        `json:"latency_ms"`
	CostMicros  int64        `json:"cost_micros"`
}

// Metering returns the assessing call.
func (e ClaimsAssessed) Metering() (ModelRef, Usage, int64) { return e.Model, e.Usage, e.CostMicros }

// Verdict is the aggregated verdict on one claim.
type Verdict struct {
	ClaimID    string  `json:"claim_id"`
	Verdict    string  `json:"verdict"`
	Confidence float64 `json:"confidence"`
}

// VerdictsGiven records the verdict on every claim of a verify query.
type VerdictsGiven struct {
	Verdicts []Verdict `json:"verdicts"`
}

// StepFailed records a step that did not succeed and why: one the query goes
// on without (what is missing from the result), or the writing of the one
// answer (synthesis, rewrite), after which the query ends failed.
type StepFailed struct {
	Step           string    `json:"step"`
	Model          *ModelRef `json:"model,omitempty"`
	Class          string    `json:"class"`
	Message        string    `json:"message"`
	UpstreamStatus int       `json:"upstream_status,omitempty"`
	// Usage is what the failed call's host processed, as it reported it or
	// as the service counted it (UsageSource), when the host answered:
	// never charged to the customer (crosscheck_model_tokens_unbilled_total).
	Usage       *Usage `json:"usage,omitempty"`
	UsageSource string `json:"usage_source,omitempty"`
}

// Key identifies the failed step within its query.
func (e StepFailed) Key() string {
	if e.Model != nil {
		return e.Step + "/" + e.Model.Key()
	}
	return e.Step
}

func (ModelRevised) EventName() string       { return "model_revised" }
func (DisagreementsFound) EventName() string { return "disagreements_found" }
func (ClaimsExtracted) EventName() string    { return "claims_extracted" }
func (ClaimsMerged) EventName() string       { return "claims_merged" }
func (EvidenceRetrieved) EventName() string  { return "evidence_retrieved" }
func (ClaimsAssessed) EventName() string     { return "claims_assessed" }
func (VerdictsGiven) EventName() string      { return "verdicts_given" }
func (StepFailed) EventName() string         { return "step_failed" }

func init() {
	register(AggregateQuery,
		func() Event { return &ModelRevised{} },
		func() Event { return &DisagreementsFound{} },
		func() Event { return &ClaimsExtracted{} },
		func() Event { return &ClaimsMerged{} },
		func() Event { return &EvidenceRetrieved{} },
		func() Event { return &ClaimsAssessed{} },
		func() Event { return &VerdictsGiven{} },
		func() Event { return &StepFailed{} },
	)
}

// AddSources appends to list the sources whose URL it does not have yet,
// keeping at most max.
func AddSources(list, add []Citation, max int) []Citation {
	for _, s := range add {
		if len(list) >= max {
			break
		}
		dup := false
		for _, have := range list {
			if have.URL == s.URL {
				dup = true
				break
			}
		}
		if !dup {
			list = append(list, s)
		}
	}
	return list
}

// SourcesPerClaim is how many sources a claim keeps.
const SourcesPerClaim = 5
