// Package apiv1 holds the wire types of crosscheck's /v1 HTTP API that a Go
// client decodes and encodes: the body of POST /v1/queries, the query that
// GET /v1/queries/{id} returns, and the error envelope of every failure. It
// imports nothing of the service, and its JSON is field for field the
// service's: a field is added here when the API adds it, never renamed.
package apiv1

import "time"

// QueryRequest is the body of POST /v1/queries and POST /v1/estimate-cost.
// Models maps a provider key to a model id, or to null to leave the
// provider out; omitted, the defaults of the catalog run.
type QueryRequest struct {
	Mode         string             `json:"mode"`
	Prompt       string             `json:"prompt"`
	Models       map[string]*string `json:"models,omitempty"`
	CustomModels []string           `json:"custom_models,omitempty"`
	// Files are file ids (POST /v1/files) the query attaches: at most 5,
	// 20 MB combined, each the caller's and not expired.
	Files []string `json:"files,omitempty"`
}

// Query is a query as GET /v1/queries/{id} returns it.
type Query struct {
	RequestID       string  `json:"request_id"`
	Object          string  `json:"object"`
	Mode            string  `json:"mode"`
	Status          string  `json:"status"`
	Stage           string  `json:"stage"`
	ProgressPercent int     `json:"progress_percent"`
	Answer          *Answer `json:"answer,omitempty"`
	// Files are the files the query attaches; absent when none.
	Files     []AttachedFile `json:"files,omitempty"`
	Models    []ModelResult  `json:"models"`
	Synthesis *Synthesis     `json:"synthesis,omitempty"`
	// Justify and Verify are the blocks of their modes, null in the others.
	Justify *JustifyResult `json:"justify"`
	Verify  *VerifyResult  `json:"verify"`
	Credits QueryCredits   `json:"credits"`
	Error   *QueryError    `json:"error,omitempty"`
	// Missing says which attached files a model could not see at all.
	Missing     []string   `json:"missing,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// Answer is the one aggregated answer of a query.
type Answer struct {
	Text      string     `json:"text"`
	Conflicts []Conflict `json:"conflicts"`
}

// Conflict is a topic on which the models' answers differ.
type Conflict struct {
	Topic      string     `json:"topic"`
	Positions  []Position `json:"positions"`
	Resolution string     `json:"resolution"`
}

// Position is one model's stance on a conflict.
type Position struct {
	Model    string `json:"model"`
	Position string `json:"position"`
}

// Usage is the tokens a model call reported.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Citation is one source a model cited or a search found.
type Citation struct {
	URL     string `json:"url"`
	Title   string `json:"title,omitempty"`
	Snippet string `json:"snippet,omitempty"`
}

// QueryCredits is what a query was estimated to cost and was charged, in
// credits. Charged is null until the query is settled.
type QueryCredits struct {
	Estimated float64  `json:"estimated"`
	Charged   *float64 `json:"charged"`
}

// ModelResult is one participating model's own answer. Status is pending,
// answered or failed.
type ModelResult struct {
	Provider    string      `json:"provider"`
	ModelID     string      `json:"model_id"`
	CustomModel string      `json:"custom_model,omitempty"`
	Simulated   bool        `json:"simulated"`
	Status      string      `json:"status"`
	Answer      string      `json:"answer,omitempty"`
	Citations   []Citation  `json:"citations"`
	Usage       *Usage      `json:"usage,omitempty"`
	Credits     float64     `json:"credits"`
	LatencyMS   int64       `json:"latency_ms"`
	Error       *ModelError `json:"error,omitempty"`
	// Files says how the model received each attached file.
	Files []ModelFile `json:"files,omitempty"`
}

// AttachedFile is a file a query attaches.
type AttachedFile struct {
	FileID    string `json:"file_id"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	MediaType string `json:"media_type"`
	Bytes     int64  `json:"bytes"`
}

// ModelFile is how one model received one attached file: Seen is native,
// text (its extracted text) or none.
type ModelFile struct {
	FileID string `json:"file_id"`
	Seen   string `json:"seen"`
}

// ModelError says why one model did not answer.
type ModelError struct {
	Class          string `json:"class"`
	Message        string `json:"message"`
	UpstreamStatus int    `json:"upstream_status,omitempty"`
}

// Synthesis says which model wrote the one answer and what that call cost.
type Synthesis struct {
	Provider string `json:"provider"`
	ModelID  string `json:"model_id"`
	// CustomModel is the BYOM id of a customer-owned synthesizer.
	CustomModel string  `json:"custom_model,omitempty"`
	Simulated   bool    `json:"simulated"`
	Usage       Usage   `json:"usage"`
	Credits     float64 `json:"credits"`
	LatencyMS   int64   `json:"latency_ms"`
}

// JustifyResult is the justify block: each model's answer per round, and
// the disagreements of the rounds. Missing says what the result lacks
// because a step failed.
type JustifyResult struct {
	Rounds        []Round        `json:"rounds"`
	Disagreements []Disagreement `json:"disagreements"`
	Missing       []string       `json:"missing"`
}

// Round is one round of a deliberation.
type Round struct {
	Round   int           `json:"round"`
	Answers []RoundAnswer `json:"answers"`
}

// RoundAnswer is one model's answer in a round; Changed, after the first
// round, is whether the model says it changed a position.
type RoundAnswer struct {
	Model   string `json:"model"`
	ModelID string `json:"model_id"`
	Answer  string `json:"answer"`
	Changed *bool  `json:"changed,omitempty"`
}

// Disagreement is a topic on which the models' first answers differed, and
// whether their revised answers agree.
type Disagreement struct {
	Topic      string   `json:"topic"`
	Positions  []Stance `json:"positions"`
	Resolved   bool     `json:"resolved"`
	Resolution string   `json:"resolution"`
}

// Stance is one model's position on a disagreement, before and after the
// deliberation.
type Stance struct {
	Model  string `json:"model"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// VerifyResult is the verify block: a verdict per claim. Missing says what
// the result lacks because a step failed.
type VerifyResult struct {
	Claims  []VerifiedClaim `json:"claims"`
	Missing []string        `json:"missing"`
}

// VerifiedClaim is one claim with its evidence, its judgements and its
// verdict. Verdict and Confidence are null until the cross-check ends.
type VerifiedClaim struct {
	ID          string            `json:"id"`
	Text        string            `json:"text"`
	Verdict     *string           `json:"verdict"`
	Confidence  *float64          `json:"confidence"`
	Sources     []Citation        `json:"sources"`
	AssertedBy  []string          `json:"asserted_by"`
	Assessments []ClaimAssessment `json:"assessments"`
}

// ClaimAssessment is one model's judgement of a claim.
type ClaimAssessment struct {
	Model     string `json:"model"`
	Verdict   string `json:"verdict"`
	Rationale string `json:"rationale"`
}

// QueryError is the error of a failed query.
type QueryError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorBody is the error envelope every failed request answers with.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of the envelope: Code is the stable code a
// client branches on; RetryAfterSeconds is set with a Retry-After header.
type ErrorDetail struct {
	Code              string  `json:"code"`
	Message           string  `json:"message"`
	RequestID         *string `json:"request_id"`
	Retriable         bool    `json:"retriable"`
	RetryAfterSeconds *int    `json:"retry_after_seconds"`
	DocsURL           string  `json:"docs_url"`
}

// QuerySummary is one row of GET /v1/queries: a query without its models'
// answers. CompletedAt is when it ended, completed or failed.
type QuerySummary struct {
	RequestID       string       `json:"request_id"`
	Object          string       `json:"object"`
	Mode            string       `json:"mode"`
	Status          string       `json:"status"`
	Stage           string       `json:"stage"`
	ProgressPercent int          `json:"progress_percent"`
	Credits         QueryCredits `json:"credits"`
	Error           *QueryError  `json:"error,omitempty"`
	CreatedAt       time.Time    `json:"created_at"`
	CompletedAt     *time.Time   `json:"completed_at,omitempty"`
}

// QueryList is one page of GET /v1/queries, newest first. When HasMore is
// true, NextAfter is the cursor to pass as the after parameter for the
// next page.
type QueryList struct {
	Object    string         `json:"object"`
	Data      []QuerySummary `json:"data"`
	HasMore   bool           `json:"has_more"`
	NextAfter *string        `json:"next_after"`
}
