package providers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
)

var testSchema = &Schema{Name: "synthesis", JSON: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["answer","conflicts"],"properties":{"answer":{"type":"string"},"conflicts":{"type":"array"}}}`)}

type replies struct {
	texts []string
	reqs  []Request
}

func (r *replies) Complete(ctx context.Context, req *Request) (*Response, error) {
	r.reqs = append(r.reqs, *req)
	text := r.texts[min(len(r.reqs)-1, len(r.texts)-1)]
	return &Response{Text: text, Usage: events.Usage{InputTokens: 10, OutputTokens: 5}}, nil
}

func TestStructuredRepairsOnce(t *testing.T) {
	for _, c := range []struct {
		name    string
		texts   []string
		calls   int
		wantErr bool
	}{
		{"valid at once", []string{`{"answer":"a","conflicts":[]}`}, 1, false},
		{"fenced is fine", []string{"```json\n{\"answer\":\"a\",\"conflicts\":[]}\n```"}, 1, false},
		{"repaired", []string{`{"answer":"a"}`, `{"answer":"a","conflicts":[]}`}, 2, false},
		{"not JSON, then repaired", []string{`Sure! here it is`, `{"answer":"a","conflicts":[]}`}, 2, false},
		{"still invalid after one repair", []string{`{"answer":1}`, `{"answer":2}`, `{"answer":"a","conflicts":[]}`}, 2, true},
	} {
		up := &replies{texts: c.texts}
		resp, err := (&Structured{Provider: up}).Complete(context.Background(), &Request{Messages: []Message{{Role: RoleUser, Content: "q"}}, Schema: testSchema})
		if len(up.reqs) != c.calls {
			t.Errorf("%s: %d calls, want %d", c.name, len(up.reqs), c.calls)
		}
		if c.wantErr {
			if Classify(err).Class != ClassInvalidOutput {
				t.Errorf("%s: err %v, want invalid_output", c.name, err)
			}
			continue
		}
		if err != nil || !json.Valid(resp.JSON) || resp.Usage.InputTokens != 10*c.calls {
			t.Errorf("%s: %v, JSON %s, usage %+v", c.name, err, resp.JSON, resp.Usage)
		}
		if c.calls == 2 {
			last := up.reqs[1].Messages
			if last[len(last)-2].Role != RoleAssistant || !strings.Contains(last[len(last)-1].Content, "not a valid JSON object") {
				t.Errorf("%s: the repair request does not show the reply and the problem: %+v", c.name, last)
			}
		}
	}
}

// BenchmarkValidate measures the validation of one structured answer
// against its schema: it runs on every structured call of every query.
func BenchmarkValidate(b *testing.B) {
	schema := &Schema{Name: "answer", JSON: json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"},"conflicts":{"type":"array","items":{"type":"object","properties":{"topic":{"type":"string"},"positions":{"type":"array","items":{"type":"object","properties":{"model":{"type":"string"},"position":{"type":"string"}},"required":["model","position"],"additionalProperties":false}},"resolution":{"type":"string"}},"required":["topic","positions","resolution"],"additionalProperties":false}},"verdict":{"type":"string","enum":["supported","refuted","unverifiable"]}},"required":["answer","conflicts"],"additionalProperties":false}`)}
	out := json.RawMessage(`{"answer":"x","conflicts":[{"topic":"t","positions":[{"model":"a","position":"p"}],"resolution":"r"}],"verdict":"supported"}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := Validate(schema, &Response{JSON: out}); err != nil {
			b.Fatal(err)
		}
	}
}
