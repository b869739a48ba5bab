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
		name  string
		texts []string
		calls int
		class string // of the failure, "" when the object is found
	}{
		{"valid at once", []string{`{"answer":"a","conflicts":[]}`}, 1, ""},
		{"fenced is fine", []string{"```json\n{\"answer\":\"a\",\"conflicts\":[]}\n```"}, 1, ""},
		{"repaired", []string{`{"answer":"a"}`, `{"answer":"a","conflicts":[]}`}, 2, ""},
		{"not JSON, then repaired", []string{`Sure! here it is`, `{"answer":"a","conflicts":[]}`}, 2, ""},
		{"still invalid after one repair", []string{`{"answer":1}`, `{"answer":2}`, `{"answer":"a","conflicts":[]}`}, 2, ClassSchemaMismatch},
		{"never JSON", []string{`Once upon a time`}, 2, ClassNotJSON},
		{"empty twice", []string{"  "}, 2, ClassEmpty},
	} {
		up := &replies{texts: c.texts}
		resp, err := (&Structured{Provider: up}).Complete(context.Background(), &Request{Messages: []Message{{Role: RoleUser, Content: "q"}}, Schema: testSchema})
		if len(up.reqs) != c.calls {
			t.Errorf("%s: %d calls, want %d", c.name, len(up.reqs), c.calls)
		}
		if resp == nil || resp.Usage.InputTokens != 10*c.calls {
			t.Errorf("%s: response %+v, want the usage of every call", c.name, resp)
		}
		if c.class != "" {
			if e := Classify(err); e.Class != c.class || !strings.Contains(e.Message, "after one repair attempt") {
				t.Errorf("%s: err %v, want %s after the repair", c.name, err, c.class)
			}
			continue
		}
		if err != nil || !json.Valid(resp.JSON) {
			t.Errorf("%s: %v, JSON %s", c.name, err, resp.JSON)
		}
		if c.calls == 2 {
			last := up.reqs[1].Messages
			if last[len(last)-2].Role != RoleAssistant || last[len(last)-2].Content != c.texts[0] ||
				!strings.Contains(last[len(last)-1].Content, "JSON object") {
				t.Errorf("%s: the repair request does not show the reply and the problem: %+v", c.name, last)
			}
		}
	}
}

// TestParseFindsTheObject: the object of a structured reply is found
// wherever the host put it, and a reply without a usable one gets the
// class that names why.
func TestParseFindsTheObject(t *testing.T) {
	const obj = `{"answer":"a {b} c","conflicts":[]}`
	for _, c := range []struct {
		name, text, finish, class string
	}{
		{"the whole text", obj, FinishStop, ""},
		{"with white space", "\n  " + obj + "\n", "", ""},
		{"prose before", "Here is the JSON:\n" + obj, "", ""},
		{"prose after", obj + "\nI hope this helps.", "", ""},
		{"prose around, braces in it", "Note {this}: " + obj + " and {that}.", "", ""},
		{"a fence mid-text", "Sure.\n```json\n" + obj + "\n```\nAnything else?", "", ""},
		{"a fence without a tag", "```\n" + obj + "\n```", "", ""},
		{"the second object is the valid one", `{"answer":1} then ` + obj, "", ""},
		{"an object that does not match", `{"answer":1,"conflicts":[]}`, "", ClassSchemaMismatch},
		{"prose only", "Once upon a time there was a fox.", "", ClassNotJSON},
		{"an array", `["a", "b"]`, "", ClassNotJSON},
		{"an object inside an array", `[{"answer":"a"}]`, "", ClassSchemaMismatch},
		{"empty", " \n", "", ClassEmpty},
		{"cut at the output bound", `{"answer":"once upon a ti`, FinishLength, ClassOutputLimit},
		{"prose cut at the output bound", `Once upon a time there`, FinishLength, ClassOutputLimit},
		{"a valid object before a cut", obj + " and then the story goes o", FinishLength, ""},
	} {
		resp := &Response{Text: c.text, Finish: c.finish}
		err := Parse(testSchema, resp)
		switch {
		case c.class == "" && err != nil:
			t.Errorf("%s: %v, want the object", c.name, err)
		case c.class == "" && string(resp.JSON) != obj:
			t.Errorf("%s: JSON %s, want %s", c.name, resp.JSON, obj)
		case c.class != "" && (err == nil || err.Class != c.class):
			t.Errorf("%s: err %v, want %s", c.name, err, c.class)
		}
	}
	// A vendor's native object comes first.
	resp := &Response{Text: "prose", JSON: json.RawMessage(obj)}
	if err := Parse(testSchema, resp); err != nil || string(resp.JSON) != obj {
		t.Fatalf("native object: %v, %s", err, resp.JSON)
	}
}

// TestParseBoundsItsWork: a reply of braces and nothing else costs at most
// maxObjectStarts decodes, whatever its length.
func TestParseBoundsItsWork(t *testing.T) {
	text := strings.Repeat("{ not json ", 100_000)
	if n := len(candidates(text)); n != 1 {
		t.Fatalf("%d candidates, want the whole text only", n)
	}
	if err := Parse(testSchema, &Response{Text: text}); err == nil || err.Class != ClassNotJSON {
		t.Fatalf("err %v, want not_json", err)
	}
}

// TestStructuredDoesNotRepairOtherFailures: a call that failed otherwise
// than by its output is not asked again.
func TestStructuredDoesNotRepairOtherFailures(t *testing.T) {
	for _, class := range []string{ClassRefused, ClassContextOverflow, ClassHostError, ClassRateLimited, ClassTimeout} {
		calls := 0
		p := ProviderFunc(func(context.Context, *Request) (*Response, error) {
			calls++
			return &Response{Text: "no"}, &Error{Class: class}
		})
		_, err := (&Structured{Provider: p}).Complete(context.Background(), &Request{Schema: testSchema})
		if Classify(err).Class != class || calls != 1 {
			t.Errorf("%s: %v after %d calls, want it as it is after one", class, err, calls)
		}
	}
}

// BenchmarkParse measures taking the object out of one structured answer
// and validating it against its schema: it runs on every structured call of
// every query.
func BenchmarkParse(b *testing.B) {
	schema := &Schema{Name: "answer", JSON: json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"},"conflicts":{"type":"array","items":{"type":"object","properties":{"topic":{"type":"string"},"positions":{"type":"array","items":{"type":"object","properties":{"model":{"type":"string"},"position":{"type":"string"}},"required":["model","position"],"additionalProperties":false}},"resolution":{"type":"string"}},"required":["topic","positions","resolution"],"additionalProperties":false}},"verdict":{"type":"string","enum":["supported","refuted","unverifiable"]}},"required":["answer","conflicts"],"additionalProperties":false}`)}
	out := `{"answer":"x","conflicts":[{"topic":"t","positions":[{"model":"a","position":"p"}],"resolution":"r"}],"verdict":"supported"}`
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(schema, &Response{Text: out}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParse: whatever a host replies, Parse neither panics nor accepts
// something that is not a JSON object valid for the schema, and an object
// it finds is one the reply's text holds.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"answer":"a","conflicts":[]}`, "x ```json\n{\"answer\":\"a\",\"conflicts\":[]}\n``` y", `{"answer":`, "{{{", "```", `{"a":1} {"answer":"b","conflicts":[1]}`} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, text string, cut bool) {
		resp := &Response{Text: text}
		if cut {
			resp.Finish = FinishLength
		}
		err := Parse(testSchema, resp)
		if err != nil {
			return
		}
		var obj map[string]any
		if json.Unmarshal(resp.JSON, &obj) != nil || obj["answer"] == nil || !strings.Contains(text, strings.TrimSpace(string(resp.JSON))) {
			t.Fatalf("accepted %q from %q", resp.JSON, text)
		}
	})
}
