package openaicompat

import (
	"encoding/json"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// addTools offers req's tools to the model as chat-completions function
// tools, with req's tool choice.
func addTools(params *sdk.ChatCompletionNewParams, req providers.Request) error {
	if len(req.Tools) == 0 {
		return nil
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{}}}
		if t.Parameters != "" {
			var schema map[string]any
			if err := json.Unmarshal([]byte(t.Parameters), &schema); err != nil || schema == nil {
				return badRequest("openaicompat: the parameters of tool %s are not a JSON object", t.Name)
			}
			fn.Parameters = schema
		}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	switch req.ToolChoice {
	case "", events.ToolChoiceAuto:
		params.ToolChoice.OfAuto = param.NewOpt("auto")
	case events.ToolChoiceNone, events.ToolChoiceRequired:
		params.ToolChoice.OfAuto = param.NewOpt(req.ToolChoice)
	default:
		params.ToolChoice = sdk.ToolChoiceOptionFunctionToolChoice(sdk.ChatCompletionNamedToolChoiceFunctionParam{Name: req.ToolChoice})
	}
	return nil
}

// toolCalls returns the function calls of a chat completion's message.
func toolCalls(msg sdk.ChatCompletionMessage) []events.ToolCall {
	var out []events.ToolCall
	for _, c := range msg.ToolCalls {
		if c.Type != "function" {
			continue
		}
		out = append(out, events.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
	}
	return out
}
