// Package anthropic is the model backend for Anthropic's Messages API, built on
// the official Go SDK.
//
// Structured output is forced tool use: one tool named after the schema, whose
// input_schema is the schema, and a tool_choice that forces it. Web search is
// the server tool web_search_20250305; its sources come back as citations.
//
// The client takes its credentials and base URL from Config only: the SDK's
// environment lookups (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN,
// ANTHROPIC_BASE_URL, ANTHROPIC_PROFILE, ANTHROPIC_CUSTOM_HEADERS, federation)
// are switched off, and the SDK does not retry: retries are providers.Retry's.
package anthropic

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// DefaultBaseURL is the API's address when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.anthropic.com/"

// DefaultMaxOutputTokens is max_tokens when the request leaves it zero: the
// API requires one.
const DefaultMaxOutputTokens = 4096

// attemptTimeout bounds one HTTP attempt. The SDK sets a 10-minute bound on
// every non-streaming call anyway, and refuses outright (before sending) a
// call whose max_tokens it guesses would take longer, unless a timeout is set
// explicitly. Setting it keeps the bound and drops the refusal; the service's
// own deadline comes from the caller's context.
const attemptTimeout = 10 * time.Minute

// Config configures the backend.
type Config struct {
	// APIKey is sent as the x-api-key header.
	APIKey string
	// BaseURL is the API's address; empty means DefaultBaseURL.
	BaseURL string
	// HTTPClient sends the requests; nil means http.DefaultClient. Its
	// responses are read to providers.MaxResponseBytes at most.
	HTTPClient *http.Client
}

// Client is the Anthropic backend.
type Client struct {
	client sdk.Client
	apiKey string
}

var _ providers.Provider = (*Client)(nil)

// New returns a backend that calls the API at cfg.BaseURL with cfg.APIKey.
func New(cfg Config) *Client {
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	hc := providers.LimitResponses(cfg.HTTPClient, providers.MaxResponseBytes)
	key := cfg.APIKey
	opts := []option.RequestOption{
		// Skips DefaultClientOptions: no credential, base URL or header is
		// taken from the environment or a profile file.
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(base),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithRequestTimeout(attemptTimeout),
		// The last word on the credential headers, applied to the request as
		// it leaves, after every option and middleware: only the configured
		// key, never a bearer token.
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			r.Header.Del("Authorization")
			if key != "" {
				r.Header.Set("X-Api-Key", key)
			} else {
				r.Header.Del("X-Api-Key")
			}
			return next(r)
		}),
	}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	}
	return &Client{client: sdk.NewClient(opts...), apiKey: key}
}

// Complete runs one call of the Messages API.
func (c *Client) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	start := time.Now()
	params, toolName, err := buildParams(*req)
	if err != nil {
		return nil, c.redact(err)
	}
	msg, err := c.client.Messages.New(ctx, params)
	latency := time.Since(start)
	if err != nil {
		return nil, c.mapError(ctx, err)
	}
	resp, err := readMessage(msg, toolName)
	resp.Latency = latency
	if err == nil {
		err = providers.Finished(req, &resp)
	}
	return &resp, c.redact(err)
}

// buildParams turns req into the Messages API's parameters, and returns the
// name of the forced tool when req asks for structured output.
func buildParams(req providers.Request) (sdk.MessageNewParams, string, error) {
	maxTokens := req.MaxOutputTokens
	if maxTokens <= 0 {
		maxTokens = DefaultMaxOutputTokens
	}
	params := sdk.MessageNewParams{
		Model:     sdk.Model(req.Model),
		MaxTokens: int64(maxTokens),
	}

	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == providers.RoleUser {
			lastUser = i
		}
	}
	var attachments []sdk.ContentBlockParamUnion
	for _, a := range req.Attachments {
		b, err := attachmentBlock(a)
		if err != nil {
			return params, "", err
		}
		attachments = append(attachments, b)
	}
	if len(attachments) > 0 && lastUser < 0 {
		// No user message to carry them: they make one of their own.
		params.Messages = append(params.Messages, sdk.NewUserMessage(attachments...))
	}

	for i, m := range req.Messages {
		var blocks []sdk.ContentBlockParamUnion
		if i == lastUser {
			// Files go before the text that asks about them.
			blocks = append(blocks, attachments...)
		}
		if m.Content != "" {
			blocks = append(blocks, sdk.NewTextBlock(m.Content))
		}
		switch m.Role {
		case providers.RoleSystem:
			if m.Content != "" {
				params.System = append(params.System, sdk.TextBlockParam{Text: m.Content})
			}
		case providers.RoleUser:
			if len(blocks) > 0 {
				params.Messages = append(params.Messages, sdk.NewUserMessage(blocks...))
			}
		case providers.RoleAssistant:
			if len(blocks) > 0 {
				params.Messages = append(params.Messages, sdk.NewAssistantMessage(blocks...))
			}
		default:
			return params, "", providers.Unusable("message %d has unknown role %q", i, m.Role)
		}
	}

	var toolName string
	if req.Schema != nil {
		if !json.Valid(req.Schema.JSON) {
			return params, "", providers.Unusable("schema %q is not valid JSON", req.Schema.Name)
		}
		toolName = req.Schema.Name
		if toolName == "" {
			toolName = "structured_output"
		}
		// The schema goes out verbatim as input_schema.
		schema := param.Override[sdk.ToolInputSchemaParam](json.RawMessage(req.Schema.JSON))
		tool := sdk.ToolUnionParamOfTool(schema, toolName)
		tool.OfTool.Description = sdk.String("Reply by calling this tool exactly once; its input is the answer.")
		params.Tools = append(params.Tools, tool)
		params.ToolChoice = sdk.ToolChoiceUnionParam{OfTool: &sdk.ToolChoiceToolParam{
			Name:                   toolName,
			DisableParallelToolUse: sdk.Bool(true),
		}}
	}
	if req.WebSearch {
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfWebSearchTool20250305: &sdk.WebSearchTool20250305Param{}})
	}
	if err := addTools(&params, req); err != nil {
		return params, "", err
	}
	return params, toolName, nil
}

// attachmentBlock is a's native content block: an image, a PDF document, or
// text headed by the file's name.
func attachmentBlock(a providers.Attachment) (sdk.ContentBlockParamUnion, error) {
	mt, _, err := mime.ParseMediaType(a.MediaType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(a.MediaType))
	}
	switch mt {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return sdk.NewImageBlockBase64(mt, base64.StdEncoding.EncodeToString(a.Data)), nil
	case "image/jpg":
		return sdk.NewImageBlockBase64("image/jpeg", base64.StdEncoding.EncodeToString(a.Data)), nil
	case "application/pdf":
		doc := sdk.NewDocumentBlock(sdk.Base64PDFSourceParam{Data: base64.StdEncoding.EncodeToString(a.Data)})
		if a.Name != "" {
			doc.OfDocument.Title = sdk.String(a.Name)
		}
		return doc, nil
	}
	if !strings.HasPrefix(mt, "text/") && !utf8.Valid(a.Data) {
		return sdk.ContentBlockParamUnion{}, providers.Unusable("attachment %q: media type %q cannot be sent to this model", a.Name, a.MediaType)
	}
	name := a.Name
	if name == "" {
		name = "attachment"
	}
	return sdk.NewTextBlock("File: " + name + "\n\n" + strings.ToValidUTF8(string(a.Data), "\uFFFD")), nil
}

// stopModelContextWindowExceeded is the stop reason of an answer stopped
// because the prompt and the answer filled the model's context window.
const stopModelContextWindowExceeded = "model_context_window_exceeded"

// readMessage turns the API's message into a Response: its text, the forced
// tool's input as the structured reply (or, when the model answered in text
// instead, that text: providers.Structured takes the object out of it),
// citations, tool calls, usage and why it stopped. A refusal fails it as
// refused.
func readMessage(msg *sdk.Message, toolName string) (providers.Response, error) {
	resp := providers.Response{Usage: events.Usage{
		InputTokens:  int(msg.Usage.InputTokens),
		OutputTokens: int(msg.Usage.OutputTokens),
	}}
	switch msg.StopReason {
	case sdk.StopReasonEndTurn, sdk.StopReasonStopSequence, sdk.StopReasonToolUse:
		resp.Finish = providers.FinishStop
	case sdk.StopReasonMaxTokens:
		resp.Finish = providers.FinishLength
	case stopModelContextWindowExceeded:
		resp.Finish = providers.FinishContext
	case sdk.StopReasonRefusal:
		m := "the model refused to answer"
		if e := msg.StopDetails.Explanation; e != "" {
			m += ": " + e
		} else if cat := msg.StopDetails.Category; cat != "" {
			m += " (" + string(cat) + ")"
		}
		return resp, &providers.Error{Class: providers.ClassRefused, Message: m}
	}

	var text strings.Builder
	var cited, found []events.Citation
	var input json.RawMessage
	haveInput := false
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			// Search-grounded answers come in many text blocks that split
			// sentences where the citations change: they join as they are.
			text.WriteString(b.Text)
			for _, ci := range b.Citations {
				if ci.Type != "web_search_result_location" || ci.URL == "" {
					continue
				}
				cited = addCitation(cited, events.Citation{URL: ci.URL, Title: ci.Title, Snippet: ci.CitedText})
			}
		case "tool_use":
			if !haveInput || b.Name == toolName {
				input, haveInput = b.Input, b.Name == toolName
			}
		case "web_search_tool_result":
			for _, r := range b.AsWebSearchToolResult().Content.OfWebSearchResultBlockArray {
				if r.URL != "" {
					found = addCitation(found, events.Citation{URL: r.URL, Title: r.Title})
				}
			}
		}
	}
	// What the model cited, or else what its searches found.
	resp.Citations = cited
	if len(resp.Citations) == 0 {
		resp.Citations = found
	}

	resp.Text = text.String()
	if toolName == "" {
		resp.ToolCalls = toolCalls(msg)
		return resp, nil
	}
	if obj, err := toolObject(input); err == nil {
		resp.JSON = obj
		resp.Text = string(obj)
	} else if haveInput && strings.TrimSpace(resp.Text) == "" {
		resp.Text = string(input) // a tool input that is no object: repaired as text
	}
	return resp, nil
}

// toolObject checks that a tool call's input is one JSON object, and compacts it.
func toolObject(input json.RawMessage) (json.RawMessage, error) {
	trimmed := strings.TrimSpace(string(input))
	if trimmed == "" || trimmed == "null" {
		return nil, errors.New("the model did not call the tool")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(input, &probe); err != nil {
		return nil, fmt.Errorf("the tool input is not a JSON object: %v", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, input); err != nil {
		return nil, err
	}
	return json.RawMessage(buf.Bytes()), nil
}

// addCitation appends c unless its URL is already there; a later snippet
// fills an earlier citation that had none.
func addCitation(list []events.Citation, c events.Citation) []events.Citation {
	for i := range list {
		if list[i].URL == c.URL {
			if list[i].Snippet == "" {
				list[i].Snippet = c.Snippet
			}
			if list[i].Title == "" {
				list[i].Title = c.Title
			}
			return list
		}
	}
	return append(list, c)
}

// mapError classifies a failed call. A context that ended comes back as its
// own error, so a deadline classifies as timeout.
func (c *Client) mapError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if pe, ok := providers.Classified(err); ok {
		return pe
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		return c.redact(fromAPIError(apiErr))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The SDK's own per-attempt bound ran out.
		return &providers.Error{Class: providers.ClassTimeout, Message: "the model call timed out"}
	}
	return c.redact(&providers.Error{Class: providers.ClassHostError, Message: err.Error()})
}

// errorBody is the API's error envelope.
type errorBody struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func fromAPIError(e *sdk.Error) *providers.Error {
	status := e.StatusCode
	var body errorBody
	_ = json.Unmarshal([]byte(e.RawJSON()), &body)
	typ := body.Error.Type
	if typ == "" {
		typ = string(e.Type())
	}
	msg := body.Error.Message
	if msg == "" {
		msg = strings.TrimSpace(e.RawJSON())
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	if typ != "" {
		msg = typ + ": " + msg
	}

	pe := &providers.Error{Class: providers.HTTPClass(status, typ, msg), Status: status, Message: msg}
	switch {
	case typ == "rate_limit_error":
		pe.Class = providers.ClassRateLimited
	case typ == "timeout_error":
		pe.Class = providers.ClassTimeout
	case pe.Class == providers.ClassContextOverflow:
		pe.PromptTokens, pe.ContextWindow, _ = providers.ContextRefusal(typ, msg)
	}
	if e.Response != nil {
		pe.RetryAfter = providers.RetryAfter(e.Response.Header, time.Now())
	}
	return pe
}

// redact removes the API key from err's message, should the upstream or the
// transport ever echo it.
func (c *Client) redact(err error) error {
	if c.apiKey == "" || err == nil {
		return err
	}
	var pe *providers.Error
	if errors.As(err, &pe) {
		if strings.Contains(pe.Message, c.apiKey) {
			cp := *pe
			cp.Message = strings.ReplaceAll(cp.Message, c.apiKey, "[redacted]")
			return &cp
		}
		return err
	}
	if strings.Contains(err.Error(), c.apiKey) {
		return errors.New(strings.ReplaceAll(err.Error(), c.apiKey, "[redacted]"))
	}
	return err
}
