package queries

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
)

// MaxTools bounds the tools a query offers.
const MaxTools = 128

// maxToolsBytes bounds the tools of a query as JSON.
const maxToolsBytes = 64 * 1024

// decodeTools reads tools (an array of {name, description, parameters},
// parameters a JSON Schema object) and tool_choice (auto, none, required, or
// the name of an offered tool).
func decodeTools(raw, choice json.RawMessage, r *Request) error {
	if !isNull(raw) {
		if len(raw) > maxToolsBytes {
			return apperr.New(apperr.InvalidRequest, "tools is %d bytes of JSON; at most %d", len(raw), maxToolsBytes)
		}
		var tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(raw, &tools); err != nil {
			return apperr.New(apperr.InvalidRequest, "tools must be an array of {name, description, parameters}")
		}
		if len(tools) > MaxTools {
			return apperr.New(apperr.InvalidRequest, "tools has %d entries; at most %d", len(tools), MaxTools)
		}
		for i, t := range tools {
			if !events.ValidToolName(t.Name) {
				return apperr.New(apperr.InvalidRequest, "tools[%d].name must be 1 to 64 letters, digits, underscores or dashes", i)
			}
			if slices.ContainsFunc(r.Tools, func(o events.Tool) bool { return o.Name == t.Name }) {
				return apperr.New(apperr.InvalidRequest, "tools[%d].name %q is offered twice", i, t.Name)
			}
			tool := events.Tool{Name: t.Name, Description: t.Description}
			if !isNull(t.Parameters) {
				var schema map[string]any
				if json.Unmarshal(t.Parameters, &schema) != nil {
					return apperr.New(apperr.InvalidRequest, "tools[%d].parameters must be a JSON Schema object", i)
				}
				var b bytes.Buffer
				if err := json.Compact(&b, t.Parameters); err != nil {
					return apperr.New(apperr.InvalidRequest, "tools[%d].parameters must be a JSON Schema object", i)
				}
				tool.Parameters = b.String()
			}
			r.Tools = append(r.Tools, tool)
		}
	}
	if isNull(choice) {
		return nil
	}
	if err := json.Unmarshal(choice, &r.ToolChoice); err != nil {
		return apperr.New(apperr.InvalidRequest, "tool_choice must be a string: auto, none, required, or the name of a tool")
	}
	switch r.ToolChoice {
	case events.ToolChoiceAuto, events.ToolChoiceNone:
		return nil
	case events.ToolChoiceRequired:
		if len(r.Tools) == 0 {
			return apperr.New(apperr.InvalidRequest, "tool_choice is required but tools offers none")
		}
		return nil
	}
	if !slices.ContainsFunc(r.Tools, func(t events.Tool) bool { return t.Name == r.ToolChoice }) {
		return apperr.New(apperr.InvalidRequest, "%s", fmt.Sprintf("tool_choice %q is not auto, none, required or the name of an offered tool", truncate(r.ToolChoice)))
	}
	return nil
}
