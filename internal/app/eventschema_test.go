package app

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/crosscheck/crosscheck/internal/events"
)

// eventSchemaDir holds the JSON Schema of each event type,
// <type>.json, relative to this package's directory.
const eventSchemaDir = "../../api/events"

// eventTypeSchema is the schema of one event type, read once.
type eventTypeSchema struct {
	file string
	// one validates one stored event.
	one *openapi3.Schema
	// many validates an array of stored events of the type at once: the
	// schema as its items, its $defs hoisted to the root. kin-openapi
	// compiles a schema on every validation, so a batch per type costs one
	// compilation instead of one per event.
	many *openapi3.Schema
}

var eventSchemas struct {
	once   sync.Once
	byType map[string]*eventTypeSchema
	err    error
}

// loadEventSchemas reads the schema of every event type once.
func loadEventSchemas() (map[string]*eventTypeSchema, error) {
	eventSchemas.once.Do(func() {
		eventSchemas.byType, eventSchemas.err = readEventSchemas()
	})
	return eventSchemas.byType, eventSchemas.err
}

func readEventSchemas() (map[string]*eventTypeSchema, error) {
	files, err := filepath.Glob(filepath.Join(eventSchemaDir, "*.*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no event schemas in %s", eventSchemaDir)
	}
	out := map[string]*eventTypeSchema{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		one := &openapi3.Schema{}
		if err := json.Unmarshal(b, one); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		var item map[string]any
		if err := json.Unmarshal(b, &item); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		batch := map[string]any{"type": "array", "items": item}
		if defs, ok := item["$defs"]; ok {
			batch["$defs"] = defs
			delete(item, "$defs")
		}
		delete(item, "$schema")
		bb, err := json.Marshal(batch)
		if err != nil {
			return nil, err
		}
		many := &openapi3.Schema{}
		if err := json.Unmarshal(bb, many); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		typ := strings.TrimSuffix(filepath.Base(f), ".json")
		out[typ] = &eventTypeSchema{file: filepath.Join("api/events", filepath.Base(f)), one: one, many: many}
	}
	return out, nil
}

// checkEventSchemas validates the stored bytes of each record against the
// JSON Schema of its event type in api/events, and fails the test for each
// record that does not match, with its type, subject and the validation
// error. The records are those of h.streamRecords.
func checkEventSchemas(t testing.TB, recs []events.Record) {
	t.Helper()
	schemas, err := loadEventSchemas()
	if err != nil {
		t.Errorf("event schemas: %v", err)
		return
	}
	byType := map[string][]events.Record{}
	for _, r := range recs {
		byType[r.Envelope.Type] = append(byType[r.Envelope.Type], r)
	}
	opt := openapi3.EnableJSONSchema2020()
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		rs := byType[typ]
		s := schemas[typ]
		if s == nil {
			t.Errorf("event %s %s (seq %d): no schema for type %q in %s", typ, rs[0].Envelope.Subject, rs[0].Seq, typ, eventSchemaDir)
			continue
		}
		values := make([]any, len(rs))
		decoded := true
		for i, r := range rs {
			if err := json.Unmarshal(r.Raw, &values[i]); err != nil {
				t.Errorf("event %s %s (seq %d): the stored bytes are not JSON: %v", typ, r.Envelope.Subject, r.Seq, err)
				decoded = false
			}
		}
		if !decoded || s.many.VisitJSON(values, opt) == nil {
			continue
		}
		// Something does not match: find what, one event at a time.
		reported := 0
		for i, r := range rs {
			err := s.one.VisitJSON(values[i], opt)
			if err == nil {
				continue
			}
			if reported++; reported > 5 {
				t.Errorf("event %s: more events do not match %s", typ, s.file)
				break
			}
			t.Errorf("event %s %s (seq %d) does not match %s: %s\nstored: %s", typ, r.Envelope.Subject, r.Seq, s.file, schemaErrorLine(err), clip(r.Raw, 2000))
		}
		if reported == 0 {
			t.Errorf("event %s: the %d events do not match %s together, yet each does", typ, len(rs), s.file)
		}
	}
}

// schemaErrorLine is the first line of a kin-openapi validation error, the
// one that says where and why; the lines after it repeat the value.
func schemaErrorLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	for {
		rest, ok := strings.CutPrefix(line, "validation failed due to: ")
		if !ok {
			return line
		}
		line = rest
	}
}

func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// TestEventsOfARunValidate runs a query of each mode and validates every
// event the run stored against its schema.
func TestEventsOfARunValidate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	for _, mode := range []string{"unify", "justify", "verify"} {
		r := h.submit(key, map[string]any{"mode": mode, "prompt": "Tell me about Mount Everest, the Danube and the Eiffel Tower."})
		if r.status != 202 {
			t.Fatalf("submit %s: %d %s", mode, r.status, r.body)
		}
		id := r.json(t)["request_id"].(string)
		if res := h.wait(key, id, 30*time.Second); res["status"] != "completed" {
			t.Fatalf("%s query %s: %v", mode, id, res["status"])
		}
	}
	recs := append(h.streamRecords("QUERIES"), h.streamRecords("ACCOUNTS")...)
	checkEventSchemas(t, recs)
	seen := map[string]bool{}
	for _, r := range recs {
		seen[r.Envelope.Type] = true
	}
	// 18: the money of a query is a reservation and a settlement (per-call
	// debits and releases are what earlier versions wrote), its charge is on
	// its terminal event (credits_settled is what earlier versions wrote).
	if len(seen) < 18 {
		t.Errorf("the run stored %d event types, want at least 18: %v", len(seen), slices.Sorted(maps.Keys(seen)))
	}
	t.Logf("%d events of %d types checked", len(recs), len(seen))
}
