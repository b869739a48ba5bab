package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Structured checks structured output against the request's schema. When a
// model returns output that is not valid, it asks once more, showing the
// model its reply and what is wrong with it (one repair attempt); the usage
// of both calls is reported together. Output that is still invalid fails
// with class invalid_output.
type Structured struct {
	Provider Provider
}

var _ Provider = (*Structured)(nil)

// Complete runs req and validates its structured output.
func (s *Structured) Complete(ctx context.Context, req *Request) (*Response, error) {
	// The call waits in s.Provider.Complete for as long as the model takes,
	// holding this frame: the repair is in repair, so the frame stays small.
	resp, err := s.Provider.Complete(ctx, req)
	if err != nil || req.Schema == nil {
		return resp, err
	}
	return s.repair(ctx, req, resp)
}

// repair validates resp, the answer to req, and when it is invalid asks the
// model once to correct it.
//
//go:noinline
func (s *Structured) repair(ctx context.Context, req *Request, resp *Response) (*Response, error) {
	verr := Validate(req.Schema, resp)
	if verr == nil {
		return resp, nil
	}
	repair := *req
	repair.Messages = append(append([]Message(nil), req.Messages...),
		Message{Role: RoleAssistant, Content: resp.Text},
		Message{Role: RoleUser, Content: fmt.Sprintf("Your reply is not a valid JSON object for the schema %q: %v. Reply again with only the corrected JSON object.", req.Schema.Name, verr)},
	)
	second, err := s.Provider.Complete(ctx, &repair)
	if second == nil {
		second = &Response{}
	}
	second.Usage.InputTokens += resp.Usage.InputTokens
	second.Usage.OutputTokens += resp.Usage.OutputTokens
	second.Latency += resp.Latency
	if err != nil {
		return second, err
	}
	if verr := Validate(req.Schema, second); verr != nil {
		return second, &Error{Class: ClassInvalidOutput, Message: fmt.Sprintf("the output is not valid for the schema %q after one repair attempt: %v", req.Schema.Name, verr)}
	}
	return second, nil
}

var compiled sync.Map // schema JSON → *jsonschema.Schema

// Validate parses resp's structured output (resp.JSON, else the text, with
// any Markdown code fence removed), checks it against schema (JSON Schema
// 2020-12, each schema compiled once), and stores the object in resp.JSON.
func Validate(schema *Schema, resp *Response) error {
	raw := bytes.TrimSpace(resp.JSON)
	if len(raw) == 0 {
		raw = unfence([]byte(resp.Text))
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	key := string(schema.JSON)
	sc, ok := compiled.Load(key)
	if !ok {
		compiledSchema, err := compile(schema.JSON)
		if err != nil {
			return fmt.Errorf("the schema itself is invalid: %v", err)
		}
		sc, _ = compiled.LoadOrStore(key, compiledSchema)
	}
	if err := sc.(*jsonschema.Schema).Validate(v); err != nil {
		return err
	}
	resp.JSON = json.RawMessage(raw)
	return nil
}

// compile compiles a JSON Schema 2020-12 document.
func compile(doc json.RawMessage) (*jsonschema.Schema, error) {
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("structured-output.json", parsed); err != nil {
		return nil, err
	}
	return c.Compile("structured-output.json")
}

func unfence(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if bytes.HasPrefix(b, []byte("```")) {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		b = bytes.TrimSuffix(bytes.TrimSpace(b), []byte("```"))
	}
	return bytes.TrimSpace(b)
}
