package projections

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

// wantMarshal fails t unless d.Encode writes what json.Marshal writes.
func wantMarshal(t *testing.T, d *QueryDoc) {
	t.Helper()
	got, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode:\n%s\njson.Marshal:\n%s", got, want)
	}
}

// Every stage of a unify query's document, written by hand, and the
// documents that go through json.Marshal, are what json.Marshal writes.
func TestEncodeIsMarshal(t *testing.T) {
	a := events.ModelRef{Provider: "provider_a", ModelID: "a-1", Simulated: true}
	b := events.ModelRef{Provider: "byom", ModelID: "mine", CustomModel: "cm_<1>"}
	recs := []events.Record{
		record(1, events.QuerySubmitted{RequestID: "req_1", AccountID: `acct_"q"`, KeyFingerprint: "abcd&efg", Mode: events.ModeUnify, Models: []events.ModelRef{a, b}, EstimatedMicros: 1_154_375}),
		record(2, events.QueryStarted{}),
		record(3, events.ModelAnswered{Model: a, Answer: "line\n\t\"quoted\" <b>&</b> \u2028 é \x01\x7f", Usage: events.Usage{InputTokens: 3, OutputTokens: 38},
			UsageSource: events.UsageEstimated, CostMicros: 77_500, LatencyMS: 12, Citations: []events.Citation{{URL: "https://example.com/?a=1&b=2", Title: "T"}, {URL: "u", Snippet: "s"}}}),
		record(4, events.ModelFailed{Model: b, Class: "timeout", Message: "slow"}),
		record(5, events.Synthesized{Model: a, Answer: events.Answer{Text: "one", Conflicts: []events.Conflict{{Topic: "figure", Positions: []events.Position{{Model: "provider_a", Position: "68"}}, Resolution: "majority"}}},
			Usage: events.Usage{InputTokens: 298, OutputTokens: 100}, UsageSource: events.UsageReported, CostMicros: 1, LatencyMS: 3}),
		record(6, events.QueryCompleted{ChargedMicros: ptr(int64(659_000))}),
	}
	for i := range recs {
		wantMarshal(t, FoldQuery(recs[:i+1]))
	}
	// Without the failed model, every stage is written by hand.
	recs = append(recs[:3:3], record(4, events.ModelAnswered{Model: b, Answer: "B"}), recs[4], recs[5])
	for i := range recs {
		d := FoldQuery(recs[:i+1])
		if _, ok := d.appendJSON(nil); !ok {
			t.Fatalf("the document after event %d was not written by hand", i+1)
		}
		wantMarshal(t, d)
	}
	// The modes and parts written by json.Marshal.
	for _, mode := range []string{events.ModeJustify, events.ModeVerify} {
		wantMarshal(t, FoldQuery([]events.Record{record(1, events.QuerySubmitted{RequestID: "req_1", Mode: mode, Models: []events.ModelRef{a}})}))
	}
	wantMarshal(t, FoldQuery([]events.Record{record(1, events.QuerySubmitted{RequestID: "req_1", Mode: events.ModeUnify, Models: []events.ModelRef{a}}),
		record(2, events.QueryFailed{Code: "provider_error", Message: "every selected model failed"})}))
	// Floats at the edges of json's formats, times, and empty parts.
	charged := 1e21
	d := &QueryDoc{Result: Result{Models: []ModelResult{{Credits: 1e-7, Citations: []events.Citation{}}, {Credits: -0.0000001}}, Credits: QueryCredits{Estimated: 123456789.125, Charged: &charged},
		Answer: &events.Answer{Conflicts: []events.Conflict{{}}}, Synthesis: &Synthesis{Credits: 5e-324}, CreatedAt: time.Date(2026, 11, 26, 1, 2, 3, 4, time.FixedZone("x", 5400)),
		StartedAt: &time.Time{}, ToolCalls: []events.ToolCall{}, Files: []AttachedFile{}, Missing: []string{}}}
	wantMarshal(t, d)
	// What json.Marshal refuses, Encode refuses too.
	d.Result.Credits.Estimated = math.NaN()
	if _, err := d.Encode(); err == nil {
		t.Fatal("a NaN credit was encoded")
	}
	d.Result.Credits.Estimated, d.Result.CreatedAt = 1, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := d.Encode(); err == nil {
		t.Fatal("a year past 9999 was encoded")
	}
}

func ptr[T any](v T) *T { return &v }

// Any strings, numbers and shapes of a hand-written document encode as
// json.Marshal encodes them.
func FuzzEncodeIsMarshal(f *testing.F) {
	f.Add("req_1", "line\n\"q\" <&> \u2028", "topic", "\xff\xfe", 1.5, int64(42), int64(1700000000), true, uint8(3))
	f.Add("", "", "", "", 1e-7, int64(-1), int64(0), false, uint8(0))
	f.Fuzz(func(t *testing.T, id, answer, topic, other string, credits float64, n, unix int64, flag bool, shape uint8) {
		at := time.Unix(unix%253402300799, n%1e9).UTC()
		m := ModelResult{Provider: other, ModelID: id, Simulated: flag, Status: topic, Answer: answer, Credits: credits, LatencyMS: n,
			Citations: []events.Citation{{URL: answer, Title: topic, Snippet: other}}}
		if shape&1 != 0 {
			m.Usage, m.UsageSource, m.CustomModel, m.Citations = &events.Usage{InputTokens: int(n), OutputTokens: int(unix)}, topic, answer, nil
		}
		d := &QueryDoc{Seq: uint64(unix), AccountID: id, KeyFingerprint: other, Result: Result{
			RequestID: id, Object: "query", Mode: topic, Status: other, Stage: answer, ProgressPercent: int(n % 101),
			Models: []ModelResult{m, {}}, Credits: QueryCredits{Estimated: credits}, CreatedAt: at}}
		if shape&2 != 0 {
			d.Result.Answer = &events.Answer{Text: answer, Conflicts: []events.Conflict{{Topic: topic, Positions: []events.Position{{Model: id, Position: other}}, Resolution: answer}}}
			d.Result.Synthesis = &Synthesis{Provider: id, ModelID: other, CustomModel: topic, Simulated: flag, Usage: events.Usage{InputTokens: int(n)}, UsageSource: answer, Credits: -credits, LatencyMS: unix}
			d.Result.StartedAt, d.Result.CompletedAt, d.Result.Credits.Charged = &at, &at, &credits
		}
		if shape&4 != 0 {
			d.Result.Models = nil
		}
		if shape&8 != 0 {
			d.Result.Missing = []string{other}
		}
		got, gerr := d.Encode()
		want, werr := json.Marshal(d)
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Encode = %s, %v\njson.Marshal = %s, %v", got, gerr, want, werr)
		}
	})
}
