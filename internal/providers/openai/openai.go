// Package openai is the model backend for OpenAI's Responses API, built on the
// official SDK (github.com/openai/openai-go/v3).
//
// The client is built from the Responses service alone, never through
// openai.NewClient: NewClient applies DefaultClientOptions, which read
// OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_ADMIN_KEY, OPENAI_ORG_ID,
// OPENAI_PROJECT_ID and OPENAI_CUSTOM_HEADERS from the environment, and the SDK
// offers no public way to turn that off. Every setting the backend sends is the
// Config's.
package openai

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// DefaultBaseURL is OpenAI's API, used when Config.BaseURL is empty.
const DefaultBaseURL = "https://api.openai.com/v1/"

// Config configures a Client.
type Config struct {
	APIKey string
	// BaseURL is the API root, e.g. https://api.openai.com/v1; empty means
	// DefaultBaseURL.
	BaseURL string
	// HTTPClient sends the requests; nil means http.DefaultClient. Its
	// responses are read to providers.MaxResponseBytes at most.
	HTTPClient *http.Client
}

// Client calls the Responses API.
type Client struct {
	svc responses.ResponseService
	key string
}

var _ providers.Provider = (*Client)(nil)

// New returns a client that sends exactly cfg's credentials to cfg's base URL,
// with the SDK's own retries off: retries are providers.Retry's.
func New(cfg Config) *Client {
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	opts := []option.RequestOption{
		option.WithBaseURL(base),
		option.WithAPIKey(cfg.APIKey),
		option.WithMaxRetries(0),
		option.WithHTTPClient(providers.LimitResponses(cfg.HTTPClient, providers.MaxResponseBytes)),
	}
	return &Client{svc: responses.NewResponseService(opts...), key: cfg.APIKey}
}

// Complete runs one call through POST /responses.
func (c *Client) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	start := time.Now()
	params, err := buildParams(*req)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	res, err := c.svc.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		return nil, ClassifyError(ctx, err, raw, c.key)
	}
	out, err := parseResponse(res)
	out.Latency = time.Since(start)
	if err == nil {
		err = providers.Finished(req, &out)
	}
	return &out, err
}

func badRequest(format string, args ...any) error {
	return providers.Unusable(format, args...)
}

func buildParams(req providers.Request) (responses.ResponseNewParams, error) {
	// Store false: customer prompts and answers are not kept at the vendor.
	params := responses.ResponseNewParams{Model: req.Model, Store: param.NewOpt(false)}
	if req.MaxOutputTokens > 0 {
		params.MaxOutputTokens = param.NewOpt(int64(req.MaxOutputTokens))
	}

	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == providers.RoleUser {
			lastUser = i
		}
	}
	var attachments responses.ResponseInputMessageContentListParam
	for _, a := range req.Attachments {
		part, err := attachmentPart(a)
		if err != nil {
			return params, err
		}
		attachments = append(attachments, part)
	}

	var instructions []string
	var input responses.ResponseInputParam
	for i, m := range req.Messages {
		var role responses.EasyInputMessageRole
		switch m.Role {
		case providers.RoleSystem:
			instructions = append(instructions, m.Content)
			continue
		case providers.RoleUser:
			role = responses.EasyInputMessageRoleUser
		case providers.RoleAssistant:
			role = responses.EasyInputMessageRoleAssistant
		default:
			return params, badRequest("openai: unknown message role %q", m.Role)
		}
		msg := &responses.EasyInputMessageParam{Role: role}
		if i == lastUser && len(attachments) > 0 {
			msg.Content.OfInputItemContentList = userParts(m.Content, attachments)
		} else {
			msg.Content.OfString = param.NewOpt(m.Content)
		}
		input = append(input, responses.ResponseInputItemUnionParam{OfMessage: msg})
	}
	if lastUser < 0 && len(attachments) > 0 {
		input = append(input, responses.ResponseInputItemUnionParam{OfMessage: &responses.EasyInputMessageParam{
			Role:    responses.EasyInputMessageRoleUser,
			Content: responses.EasyInputMessageContentUnionParam{OfInputItemContentList: attachments},
		}})
	}
	if len(instructions) > 0 {
		params.Instructions = param.NewOpt(strings.Join(instructions, "\n\n"))
	}
	params.Input.OfInputItemList = input

	if req.Schema != nil {
		schema, err := schemaMap(req.Schema.JSON)
		if err != nil {
			return params, err
		}
		params.Text.Format.OfJSONSchema = &responses.ResponseFormatTextJSONSchemaConfigParam{
			Name:   SchemaName(req.Schema.Name),
			Schema: schema,
			Strict: param.NewOpt(true),
		}
	}
	if req.WebSearch {
		params.Tools = []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}}
	}
	if err := addTools(&params, req); err != nil {
		return params, err
	}
	return params, nil
}

// userParts puts the attachments before the message's own text.
func userParts(text string, attachments responses.ResponseInputMessageContentListParam) responses.ResponseInputMessageContentListParam {
	parts := append(responses.ResponseInputMessageContentListParam{}, attachments...)
	if text != "" {
		parts = append(parts, responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{Text: text}})
	}
	return parts
}

// Attachment kinds.
const (
	AttachmentImage = "image"
	AttachmentPDF   = "pdf"
	AttachmentText  = "text"
)

// AttachmentKind sorts a media type into image (sent natively as an image),
// pdf, or text; it is empty for a type no backend can send.
func AttachmentKind(mediaType string) string {
	mt, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(mediaType))
	}
	switch {
	case mt == "image/png" || mt == "image/jpeg" || mt == "image/gif" || mt == "image/webp":
		return AttachmentImage
	case mt == "application/pdf":
		return AttachmentPDF
	case strings.HasPrefix(mt, "text/"):
		return AttachmentText
	}
	return ""
}

// DataURL is a's content as a base64 data URL.
func DataURL(mediaType string, data []byte) string {
	mt, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		mt = mediaType
	}
	return "data:" + mt + ";base64," + base64.StdEncoding.EncodeToString(data)
}

func attachmentPart(a providers.Attachment) (responses.ResponseInputContentUnionParam, error) {
	switch AttachmentKind(a.MediaType) {
	case AttachmentImage:
		return responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
			ImageURL: param.NewOpt(DataURL(a.MediaType, a.Data)),
			Detail:   responses.ResponseInputImageDetailAuto,
		}}, nil
	case AttachmentPDF:
		return responses.ResponseInputContentUnionParam{OfInputFile: &responses.ResponseInputFileParam{
			FileData: param.NewOpt(DataURL("application/pdf", a.Data)),
			Filename: param.NewOpt(a.Name),
		}}, nil
	case AttachmentText:
		return responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{
			Text: "File " + a.Name + ":\n" + string(a.Data),
		}}, nil
	}
	return responses.ResponseInputContentUnionParam{}, badRequest("openai: attachment %q has unsupported media type %q", a.Name, a.MediaType)
}

var schemaNameUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// SchemaName makes name a valid structured-output schema name
// (^[a-zA-Z0-9_-]{1,64}$).
func SchemaName(name string) string {
	name = schemaNameUnsafe.ReplaceAllString(name, "_")
	if len(name) > 64 {
		name = name[:64]
	}
	if name == "" {
		name = "response"
	}
	return name
}

// schemaMap turns the schema into the map the SDK wants. Its top-level values
// stay raw JSON, so nested objects (properties above all, whose order strict
// structured output follows) keep their order.
func schemaMap(raw json.RawMessage) (map[string]any, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, badRequest("openai: the schema is not a JSON object")
	}
	m := make(map[string]any, len(top))
	for k, v := range top {
		m[k] = v
	}
	return m, nil
}

// parseResponse reads a response: its text (a structured reply's too, raw:
// providers.Structured takes its object out), citations, tool calls, usage
// and why it stopped; a refusal, a content filter or a failed status fails
// it.
func parseResponse(res *responses.Response) (providers.Response, error) {
	out := providers.Response{Usage: events.Usage{
		InputTokens:  int(res.Usage.InputTokens),
		OutputTokens: int(res.Usage.OutputTokens),
	}}
	var text strings.Builder
	var refusal string
	seen := map[string]bool{}
	for _, item := range res.Output {
		if item.Type != "message" {
			continue
		}
		for _, part := range item.Content {
			switch part.Type {
			case "output_text":
				text.WriteString(part.Text)
				for _, a := range part.Annotations {
					if a.Type != "url_citation" || a.URL == "" || seen[a.URL] {
						continue
					}
					seen[a.URL] = true
					out.Citations = append(out.Citations, events.Citation{URL: a.URL, Title: a.Title, Snippet: span(part.Text, a.StartIndex, a.EndIndex)})
				}
			case "refusal":
				refusal = part.Refusal
			}
		}
	}
	out.Text = text.String()
	out.ToolCalls = toolCalls(res)
	switch {
	case res.Status == responses.ResponseStatusCompleted:
		out.Finish = providers.FinishStop
	case res.Status == responses.ResponseStatusIncomplete && res.IncompleteDetails.Reason == "max_output_tokens":
		out.Finish = providers.FinishLength
	}

	switch {
	case refusal != "":
		return out, &providers.Error{Class: providers.ClassRefused, Message: "the model refused: " + refusal}
	case res.Status == responses.ResponseStatusFailed:
		status := failedStatus(string(res.Error.Code))
		e := StatusError(status, string(res.Error.Code), "the response failed: "+res.Error.Message)
		// The host answered 200 with a failed response: no upstream status,
		// retried only as the code's status would be.
		e.Status, e.Final = 0, status < 500 && status != http.StatusTooManyRequests
		return out, e
	case res.Status == responses.ResponseStatusIncomplete && res.IncompleteDetails.Reason == "content_filter":
		return out, &providers.Error{Class: providers.ClassRefused, Message: "the answer was stopped by the content filter"}
	}
	return out, nil
}

// failedStatus is the HTTP status whose class fits the error code of a
// response whose status is failed: 429 for a rate limit, 500 for a server
// error or a timeout, 400 for anything else.
func failedStatus(code string) int {
	switch {
	case code == "rate_limit_exceeded":
		return http.StatusTooManyRequests
	case code == "server_error" || strings.HasSuffix(code, "_timeout"):
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// span is text's characters [start, end), or "" when they are out of range.
func span(text string, start, end int64) string {
	r := []rune(text)
	if start < 0 || end <= start || end > int64(len(r)) {
		return ""
	}
	return string(r[start:end])
}
