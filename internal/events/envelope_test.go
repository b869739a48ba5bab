package events

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// The header read by hand gives the record a full decode gives, and every
// envelope it does not recognise, or that is not valid JSON, is decoded in
// full or refused as a full decode refuses it.
func TestDecodeMatchesFullDecode(t *testing.T) {
	var wrapped []string
	for _, ev := range []Event{
		QuerySubmitted{RequestID: "req_1", Mode: ModeUnify, Models: []ModelRef{{Provider: "provider_a", ModelID: "m"}}, EstimatedMicros: 7},
		ModelAnswered{Model: ModelRef{Provider: "provider_b"}, Answer: "a \"quoted\" <answer> ✓", Usage: Usage{1, 2}, CostMicros: 3},
		QueryFailed{Code: "provider_error", Message: "all failed"},
		KeyRevoked{KeyStateChanged{Fingerprint: "abcdefgh", From: StateActive, To: StateRevoked}},
	} {
		for _, at := range []time.Time{testTime, testTime.Add(123456789 * time.Nanosecond)} {
			env, err := Wrap(AggregateQuery, "req_1", ev, at)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := jsonMarshal(env)
			wrapped = append(wrapped, string(raw))
		}
	}
	first := wrapped[0]
	cases := append(wrapped,
		strings.Replace(first, `"subject":"ev.query`, `"subject":"ev.\u0071uery`, 1), // an escape in the header
		strings.Replace(first, `"source":"crosscheck"`, `"source":"cröss"`, 1),       // not ASCII
		first+" ", // trailing space
		strings.Replace(first, `"schema":1`, `"schema":01`, 1), // a number JSON refuses
		strings.Replace(first, `"schema":1`, `"schema":1.5`, 1),
		strings.Replace(first, `"time":"`, `"time":"x`, 1),
		strings.TrimSuffix(first, "}}")+"}",      // data cut short
		strings.TrimSuffix(first, "}")+`,"x":1}`, // a field after data
		strings.Replace(first, `"data":{`, `"data":{"request_id":"a","request_id":"b",`, 1),
		strings.Replace(first, `"type":"query.submitted"`, `"type":"query.exploded"`, 1),
		`{"id":"1","type":"query.completed","source":"s","subject":"ev.query.r.completed","time":"2026-11-21T12:00:00Z","schema":1,"data":{}}`,
		`{"id":"1","type":"query.completed","source":"s","subject":"ev.query.r.completed","time":"2026-11-21T12:00:00Z","schema":1,"data":nul}`,
	)
	for _, raw := range cases {
		got, gotErr := Decode(9, []byte(raw))
		want, wantErr := decodeFull(9, []byte(raw))
		if (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s:\n error %v, a full decode: %v", raw, gotErr, wantErr)
			continue
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got  %+v\n want %+v", raw, got, want)
		}
	}
}

// BenchmarkDecode decodes a model answer: by its header read by hand, and
// in full.
func BenchmarkDecode(b *testing.B) {
	env, err := Wrap(AggregateQuery, "req_01M7Z5T4Q295N5DJSD8HA71RYY", ModelAnswered{
		Model: ModelRef{Provider: "provider_a", ModelID: "sim-alpha-standard", Simulated: true}, Answer: strings.Repeat("an answer ", 20), Usage: Usage{InputTokens: 12, OutputTokens: 48},
	}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := jsonMarshal(env)
	for name, decode := range map[string]func(uint64, []byte) (Record, error){"header": Decode, "full": decodeFull} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decode(1, raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
