// Package gemini is the model backend for Google's Gemini API, built on the
// official Google Gen AI Go SDK (google.golang.org/genai) and its
// Models.GenerateContent call.
//
// The client is pinned to what its Config says: the Gemini API backend, the
// configured API key and base URL. The SDK's own environment lookups
// (GOOGLE_API_KEY, GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI,
// GOOGLE_CLOUD_PROJECT, GOOGLE_CLOUD_LOCATION, GOOGLE_GEMINI_BASE_URL …) only
// fill fields left empty, so none is left empty. The SDK's HTTP retries and
// its automatic continuation (which re-sends a request whose answer ended in
// finish reason CONTINUATION) are both switched off: one Complete is one
// upstream request, and retries are the service's (providers.Retry).
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genai"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// DefaultBaseURL is the Gemini API's endpoint, used when Config.BaseURL is
// empty. It is set explicitly so that GOOGLE_GEMINI_BASE_URL and
// genai.SetDefaultBaseURLs cannot redirect the calls.
const DefaultBaseURL = "https://generativelanguage.googleapis.com/"

// apiVersion is the Gemini API version the calls go to: /v1beta/models/{model}:generateContent.
const apiVersion = "v1beta"

// Config configures a Client.
type Config struct {
	// APIKey is the Gemini API key, sent as the x-goog-api-key header. Required.
	APIKey string
	// BaseURL is the API's base URL; empty means DefaultBaseURL.
	BaseURL string
	// HTTPClient sends the requests; nil means a new http.Client. Its
	// responses are read to providers.MaxResponseBytes at most.
	HTTPClient *http.Client
}

// Client is a Gemini API backend.
type Client struct {
	genai  *genai.Client
	apiKey string
}

var _ providers.Provider = (*Client)(nil)

// New returns a client for the Gemini API. ctx is the genai client
// constructor's; no request is sent.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.APIKey == "" {
		// Left empty, the SDK would take GOOGLE_API_KEY or GEMINI_API_KEY.
		return nil, errors.New("gemini: an API key is required")
	}
	baseURL := cfg.BaseURL
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	hc = providers.LimitResponses(hc, providers.MaxResponseBytes)
	gc, err := genai.NewClient(ctx, &genai.ClientConfig{
		APIKey:     cfg.APIKey,
		Backend:    genai.BackendGeminiAPI,
		HTTPClient: hc,
		HTTPOptions: genai.HTTPOptions{
			BaseURL:    baseURL,
			APIVersion: apiVersion,
			// One attempt: nil already means no retries in v1.77.0, but an
			// explicit single attempt does not depend on that default.
			RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)},
		},
	})
	if err != nil {
		// The SDK's constructor errors print the whole ClientConfig.
		return nil, fmt.Errorf("gemini: %s", redact(err.Error(), cfg.APIKey))
	}
	return &Client{genai: gc, apiKey: cfg.APIKey}, nil
}

// Complete runs one generateContent call.
func (c *Client) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	start := time.Now()
	contents, system, err := buildContents(*req)
	if err != nil {
		return nil, err
	}
	config := &genai.GenerateContentConfig{
		SystemInstruction:     system,
		AutomaticContinuation: genai.Ptr(false),
	}
	if req.MaxOutputTokens > 0 {
		config.MaxOutputTokens = int32(min(req.MaxOutputTokens, 1<<31-1))
	}
	if req.Schema != nil {
		if !json.Valid(req.Schema.JSON) {
			// The SDK drops a body it cannot marshal without saying so.
			return nil, providers.Unusable("schema %q is not valid JSON", req.Schema.Name)
		}
		config.ResponseMIMEType = "application/json"
		config.ResponseJsonSchema = req.Schema.JSON
	}
	if req.WebSearch {
		config.Tools = []*genai.Tool{{GoogleSearch: &genai.GoogleSearch{}}}
	}
	if err := addTools(config, *req); err != nil {
		return nil, err
	}

	out, err := c.genai.Models.GenerateContent(ctx, req.Model, contents, config)
	latency := time.Since(start)
	if err != nil {
		return &providers.Response{Latency: latency}, c.mapError(ctx, err)
	}
	resp, err := c.response(out)
	resp.Latency = latency
	if err == nil {
		err = providers.Finished(req, &resp)
	}
	return &resp, err
}

// buildContents turns the messages into Gemini contents and the system
// instruction, with the attachments on the last user message.
func buildContents(req providers.Request) ([]*genai.Content, *genai.Content, error) {
	var system *genai.Content
	var contents []*genai.Content
	lastUser := -1
	for _, m := range req.Messages {
		switch m.Role {
		case providers.RoleSystem:
			if m.Content == "" {
				continue
			}
			if system == nil {
				system = &genai.Content{Role: genai.RoleUser}
			}
			system.Parts = append(system.Parts, genai.NewPartFromText(m.Content))
		case providers.RoleUser, providers.RoleAssistant:
			role := genai.RoleUser
			if m.Role == providers.RoleAssistant {
				role = genai.RoleModel
			}
			content := &genai.Content{Role: role}
			if m.Content != "" {
				content.Parts = append(content.Parts, genai.NewPartFromText(m.Content))
			}
			contents = append(contents, content)
			if m.Role == providers.RoleUser {
				lastUser = len(contents) - 1
			}
		default:
			return nil, nil, providers.Unusable("unknown message role %q", m.Role)
		}
	}
	if len(req.Attachments) > 0 {
		parts, err := attachmentParts(req.Attachments)
		if err != nil {
			return nil, nil, err
		}
		if lastUser < 0 {
			contents = append(contents, &genai.Content{Role: genai.RoleUser})
			lastUser = len(contents) - 1
		}
		contents[lastUser].Parts = append(contents[lastUser].Parts, parts...)
	}
	// A content without parts is rejected upstream.
	kept := contents[:0]
	for _, content := range contents {
		if len(content.Parts) > 0 {
			kept = append(kept, content)
		}
	}
	if len(kept) == 0 {
		return nil, nil, providers.Unusable("the request has no user or assistant content")
	}
	return kept, system, nil
}

// inlineTypes are the media types sent as inline data, which Gemini reads
// natively.
var inlineTypes = map[string]bool{
	"image/png":       true,
	"image/jpeg":      true,
	"image/gif":       true,
	"image/webp":      true,
	"application/pdf": true,
}

// attachmentParts sends images and PDFs as inline data and text as text
// parts prefixed with the file name.
func attachmentParts(attachments []providers.Attachment) ([]*genai.Part, error) {
	var parts []*genai.Part
	for _, a := range attachments {
		mediaType, _, err := mime.ParseMediaType(a.MediaType)
		if err != nil {
			mediaType = strings.ToLower(strings.TrimSpace(a.MediaType))
		}
		if mediaType == "image/jpg" {
			mediaType = "image/jpeg"
		}
		switch {
		case inlineTypes[mediaType]:
			parts = append(parts, genai.NewPartFromBytes(a.Data, mediaType))
		case strings.HasPrefix(mediaType, "text/") || utf8.Valid(a.Data):
			parts = append(parts, genai.NewPartFromText(fmt.Sprintf("File %s:\n\n%s", a.Name, a.Data)))
		default:
			return nil, providers.Unusable("attachment %q: media type %q cannot be sent to Gemini", a.Name, a.MediaType)
		}
	}
	return parts, nil
}

// filteredFinish are the finish reasons of an answer stopped by a content
// filter.
var filteredFinish = map[genai.FinishReason]bool{
	genai.FinishReasonSafety:                 true,
	genai.FinishReasonProhibitedContent:      true,
	genai.FinishReasonBlocklist:              true,
	genai.FinishReasonSPII:                   true,
	genai.FinishReasonImageSafety:            true,
	genai.FinishReasonImageProhibitedContent: true,
}

// response reads the answer: its text (a structured reply's too, raw:
// providers.Structured takes its object out), citations, tool calls, usage
// and why it stopped. A blocked prompt or an answer stopped for safety
// fails it as refused.
func (c *Client) response(out *genai.GenerateContentResponse) (providers.Response, error) {
	var resp providers.Response
	if u := out.UsageMetadata; u != nil {
		resp.Usage = events.Usage{
			InputTokens:  int(u.PromptTokenCount),
			OutputTokens: int(u.CandidatesTokenCount) + int(u.ThoughtsTokenCount),
		}
	}
	if pf := out.PromptFeedback; pf != nil && pf.BlockReason != "" && pf.BlockReason != genai.BlockedReasonUnspecified {
		msg := "the prompt was blocked: " + string(pf.BlockReason)
		if pf.BlockReasonMessage != "" {
			msg += ": " + pf.BlockReasonMessage
		}
		return resp, &providers.Error{Class: providers.ClassRefused, Message: redact(msg, c.apiKey)}
	}
	if len(out.Candidates) == 0 || out.Candidates[0] == nil {
		return resp, &providers.Error{Class: providers.ClassEmpty, Message: "the response has no candidate"}
	}
	cand := out.Candidates[0]
	if filteredFinish[cand.FinishReason] {
		msg := "the answer was stopped: " + string(cand.FinishReason)
		if cand.FinishMessage != "" {
			msg += ": " + cand.FinishMessage
		}
		return resp, &providers.Error{Class: providers.ClassRefused, Message: redact(msg, c.apiKey)}
	}
	switch cand.FinishReason {
	case genai.FinishReasonStop:
		resp.Finish = providers.FinishStop
	case genai.FinishReasonMaxTokens:
		resp.Finish = providers.FinishLength
	}
	var text strings.Builder
	if cand.Content != nil {
		for _, p := range cand.Content.Parts {
			if p != nil && !p.Thought {
				text.WriteString(p.Text)
			}
		}
	}
	resp.Text = text.String()
	resp.ToolCalls = toolCalls(cand)
	resp.Citations = citations(cand.GroundingMetadata)
	return resp, nil
}

// citations reads the web sources of a grounded answer, each once, with the
// first answer segment that cites it as its snippet.
func citations(gm *genai.GroundingMetadata) []events.Citation {
	if gm == nil {
		return nil
	}
	snippets := map[int]string{}
	for _, s := range gm.GroundingSupports {
		if s == nil || s.Segment == nil || strings.TrimSpace(s.Segment.Text) == "" {
			continue
		}
		for _, i := range s.GroundingChunkIndices {
			if _, ok := snippets[int(i)]; !ok {
				snippets[int(i)] = strings.TrimSpace(s.Segment.Text)
			}
		}
	}
	var out []events.Citation
	seen := map[string]int{}
	for i, ch := range gm.GroundingChunks {
		if ch == nil || ch.Web == nil || ch.Web.URI == "" {
			continue
		}
		if j, ok := seen[ch.Web.URI]; ok {
			if out[j].Snippet == "" {
				out[j].Snippet = snippets[i]
			}
			continue
		}
		seen[ch.Web.URI] = len(out)
		out = append(out, events.Citation{URL: ch.Web.URI, Title: ch.Web.Title, Snippet: snippets[i]})
	}
	return out
}

// mapError turns the SDK's error into the context's error when ctx ended, or
// a classified *providers.Error.
func (c *Client) mapError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if pe, ok := providers.Classified(err); ok {
		return pe
	}
	var ae genai.APIError
	if errors.As(err, &ae) {
		return c.apiError(ae)
	}
	var pae *genai.APIError
	if errors.As(err, &pae) && pae != nil {
		return c.apiError(*pae)
	}
	msg := redact(err.Error(), c.apiKey)
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &providers.Error{Class: providers.ClassTimeout, Message: msg}
	}
	return &providers.Error{Class: providers.ClassHostError, Message: msg}
}

// statusCodes are the HTTP statuses of google.rpc status names, for an error
// body without a code.
var statusCodes = map[string]int{
	"INVALID_ARGUMENT":    400,
	"FAILED_PRECONDITION": 400,
	"OUT_OF_RANGE":        400,
	"UNAUTHENTICATED":     401,
	"PERMISSION_DENIED":   403,
	"NOT_FOUND":           404,
	"ABORTED":             409,
	"ALREADY_EXISTS":      409,
	"RESOURCE_EXHAUSTED":  429,
	"CANCELLED":           499,
	"INTERNAL":            500,
	"UNKNOWN":             500,
	"DATA_LOSS":           500,
	"UNIMPLEMENTED":       501,
	"UNAVAILABLE":         503,
	"DEADLINE_EXCEEDED":   504,
}

func (c *Client) apiError(ae genai.APIError) *providers.Error {
	status := ae.Code
	if status == 0 {
		status = statusCodes[ae.Status]
	}
	msg := ae.Message
	if msg == "" {
		msg = ae.Status
	} else if ae.Status != "" && !strings.Contains(ae.Status, " ") {
		msg = ae.Status + ": " + msg
	}
	msg = redact(msg, c.apiKey)
	e := &providers.Error{Class: providers.HTTPClass(status, ae.Status, msg), Status: status, Message: msg, RetryAfter: retryDelay(ae.Details)}
	if e.Class == providers.ClassContextOverflow {
		e.PromptTokens, e.ContextWindow, _ = providers.ContextRefusal(ae.Status, msg)
	}
	return e
}

// retryDelay reads google.rpc.RetryInfo.retryDelay from an error's details:
// "7s" in the JSON form of a google.protobuf.Duration. The SDK does not hand
// back the response headers of a failed call, so a retry-after header cannot
// be read. Like a header's, the wait is at most providers.MaxRetryAfter.
func retryDelay(details []map[string]any) time.Duration {
	for _, d := range details {
		if t, _ := d["@type"].(string); t != "type.googleapis.com/google.rpc.RetryInfo" {
			continue
		}
		switch v := d["retryDelay"].(type) {
		case string:
			if secs, ok := strings.CutSuffix(strings.TrimSpace(v), "s"); ok {
				if f, err := strconv.ParseFloat(secs, 64); err == nil && f > 0 {
					return providers.RetryAfterSeconds(f)
				}
			}
		case map[string]any:
			secs, _ := v["seconds"].(float64)
			if s, ok := v["seconds"].(string); ok {
				secs, _ = strconv.ParseFloat(s, 64)
			}
			nanos, _ := v["nanos"].(float64)
			if d := providers.RetryAfterSeconds(secs + nanos/1e9); d > 0 {
				return d
			}
		}
	}
	return 0
}

// redact removes the API key from an upstream or SDK message.
func redact(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}
