package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// Tool is a function a query offers its models: its name, what it does, and
// the JSON Schema of its arguments as a JSON text (empty: no arguments).
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Parameters  string `json:"parameters,omitempty"`
}

// ValidToolName reports whether s can name a tool: 1 to 64 letters,
// digits, underscores and hyphens, as the vendors' function names allow.
func ValidToolName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// ToolCall is a call of an offered tool: by a model (its proposal), or by
// the query's answer (the calls the models agreed on). Arguments is a JSON
// text.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// The tool choices of a query besides the name of one offered tool, which
// asks for a call of that tool.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceNone     = "none"
	ToolChoiceRequired = "required"
)

// AgreeToolCalls returns the tool calls of a query's answer, given every
// answering model's proposal: a tool is called when more than half of the
// models that answered propose calling it. With tool_choice required, when
// no tool has that majority, the tool proposed by the most models is called
// (ties: the one proposed first, in the query's model order); with the name
// of one tool, only that tool is called, when any model proposes it; with
// none, no tool is called. Each called tool is called once, with the
// arguments of the first model (in the query's model order) that proposed
// it, under an id derived from the query and the call's position; the calls
// are in the order their tools were first proposed.
func AgreeToolCalls(q *Query) []ToolCall {
	s := q.Submitted
	if s == nil || len(s.Tools) == 0 || s.ToolChoice == ToolChoiceNone {
		return nil
	}
	var order []string
	votes := map[string]int{}
	args := map[string]string{}
	answered := 0
	for _, m := range s.Models {
		a, ok := q.Answers[m.Key()]
		if !ok {
			continue
		}
		answered++
		seen := map[string]bool{}
		for _, c := range a.ToolCalls {
			if seen[c.Name] || !offered(s.Tools, c.Name) {
				continue
			}
			seen[c.Name] = true
			if votes[c.Name] == 0 {
				order = append(order, c.Name)
				args[c.Name] = c.Arguments
			}
			votes[c.Name]++
		}
	}
	var called []string
	switch choice := s.ToolChoice; {
	case choice != "" && choice != ToolChoiceAuto && choice != ToolChoiceRequired:
		if votes[choice] > 0 {
			called = []string{choice}
		}
	default:
		for _, name := range order {
			if 2*votes[name] > answered {
				called = append(called, name)
			}
		}
		if len(called) == 0 && choice == ToolChoiceRequired && len(order) > 0 {
			best := order[0]
			for _, name := range order[1:] {
				if votes[name] > votes[best] {
					best = name
				}
			}
			called = []string{best}
		}
	}
	var out []ToolCall
	for i, name := range called {
		sum := sha256.Sum256([]byte(s.RequestID + "/" + strconv.Itoa(i) + "/" + name))
		out = append(out, ToolCall{ID: "call_" + hex.EncodeToString(sum[:12]), Name: name, Arguments: args[name]})
	}
	return out
}

func offered(tools []Tool, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}
