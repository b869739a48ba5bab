package openai

import (
	"encoding/json"

	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// addTools offers req's tools to the model as Responses API function tools,
// with req's tool choice.
func addTools(params *responses.ResponseNewParams, req providers.Request) error {
	if len(req.Tools) == 0 {
		return nil
	}
	for _, t := range req.Tools {
		fn := &responses.FunctionToolParam{Name: t.Name, Strict: param.NewOpt(false), Parameters: map[string]any{"type": "object", "properties": map[string]any{}}}
		if t.Parameters != "" {
			schema, err := schemaMap(json.RawMessage(t.Parameters))
			if err != nil {
				return err
			}
			fn.Parameters = schema
		}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: fn})
	}
	switch req.ToolChoice {
	case "", events.ToolChoiceAuto:
	case events.ToolChoiceNone:
		params.ToolChoice.OfToolChoiceMode = param.NewOpt(responses.ToolChoiceOptionsNone)
	case events.ToolChoiceRequired:
		params.ToolChoice.OfToolChoiceMode = param.NewOpt(responses.ToolChoiceOptionsRequired)
	default:
		params.ToolChoice.OfFunctionTool = &responses.ToolChoiceFunctionParam{Name: req.ToolChoice}
	}
	return nil
}

// toolCalls returns the function calls of a response's output.
func toolCalls(res *responses.Response) []events.ToolCall {
	var out []events.ToolCall
	for _, item := range res.Output {
		if item.Type != "function_call" {
			continue
		}
		c := item.AsFunctionCall()
		out = append(out, events.ToolCall{ID: c.CallID, Name: c.Name, Arguments: c.Arguments})
	}
	return out
}
