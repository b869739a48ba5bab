package events

import (
	"strings"
	"testing"
)

func TestAgreeToolCalls(t *testing.T) {
	refs := []ModelRef{{Provider: "provider_a", ModelID: "a"}, {Provider: "provider_b", ModelID: "b"}, {Provider: "provider_c", ModelID: "c"}, {Provider: "provider_d", ModelID: "d"}}
	tools := []Tool{{Name: "weather"}, {Name: "search"}}
	call := func(name, args string) []ToolCall { return []ToolCall{{ID: "x", Name: name, Arguments: args}} }
	for _, c := range []struct {
		name      string
		choice    string
		proposals [][]ToolCall // per model; nil entry with failed: the model did not answer
		failed    []int
		want      string // names:args joined by ","
	}{
		{"all agree", "", [][]ToolCall{call("weather", `{"c":1}`), call("weather", `{"c":2}`), call("weather", "{}"), call("weather", "{}")}, nil, `weather:{"c":1}`},
		{"half is not a majority", "auto", [][]ToolCall{call("weather", "{}"), call("weather", "{}"), nil, nil}, nil, ""},
		{"a majority of those that answered", "", [][]ToolCall{nil, call("weather", `{"b":1}`), call("weather", "{}"), nil}, []int{0, 3}, `weather:{"b":1}`},
		{"required takes the most proposed", "required", [][]ToolCall{call("search", "{}"), call("weather", "{}"), call("weather", "{}"), nil}, nil, "weather:{}"},
		{"required ties take the first proposed", "required", [][]ToolCall{call("search", "{}"), call("weather", "{}"), nil, nil}, nil, "search:{}"},
		{"none calls nothing", "none", [][]ToolCall{call("weather", "{}"), call("weather", "{}"), call("weather", "{}"), call("weather", "{}")}, nil, ""},
		{"a named tool only", "search", [][]ToolCall{call("weather", "{}"), call("weather", "{}"), call("search", `{"q":1}`), nil}, nil, `search:{"q":1}`},
		{"tools not offered are ignored", "", [][]ToolCall{call("rm", "{}"), call("rm", "{}"), call("rm", "{}"), nil}, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := &Query{Submitted: &QuerySubmitted{RequestID: "req_1", Models: refs, Tools: tools, ToolChoice: c.choice}, Answers: map[string]ModelAnswered{}}
			for i, ref := range refs {
				if contains(c.failed, i) {
					continue
				}
				q.Answers[ref.Key()] = ModelAnswered{Model: ref, ToolCalls: c.proposals[i]}
			}
			var got []string
			for _, tc := range AgreeToolCalls(q) {
				if !strings.HasPrefix(tc.ID, "call_") {
					t.Errorf("id %q", tc.ID)
				}
				got = append(got, tc.Name+":"+tc.Arguments)
			}
			if g := strings.Join(got, ","); g != c.want {
				t.Errorf("got %q, want %q", g, c.want)
			}
			if again := AgreeToolCalls(q); len(again) > 0 && again[0].ID != AgreeToolCalls(q)[0].ID {
				t.Errorf("ids are not deterministic")
			}
		})
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
