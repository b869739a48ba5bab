package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Structured is the one repair layer of structured output: every backend
// hands it the raw reply of a call that asked for a schema (the text, and
// the object where the vendor returned one natively), and it takes the
// reply's object out (Parse: the whole text, a Markdown fence anywhere in
// it, or the first object in the prose around it) and checks it against the
// schema. When that fails, it asks once more, showing the model its reply
// and what is wrong with it (one repair attempt); the usage of both calls is
// reported together. A reply still unusable fails with its class: empty,
// not_json, schema_mismatch, or output_limit when the host cut it at the
// output bound. A call that failed otherwise (a host error, a context
// overflow, a refusal) is not repaired.
type Structured struct {
	Provider Provider
}

var _ Provider = (*Structured)(nil)

// Complete runs req and parses its structured output.
func (s *Structured) Complete(ctx context.Context, req *Request) (*Response, error) {
	// The call waits in s.Provider.Complete for as long as the model takes,
	// holding this frame: the repair is in repair, so the frame stays small.
	resp, err := s.Provider.Complete(ctx, req)
	if err != nil || req.Schema == nil {
		return resp, err
	}
	return s.repair(ctx, req, resp)
}

// repair parses resp, the answer to req, and when it is unusable asks the
// model once to correct it.
//
//go:noinline
func (s *Structured) repair(ctx context.Context, req *Request, resp *Response) (*Response, error) {
	perr := Parse(req.Schema, resp)
	if perr == nil {
		return resp, nil
	}
	repair := *req
	repair.Messages = append(append([]Message(nil), req.Messages...),
		Message{Role: RoleAssistant, Content: resp.Text},
		Message{Role: RoleUser, Content: repairPrompt(req.Schema, perr)},
	)
	second, err := s.Provider.Complete(ctx, &repair)
	if second == nil {
		second = &Response{}
	}
	second.Usage.InputTokens += resp.Usage.InputTokens
	second.Usage.OutputTokens += resp.Usage.OutputTokens
	if resp.UsageSource == UsageEstimated {
		second.UsageSource = UsageEstimated
	}
	second.Latency += resp.Latency
	if err != nil {
		return second, err
	}
	if perr := Parse(req.Schema, second); perr != nil {
		perr.Message = fmt.Sprintf("after one repair attempt, %s", perr.Message)
		return second, perr
	}
	return second, nil
}

// repairPrompt asks for the object again, saying what was wrong with the
// reply.
func repairPrompt(schema *Schema, perr *Error) string {
	switch perr.Class {
	case ClassEmpty:
		return fmt.Sprintf("Your reply was empty. Reply with only the JSON object for the schema %q.", schema.Name)
	case ClassOutputLimit:
		return fmt.Sprintf("Your reply was cut at the output limit before its JSON object was complete. Reply again with only the JSON object for the schema %q, shorter.", schema.Name)
	}
	return fmt.Sprintf("Your reply is not a valid JSON object for the schema %q: %s. Reply again with only the corrected JSON object.", schema.Name, perr.Message)
}

var compiled sync.Map // schema JSON → *jsonschema.Schema

// maxObjectStarts bounds the places in a reply's text Parse tries an object
// at: a reply of prose with many braces costs at most that many decodes.
const maxObjectStarts = 64

// Parse takes the structured output out of resp: resp.JSON when the vendor
// returned the object natively, else the first candidate of resp.Text that
// is a JSON object valid against schema (JSON Schema 2020-12, each schema
// compiled once), the candidates being the whole text, the content of each
// Markdown code fence anywhere in it, and each object in the text, prose
// before and after it left out. It stores the object in resp.JSON and
// returns nil, or returns an *Error of class
//
//   - empty: the reply has no text;
//   - output_limit: the host cut the reply at the output bound (Finish
//     length) and no valid object was found;
//   - not_json: no JSON object was found;
//   - schema_mismatch: an object was found, but none is valid for schema.
func Parse(schema *Schema, resp *Response) *Error {
	sc, err := compiledSchema(schema.JSON)
	if err != nil {
		return &Error{Class: ClassSchemaMismatch, Final: true, Message: fmt.Sprintf("the schema %q itself is invalid: %v", schema.Name, err)}
	}
	var mismatch error
	try := func(raw []byte) bool {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return false
		}
		if _, object := v.(map[string]any); !object {
			return false
		}
		if err := sc.Validate(v); err != nil {
			if mismatch == nil {
				mismatch = err
			}
			return false
		}
		resp.JSON = json.RawMessage(raw)
		return true
	}
	if native := bytes.TrimSpace(resp.JSON); len(native) > 0 && try(native) {
		return nil
	}
	text := strings.TrimSpace(resp.Text)
	for _, raw := range candidates(text) {
		if try(raw) {
			return nil
		}
	}
	switch {
	case resp.Finish == FinishLength && (text != "" || len(resp.JSON) > 0):
		return &Error{Class: ClassOutputLimit, Message: fmt.Sprintf("the reply was cut at the output limit before its JSON object for the schema %q was complete", schema.Name)}
	case mismatch != nil:
		return &Error{Class: ClassSchemaMismatch, Message: fmt.Sprintf("the reply's JSON object does not match the schema %q: %s", schema.Name, oneLine(mismatch))}
	case text == "":
		return &Error{Class: ClassEmpty, Message: "the reply is empty"}
	}
	return &Error{Class: ClassNotJSON, Message: fmt.Sprintf("the reply holds no JSON object (%d characters of text)", len([]rune(text)))}
}

// candidates are the texts of a reply that may be its object, in order:
// the whole text, the content of each Markdown code fence, and each JSON
// object the text holds (at most maxObjectStarts tried).
func candidates(text string) [][]byte {
	out := [][]byte{[]byte(text)}
	rest := text
	for {
		i := strings.Index(rest, "```")
		if i < 0 {
			break
		}
		body := rest[i+3:]
		j := strings.Index(body, "```")
		if j < 0 {
			break
		}
		block := body[:j]
		if nl := strings.IndexByte(block, '\n'); nl >= 0 && !strings.ContainsAny(block[:nl], "{[") {
			block = block[nl+1:] // the fence's language tag, e.g. json
		}
		out = append(out, []byte(strings.TrimSpace(block)))
		rest = body[j+3:]
	}
	tried := 0
	for i := 0; i < len(text) && tried < maxObjectStarts; {
		k := strings.IndexByte(text[i:], '{')
		if k < 0 {
			break
		}
		i += k
		tried++
		dec := json.NewDecoder(strings.NewReader(text[i:]))
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			i++
			continue
		}
		out = append(out, raw)
		i += int(dec.InputOffset())
	}
	return out
}

// compiledSchema compiles a JSON Schema 2020-12 document, once per
// document.
func compiledSchema(doc json.RawMessage) (*jsonschema.Schema, error) {
	key := string(doc)
	if sc, ok := compiled.Load(key); ok {
		return sc.(*jsonschema.Schema), nil
	}
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("structured-output.json", parsed); err != nil {
		return nil, err
	}
	sc, err := c.Compile("structured-output.json")
	if err != nil {
		return nil, err
	}
	stored, _ := compiled.LoadOrStore(key, sc)
	return stored.(*jsonschema.Schema), nil
}

// oneLine is err's message on one line, its most specific cause first when
// it is a schema validation error.
func oneLine(err error) string {
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		for len(ve.Causes) > 0 {
			ve = ve.Causes[0]
		}
		return strings.Join(strings.Fields(ve.Error()), " ")
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
