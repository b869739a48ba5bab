package simulated

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// toolResultMark is how a prompt carries the result of a tool call, in
// any case (the chat completions door writes "Tool result (call id …)").
const toolResultMark = "tool result (call id"

// proposeToolCalls plays a model's use of the offered tools. Until the
// prompt carries a tool's result, it proposes a call of each tool the
// prompt asks for by name ("call <name>"), with the JSON object that
// follows the name as its arguments ({} when none); with tool_choice
// required, or the name of one tool, and no tool asked for, it calls that
// tool (the first offered, for required). With tool_choice none, or once a
// result is in the prompt, it proposes nothing. The same prompt and tools
// always give the same calls.
func proposeToolCalls(provider string, req *providers.Request, prompt string) []events.ToolCall {
	if len(req.Tools) == 0 || req.ToolChoice == events.ToolChoiceNone || strings.Contains(strings.ToLower(prompt), toolResultMark) {
		return nil
	}
	var out []events.ToolCall
	add := func(name, args string) {
		out = append(out, events.ToolCall{ID: "call_sim_" + provider + "_" + strconv.Itoa(len(out)), Name: name, Arguments: args})
	}
	for _, t := range req.Tools {
		at := strings.Index(prompt, "call "+t.Name)
		if at < 0 {
			continue
		}
		add(t.Name, argumentsAfter(prompt[at+len("call "+t.Name):]))
	}
	if len(out) > 0 {
		return out
	}
	switch req.ToolChoice {
	case "", events.ToolChoiceAuto:
	case events.ToolChoiceRequired:
		add(req.Tools[0].Name, "{}")
	default:
		add(req.ToolChoice, "{}")
	}
	return out
}

// argumentsAfter returns the JSON object that s starts with (after white
// space), compacted, or {} when s starts with none.
func argumentsAfter(s string) string {
	s = strings.TrimLeft(s, " \t\n")
	if !strings.HasPrefix(s, "{") {
		return "{}"
	}
	var v map[string]any
	if err := json.NewDecoder(strings.NewReader(s)).Decode(&v); err != nil {
		return "{}"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
