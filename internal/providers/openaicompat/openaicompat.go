// Package openaicompat is the model backend for any host that speaks OpenAI's
// Chat Completions protocol (Mistral, xAI, DeepSeek, Groq, Together,
// OpenRouter, Ollama, vLLM, LM Studio), built on the official OpenAI SDK.
//
// As in package openai, the client is built from the chat completions service
// alone, never through openai.NewClient, so no OPENAI_* environment variable
// can change the host, the credentials or the headers it sends.
package openaicompat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
	"github.com/crosscheck/crosscheck/internal/providers/openai"
)

// Config configures a Client.
type Config struct {
	// APIKey is sent as Authorization: Bearer; empty (Ollama, a local vLLM)
	// sends no Authorization header at all.
	APIKey string
	// BaseURL is the host's OpenAI-compatible root, e.g.
	// https://api.mistral.ai/v1 or http://localhost:11434/v1. It is required:
	// a customer's key must never go to a host it was not configured for.
	BaseURL string
	// HTTPClient sends the requests; nil means http.DefaultClient. Its
	// responses are read to providers.MaxResponseBytes at most.
	HTTPClient *http.Client
}

// Client calls POST {BaseURL}/chat/completions.
type Client struct {
	svc sdk.ChatCompletionService
	key string
	err error // a configuration error every call returns
}

var _ providers.Provider = (*Client)(nil)

// New returns a client that sends exactly cfg's credentials to cfg's base URL,
// with the SDK's own retries off: retries are providers.Retry's.
func New(cfg Config) *Client {
	if strings.TrimSpace(cfg.BaseURL) == "" {
		return &Client{err: providers.Unusable("openaicompat: no base URL configured")}
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey), // empty: no Authorization header
		option.WithMaxRetries(0),
		option.WithHTTPClient(providers.LimitResponses(cfg.HTTPClient, providers.MaxResponseBytes)),
	}
	return &Client{svc: sdk.NewChatCompletionService(opts...), key: cfg.APIKey}
}

// Complete runs one call. WebSearch is ignored: the protocol has no portable
// web search, so no citations come back.
func (c *Client) Complete(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	if c.err != nil {
		return nil, c.err
	}
	start := time.Now()
	params, err := buildParams(*req)
	if err != nil {
		return nil, err
	}
	var raw *http.Response
	res, err := c.svc.New(ctx, params, option.WithResponseInto(&raw))
	if err != nil {
		return nil, openai.ClassifyError(ctx, err, raw, c.key)
	}
	out, err := parseResponse(res, c.key)
	out.Latency = time.Since(start)
	if err == nil {
		err = providers.Finished(req, &out)
	}
	return &out, err
}

func badRequest(format string, args ...any) error {
	return providers.Unusable(format, args...)
}

func buildParams(req providers.Request) (sdk.ChatCompletionNewParams, error) {
	params := sdk.ChatCompletionNewParams{Model: req.Model}
	if req.MaxOutputTokens > 0 {
		// max_tokens, not OpenAI's newer max_completion_tokens: it is the one
		// field every compatible host reads.
		params.MaxTokens = param.NewOpt(int64(req.MaxOutputTokens))
	}

	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == providers.RoleUser {
			lastUser = i
		}
	}
	var attachments []sdk.ChatCompletionContentPartUnionParam
	for _, a := range req.Attachments {
		part, err := attachmentPart(a)
		if err != nil {
			return params, err
		}
		attachments = append(attachments, part)
	}

	for i, m := range req.Messages {
		var msg sdk.ChatCompletionMessageParamUnion
		switch m.Role {
		case providers.RoleSystem:
			msg.OfSystem = &sdk.ChatCompletionSystemMessageParam{}
			msg.OfSystem.Content.OfString = param.NewOpt(m.Content)
		case providers.RoleUser:
			msg.OfUser = &sdk.ChatCompletionUserMessageParam{}
			if i == lastUser && len(attachments) > 0 {
				msg.OfUser.Content.OfArrayOfContentParts = userParts(m.Content, attachments)
			} else {
				msg.OfUser.Content.OfString = param.NewOpt(m.Content)
			}
		case providers.RoleAssistant:
			msg.OfAssistant = &sdk.ChatCompletionAssistantMessageParam{}
			msg.OfAssistant.Content.OfString = param.NewOpt(m.Content)
		default:
			return params, badRequest("openaicompat: unknown message role %q", m.Role)
		}
		params.Messages = append(params.Messages, msg)
	}
	if lastUser < 0 && len(attachments) > 0 {
		msg := &sdk.ChatCompletionUserMessageParam{}
		msg.Content.OfArrayOfContentParts = attachments
		params.Messages = append(params.Messages, sdk.ChatCompletionMessageParamUnion{OfUser: msg})
	}

	if req.Schema != nil {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(req.Schema.JSON, &obj); err != nil || obj == nil {
			return params, badRequest("openaicompat: the schema is not a JSON object")
		}
		params.ResponseFormat.OfJSONSchema = &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{
				Name:   openai.SchemaName(req.Schema.Name),
				Strict: param.NewOpt(true),
				Schema: req.Schema.JSON, // raw, so its key order is kept
			},
		}
	}
	if err := addTools(&params, req); err != nil {
		return params, err
	}
	return params, nil
}

// userParts puts the attachments before the message's own text.
func userParts(text string, attachments []sdk.ChatCompletionContentPartUnionParam) []sdk.ChatCompletionContentPartUnionParam {
	parts := append([]sdk.ChatCompletionContentPartUnionParam{}, attachments...)
	if text != "" {
		parts = append(parts, textPart(text))
	}
	return parts
}

func textPart(text string) sdk.ChatCompletionContentPartUnionParam {
	return sdk.ChatCompletionContentPartUnionParam{OfText: &sdk.ChatCompletionContentPartTextParam{Text: text}}
}

func attachmentPart(a providers.Attachment) (sdk.ChatCompletionContentPartUnionParam, error) {
	switch openai.AttachmentKind(a.MediaType) {
	case openai.AttachmentImage:
		return sdk.ChatCompletionContentPartUnionParam{OfImageURL: &sdk.ChatCompletionContentPartImageParam{
			ImageURL: sdk.ChatCompletionContentPartImageImageURLParam{URL: openai.DataURL(a.MediaType, a.Data)},
		}}, nil
	case openai.AttachmentPDF:
		// Compatible hosts have no portable PDF input, and no extracted text
		// is at hand here: say what was attached.
		return textPart(fmt.Sprintf("[A PDF named %q was attached, but it could not be read natively here.]", a.Name)), nil
	case openai.AttachmentText:
		return textPart("File " + a.Name + ":\n" + string(a.Data)), nil
	}
	return sdk.ChatCompletionContentPartUnionParam{}, badRequest("openaicompat: attachment %q has unsupported media type %q", a.Name, a.MediaType)
}

// parseResponse reads a completion: its text (a structured reply's too,
// raw: providers.Structured takes its object out), tool calls, usage and
// finish reason; a refusal or a content filter fails it as refused.
func parseResponse(res *sdk.ChatCompletion, key string) (providers.Response, error) {
	out := providers.Response{Usage: events.Usage{
		InputTokens:  int(res.Usage.PromptTokens),
		OutputTokens: int(res.Usage.CompletionTokens),
	}}
	if len(res.Choices) == 0 {
		return out, inBodyError(res.RawJSON(), key)
	}
	choice := res.Choices[0]
	out.Text = choice.Message.Content
	out.ToolCalls = toolCalls(choice.Message)
	switch choice.FinishReason {
	case "length":
		out.Finish = providers.FinishLength
	case "stop", "tool_calls":
		out.Finish = providers.FinishStop
	}
	switch {
	case choice.FinishReason == "content_filter":
		return out, &providers.Error{Class: providers.ClassRefused, Message: "the answer was stopped by the content filter"}
	case choice.Message.Refusal != "":
		return out, &providers.Error{Class: providers.ClassRefused, Message: "the model refused: " + openai.Redact(choice.Message.Refusal, key)}
	}
	return out, nil
}

// inBodyError classifies a 200 response that carries no choices, which some
// routers (OpenRouter) send with an error object instead.
func inBodyError(raw, key string) error {
	var v struct {
		Error struct {
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
			Type    string          `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(raw), &v) != nil || v.Error.Message == "" {
		return &providers.Error{Class: providers.ClassEmpty, Message: "the response has no choices"}
	}
	msg := openai.Redact(v.Error.Message, key)
	var status int
	if json.Unmarshal(v.Error.Code, &status) == nil && status >= 400 && status <= 599 {
		return openai.StatusError(status, v.Error.Type, msg)
	}
	var code string
	_ = json.Unmarshal(v.Error.Code, &code)
	return openai.StatusError(http.StatusBadRequest, code+" "+v.Error.Type, msg)
}
