package events_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/crosscheck/crosscheck/internal/events"
)

// schemaDir holds one JSON Schema per event type, relative to this package.
const schemaDir = "../../api/events"

// defsFile is the file of the definitions the schemas share.
const defsFile = "defs.json"

// eventSchema is one schema file: as written, and as kin-openapi reads it.
type eventSchema struct {
	raw    map[string]any
	schema *openapi3.Schema
}

// readSchemas reads every event schema of schemaDir by event type, and the
// shared definitions.
func readSchemas(t *testing.T) (map[string]eventSchema, map[string]any) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files in %s: %v", schemaDir, err)
	}
	out := map[string]eventSchema{}
	var defs map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("%s is not a JSON object: %v", f, err)
		}
		name := filepath.Base(f)
		if name == defsFile {
			defs = raw
			continue
		}
		s := &openapi3.Schema{}
		if err := json.Unmarshal(b, s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(name, ".json")] = eventSchema{raw: raw, schema: s}
	}
	if defs == nil {
		t.Fatalf("%s/%s is missing", schemaDir, defsFile)
	}
	return out, defs
}

// validate validates an event as stored against a schema with kin-openapi's
// JSON Schema 2020-12 validator. (Should kin-openapi fail to compile a
// schema, it would fall back to its OpenAPI 3.0 validator, which resolves no
// $ref of $defs: every event would fail, so the examples would.)
func validate(s *openapi3.Schema, stored []byte) error {
	var v any
	if err := json.Unmarshal(stored, &v); err != nil {
		return err
	}
	return s.VisitJSON(v, openapi3.EnableJSONSchema2020())
}

func TestEverySchemaFileIsARegisteredEventType(t *testing.T) {
	schemas, _ := readSchemas(t)
	types := events.Types()
	sort.Strings(types)
	for _, typ := range types {
		if _, ok := schemas[typ]; !ok {
			t.Errorf("event type %s has no schema: write %s/%s.json", typ, schemaDir, typ)
		}
	}
	for typ, s := range schemas {
		if !slices.Contains(types, typ) {
			t.Errorf("%s/%s.json names no registered event type", schemaDir, typ)
			continue
		}
		if s.raw["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema is %v, want draft 2020-12", typ, s.raw["$schema"])
		}
		if title, _ := s.raw["title"].(string); !strings.HasPrefix(title, typ+": ") {
			t.Errorf("%s: title %q does not start with the event type", typ, title)
		}
		if desc, _ := s.raw["description"].(string); !strings.HasPrefix(desc, "Appended ") || !strings.HasSuffix(desc, ".") {
			t.Errorf("%s: the description should be a sentence saying when the event is appended: %q", typ, desc)
		}
		props, _ := s.raw["properties"].(map[string]any)
		if c := prop(props, "type")["const"]; c != typ {
			t.Errorf("%s: properties.type.const is %v", typ, c)
		}
		if p, want := prop(props, "subject")["pattern"], subjectPattern(typ); p != want {
			t.Errorf("%s: properties.subject.pattern is %v, want %s", typ, p, want)
		}
		// The envelope: the fields of events.Envelope, every one required.
		envelope := jsonFields(reflect.TypeFor[events.Envelope]())
		required := asSlice(s.raw["required"])
		for name := range envelope {
			if prop(props, name) == nil || !slices.Contains(required, any(name)) {
				t.Errorf("%s: the envelope field %s is not a required property", typ, name)
			}
		}
		for name := range props {
			if _, ok := envelope[name]; !ok {
				t.Errorf("%s: property %s is not an envelope field", typ, name)
			}
		}
		if s.raw["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties must be false", typ)
		}
	}
}

// TestSchemasShareTheirDefinitions: each schema is self-contained, with a
// copy of each shared definition it uses; the copies are those of defs.json.
func TestSchemasShareTheirDefinitions(t *testing.T) {
	schemas, defsDoc := readSchemas(t)
	defs, _ := defsDoc["$defs"].(map[string]any)
	if len(defs) == 0 {
		t.Fatalf("%s has no $defs", defsFile)
	}
	used := map[string]bool{}
	for typ, s := range schemas {
		own, _ := s.raw["$defs"].(map[string]any)
		for name, def := range own {
			used[name] = true
			if !reflect.DeepEqual(def, defs[name]) {
				t.Errorf("%s: $defs/%s differs from %s's; copy it from there", typ, name, defsFile)
			}
		}
		for _, ref := range refsOf(s.raw) {
			name, ok := strings.CutPrefix(ref, "#/$defs/")
			if !ok {
				t.Errorf("%s: $ref %q: a schema refers only to its own $defs", typ, ref)
			} else if own[name] == nil {
				t.Errorf("%s: $ref %q has no definition in the schema's $defs", typ, ref)
			}
		}
	}
	for name := range defs {
		if !used[name] {
			t.Errorf("%s: $defs/%s is used by no event schema", defsFile, name)
		}
	}
}

func refsOf(node any) []string {
	var out []string
	switch n := node.(type) {
	case map[string]any:
		if r, ok := n["$ref"].(string); ok {
			out = append(out, r)
		}
		for _, v := range n {
			out = append(out, refsOf(v)...)
		}
	case []any:
		for _, v := range n {
			out = append(out, refsOf(v)...)
		}
	}
	return out
}

// legacyOptional are the fields the Go types always write that a schema
// leaves optional: events recorded under schema version 1 by earlier builds
// do not have them (estimates and costs before credits existed, the cap's
// link before it joined the hash chain).
var legacyOptional = map[string]bool{
	"query.submitted data.estimated_micros":  true,
	"query.model_answered data.cost_micros":  true,
	"query.synthesized data.cost_micros":     true,
	"account.monthly_cap_set data.prev_hash": true,
}

// TestSchemasMatchTheGoTypes compares each schema's data with the JSON
// encoding of its Go type: the same properties at every level, required
// unless omitempty, and the same JSON types, null where a pointer is not
// omitempty.
func TestSchemasMatchTheGoTypes(t *testing.T) {
	schemas, _ := readSchemas(t)
	for typ, ev := range examples(t) {
		s, ok := schemas[typ]
		if !ok {
			continue // reported by TestEverySchemaFileIsARegisteredEventType
		}
		defs, _ := s.raw["$defs"].(map[string]any)
		props, _ := s.raw["properties"].(map[string]any)
		c := shapeCheck{t: t, typ: typ, defs: defs}
		c.compare("data", reflect.TypeOf(ev), prop(props, "data"), false)
	}
}

type shapeCheck struct {
	t    *testing.T
	typ  string
	defs map[string]any
}

func (c shapeCheck) resolve(s map[string]any) map[string]any {
	if r, ok := s["$ref"].(string); ok {
		def, _ := c.defs[strings.TrimPrefix(r, "#/$defs/")].(map[string]any)
		return c.resolve(def)
	}
	return s
}

// jsonTypes are the JSON types a schema allows.
func jsonTypes(s map[string]any) []string {
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, x.(string))
		}
		return out
	}
	switch v := s["const"].(type) {
	case string:
		return []string{"string"}
	case float64:
		if v == float64(int64(v)) {
			return []string{"integer"}
		}
		return []string{"number"}
	case bool:
		return []string{"boolean"}
	}
	return nil
}

func (c shapeCheck) compare(path string, gt reflect.Type, s map[string]any, nullable bool) {
	c.t.Helper()
	s = c.resolve(s)
	if s == nil {
		c.t.Errorf("%s: %s: no schema", c.typ, path)
		return
	}
	if gt.Kind() == reflect.Pointer {
		gt = gt.Elem()
	}
	var want string
	switch gt.Kind() {
	case reflect.String:
		want = "string"
	case reflect.Bool:
		want = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "integer"
	case reflect.Float32, reflect.Float64:
		want = "number"
	case reflect.Slice:
		want = "array"
	case reflect.Struct:
		want = "object"
	default:
		c.t.Errorf("%s: %s: Go kind %s has no JSON type here", c.typ, path, gt.Kind())
		return
	}
	got := jsonTypes(s)
	wantTypes := []string{want}
	if nullable {
		wantTypes = append(wantTypes, "null")
	}
	slices.Sort(got)
	slices.Sort(wantTypes)
	if !slices.Equal(got, wantTypes) {
		c.t.Errorf("%s: %s: schema types %v, the Go type %s encodes as %v", c.typ, path, got, gt, wantTypes)
	}
	switch gt.Kind() {
	case reflect.Slice:
		items, _ := s["items"].(map[string]any)
		c.compare(path+"[]", gt.Elem(), items, false)
	case reflect.Struct:
		if s["additionalProperties"] != false {
			c.t.Errorf("%s: %s: additionalProperties must be false", c.typ, path)
		}
		props, _ := s["properties"].(map[string]any)
		var required []string
		for _, r := range asSlice(s["required"]) {
			required = append(required, r.(string))
		}
		fields := jsonFields(gt)
		for name, f := range fields {
			ps := prop(props, name)
			if ps == nil {
				c.t.Errorf("%s: %s.%s is in the Go type but not in the schema", c.typ, path, name)
				continue
			}
			wantRequired := !f.omitempty && !legacyOptional[c.typ+" "+path+"."+name]
			if slices.Contains(required, name) != wantRequired {
				c.t.Errorf("%s: %s.%s: required is %v, want %v", c.typ, path, name, !wantRequired, wantRequired)
			}
			c.compare(path+"."+name, f.typ, ps, f.typ.Kind() == reflect.Pointer && !f.omitempty)
		}
		for name := range props {
			if _, ok := fields[name]; !ok {
				c.t.Errorf("%s: %s.%s is in the schema but not in the Go type", c.typ, path, name)
			}
		}
		for _, name := range required {
			if props[name] == nil {
				c.t.Errorf("%s: %s.%s is required but not a property", c.typ, path, name)
			}
		}
	}
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

func prop(props map[string]any, name string) map[string]any {
	p, _ := props[name].(map[string]any)
	return p
}

type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists the JSON fields of a struct as encoding/json writes them,
// embedded structs flattened.
func jsonFields(t reflect.Type) map[string]jsonField {
	out := map[string]jsonField{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n, sub := range jsonFields(f.Type) {
				out[n] = sub
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = jsonField{typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")}
	}
	return out
}

var exampleTime = time.Date(2026, 11, 21, 13, 49, 8, 348947723, time.UTC)

func ulid() string { return events.NewID() }

// examples returns a realistic event of every registered type, with every
// optional field set somewhere.
func examples(t *testing.T) map[string]events.Event {
	byomID := "byom_" + strings.ToLower(ulid())
	sealed := events.Sealed{KeyID: "mk_0123456789ab", Ciphertext: "3q2+7w=="}
	t.Helper()
	sim := events.ModelRef{Provider: "provider_a", ModelID: "sim-alpha-standard", Simulated: true}
	byom := events.ModelRef{Provider: "openai", ModelID: "llama-3.1-70b", CustomModel: "byom_01m7z5w7h9"}
	// full sets every field of a ModelRef: a customer-owned model the
	// simulator stands in for.
	full := events.ModelRef{Provider: "openai", ModelID: "llama-3.1-70b", CustomModel: "byom_01m7z5w7h9", Simulated: true}
	usage := events.Usage{InputTokens: 367, OutputTokens: 113}
	citation := events.Citation{URL: "corpus://sample/history.md", Title: "Landmarks of modern history", Snippet: "The Eiffel Tower was completed in 1889."}
	change := func(from, to string) events.KeyStateChanged {
		return events.KeyStateChanged{Fingerprint: "wcxl4agk", From: from, To: to}
	}
	link := events.LedgerLink{PrevHash: strings.Repeat("9b1f", 16)}
	capMicros := int64(1_000_000)
	evs := []events.Event{
		events.QuerySubmitted{RequestID: "req_" + ulid(), AccountID: "acct_" + strings.ToLower(ulid()), KeyFingerprint: "f824173q",
			Mode: events.ModeVerify, Prompt: "Tell me about Mount Everest, the Danube and the Eiffel Tower.", Models: []events.ModelRef{sim, byom}, EstimatedMicros: 1_208_750,
			Files: []events.FileRef{{ID: "file_" + ulid(), Name: "report.pdf", Kind: "pdf", MediaType: "application/pdf", Bytes: 48_213,
				SHA256: strings.Repeat("ab", 32), Pages: 3, TextChars: 5_120, NativeFor: []string{"provider_a"}}},
			Tools:      []events.Tool{{Name: "get_weather", Description: "The weather in a city.", Parameters: `{"type":"object","properties":{"city":{"type":"string"}}}`}},
			ToolChoice: events.ToolChoiceAuto},
		events.QueryStarted{},
		events.ModelAnswered{Model: full, Answer: "Mount Everest is 8,849 metres tall [1].", Citations: []events.Citation{citation}, Usage: usage, UsageSource: events.UsageReported, LatencyMS: 2000, CostMicros: 112_000,
			ToolCalls: []events.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
		events.ModelFailed{Model: full, Class: "refused", Message: "the model refused: I cannot help with that", UpstreamStatus: 200, LatencyMS: 1000,
			Usage: &events.Usage{InputTokens: 367, OutputTokens: 9}, UsageSource: events.UsageReported},
		events.ModelRetried{Model: full, Attempt: 1, Class: "rate_limited", Message: "rate_limit_error: too many requests", UpstreamStatus: 429, RetryInMS: 7000},
		events.ProgressReported{Stage: events.StageAggregating, Percent: 85, Message: "synthesizing one answer from 4 model answers"},
		events.Synthesized{Model: full, Answer: events.Answer{Text: "Mount Everest is 8,849 metres tall.", Conflicts: []events.Conflict{{
			Topic: "key figure", Positions: []events.Position{{Model: "provider_a", Position: "62"}, {Model: "byom_01m7z5w7h9", Position: "67"}},
			Resolution: "majority"}}}, Usage: usage, UsageSource: events.UsageReported, LatencyMS: 2000, CostMicros: 409_500,
			ToolCalls: []events.ToolCall{{ID: "call_5f0c", Name: "get_weather", Arguments: `{"city":"Oslo"}`}}},
		events.AttemptFailed{Attempt: 2, Message: "job panicked: runtime error: index out of range [3] with length 3", RetryInMS: 2000},
		events.AttemptStarted{Delivery: 3},
		events.AttemptHandedBack{},
		events.QueryCancelRequested{KeyFingerprint: "k3y4abcd"},
		events.CreditsSettled{ChargedMicros: 855_500, Failed: &events.Failure{Code: "aggregation_failed", Message: "the synthesis failed"}},
		events.WithCharge(events.QueryCompleted{}, 855_500),
		events.WithCharge(events.QueryFailed{Code: "provider_error", Message: "every selected model failed: provider_a: timeout"}, 0),
		events.ModelRevised{Model: full, Round: 2, Answer: "revised", Changed: true, Usage: usage, UsageSource: events.UsageReported, LatencyMS: 10, CostMicros: 299_500},
		events.DisagreementsFound{Model: full, Disagreements: []events.Disagreement{{Topic: "key figure",
			Positions: []events.Stance{{Model: "provider_a", Before: "38", After: "38"}, {Model: "provider_b", Before: "42", After: "38"}},
			Resolved:  true, Resolution: "resolved in round 2"}}, Usage: usage, UsageSource: events.UsageReported, LatencyMS: 10, CostMicros: 460_000},
		events.ClaimsExtracted{Model: full, Claims: []events.ExtractedClaim{{Text: "The Eiffel Tower was completed in 1889.", CheckWorthy: true}},
			Usage: usage, UsageSource: events.UsageReported, LatencyMS: 10, CostMicros: 249_000},
		events.ClaimsMerged{Method: events.MergedByModel, Model: full, Claims: []events.Claim{{ID: "c1", Text: "The Eiffel Tower was completed in 1889.",
			AssertedBy: []string{"provider_a", "byom_01m7z5w7h9"}, Queries: []string{"eiffel tower completed"}}}, Usage: usage, UsageSource: events.UsageReported, LatencyMS: 10, CostMicros: 513_500},
		events.EvidenceRetrieved{ClaimID: "c2", Query: "danube flows through countries", Backend: "searxng", Sources: []events.Citation{citation},
			Error: "searxng: no answer within 10s"},
		events.ClaimsAssessed{Model: full, Assessments: []events.Assessment{{ClaimID: "c1", Verdict: events.VerdictRefuted, Rationale: "the evidence [1] gives a different figure"}},
			Usage: usage, UsageSource: events.UsageReported, LatencyMS: 10, CostMicros: 528_500},
		events.VerdictsGiven{Verdicts: []events.Verdict{{ClaimID: "c1", Verdict: events.VerdictDisputed, Confidence: 0.67}}},
		events.StepFailed{Step: events.StepAssessClaims, Model: &full, Class: "not_json", Message: "after one repair attempt, the reply holds no JSON object", UpstreamStatus: 200,
			Usage: &events.Usage{InputTokens: 1310, OutputTokens: 190}, UsageSource: events.UsageEstimated},
		events.AccountCreated{AccountID: "acct_" + strings.ToLower(ulid()), Name: "development", Plan: events.PlanPro},
		events.KeyCreated{Fingerprint: "f824173q", Name: "development key", SecretHash: strings.Repeat("3ba512ee", 8), AUPAccepted: true},
		events.KeyDisabled{change(events.StateActive, events.StateDisabled)},
		events.KeyEnabled{change(events.StateDisabled, events.StateActive)},
		events.KeyRevoked{change(events.StateDisabled, events.StateRevoked)},
		events.KeySuspended{change(events.StateDisabled, events.StateSuspended)},
		events.KeyUnsuspended{change(events.StateSuspended, events.StateDisabled)},
		events.CreditsGranted{AmountMicros: 300_000_000, Reason: "plan pro: monthly credits", Period: "2026-11", LedgerLink: link},
		events.CreditsAdjusted{AmountMicros: -5_000_000, Reason: "correction of the welcome bonus", LedgerLink: link},
		events.CreditsReserved{RequestID: "req_" + ulid(), AmountMicros: 1_208_750, LedgerLink: link},
		events.CreditsDebited{RequestID: "req_" + ulid(), CallID: ulid(), Model: full, InputTokens: 367, OutputTokens: 113,
			CostMicros: 409_500, AmountMicros: 400_000, WrittenOffMicros: 9_500, LedgerLink: link},
		events.CreditsReleased{RequestID: "req_" + ulid(), AmountMicros: 353_250, ChargedMicros: 855_500, Reason: "settled", LedgerLink: link},
		events.MonthlyCapSet{CapMicros: &capMicros, LedgerLink: link},
		events.ChargesSettled{RequestID: "req_" + ulid(), Calls: []events.SettledCall{{CallID: ulid(), Step: "synthesized", Model: full, InputTokens: 367, OutputTokens: 113,
			InputPerMillion: 500, OutputPerMillion: 2000, CostMicros: 409_500, AmountMicros: 409_500}}, ChargedMicros: 855_500, ReleasedMicros: 353_250, Reason: "settled",
			Ending:       &events.QueryEnding{Status: events.StatusFailed, Code: "cancelled", Message: events.CancelledMessage},
			Cancellation: &events.CancellationCharge{Percent: 10, BasisMicros: 1_208_750, MinimumMicros: 120_875, CostMicros: 0}, LedgerLink: link},
		events.ChargesReversed{RequestID: "req_" + ulid(), Calls: []string{ulid(), ulid()}, RefundedMicros: 855_500,
			Reason: "the query no longer records 1 of the 2 calls its settlement charged", LedgerLink: link},
		events.FileUploaded{FileID: "file_" + ulid(), Name: "report.pdf", Kind: events.FileKindPDF, MediaType: "application/pdf",
			Bytes: 48213, SHA256: strings.Repeat("3ba512ee", 8), Purpose: "query", KeyFingerprint: "f824173q"},
		events.FileExtracted{FileID: "file_" + ulid(), Pages: 12, Chars: 30412, Truncated: false},
		events.FileDeleted{FileID: "file_" + ulid()},
		events.FileExpired{FileID: "file_" + ulid()},
		events.BYOMConnected{ModelID: byomID, Name: "local llama", Kind: events.KindOpenAICompatible, BaseURL: "http://127.0.0.1:11434/v1",
			Model: "llama3.1:8b", APIVersion: "2024-10-21", Capabilities: events.Capabilities{Images: true, StructuredOutput: true, ContextWindow: 131072},
			HeaderNames: []string{"X-Org"}, State: events.BYOMActive, Secret: &sealed},
		events.BYOMTested{ModelID: byomID, OK: false, Class: "authentication", Message: "the host rejected the API key (HTTP 401)"},
		events.BYOMDisabledEv{events.BYOMStateChanged{ModelID: byomID, From: events.BYOMActive, To: events.BYOMDisabled}},
		events.BYOMEnabledEv{events.BYOMStateChanged{ModelID: byomID, From: events.BYOMDisabled, To: events.BYOMActive}},
		events.BYOMDeletedEv{events.BYOMStateChanged{ModelID: byomID, From: events.BYOMActive, To: events.BYOMDeleted}},
		events.BYOMKeyRotated{ModelID: byomID, Secret: sealed},
	}
	out := map[string]events.Event{}
	for _, ev := range evs {
		typ := aggregateOf(ev) + "." + ev.EventName()
		if _, dup := out[typ]; dup {
			t.Fatalf("two examples of %s", typ)
		}
		out[typ] = ev
	}
	for _, typ := range events.Types() {
		if _, ok := out[typ]; !ok {
			t.Errorf("no example of event type %s: add one to examples", typ)
		}
	}
	return out
}

func aggregateOf(ev events.Event) string {
	var found []string
	for _, agg := range []string{events.AggregateQuery, events.AggregateAccount, events.AggregateFile} {
		if slices.Contains(events.Types(), agg+"."+ev.EventName()) {
			found = append(found, agg)
		}
	}
	if len(found) != 1 {
		panic("no one aggregate has an event named " + ev.EventName())
	}
	return found[0]
}

// subjectPattern is the pattern of the subjects an event type is stored
// under: ev.<aggregate>.<id>.<name>; a ledger event on the ledger's own
// subjects or, written before those, on the account's; a settlement on the
// subject of its query.
func subjectPattern(typ string) string {
	agg, name, _ := strings.Cut(typ, ".")
	switch {
	case typ == "account.charges_settled":
		return `^ev\.account\.[^.*>]+\.ledger\.(chain|charges_settled\.req_[0-9A-HJKMNP-TV-Z]{26})$`
	case typ == "account.charges_reversed":
		return `^ev\.account\.[^.*>]+\.ledger\.(chain|charges_reversed)$`
	case agg == events.AggregateAccount && (strings.HasPrefix(name, "credits_") || name == "monthly_cap_set"):
		return `^ev\.account\.[^.*>]+\.(ledger\.chain|(ledger\.)?` + name + `)$`
	}
	return `^ev\.` + agg + `\.[^.*>]+\.` + name + `$`
}

// stored wraps ev as the service stores it.
func stored(t *testing.T, typ string, ev events.Event) []byte {
	t.Helper()
	agg, _, _ := strings.Cut(typ, ".")
	id := "req_" + ulid()
	if agg == events.AggregateAccount || agg == events.AggregateFile {
		id = "acct_" + strings.ToLower(ulid())
	}
	env, err := events.Wrap(agg, id, ev, exampleTime)
	if _, ledger := events.Linked(ev, ""); ledger {
		env, err = events.WrapLedger(id, ev, exampleTime)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	// The stored bytes decode as that event type.
	if rec, err := events.Decode(1, b); err != nil || rec.Envelope.Type != typ {
		t.Fatalf("%s: decode: %v (%s)", typ, err, rec.Envelope.Type)
	}
	return b
}

func TestEventExamplesValidate(t *testing.T) {
	schemas, _ := readSchemas(t)
	for typ, ev := range examples(t) {
		s, ok := schemas[typ]
		if !ok {
			continue
		}
		b := stored(t, typ, ev)
		if err := validate(s.schema, b); err != nil {
			t.Errorf("%s: the example does not validate: %v\n%s", typ, err, b)
			continue
		}
		// The example exercises the whole schema: every property is set.
		var v any
		_ = json.Unmarshal(b, &v)
		defs, _ := s.raw["$defs"].(map[string]any)
		for _, missing := range unset(shapeCheck{defs: defs}, "", s.raw, v) {
			t.Errorf("%s: the example leaves %s unset", typ, missing)
		}
	}
}

// unset lists the properties of schema s that value v sets nowhere.
func unset(c shapeCheck, path string, s map[string]any, v any) []string {
	s = c.resolve(s)
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for name, ps := range props {
			x, ok := v[name]
			if !ok {
				out = append(out, path+"/"+name)
				continue
			}
			out = append(out, unset(c, path+"/"+name, ps.(map[string]any), x)...)
		}
	case []any:
		items, _ := s["items"].(map[string]any)
		if len(v) == 0 {
			return []string{path + "[]"}
		}
		// A property is set when one item sets it.
		var per [][]string
		for _, x := range v {
			per = append(per, unset(c, path+"[]", items, x))
		}
		for _, m := range per[0] {
			if !slices.ContainsFunc(per[1:], func(o []string) bool { return !slices.Contains(o, m) }) {
				out = append(out, m)
			}
		}
	}
	return out
}

// TestSchemasRejectWrongEvents: an event that is not of its type's shape
// fails validation.
func TestSchemasRejectWrongEvents(t *testing.T) {
	schemas, _ := readSchemas(t)
	exs := examples(t)
	cases := []struct {
		typ, what string
		edit      func(m map[string]any)
	}{
		{"query.model_answered", "an unknown envelope property", func(m map[string]any) { m["seq"] = 7 }},
		{"query.model_answered", "an unknown data property", func(m map[string]any) { data(m)["tokens"] = 12 }},
		{"query.model_answered", "an unknown property of the model", func(m map[string]any) { data(m)["model"].(map[string]any)["vendor"] = "x" }},
		{"query.model_answered", "a latency that is a string", func(m map[string]any) { data(m)["latency_ms"] = "2000" }},
		{"query.model_answered", "a latency that is not an integer", func(m map[string]any) { data(m)["latency_ms"] = 2.5 }},
		{"query.model_answered", "no answer", func(m map[string]any) { delete(data(m), "answer") }},
		{"query.model_answered", "no usage", func(m map[string]any) { delete(data(m), "usage") }},
		{"query.model_answered", "the type of another event", func(m map[string]any) { m["type"] = "query.model_failed" }},
		{"query.model_answered", "a subject of another event", func(m map[string]any) {
			m["subject"] = strings.Replace(m["subject"].(string), ".model_answered", ".model_failed", 1)
		}},
		{"query.model_answered", "schema version 2", func(m map[string]any) { m["schema"] = 2 }},
		{"query.model_answered", "another source", func(m map[string]any) { m["source"] = "elsewhere" }},
		{"query.model_answered", "a time that is not RFC 3339", func(m map[string]any) { m["time"] = "21/11/2026 13:49" }},
		{"query.model_answered", "an id that is not a ULID", func(m map[string]any) { m["id"] = "evt-1" }},
		{"query.model_answered", "data that is null", func(m map[string]any) { m["data"] = nil }},
		{"query.model_answered", "no data", func(m map[string]any) { delete(m, "data") }},
		{"query.submitted", "an unknown mode", func(m map[string]any) { data(m)["mode"] = "debate" }},
		{"query.submitted", "models that are null", func(m map[string]any) { data(m)["models"] = nil }},
		{"query.submitted", "a request id without its prefix", func(m map[string]any) { data(m)["request_id"] = "01M7Z5WCBWN6XHC22N54RJ5HP7" }},
		{"query.started", "data with a property", func(m map[string]any) { data(m)["worker"] = "w1" }},
		{"query.step_failed", "a model that is null", func(m map[string]any) { data(m)["model"] = nil }},
		{"query.credits_settled", "an unknown property of the failure", func(m map[string]any) { data(m)["failed"].(map[string]any)["at"] = "x" }},
		{"query.synthesized", "a conflict position with an unknown property", func(m map[string]any) {
			data(m)["answer"].(map[string]any)["conflicts"].([]any)[0].(map[string]any)["positions"].([]any)[0].(map[string]any)["weight"] = 1
		}},
		{"query.verdicts_given", "a confidence above 1", func(m map[string]any) {
			data(m)["verdicts"].([]any)[0].(map[string]any)["confidence"] = 1.5
		}},
		{"account.key_disabled", "a key disabled to active", func(m map[string]any) { data(m)["to"] = "active" }},
		{"account.credits_debited", "a negative amount", func(m map[string]any) { data(m)["amount_micros"] = -1 }},
		{"account.credits_debited", "a prev_hash that is not a hash", func(m map[string]any) { data(m)["prev_hash"] = "9b1f…" }},
		{"account.monthly_cap_set", "a cap that is a string", func(m map[string]any) { data(m)["cap_micros"] = "1000000" }},
	}
	for _, c := range cases {
		s, ok := schemas[c.typ]
		if !ok {
			t.Errorf("%s: no schema", c.typ)
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(stored(t, c.typ, exs[c.typ]), &m); err != nil {
			t.Fatal(err)
		}
		c.edit(m)
		b, _ := json.Marshal(m)
		if err := validate(s.schema, b); err == nil {
			t.Errorf("%s with %s validates: %s", c.typ, c.what, b)
		}
	}
	// What the Go types write with their zero values validates too: null
	// for a removed cap, and the empty model of an exact_text merge.
	for typ, ev := range map[string]events.Event{
		"account.monthly_cap_set":  events.MonthlyCapSet{},
		"query.claims_merged":      events.ClaimsMerged{Method: events.MergedByExactText, Claims: []events.Claim{}},
		"query.evidence_retrieved": events.EvidenceRetrieved{Query: "the prompt", Backend: "offline", Sources: []events.Citation{}},
	} {
		if err := validate(schemas[typ].schema, stored(t, typ, ev)); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
}

func data(m map[string]any) map[string]any { return m["data"].(map[string]any) }
