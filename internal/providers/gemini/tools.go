package gemini

import (
	"encoding/json"
	"strconv"

	"google.golang.org/genai"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// addTools offers req's tools to the model as function declarations (their
// parameters as JSON Schema), with req's tool choice as the function calling
// mode (required is ANY; one named tool is ANY with only that name allowed).
// A call that asks for structured output offers none.
func addTools(config *genai.GenerateContentConfig, req providers.Request) error {
	if len(req.Tools) == 0 || req.Schema != nil {
		return nil
	}
	tool := &genai.Tool{}
	for _, t := range req.Tools {
		fd := &genai.FunctionDeclaration{Name: t.Name, Description: t.Description}
		if t.Parameters != "" {
			if !json.Valid([]byte(t.Parameters)) {
				return providers.Unusable("the parameters of tool %s are not JSON", t.Name)
			}
			fd.ParametersJsonSchema = json.RawMessage(t.Parameters)
		}
		tool.FunctionDeclarations = append(tool.FunctionDeclarations, fd)
	}
	config.Tools = append(config.Tools, tool)
	fc := &genai.FunctionCallingConfig{Mode: genai.FunctionCallingConfigModeAuto}
	switch req.ToolChoice {
	case "", events.ToolChoiceAuto:
	case events.ToolChoiceNone:
		fc.Mode = genai.FunctionCallingConfigModeNone
	case events.ToolChoiceRequired:
		fc.Mode = genai.FunctionCallingConfigModeAny
	default:
		fc.Mode, fc.AllowedFunctionNames = genai.FunctionCallingConfigModeAny, []string{req.ToolChoice}
	}
	config.ToolConfig = &genai.ToolConfig{FunctionCallingConfig: fc}
	return nil
}

// toolCalls returns the function calls of a candidate; a call without an
// id gets one from its position.
func toolCalls(cand *genai.Candidate) []events.ToolCall {
	if cand.Content == nil {
		return nil
	}
	var out []events.ToolCall
	for _, p := range cand.Content.Parts {
		if p == nil || p.FunctionCall == nil {
			continue
		}
		args, err := json.Marshal(p.FunctionCall.Args)
		if err != nil || p.FunctionCall.Args == nil {
			args = []byte("{}")
		}
		id := p.FunctionCall.ID
		if id == "" {
			id = "call_" + p.FunctionCall.Name + "_" + strconv.Itoa(len(out))
		}
		out = append(out, events.ToolCall{ID: id, Name: p.FunctionCall.Name, Arguments: string(args)})
	}
	return out
}
