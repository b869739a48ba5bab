package anthropic

import (
	"bytes"
	"encoding/json"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// addTools offers req's tools to the model as Messages API client tools,
// with req's tool choice (required is Anthropic's any). A call that asks for
// structured output uses a tool of its own and offers none of req's.
func addTools(params *sdk.MessageNewParams, req providers.Request) error {
	if len(req.Tools) == 0 || req.Schema != nil {
		return nil
	}
	for _, t := range req.Tools {
		schema := sdk.ToolInputSchemaParam{Properties: map[string]any{}}
		if t.Parameters != "" {
			if !json.Valid([]byte(t.Parameters)) {
				return providers.Unusable("the parameters of tool %s are not JSON", t.Name)
			}
			schema = param.Override[sdk.ToolInputSchemaParam](json.RawMessage(t.Parameters))
		}
		tool := sdk.ToolUnionParamOfTool(schema, t.Name)
		if t.Description != "" {
			tool.OfTool.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, tool)
	}
	switch req.ToolChoice {
	case "", events.ToolChoiceAuto:
		params.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{}}
	case events.ToolChoiceNone:
		params.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
	case events.ToolChoiceRequired:
		params.ToolChoice = sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{}}
	default:
		params.ToolChoice = sdk.ToolChoiceUnionParam{OfTool: &sdk.ToolChoiceToolParam{Name: req.ToolChoice}}
	}
	return nil
}

// toolCalls returns the tool_use blocks of a message as tool calls, their
// input compacted as the arguments.
func toolCalls(msg *sdk.Message) []events.ToolCall {
	var out []events.ToolCall
	for _, b := range msg.Content {
		if b.Type != "tool_use" {
			continue
		}
		var args bytes.Buffer
		if json.Compact(&args, b.Input) != nil {
			args.Reset()
			args.WriteString("{}")
		}
		out = append(out, events.ToolCall{ID: b.ID, Name: b.Name, Arguments: args.String()})
	}
	return out
}
