// Package chat is the OpenAI chat-completions dialect of crosscheck: the
// decoding of a POST /v1/chat/completions body into a query (its mode, its
// one prompt, its files and its model selection), and the completion and
// chunk objects that carry a query's answer back in OpenAI's shape. It holds
// no I/O; the handlers package serves it.
package chat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/gabriel-vasile/mimetype"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
)

// The models of the chat door: one per mode.
const (
	ModelUnify   = "svc-unify"
	ModelJustify = "svc-justify"
	ModelVerify  = "svc-verify"
)

// Models are the model ids of the chat door, in the order GET /v1/models
// lists them.
var Models = []string{ModelUnify, ModelJustify, ModelVerify}

// ModeOf returns the query mode that model names, and false for a model
// that is not one of Models.
func ModeOf(model string) (string, bool) {
	switch model {
	case ModelUnify:
		return events.ModeUnify, true
	case ModelJustify:
		return events.ModeJustify, true
	case ModelVerify:
		return events.ModeVerify, true
	}
	return "", false
}

// Bounds of a chat request. A conversation becomes one prompt, which the
// queries service bounds to 32 KB; these bound the work of decoding.
const (
	// MaxBodyBytes bounds a request body, inline files (base64) included.
	MaxBodyBytes = 8 << 20
	// MaxMessages bounds the messages of a conversation.
	MaxMessages = 256
	// MaxParts bounds the content parts of one message.
	MaxParts = 64
	// MaxTools bounds the tools of a request.
	MaxTools = 128
	// MaxToolsBytes bounds the tools of a request as sent: twice the 64 KB
	// a query's tools may hold as compact JSON, for the wrapper of OpenAI's
	// shape and the client's white space.
	MaxToolsBytes = 128 << 10
	// MaxInlineFiles bounds the files a request sends inline (image_url
	// data URLs and file parts with file_data); a query attaches at most 5
	// files in all.
	MaxInlineFiles = 5
	// MaxPromptBytes is the limit of the prompt the conversation becomes.
	MaxPromptBytes = 32 * 1024
)

// Request is a decoded, valid chat completion request.
type Request struct {
	// Model is the svc-* model the request names, Mode its query mode.
	Model, Mode string
	// Prompt is the conversation as the query's one prompt.
	Prompt string
	// Files are the file ids the messages attach (file parts with a
	// file_id), in order of appearance.
	Files []string
	// Inline are the files the messages carry inline, to be uploaded
	// before the query is submitted.
	Inline []InlineFile
	// Models and CustomModels are the crosscheck extension's selection,
	// passed to the query as they came; nil when absent.
	Models, CustomModels json.RawMessage
	// Stream asks for a text/event-stream of chunks; IncludeUsage for the
	// usage chunk before [DONE].
	Stream, IncludeUsage bool
	// Tools are the functions the caller offers.
	Tools []Tool
	// OneToolCall is parallel_tool_calls: false: an answer carries at most
	// one tool call.
	OneToolCall bool
	// ToolChoice is the request's tool_choice: "none", "auto", "required",
	// or the name of one function; empty when absent.
	ToolChoice string
	// MaxTokens is max_completion_tokens (or max_tokens); zero when absent.
	MaxTokens int
	// Temperature is the request's temperature; nil when absent.
	Temperature *float64
	// User and Metadata are the caller's labels; the service keeps them
	// out of the query.
	User     string
	Metadata map[string]string
}

// InlineFile is a file a message carries in the request body.
type InlineFile struct {
	Name string
	Data []byte
}

// Tool is one function a request offers to the models.
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction is a tool's function: its name, description and JSON Schema
// of its arguments.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is a call of a tool, in OpenAI's shape.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function a tool call calls and its arguments, a
// JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// wire is the body as sent; unknown fields are ignored, as OpenAI's own
// server ignores them.
type wire struct {
	Model *string `json:"model"`
	// Messages and Tools are read element by element, within their bounds
	// (boundedArray), before any element is decoded.
	Messages      json.RawMessage `json:"messages"`
	Stream        *bool           `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MaxTokens           *int            `json:"max_tokens"`
	Temperature         *float64        `json:"temperature"`
	// Fields of OpenAI's shape that would change the answer's shape: n
	// (choices), logprobs, response_format (JSON). One answer in text is all
	// a query makes, so anything else is refused, not ignored.
	N                 *int              `json:"n"`
	Logprobs          *bool             `json:"logprobs"`
	TopLogprobs       *int              `json:"top_logprobs"`
	ResponseFormat    json.RawMessage   `json:"response_format"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	User              *string           `json:"user"`
	Metadata          map[string]string `json:"metadata"`
	Crosscheck        *struct {
		Models       json.RawMessage `json:"models"`
		CustomModels json.RawMessage `json:"custom_models"`
	} `json:"crosscheck"`
}

type message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []ToolCall      `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type part struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
	File *struct {
		FileID   string `json:"file_id"`
		FileData string `json:"file_data"`
		Filename string `json:"filename"`
	} `json:"file"`
}

// invalid is a refusal of the request naming the parameter at fault.
func invalid(code, param, format string, args ...any) *apperr.Error {
	return &apperr.Error{Code: code, Message: fmt.Sprintf(format, args...), Param: param}
}

// Decode parses and validates a chat completion body. Every failure is an
// *apperr.Error whose Param names the parameter at fault: model_not_found
// for a model that is not svc-unify, svc-justify or svc-verify,
// invalid_prompt for a conversation with nothing to answer or one over
// 32 KB as a prompt, invalid_request for anything else malformed. The
// crosscheck extension's models and custom_models are not checked here:
// the queries service checks them as it checks a query's.
func Decode(body []byte) (Request, error) {
	var w wire
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&w); err != nil {
		return Request{}, invalid(apperr.InvalidRequest, "", "the request body must be a JSON object of the chat completions API: %s", describe(err))
	}
	if dec.More() {
		return Request{}, invalid(apperr.InvalidRequest, "", "the request body must hold one JSON object and nothing after it")
	}
	var r Request
	if w.Model == nil || *w.Model == "" {
		return Request{}, invalid(apperr.InvalidRequest, "model", "model is required: one of %s", strings.Join(Models, ", "))
	}
	r.Model = *w.Model
	mode, ok := ModeOf(r.Model)
	if !ok {
		return Request{}, invalid(apperr.ModelNotFound, "model", "The model `%s` does not exist: use one of %s (GET /v1/models)", truncate(r.Model), strings.Join(Models, ", "))
	}
	r.Mode = mode
	if w.Stream != nil {
		r.Stream = *w.Stream
	}
	if w.StreamOptions != nil {
		if !r.Stream {
			return Request{}, invalid(apperr.InvalidRequest, "stream_options", "stream_options is only allowed when stream is true")
		}
		if w.StreamOptions.IncludeUsage != nil {
			r.IncludeUsage = *w.StreamOptions.IncludeUsage
		}
	}
	if err := w.checkShape(); err != nil {
		return Request{}, err
	}
	r.OneToolCall = w.ParallelToolCalls != nil && !*w.ParallelToolCalls
	if len(w.Tools) > MaxToolsBytes {
		return Request{}, invalid(apperr.InvalidRequest, "tools", "tools is %d bytes of JSON; at most %d (128 KiB)", len(w.Tools), MaxToolsBytes)
	}
	messages, err := boundedArray(w.Messages, MaxMessages, "messages", "messages must be a JSON array", "drop earlier turns")
	if err != nil {
		return Request{}, err
	}
	tools, err := boundedArray(w.Tools, MaxTools, "tools", "tools must be a JSON array", "offer fewer")
	if err != nil {
		return Request{}, err
	}
	if err := r.decodeTools(tools, w.ToolChoice); err != nil {
		return Request{}, err
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_completion_tokens", w.MaxCompletionTokens}, {"max_tokens", w.MaxTokens}} {
		if p.v == nil {
			continue
		}
		if *p.v < 1 {
			return Request{}, invalid(apperr.InvalidRequest, p.name, "%s must be a positive integer", p.name)
		}
		if r.MaxTokens == 0 {
			r.MaxTokens = *p.v
		}
	}
	if t := w.Temperature; t != nil && (*t < 0 || *t > 2) {
		return Request{}, invalid(apperr.InvalidRequest, "temperature", "temperature must be between 0 and 2")
	}
	r.Temperature = w.Temperature
	if w.User != nil {
		r.User = *w.User
	}
	r.Metadata = w.Metadata
	if w.Crosscheck != nil {
		r.Models, r.CustomModels = nonNull(w.Crosscheck.Models), nonNull(w.Crosscheck.CustomModels)
	}
	if err := r.decodeMessages(messages); err != nil {
		return Request{}, err
	}
	return r, nil
}

// boundedArray returns the elements of the JSON array raw (none for null
// or nothing), read one at a time and no further than the element past
// max: an array over its bound is refused (invalid_request on param, the
// message ending with hint) having copied at most max elements, whatever
// its length. Anything but an array is refused with the message shape.
func boundedArray(raw json.RawMessage, max int, param, shape, hint string) ([]json.RawMessage, error) {
	if nonNull(raw) == nil {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	notArray := invalid(apperr.InvalidRequest, param, "%s", shape)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, notArray
	}
	var out []json.RawMessage
	for dec.More() {
		if len(out) == max {
			return nil, invalid(apperr.InvalidRequest, param, "%s has more than %d entries; at most %d: %s", param, max, max, hint)
		}
		var e json.RawMessage
		if err := dec.Decode(&e); err != nil {
			return nil, notArray
		}
		out = append(out, e)
	}
	return out, nil
}

// checkShape refuses what asks for an answer of another shape than one
// choice of text: a client that asked for two choices, log probabilities or
// JSON would otherwise read what is not there without being told.
func (w *wire) checkShape() error {
	if w.N != nil && *w.N != 1 {
		return invalid(apperr.InvalidRequest, "n", "n must be 1: a completion is one answer, the synthesis of several models; send one request per answer you want")
	}
	if w.Logprobs != nil && *w.Logprobs {
		return invalid(apperr.InvalidRequest, "logprobs", "logprobs are not available: the answer is a synthesis of several models' answers, not one model's tokens")
	}
	if w.TopLogprobs != nil && *w.TopLogprobs != 0 {
		return invalid(apperr.InvalidRequest, "top_logprobs", "top_logprobs are not available: the answer is a synthesis of several models' answers, not one model's tokens")
	}
	if raw := nonNull(w.ResponseFormat); raw != nil {
		var f struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &f) != nil || f.Type != "text" {
			return invalid(apperr.InvalidRequest, "response_format", "response_format may only be {\"type\": \"text\"}: the answer is text; ask for JSON in the prompt, or offer a tool whose parameters are the schema")
		}
	}
	return nil
}

func nonNull(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	return raw
}

// describe says what a JSON decoding error found, without echoing input.
func describe(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("%s must be a JSON %s", te.Field, kindOf(te.Type.Kind().String()))
	}
	return "it is not valid JSON of that shape"
}

func kindOf(k string) string {
	switch k {
	case "slice":
		return "array"
	case "map", "struct", "ptr":
		return "object"
	case "int", "float64":
		return "number"
	}
	return k
}

func (r *Request) decodeTools(tools []json.RawMessage, choice json.RawMessage) error {
	names := map[string]bool{}
	for i, raw := range tools {
		var t Tool
		if err := json.Unmarshal(raw, &t); err != nil {
			return invalid(apperr.InvalidRequest, fmt.Sprintf("tools[%d]", i), "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}", i)
		}
		if t.Type != "function" {
			return invalid(apperr.InvalidRequest, fmt.Sprintf("tools[%d].type", i), "tools[%d].type must be \"function\"", i)
		}
		if !events.ValidToolName(t.Function.Name) {
			return invalid(apperr.InvalidRequest, fmt.Sprintf("tools[%d].function.name", i), "tools[%d].function.name must be 1 to 64 letters, digits, underscores or dashes", i)
		}
		if names[t.Function.Name] {
			return invalid(apperr.InvalidRequest, fmt.Sprintf("tools[%d].function.name", i), "tools[%d].function.name %q is offered twice", i, t.Function.Name)
		}
		names[t.Function.Name] = true
		if p := nonNull(t.Function.Parameters); p != nil {
			var schema map[string]any
			if json.Unmarshal(p, &schema) != nil {
				return invalid(apperr.InvalidRequest, fmt.Sprintf("tools[%d].function.parameters", i), "tools[%d].function.parameters must be a JSON Schema object", i)
			}
		}
		r.Tools = append(r.Tools, t)
	}
	if choice = nonNull(choice); choice == nil {
		return nil
	}
	var s string
	if json.Unmarshal(choice, &s) == nil {
		switch s {
		case "none", "auto", "required":
			if s == "required" && len(r.Tools) == 0 {
				return invalid(apperr.InvalidRequest, "tool_choice", "tool_choice is required but the request offers no tools")
			}
			r.ToolChoice = s
			return nil
		}
		return invalid(apperr.InvalidRequest, "tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(choice, &named) != nil || named.Type != "function" {
		return invalid(apperr.InvalidRequest, "tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	if !names[named.Function.Name] {
		return invalid(apperr.InvalidRequest, "tool_choice", "tool_choice names a function that tools does not offer")
	}
	r.ToolChoice = named.Function.Name
	return nil
}

// turn is one message of the conversation as text.
type turn struct {
	role, text string
}

func (r *Request) decodeMessages(raws []json.RawMessage) error {
	if len(raws) == 0 {
		return invalid(apperr.InvalidRequest, "messages", "messages is required: at least one message, the last from the user (or a tool result)")
	}
	var system []string
	var turns []turn
	for i, raw := range raws {
		var m message
		param := fmt.Sprintf("messages[%d]", i)
		if err := json.Unmarshal(raw, &m); err != nil {
			return invalid(apperr.InvalidRequest, param, "%s must be an object {role, content}: %s", param, describe(err))
		}
		text, err := r.content(m.Content, param)
		if err != nil {
			return err
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, text)
		case "user":
			turns = append(turns, turn{"User", text})
		case "assistant":
			for _, c := range m.ToolCalls {
				text = strings.TrimSpace(text + fmt.Sprintf("\n[called tool %s (call id %s) with arguments %s]", c.Function.Name, c.ID, c.Function.Arguments))
			}
			turns = append(turns, turn{"Assistant", text})
		case "tool":
			if m.ToolCallID == "" {
				return invalid(apperr.InvalidRequest, param+".tool_call_id", "%s is a tool message without tool_call_id", param)
			}
			turns = append(turns, turn{"Tool result (call id " + m.ToolCallID + ")", text})
		default:
			return invalid(apperr.InvalidRequest, param+".role", "%s.role must be system, developer, user, assistant or tool", param)
		}
	}
	if len(turns) == 0 || (turns[len(turns)-1].role == "Assistant") {
		return invalid(apperr.InvalidPrompt, "messages", "the last message must be from the user or a tool: there is nothing to answer")
	}
	r.Prompt = prompt(system, turns)
	if strings.TrimSpace(r.Prompt) == "" {
		return invalid(apperr.InvalidPrompt, "messages", "the messages hold no text to answer")
	}
	if len(r.Prompt) > MaxPromptBytes {
		return invalid(apperr.InvalidPrompt, "messages", "the conversation is %d bytes as one prompt; the limit is %d bytes (32 KB): drop or shorten earlier turns", len(r.Prompt), MaxPromptBytes)
	}
	return nil
}

// prompt writes the conversation as one prompt: a lone user message as it
// is; otherwise the instructions, then the earlier turns as context, then
// the message to answer.
func prompt(system []string, turns []turn) string {
	if len(system) == 0 && len(turns) == 1 && turns[0].role == "User" {
		return turns[0].text
	}
	var b strings.Builder
	if len(system) > 0 {
		b.WriteString("Instructions:\n")
		b.WriteString(strings.Join(system, "\n"))
		b.WriteString("\n\n")
	}
	if len(turns) > 1 {
		b.WriteString("Conversation so far:\n")
		for _, t := range turns[:len(turns)-1] {
			fmt.Fprintf(&b, "%s: %s\n", t.role, t.text)
		}
		b.WriteString("\n")
	}
	last := turns[len(turns)-1]
	if last.role == "User" {
		b.WriteString("Answer this message:\n")
	} else {
		fmt.Fprintf(&b, "Continue from this %s:\n", strings.ToLower(last.role[:1])+last.role[1:])
	}
	b.WriteString(last.text)
	return b.String()
}

// content returns a message's text; the files its parts attach are added
// to r.
func (r *Request) content(raw json.RawMessage, param string) (string, error) {
	raw = nonNull(raw)
	if raw == nil {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	raws, err := boundedArray(raw, MaxParts, param+".content", param+".content must be a string or an array of content parts", "send fewer parts")
	if err != nil {
		return "", err
	}
	var texts []string
	for j, rawPart := range raws {
		pp := fmt.Sprintf("%s.content[%d]", param, j)
		var p part
		if err := json.Unmarshal(rawPart, &p); err != nil {
			return "", invalid(apperr.InvalidRequest, param+".content", "%s.content must be a string or an array of content parts", param)
		}
		switch p.Type {
		case "text", "input_text":
			texts = append(texts, p.Text)
		case "image_url":
			if p.ImageURL == nil {
				return "", invalid(apperr.InvalidRequest, pp+".image_url", "%s.image_url is required", pp)
			}
			if err := r.dataURL(p.ImageURL.URL, fmt.Sprintf("image-%d", len(r.Inline)+1), pp+".image_url.url"); err != nil {
				return "", err
			}
			// An image is named by its content when that is an image the
			// service takes: clients label every image image/jpeg, as
			// OpenAI accepts.
			in := &r.Inline[len(r.Inline)-1]
			if mt := mimetype.Detect(in.Data).String(); strings.HasPrefix(mt, "image/") && mediaExt[mt] != "" {
				in.Name = strings.TrimSuffix(in.Name, path.Ext(in.Name)) + "." + mediaExt[mt]
			}
		case "refusal":
			texts = append(texts, p.Refusal)
		case "file":
			if p.File == nil {
				return "", invalid(apperr.InvalidRequest, pp+".file", "%s.file is required", pp)
			}
			switch {
			case p.File.FileID != "":
				// A file attached again in a later turn is one file.
				if !slices.Contains(r.Files, p.File.FileID) {
					r.Files = append(r.Files, p.File.FileID)
				}
			case p.File.FileData != "":
				name := p.File.Filename
				if name == "" {
					return "", invalid(apperr.InvalidRequest, pp+".file.filename", "%s.file.filename is required with file_data: its extension says the file's type", pp)
				}
				if err := r.dataURL(p.File.FileData, name, pp+".file.file_data"); err != nil {
					return "", err
				}
			default:
				return "", invalid(apperr.InvalidRequest, pp+".file", "%s.file needs a file_id (POST /v1/files) or file_data", pp)
			}
		default:
			return "", invalid(apperr.InvalidRequest, pp+".type", "%s.type must be text, image_url, file or refusal", pp)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// mediaExt is the file name extension of each inline media type the
// service takes.
var mediaExt = map[string]string{
	"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp",
	"application/pdf": "pdf", "text/plain": "txt",
}

// dataURL adds the file of a base64 data URL (or of bare base64, the form
// of file_data) to r.Inline. The service fetches no URL of the web.
func (r *Request) dataURL(u, name, param string) error {
	if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		return invalid(apperr.InvalidRequest, param, "%s is a web address; this service fetches none: send the image as a data: URL, or upload it with POST /v1/files and send a file part with its file_id", param)
	}
	data := u
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, payload, ok := strings.Cut(rest, ",")
		mt, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isB64 {
			return invalid(apperr.InvalidRequest, param, "%s must be a base64 data URL: data:<media type>;base64,<data>", param)
		}
		if ext, known := mediaExt[mt]; known && !strings.Contains(name, ".") {
			name += "." + ext
		}
		data = payload
	}
	if !strings.Contains(name, ".") {
		return invalid(apperr.InvalidRequest, param, "%s: the media type of the file is not one of %s", param, "image/png, image/jpeg, image/gif, image/webp, application/pdf")
	}
	if len(r.Inline) >= MaxInlineFiles {
		return invalid(apperr.InvalidFiles, param, "the messages carry more than %d files inline", MaxInlineFiles)
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return invalid(apperr.InvalidRequest, param, "%s is not valid base64", param)
	}
	r.Inline = append(r.Inline, InlineFile{Name: name, Data: b})
	return nil
}

// truncate keeps echoed client input short, valid UTF-8 and printable.
func truncate(s string) string { return apperr.Echo(s, 64) }

// QueryBody is the body of the query that answers r, as POST /v1/queries
// takes it, its tools offered to the query's models; files are the ids of
// r's files (r.Files, then the uploaded inline ones).
func (r Request) QueryBody(files []string) []byte {
	type tool struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	var tools []tool
	for _, t := range r.Tools {
		tools = append(tools, tool{t.Function.Name, t.Function.Description, nonNull(t.Function.Parameters)})
	}
	v := struct {
		Mode         string          `json:"mode"`
		Prompt       string          `json:"prompt"`
		Models       json.RawMessage `json:"models,omitempty"`
		CustomModels json.RawMessage `json:"custom_models,omitempty"`
		Files        []string        `json:"files,omitempty"`
		Tools        []tool          `json:"tools,omitempty"`
		ToolChoice   string          `json:"tool_choice,omitempty"`
	}{r.Mode, r.Prompt, r.Models, r.CustomModels, files, tools, r.ToolChoice}
	b, _ := json.Marshal(v)
	return b
}
