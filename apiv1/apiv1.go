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
	// Tools are functions the models may propose to call; ToolChoice is
	// auto (the default), none, required, or the name of one tool.
	Tools      []Tool `json:"tools,omitempty"`
	ToolChoice string `json:"tool_choice,omitempty"`
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
	// ToolCalls are the calls of the query's tools its answer makes (the
	// ones its models agreed on); absent when it makes none.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
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
	Provider    string     `json:"provider"`
	ModelID     string     `json:"model_id"`
	CustomModel string     `json:"custom_model,omitempty"`
	Simulated   bool       `json:"simulated"`
	Status      string     `json:"status"`
	Answer      string     `json:"answer,omitempty"`
	Citations   []Citation `json:"citations"`
	Usage       *Usage     `json:"usage,omitempty"`
	// UsageSource is reported (the host reported Usage) or estimated (the
	// host reported none: the service counted the call with its tokenizer
	// and charged by that count); absent in older results.
	UsageSource string      `json:"usage_source,omitempty"`
	Credits     float64     `json:"credits"`
	LatencyMS   int64       `json:"latency_ms"`
	Error       *ModelError `json:"error,omitempty"`
	// Files says how the model received each attached file.
	Files []ModelFile `json:"files,omitempty"`
	// ToolCalls are the tool calls the model proposed.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is a call of one of the query's tools; Arguments is a JSON text.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a function a query offers its models, with the JSON Schema of
// its arguments.
type Tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
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
	CustomModel string `json:"custom_model,omitempty"`
	Simulated   bool   `json:"simulated"`
	Usage       Usage  `json:"usage"`
	// UsageSource is as in ModelResult; absent when no call wrote the
	// answer (a single answer is the answer).
	UsageSource string  `json:"usage_source,omitempty"`
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

// Accepted is the body of the 202 that POST /v1/queries answers with.
// IdempotentReplayed is true when an earlier submission with the same
// Idempotency-Key and body made the query.
type Accepted struct {
	RequestID          string `json:"request_id"`
	Object             string `json:"object"`
	Status             string `json:"status"`
	IdempotentReplayed bool   `json:"idempotent_replayed"`
	PollURL            string `json:"poll_url"`
	StreamURL          string `json:"stream_url"`
}

// Estimate is the body of POST /v1/estimate-cost. Amounts are credits;
// MonthlyCap is null when the account has none.
type Estimate struct {
	Object           string         `json:"object"`
	Mode             string         `json:"mode"`
	EstimatedCredits float64        `json:"estimated_credits"`
	MarginPercent    int            `json:"margin_percent"`
	Calls            []EstimateCall `json:"calls"`
	Balance          float64        `json:"balance"`
	Reserved         float64        `json:"reserved"`
	MonthlyCap       *float64       `json:"monthly_cap"`
	SpentThisMonth   float64        `json:"spent_this_month"`
	Sufficient       bool           `json:"sufficient"`
	WithinCap        bool           `json:"within_cap"`
}

// EstimateCall is one model call of an estimate; Role says which step of
// the mode makes it.
type EstimateCall struct {
	Provider     string  `json:"provider"`
	ModelID      string  `json:"model_id"`
	CustomModel  string  `json:"custom_model,omitempty"`
	Role         string  `json:"role"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Credits      float64 `json:"credits"`
}

// Catalog is the body of GET /v1/models: the models a query may select,
// grouped by provider, and the group of the account's custom models. Data
// is the same endpoint in OpenAI's shape: the chat door's models
// (svc-unify, svc-justify, svc-verify).
type Catalog struct {
	Object string        `json:"object"`
	Data   []ModelObject `json:"data"`
	Groups []ModelGroup  `json:"groups"`
}

// ModelObject is one entry of Catalog.Data, and the body of
// GET /v1/models/{id}, in OpenAI's shape.
type ModelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelGroup is one group of the catalog. Simulated is true when its
// models run on the built-in simulated backend.
type ModelGroup struct {
	Name      string         `json:"name"`
	Backend   string         `json:"backend,omitempty"`
	Simulated bool           `json:"simulated"`
	Models    []CatalogModel `json:"models"`
}

// CatalogModel is one model of the catalog; Default says it runs when a
// query names no model of its provider.
type CatalogModel struct {
	ModelID string  `json:"model_id"`
	Name    string  `json:"name"`
	Tier    string  `json:"tier"`
	Default bool    `json:"default"`
	Pricing Pricing `json:"pricing"`
}

// Pricing is a model's price in credits per million tokens.
type Pricing struct {
	InputPerMillion  int64 `json:"input_per_million"`
	OutputPerMillion int64 `json:"output_per_million"`
}

// Progress is the data of an SSE progress event of
// GET /v1/queries/{id}/stream.
type Progress struct {
	RequestID       string `json:"request_id"`
	Stage           string `json:"stage"`
	ProgressPercent int    `json:"progress_percent"`
	Message         string `json:"message,omitempty"`
}

// StreamError is the data of an SSE error event: the error envelope, the
// query's id and its status as far as the stream told it. A stream ends
// after it; Status failed means the query ended, any other status that
// only the stream did (reconnect with Last-Event-ID, or poll).
type StreamError struct {
	Error     ErrorDetail `json:"error"`
	RequestID string      `json:"request_id"`
	Status    string      `json:"status"`
}

// File is an uploaded file as POST /v1/files and GET /v1/files/{id}
// return it.
type File struct {
	FileID     string         `json:"file_id"`
	Object     string         `json:"object"`
	Name       string         `json:"name"`
	Kind       string         `json:"kind"`
	MediaType  string         `json:"media_type"`
	Bytes      int64          `json:"bytes"`
	SHA256     string         `json:"sha256"`
	CreatedAt  time.Time      `json:"created_at"`
	ExpiresAt  time.Time      `json:"expires_at"`
	Extraction FileExtraction `json:"extraction"`
}

// FileExtraction is what text extraction produced for a file.
type FileExtraction struct {
	Pages     int  `json:"pages"`
	Chars     int  `json:"chars"`
	Truncated bool `json:"truncated"`
}
