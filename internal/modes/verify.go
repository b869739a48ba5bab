package modes

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/search"
)

// Verify researches, then checks: every model answers with research (its
// vendor's own web search where it has one and it is enabled, else the
// service's search results); each extracts the claims of its own answer;
// the check-worthy claims are merged across models; evidence is searched
// per claim; each claim is judged by the models that did not make it; the
// judgements become one verdict per claim; the answer is rewritten to agree
// with the verdicts.
type Verify struct {
	Models
	// Search is the service's search backend.
	Search search.Backend
	// NativeSearch reports whether a model searches the web itself; nil
	// means none does.
	NativeSearch func(events.ModelRef) bool
	// MaxClaims bounds the claims checked, those most models made first;
	// zero means 12.
	MaxClaims int
}

// Limits of the research.
const (
	researchResults  = 5 // search results a research prompt carries
	queriesPerClaim  = 2
	resultsPerQuery  = 3
	searchesAtOnce   = 8
	defaultMaxClaims = 12
)

// Schemas of the verify steps.
const (
	SchemaClaims      = "claims"
	SchemaMerged      = "merged_claims"
	SchemaAssessments = "assessments"
)

// ClaimsSchema is the claims of one answer.
var ClaimsSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["claims"],
  "properties": {
    "claims": {"type": "array", "items": {
      "type": "object",
      "additionalProperties": false,
      "required": ["text", "check_worthy"],
      "properties": {"text": {"type": "string", "minLength": 1}, "check_worthy": {"type": "boolean"}}
    }}
  }
}`)

// MergedSchema is the claims of every answer, merged.
var MergedSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["claims"],
  "properties": {
    "claims": {"type": "array", "items": {
      "type": "object",
      "additionalProperties": false,
      "required": ["text", "asserted_by", "queries"],
      "properties": {
        "text": {"type": "string", "minLength": 1},
        "asserted_by": {"type": "array", "items": {"type": "string"}},
        "queries": {"type": "array", "items": {"type": "string"}}
      }
    }}
  }
}`)

// AssessmentsSchema is one model's judgement of the claims it was given.
var AssessmentsSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["assessments"],
  "properties": {
    "assessments": {"type": "array", "items": {
      "type": "object",
      "additionalProperties": false,
      "required": ["claim_id", "verdict", "rationale"],
      "properties": {
        "claim_id": {"type": "string"},
        "verdict": {"type": "string", "enum": ["supported", "refuted", "unverifiable"]},
        "rationale": {"type": "string"}
      }
    }}
  }
}`)

const researchInstructions = `Answer the question accurately. State each fact as a separate, self-contained sentence, with its numbers, dates and names. Where search results are given, rely on them and cite each one you use as [n]; never invent a source.`

const extractInstructions = `Break the answer into atomic claims: each one a single fact, understandable without the rest of the answer (replace pronouns with what they refer to). Mark a claim check_worthy when sources could confirm or refute it (numbers, dates, names, events, definitions); opinions, advice, hedges and questions are not check-worthy. Reply with JSON only, matching the schema.`

const mergeInstructions = `You are given the claims extracted from the answers of several models, each with the label of the model that made it. Merge the claims that state the same fact, even in other words, into one; never merge claims that differ in a value or contradict each other. For each claim give its text, the labels of every model that made it, exactly as given, and one or two web search queries that would find evidence for or against it. Reply with JSON only, matching the schema.`

const assessInstructions = `You cross-check claims that other models made. Each claim comes with the evidence a search found for it, possibly none. Judge each claim as stated, numbers and dates included: "supported" when the evidence (or, without evidence, well-established knowledge) confirms it, "refuted" when the evidence contradicts it, "unverifiable" when you cannot tell. Give a one-sentence rationale that cites the evidence as [n]. Reply with JSON only, matching the schema, with one assessment per claim id.`

const rewriteInstructions = `You write the final answer of a checked piece of research. You are given the question, the models' answers and the claims found in them with the verdict of the cross-check. Write one answer that states the supported claims, leaves out the refuted ones (or gives the value a supported claim states instead), and mentions disputed or unverifiable claims only with that caveat. Reply with JSON only: {"answer": the answer}.`

// Run runs q from its recorded events to its end and returns the terminal
// event.
func (m *Verify) Run(ctx context.Context, q *events.Query, emit Emit) (events.Event, error) {
	j := newJob(q, emit)
	if err := j.start(ctx); err != nil {
		return nil, err
	}
	if err := m.research(ctx, j); err != nil {
		return nil, err
	}
	answers, ending := j.answered()
	if ending != nil {
		return ending, nil
	}
	if err := m.extract(ctx, j, answers); err != nil {
		return nil, err
	}
	if err := m.crossCheck(ctx, j, answers); err != nil {
		return nil, err
	}
	return j.finish(ctx, "rewriting the answer to agree with the verdicts", events.StepRewrite, answers[0].Model, func() (events.Synthesized, error) {
		return m.rewrite(ctx, j, answers)
	})
}

func (m *Verify) native(ref events.ModelRef) bool {
	return m.NativeSearch != nil && m.NativeSearch(ref)
}

// research has every pending model answer with research. The models without
// a web search of their own share one search of the service's backend.
func (m *Verify) research(ctx context.Context, j *job) error {
	pending := j.q.Pending()
	if len(pending) == 0 {
		return nil
	}
	if err := j.progress(ctx, events.StageResearching, 5, "the models research the question"); err != nil {
		return err
	}
	var sources []events.Citation
	if slices.ContainsFunc(pending, func(ref events.ModelRef) bool { return !m.native(ref) }) {
		var err error
		if sources, err = m.researchSources(ctx, j); err != nil {
			return err
		}
	}
	prompt := j.q.Submitted.Prompt
	files := fileSources(j.q.Submitted.Files)
	return j.answerAll(ctx, func(ctx context.Context, ref events.ModelRef) events.Event {
		native := m.native(ref)
		// The attached files are sources too, numbered after the search
		// results: a claim may be grounded in one (file://<file_id>).
		var listed []events.Citation
		if !native {
			listed = append(listed, sources...)
		}
		listed = append(listed, files...)
		var b strings.Builder
		fmt.Fprintf(&b, "Question:\n%s\n", prompt)
		if len(listed) > 0 {
			b.WriteString("\nSearch results:\n")
			writeSources(&b, listed)
		}
		req, err := j.withFiles(ctx, m.Files, ref, j.withTools(providers.Request{
			Purpose:   events.StepResearch,
			WebSearch: native,
			Messages: []providers.Message{
				{Role: providers.RoleSystem, Content: researchInstructions},
				{Role: providers.RoleUser, Content: b.String()},
			},
		}))
		if err != nil {
			return failed(ref, nil, err)
		}
		resp, err := m.complete(ctx, &ref, &req)
		if err != nil {
			return failed(ref, resp, err)
		}
		citations := cited(resp.Text, listed)
		if native {
			citations = append(slices.Clone(resp.Citations), citations...)
		}
		mt := m.meter(ref, resp)
		return events.ModelAnswered{Model: ref, Answer: resp.Text, Citations: citations, Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros, ToolCalls: resp.ToolCalls}
	})
}

// researchSources returns the results of the research search, searching
// (and recording the search) unless a search was recorded already.
func (m *Verify) researchSources(ctx context.Context, j *job) ([]events.Citation, error) {
	for _, e := range j.q.Evidence {
		if e.ClaimID == "" {
			return e.Sources, nil
		}
	}
	if m.Search == nil {
		return nil, nil
	}
	query := truncate(j.q.Submitted.Prompt, 400)
	ev := m.searchOnce(ctx, "", query, researchResults)
	if err := j.recordOutcome(ctx, ev, ev.Error == "" || ctx.Err() == nil); err != nil {
		return nil, err
	}
	return ev.Sources, nil
}

// searchOnce runs one search and returns its record, failed or not.
func (m *Verify) searchOnce(ctx context.Context, claimID, query string, limit int) events.EvidenceRetrieved {
	ev := events.EvidenceRetrieved{ClaimID: claimID, Query: query, Backend: m.Search.Name(), Sources: []events.Citation{}}
	results, err := m.Search.Search(ctx, query, limit)
	if err != nil {
		ev.Error = err.Error()
		return ev
	}
	for _, r := range results {
		ev.Sources = append(ev.Sources, events.Citation{URL: r.URL, Title: r.Title, Snippet: r.Snippet})
	}
	return ev
}

func writeSources(b *strings.Builder, sources []events.Citation) {
	for i, s := range sources {
		fmt.Fprintf(b, "[%d] %s — %s\n%s\n\n", i+1, s.Title, s.URL, s.Snippet)
	}
}

var citeMarker = regexp.MustCompile(`\[(\d{1,2})\]`)

// cited returns the sources text cites as [n], in order of first citation.
func cited(text string, sources []events.Citation) []events.Citation {
	out := []events.Citation{}
	seen := map[int]bool{}
	for _, m := range citeMarker.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		if n >= 1 && n <= len(sources) && !seen[n] {
			seen[n] = true
			out = append(out, sources[n-1])
		}
	}
	return out
}

// extract has each model extract the claims of its own answer, then merges
// the check-worthy ones across models: each step once.
func (m *Verify) extract(ctx context.Context, j *job, answers []events.ModelAnswered) error {
	if j.q.Merged != nil {
		return nil
	}
	var pending []events.ModelAnswered
	for _, a := range answers {
		_, done := j.q.Extracted[a.Model.Key()]
		if !done && !j.failed(events.StepExtractClaims, &a.Model) {
			pending = append(pending, a)
		}
	}
	if len(pending) > 0 {
		if err := j.progress(ctx, events.StageExtractingClaims, 40, "extracting the claims of every answer"); err != nil {
			return err
		}
		prompt := j.q.Submitted.Prompt
		if err := each(pending, func(a events.ModelAnswered) error {
			var out struct {
				Claims []events.ExtractedClaim `json:"claims"`
			}
			mt, err := m.ask(ctx, a.Model, events.StepExtractClaims, extractInstructions,
				fmt.Sprintf("Question:\n%s\n\nAnswer:\n%s\n", prompt, a.Answer),
				&providers.Schema{Name: SchemaClaims, JSON: ClaimsSchema}, &out)
			if err != nil {
				ref := a.Model
				return j.recordOutcome(ctx, stepFailed(events.StepExtractClaims, &ref, err), false)
			}
			if out.Claims == nil {
				out.Claims = []events.ExtractedClaim{}
			}
			return j.recordOutcome(ctx, events.ClaimsExtracted{Model: a.Model, Claims: out.Claims,
				Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros}, true)
		}); err != nil {
			return err
		}
	}
	return m.merge(ctx, j, answers)
}

// candidate is a check-worthy claim and the model that made it.
type candidate struct {
	model, text string
}

// merge merges the check-worthy claims of every answer with the first model
// that answered; when that fails, claims with the same normalised text are
// merged. Either way ClaimsMerged is recorded.
func (m *Verify) merge(ctx context.Context, j *job, answers []events.ModelAnswered) error {
	var cands []candidate
	known := map[string]bool{}
	for _, a := range answers {
		known[a.Model.Key()] = true
		for _, c := range j.q.Extracted[a.Model.Key()].Claims {
			if c.CheckWorthy && strings.TrimSpace(c.Text) != "" {
				cands = append(cands, candidate{a.Model.Key(), strings.TrimSpace(c.Text)})
			}
		}
	}
	merged := events.ClaimsMerged{Method: events.MergedByExactText, Claims: []events.Claim{}}
	ref := answers[0].Model
	models := map[string]bool{}
	for _, c := range cands {
		models[c.model] = true
	}
	// Claims of one model need no merging across models; a merge that
	// failed before this run is not tried again.
	if len(models) > 1 && !j.failed(events.StepMergeClaims, &ref) {
		var b strings.Builder
		b.WriteString("Claims:\n")
		for _, c := range cands {
			fmt.Fprintf(&b, "- (%s) %s\n", c.model, c.text)
		}
		var out struct {
			Claims []events.Claim `json:"claims"`
		}
		mt, err := m.ask(ctx, ref, events.StepMergeClaims, mergeInstructions, b.String(),
			&providers.Schema{Name: SchemaMerged, JSON: MergedSchema}, &out)
		if err == nil {
			merged = events.ClaimsMerged{Method: events.MergedByModel, Model: ref, Claims: cleanClaims(out.Claims, known),
				Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros}
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else if err := j.note(ctx, stepFailed(events.StepMergeClaims, &ref, err)); err != nil {
			return err
		}
	}
	if merged.Method == events.MergedByExactText {
		merged.Claims = mergeExact(cands)
	}
	var dropped int
	merged.Claims, dropped = m.rank(merged.Claims)
	if dropped > 0 {
		if err := j.note(ctx, events.StepFailed{Step: events.StepMergeClaims, Class: "too_many_claims",
			Message: fmt.Sprintf("%d claims were found; the %d that most models made were checked, %d were not", len(merged.Claims)+dropped, len(merged.Claims), dropped)}); err != nil {
			return err
		}
	}
	return j.recordOutcome(ctx, merged, true)
}

// cleanClaims drops labels no model has and claims no known model made,
// merges claims with the same normalised text, and gives each claim at most
// queriesPerClaim queries (its text when none).
func cleanClaims(claims []events.Claim, known map[string]bool) []events.Claim {
	out := []events.Claim{}
	index := map[string]int{}
	for _, c := range claims {
		var by []string
		for _, label := range c.AssertedBy {
			if known[label] && !slices.Contains(by, label) {
				by = append(by, label)
			}
		}
		if len(by) == 0 || strings.TrimSpace(c.Text) == "" {
			continue
		}
		var queries []string
		for _, q := range c.Queries {
			if q = strings.TrimSpace(q); q != "" && len(queries) < queriesPerClaim {
				queries = append(queries, q)
			}
		}
		if len(queries) == 0 {
			queries = []string{c.Text}
		}
		if i, seen := index[normalise(c.Text)]; seen {
			for _, label := range by {
				if !slices.Contains(out[i].AssertedBy, label) {
					out[i].AssertedBy = append(out[i].AssertedBy, label)
				}
			}
			continue
		}
		index[normalise(c.Text)] = len(out)
		out = append(out, events.Claim{Text: strings.TrimSpace(c.Text), AssertedBy: by, Queries: queries})
	}
	return out
}

// mergeExact merges candidates whose normalised texts are equal.
func mergeExact(cands []candidate) []events.Claim {
	out := []events.Claim{}
	index := map[string]int{}
	for _, c := range cands {
		key := normalise(c.text)
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, events.Claim{Text: c.text, Queries: []string{citeMarker.ReplaceAllString(c.text, "")}})
		}
		if !slices.Contains(out[i].AssertedBy, c.model) {
			out[i].AssertedBy = append(out[i].AssertedBy, c.model)
		}
	}
	return out
}

var nonWord = regexp.MustCompile(`[^\pL\pN]+`)

func normalise(s string) string {
	s = citeMarker.ReplaceAllString(strings.ToLower(s), " ")
	return strings.TrimSpace(nonWord.ReplaceAllString(s, " "))
}

// rank keeps the claims most models made, up to MaxClaims, numbers them c1,
// c2, … and returns how many it left out.
func (m *Verify) rank(claims []events.Claim) ([]events.Claim, int) {
	limit := m.MaxClaims
	if limit <= 0 {
		limit = defaultMaxClaims
	}
	slices.SortStableFunc(claims, func(a, b events.Claim) int { return len(b.AssertedBy) - len(a.AssertedBy) })
	dropped := max(0, len(claims)-limit)
	claims = claims[:len(claims)-dropped]
	for i := range claims {
		claims[i].ID = "c" + strconv.Itoa(i+1)
	}
	return claims, dropped
}

// crossCheck searches evidence for every claim, has each claim judged by the
// models that did not make it and records the verdicts: each step once.
func (m *Verify) crossCheck(ctx context.Context, j *job, answers []events.ModelAnswered) error {
	if j.q.Verdicts != nil {
		return nil
	}
	claims := j.q.Merged.Claims
	if err := m.searchFiles(ctx, j, claims); err != nil {
		return err
	}
	if err := m.searchEvidence(ctx, j, claims); err != nil {
		return err
	}
	if len(answers) == 1 && len(claims) > 0 {
		if err := j.note(ctx, events.StepFailed{Step: events.StepAssessClaims, Class: "self_assessed",
			Message: "only " + answers[0].Model.Key() + " answered, so it judged its own claims against the evidence"}); err != nil {
			return err
		}
	}
	work := assignments(claims, answers)
	var pending []events.ModelAnswered
	for _, a := range answers {
		_, done := j.q.Assessed[a.Model.Key()]
		if !done && !j.failed(events.StepAssessClaims, &a.Model) && len(work[a.Model.Key()]) > 0 {
			pending = append(pending, a)
		}
	}
	if len(pending) > 0 {
		if err := j.progress(ctx, events.StageCrossChecking, 65, fmt.Sprintf("%d models cross-check %d claims", len(pending), len(claims))); err != nil {
			return err
		}
		sources := claimSources(j.q.Evidence)
		texts, err := j.files.texts(ctx, m.Files, j.q.Submitted.Files)
		if err != nil {
			return err
		}
		if err := each(pending, func(a events.ModelAnswered) error {
			ev, ok := m.assess(ctx, j, a.Model, work[a.Model.Key()], sources, texts)
			return j.recordOutcome(ctx, ev, ok)
		}); err != nil {
			return err
		}
	}
	return j.record(ctx, events.VerdictsGiven{Verdicts: Aggregate(claims, j.q.Evidence, j.q.Assessed)})
}

// searchFiles looks for each claim not looked up yet in the text of the
// query's files, recording what it finds (file://<file_id>#page=N, no
// content) as the claim's evidence of backend FilesBackend.
func (m *Verify) searchFiles(ctx context.Context, j *job, claims []events.Claim) error {
	files := j.q.Submitted.Files
	if len(files) == 0 {
		return nil
	}
	texts, err := j.files.texts(ctx, m.Files, files)
	if err != nil || len(texts) == 0 {
		// Files that cannot be read give no evidence; the calls that need
		// them fail on their own.
		return nil
	}
	done := map[string]bool{}
	for _, e := range j.q.Evidence {
		if e.Backend == FilesBackend {
			done[e.ClaimID] = true
		}
	}
	for _, c := range claims {
		if done[c.ID] {
			continue
		}
		ev := events.EvidenceRetrieved{ClaimID: c.ID, Query: c.Text, Backend: FilesBackend, Sources: findInFiles(c.Text, files, texts)}
		if err := j.record(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

// searchEvidence runs every query of every claim not searched yet, a few at
// once.
func (m *Verify) searchEvidence(ctx context.Context, j *job, claims []events.Claim) error {
	if m.Search == nil {
		return nil
	}
	done := map[string]bool{}
	for _, e := range j.q.Evidence {
		if e.Backend != FilesBackend {
			done[e.ClaimID+"\x00"+e.Query] = true
		}
	}
	type lookup struct{ claim, query string }
	var pending []lookup
	for _, c := range claims {
		for _, q := range c.Queries {
			if !done[c.ID+"\x00"+q] {
				pending = append(pending, lookup{c.ID, q})
			}
		}
	}
	if len(pending) == 0 {
		return nil
	}
	if err := j.progress(ctx, events.StageCrossChecking, 50, fmt.Sprintf("searching evidence for %d claims", len(claims))); err != nil {
		return err
	}
	slots := make(chan struct{}, searchesAtOnce)
	return each(pending, func(s lookup) error {
		slots <- struct{}{}
		ev := m.searchOnce(ctx, s.claim, s.query, resultsPerQuery)
		<-slots
		return j.recordOutcome(ctx, ev, ev.Error == "" || ctx.Err() == nil)
	})
}

// assignments returns, by model, the claims it judges: those it did not
// make; a claim every model made is judged by all of them against the
// evidence.
func assignments(claims []events.Claim, answers []events.ModelAnswered) map[string][]events.Claim {
	out := map[string][]events.Claim{}
	for _, c := range claims {
		judges := 0
		for _, a := range answers {
			if !slices.Contains(c.AssertedBy, a.Model.Key()) {
				out[a.Model.Key()] = append(out[a.Model.Key()], c)
				judges++
			}
		}
		if judges == 0 {
			for _, a := range answers {
				out[a.Model.Key()] = append(out[a.Model.Key()], c)
			}
		}
	}
	return out
}

// claimSources returns each claim's sources: the results of its searches,
// each URL once, at most events.SourcesPerClaim.
func claimSources(evidence []events.EvidenceRetrieved) map[string][]events.Citation {
	out := map[string][]events.Citation{}
	for _, e := range evidence {
		if e.ClaimID != "" {
			out[e.ClaimID] = events.AddSources(out[e.ClaimID], e.Sources, events.SourcesPerClaim)
		}
	}
	return out
}

// assess has ref judge claims against their evidence. It returns the
// ClaimsAssessed event, or a StepFailed and false.
//
// A source in one of the query's files is given with the passage of the
// file it points at, taken from the file's text now: no file content is
// recorded in an event. The judging model gets the query's files too.
func (m *Verify) assess(ctx context.Context, j *job, ref events.ModelRef, claims []events.Claim, sources map[string][]events.Citation, texts map[string]string) (events.Event, bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "Question:\n%s\n\nClaims to check:\n", j.q.Submitted.Prompt)
	ids := map[string]bool{}
	for _, c := range claims {
		ids[c.ID] = true
		fmt.Fprintf(&b, "\nClaim %s: %s\nEvidence:\n", c.ID, c.Text)
		if len(sources[c.ID]) == 0 {
			b.WriteString("(no evidence found)\n")
		}
		evidence := slices.Clone(sources[c.ID])
		for i, src := range evidence {
			if passage := passageOf(c.Text, src, texts); passage != "" {
				evidence[i].Snippet = passage
			}
		}
		writeSources(&b, evidence)
	}
	var out struct {
		Assessments []events.Assessment `json:"assessments"`
	}
	mt, err := m.askFiles(ctx, j, ref, events.StepAssessClaims, assessInstructions, b.String(),
		&providers.Schema{Name: SchemaAssessments, JSON: AssessmentsSchema}, &out)
	if err != nil {
		return stepFailed(events.StepAssessClaims, &ref, err), false
	}
	kept := []events.Assessment{}
	for _, a := range out.Assessments {
		if ids[a.ClaimID] { // an id the model made up is dropped, and so is a repeat
			kept = append(kept, a)
			delete(ids, a.ClaimID)
		}
	}
	return events.ClaimsAssessed{Model: ref, Assessments: kept, Usage: mt.Usage, UsageSource: mt.UsageSource, LatencyMS: mt.LatencyMS, CostMicros: mt.CostMicros}, true
}

// rewrite has the first model that answered rewrite the answer to agree
// with the verdicts. The answer's conflicts are the refuted and disputed
// claims.
func (m *Verify) rewrite(ctx context.Context, j *job, answers []events.ModelAnswered) (events.Synthesized, error) {
	claims := j.q.Merged.Claims
	verdicts := map[string]events.Verdict{}
	for _, v := range j.q.Verdicts.Verdicts {
		verdicts[v.ClaimID] = v
	}
	conflicts := []events.Conflict{}
	for _, c := range claims {
		if v := verdicts[c.ID]; v.Verdict == events.VerdictRefuted || v.Verdict == events.VerdictDisputed {
			conflicts = append(conflicts, claimConflict(c, v, j.q.Assessed, answers))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Question:\n%s\n\nAnswers:\n", j.q.Submitted.Prompt)
	for i, a := range answers {
		fmt.Fprintf(&b, "\n### Answer %d\n%s\n", i+1, a.Answer)
	}
	b.WriteString("\nChecked claims:\n")
	if len(claims) == 0 {
		b.WriteString("(no check-worthy claims were found)\n")
	}
	for _, c := range claims {
		fmt.Fprintf(&b, "- [%s] %s\n", verdicts[c.ID].Verdict, c.Text)
	}
	return m.writeAnswer(ctx, answers[0].Model, rewriteInstructions, b.String(), conflicts)
}

// claimConflict states a refuted or disputed claim as a conflict: the models
// that made it against the judgements of the others.
func claimConflict(c events.Claim, v events.Verdict, assessed map[string]events.ClaimsAssessed, answers []events.ModelAnswered) events.Conflict {
	out := events.Conflict{Topic: c.Text}
	for _, by := range c.AssertedBy {
		out.Positions = append(out.Positions, events.Position{Model: by, Position: "asserts the claim"})
	}
	for _, a := range answers {
		for _, as := range assessed[a.Model.Key()].Assessments {
			if as.ClaimID == c.ID && !slices.Contains(c.AssertedBy, a.Model.Key()) {
				out.Positions = append(out.Positions, events.Position{Model: a.Model.Key(), Position: as.Verdict + ": " + as.Rationale})
			}
		}
	}
	if v.Verdict == events.VerdictRefuted {
		out.Resolution = fmt.Sprintf("refuted by the cross-check (confidence %.2f): left out of the answer", v.Confidence)
	} else {
		out.Resolution = fmt.Sprintf("disputed: the cross-checks disagree (confidence %.2f); the answer gives it only with that caveat", v.Confidence)
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
