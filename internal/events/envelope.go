// Package events is crosscheck's event vocabulary: the envelope every event
// travels in, the past-tense event types of each aggregate, and the pure folds
// and decisions over them. It imports no infrastructure.
package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Source is the envelope source of every event this service writes.
const Source = "crosscheck"

// SchemaVersion is the schema version of the event shapes in this package. A new
// shape of an existing event type is a new version; a type is never renamed.
const SchemaVersion = 1

// Event is one past-tense fact about an aggregate.
type Event interface {
	// EventName is the event's name within its aggregate, the last token of its
	// subject, for example "model_answered".
	EventName() string
}

// Envelope carries one event. Its attribute names follow CloudEvents. The ID is
// a ULID and is also the Nats-Msg-Id of the publish, so a retried publish is
// deduplicated by the server.
type Envelope struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Source  string          `json:"source"`
	Subject string          `json:"subject"`
	Time    time.Time       `json:"time"`
	Schema  int             `json:"schema"`
	Data    json.RawMessage `json:"data"`
}

// Record is an envelope as stored: with its stream sequence and decoded
// event. Decode leaves Envelope.Data empty; Raw holds the stored bytes.
type Record struct {
	Seq      uint64
	Envelope Envelope
	Event    Event
	Raw      []byte
	// Replayed is set by a consumer for an event it may have applied
	// before (one stored before the consumer started).
	Replayed bool
}

// Encode returns the envelope as stored, the bytes json.Marshal gives for
// an envelope whose Data is compact JSON, as Wrap makes it: Data is written
// as it is (json.Marshal would compact it again, and refuse what is not
// JSON). The rest is written without reflection when none of its strings
// needs an escape (the service's ids, types and subjects never do),
// through json.Marshal otherwise.
func (e Envelope) Encode() ([]byte, error) {
	if !plain(e.ID) || !plain(e.Type) || !plain(e.Source) || !plain(e.Subject) || len(e.Data) == 0 {
		return json.Marshal(e)
	}
	b := make([]byte, 0, len(e.Data)+len(e.ID)+len(e.Type)+len(e.Source)+len(e.Subject)+120)
	b = append(b, `{"id":"`...)
	b = append(b, e.ID...)
	b = append(b, `","type":"`...)
	b = append(b, e.Type...)
	b = append(b, `","source":"`...)
	b = append(b, e.Source...)
	b = append(b, `","subject":"`...)
	b = append(b, e.Subject...)
	b = append(b, `","time":`...)
	var err error
	if b, err = e.Time.AppendText(append(b, '"')); err != nil {
		return json.Marshal(e) // a year outside what RFC 3339 writes: json.Marshal says so
	}
	b = append(b, `","schema":`...)
	b = strconv.AppendInt(b, int64(e.Schema), 10)
	b = append(b, `,"data":`...)
	b = append(b, e.Data...)
	return append(b, '}'), nil
}

// plain reports whether json.Marshal writes s between quotes as it is:
// printable ASCII other than ", \ and the HTML characters it escapes.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// Subject returns the subject of an event of aggregate with id: ev.<aggregate>.<id>.<name>.
func Subject(aggregate, id, name string) string {
	return "ev." + aggregate + "." + id + "." + name
}

// Filter returns the subject filter that matches every event of one aggregate instance.
func Filter(aggregate, id string) string { return "ev." + aggregate + "." + id + ".>" }

// NewID returns a new ULID string.
func NewID() string { return ulid.Make().String() }

// ValidPrefixedID reports whether id is prefix, an underscore and a new id
// in lower case (26 digits and lower-case letters), the form of the ids of
// accounts (acct_) and customer-owned models (byom_).
func ValidPrefixedID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix+"_")
	if !ok || len(rest) != 26 {
		return false
	}
	for _, c := range rest {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// Wrap puts ev into a new envelope for the aggregate instance id.
func Wrap(aggregate, id string, ev Event, now time.Time) (Envelope, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return Envelope{}, fmt.Errorf("encode %s: %w", ev.EventName(), err)
	}
	return Envelope{
		ID:      NewID(),
		Type:    aggregate + "." + ev.EventName(),
		Source:  Source,
		Subject: Subject(aggregate, id, ev.EventName()),
		Time:    now.UTC(),
		Schema:  SchemaVersion,
		Data:    data,
	}, nil
}

// AggregateID returns the id token of an event subject
// ev.<aggregate>.<id>.<name>, or of a subject below it (an account's ledger,
// ev.account.<id>.ledger.<name>); "" for any other subject.
func AggregateID(subject string) string {
	rest, ok := strings.CutPrefix(subject, "ev.")
	if !ok {
		return ""
	}
	_, rest, ok = strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	id, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return id
}

var registry = map[string]func() Event{}

// typeNames maps every registered type to itself: a decoded envelope's type
// is the registered string, not a copy of its bytes.
var typeNames = map[string]string{}

func register(aggregate string, fns ...func() Event) {
	for _, fn := range fns {
		typ := aggregate + "." + fn().EventName()
		registry[typ], typeNames[typ] = fn, typ
	}
}

// Types lists every registered event type.
func Types() []string {
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	return out
}

// typed is an envelope whose data decodes straight into its event.
type typed struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Source  string    `json:"source"`
	Subject string    `json:"subject"`
	Time    time.Time `json:"time"`
	Schema  int       `json:"schema"`
	Data    any       `json:"data"`
}

// Decode decodes an envelope and its event from stored bytes. Envelopes in
// the form Wrap's envelope marshals to (the header fields in their order,
// plain strings, data last) have their header read by hand and only their
// data decoded into the event; anything else is decoded in full, the type
// read first. The data of the query events is read without reflection (see
// decodeData). Both give the same record, and an error for invalid JSON.
func Decode(seq uint64, raw []byte) (Record, error) { return DecodeStored(seq, "", raw) }

// DecodeStored is Decode for an event stored at subject: when the
// envelope's subject is the same, the record's envelope shares that string
// instead of a copy.
func DecodeStored(seq uint64, subject string, raw []byte) (Record, error) {
	if env, data, ok := scanHeader(raw, subject); ok {
		mk, known := registry[env.Type]
		if !known {
			return Record{}, fmt.Errorf("decode envelope at %d: unknown event type %q", seq, env.Type)
		}
		// Bytes that are one JSON value are the whole data (a value
		// followed by more fields is not one); anything else is decoded in
		// full, which tells a later field from invalid JSON.
		if ev, err := decodeData(env.Type, data, mk); err == nil {
			return Record{Seq: seq, Envelope: env, Event: ev, Raw: raw}, nil
		}
	}
	return decodeFull(seq, raw)
}

// decodeFull decodes an envelope of any form in one pass: the type is read
// first, then the whole envelope into that event type.
func decodeFull(seq uint64, raw []byte) (Record, error) {
	typ, err := peekType(raw)
	if err != nil {
		return Record{}, fmt.Errorf("decode envelope at %d: %w", seq, err)
	}
	mk, ok := registry[typ]
	if !ok {
		return Record{}, fmt.Errorf("decode envelope at %d: unknown event type %q", seq, typ)
	}
	ev := mk()
	t := typed{Data: ev}
	if err := json.Unmarshal(raw, &t); err != nil {
		return Record{}, fmt.Errorf("decode %s at %d: %w", typ, seq, err)
	}
	if t.Type != typ {
		return Record{}, fmt.Errorf("decode envelope at %d: ambiguous type", seq)
	}
	env := Envelope{ID: t.ID, Type: t.Type, Source: t.Source, Subject: t.Subject, Time: t.Time, Schema: t.Schema}
	// Events are kept as values, not pointers, so type switches read plainly.
	return Record{Seq: seq, Envelope: env, Event: deref(ev), Raw: raw}, nil
}

// scanHeader reads the header of an envelope exactly as json.Marshal writes
// an Envelope: {"id":"…","type":"…","source":"…","subject":"…","time":"…",
// "schema":N,"data":…}, every string plain ASCII without escapes. It
// returns the header (Data left empty) and the bytes from the data to the
// envelope's closing brace, not yet validated; ok is false for any other form, which the caller decodes in
// full. The type, the source and the subject share the registered type,
// Source and subject when they equal them, so only the id is copied.
func scanHeader(raw []byte, subject string) (env Envelope, data []byte, ok bool) {
	rest := raw
	str := func(key string) ([]byte, bool) {
		if !bytes.HasPrefix(rest, []byte(key)) {
			return nil, false
		}
		rest = rest[len(key):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 {
			return nil, false
		}
		for _, c := range rest[:end] {
			if c == '\\' || c < 0x20 || c >= 0x80 {
				return nil, false
			}
		}
		v := rest[:end]
		rest = rest[end+1:]
		return v, true
	}
	var id, typ, source, subj, at []byte
	if id, ok = str(`{"id":"`); !ok {
		return
	}
	if typ, ok = str(`,"type":"`); !ok {
		return
	}
	if source, ok = str(`,"source":"`); !ok {
		return
	}
	if subj, ok = str(`,"subject":"`); !ok {
		return
	}
	if at, ok = str(`,"time":"`); !ok {
		return
	}
	t, err := time.Parse(time.RFC3339, string(at))
	if err != nil {
		return Envelope{}, nil, false
	}
	env.ID, env.Time = string(id), t
	if env.Type, ok = typeNames[string(typ)]; !ok {
		env.Type = string(typ)
	}
	env.Source = Source
	if string(source) != Source {
		env.Source = string(source)
	}
	env.Subject = subject
	if string(subj) != subject {
		env.Subject = string(subj)
	}
	const schema, dataKey = `,"schema":`, `,"data":`
	if !bytes.HasPrefix(rest, []byte(schema)) {
		return Envelope{}, nil, false
	}
	rest = rest[len(schema):]
	n := 0
	for n < len(rest) && n < 9 && rest[n] >= '0' && rest[n] <= '9' {
		env.Schema = env.Schema*10 + int(rest[n]-'0')
		n++
	}
	if n == 0 || (n > 1 && rest[0] == '0') {
		return Envelope{}, nil, false
	}
	rest = rest[n:]
	if !bytes.HasPrefix(rest, []byte(dataKey)) || len(rest) < len(dataKey)+1 || rest[len(rest)-1] != '}' {
		return Envelope{}, nil, false
	}
	return env, rest[len(dataKey) : len(rest)-1], true
}

// peekType finds the envelope's "type" without decoding the rest. Envelopes
// written by this package put it before "data"; anything else falls back to a
// full decode of the header fields.
func peekType(raw []byte) (string, error) {
	const key = `"type":"`
	if i := bytes.Index(raw, []byte(key)); i >= 0 {
		rest := raw[i+len(key):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 && bytes.IndexByte(rest[:j], '\\') < 0 && i < bytes.Index(raw, []byte(`"data":`)) {
			return string(rest[:j]), nil
		}
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return "", err
	}
	return head.Type, nil
}

func deref(ev Event) Event {
	return reflect.ValueOf(ev).Elem().Interface().(Event)
}
