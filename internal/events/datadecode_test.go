package events

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
)

// dataSamples are events of every query type with every field set, as the
// hand-written reader must read them, plus the zero value of every
// registered type.
func dataSamples() []Event {
	m := ModelRef{Provider: "provider_a", ModelID: "sim-alpha", CustomModel: "byom_1", Simulated: true}
	out := []Event{
		QuerySubmitted{RequestID: "req_1", AccountID: "acc_1", KeyFingerprint: "abcdefgh", Mode: ModeUnify, Prompt: "Wie hoch ist der Eiffelturm? ✓ 日本",
			Models: []ModelRef{m, {Provider: "provider_b", ModelID: "b"}}, EstimatedMicros: 1234567,
			Files: []FileRef{{ID: "file_1", Name: "a.pdf", Kind: "pdf", MediaType: "application/pdf", Bytes: 1 << 40, SHA256: "ab12", Pages: 3, TextChars: 99, NativeFor: []string{"provider_a", "byom_1"}},
				{ID: "file_2", Name: "b.txt", Kind: "text", NativeFor: []string{}}}},
		QuerySubmitted{RequestID: "req_2", Models: []ModelRef{}},
		QueryStarted{},
		ModelAnswered{Model: m, Answer: "an answer\nwith a \"quote\", a tab\t and <html> & more", Citations: []Citation{{URL: "https://example.com/a", Title: "A", Snippet: "s"}, {URL: "u"}},
			Usage: Usage{InputTokens: 12, OutputTokens: -48}, LatencyMS: 5, CostMicros: 999999999999},
		ModelAnswered{Model: m, Answer: "plain", Citations: []Citation{}},
		ModelAnswered{Model: m, Answer: "réponse ✓", Citations: []Citation{{URL: "https://example.com/b", Title: "B", Snippet: "s"}}, Usage: Usage{3, 4}, LatencyMS: 1, CostMicros: 2},
		ModelAnswered{Model: m, Answer: "counted", Usage: Usage{5, 6}, UsageSource: UsageEstimated, LatencyMS: 1, CostMicros: 2},
		ModelFailed{Model: m, Class: "rate_limited", Message: "slow down", UpstreamStatus: 429, LatencyMS: 7},
		ModelFailed{Model: m, Class: "refused", Message: "no", LatencyMS: 7, Usage: &Usage{InputTokens: 30, OutputTokens: 2}, UsageSource: UsageReported},
		ModelRetried{Model: m, Attempt: 2, Class: "timeout", Message: "late", UpstreamStatus: 504, RetryInMS: 250},
		ProgressReported{Stage: "synthesizing", Percent: 80, Message: "almost"},
		Synthesized{Model: m, Answer: Answer{Text: "one answer", Conflicts: []Conflict{{Topic: "height", Positions: []Position{{Model: "a", Position: "300 m"}, {Model: "b", Position: "330 m"}}, Resolution: "330 m with antennas"}, {Topic: "t", Positions: []Position{}}}},
			Usage: Usage{1, 2}, UsageSource: UsageReported, LatencyMS: 3, CostMicros: 4},
		Synthesized{Answer: Answer{Conflicts: []Conflict{}}},
		CreditsSettled{ChargedMicros: 42},
		CreditsSettled{ChargedMicros: 0, Failed: &Failure{Code: "provider_error", Message: "all failed"}},
		AttemptFailed{Attempt: 3, Message: "panic", RetryInMS: 1000},
		QueryCompleted{},
		QueryFailed{Code: "timeout", Message: "took too long"},
		WithCharge(QueryCompleted{}, 1_234_567),
		WithCharge(QueryCompleted{}, 0),
		WithCharge(QueryFailed{Code: "cancelled", Message: "stopped"}, 42),
		CreditsReserved{RequestID: "req_1", AmountMicros: 1208750, LedgerLink: LedgerLink{PrevHash: "65b29917c1b5"}},
		ChargesSettled{RequestID: "req_1", Calls: []SettledCall{
			{CallID: "01M7Z925HBRKA1WVJHGF23GR62", Step: "model_answered", Model: m, InputTokens: 16, OutputTokens: 52, InputPerMillion: 500, OutputPerMillion: 2000, CostMicros: 112000, AmountMicros: 100000, WrittenOffMicros: 12000},
			{CallID: "c2", Step: "synthesized", Model: ModelRef{Provider: "provider_b", ModelID: "b"}},
		}, ChargedMicros: 855500, ReleasedMicros: 353250, Reason: "settled", Ending: &QueryEnding{Status: "failed", Code: "aggregation_failed", Message: "the synthesis failed: \"x\" ✓"}, LedgerLink: LedgerLink{PrevHash: "ab"}},
		ChargesSettled{RequestID: "req_2", Calls: []SettledCall{}, Reason: "settled", Ending: &QueryEnding{Status: "completed"}},
		ChargesSettled{RequestID: "req_3", Calls: []SettledCall{{CallID: "c3", Step: "model_answered", Model: m, CostMicros: 5, AmountMicros: 5}}, ChargedMicros: 120005, ReleasedMicros: 1080000,
			Reason: "cancelled", Ending: &QueryEnding{Status: "failed", Code: "cancelled", Message: CancelledMessage},
			Cancellation: &CancellationCharge{Percent: 10, BasisMicros: 1200050, MinimumMicros: 120005, CostMicros: 120000, AmountMicros: 119000, WrittenOffMicros: 1000}, LedgerLink: LedgerLink{PrevHash: "cd"}},
		ChargesSettled{RequestID: "req_4", Calls: []SettledCall{}, Reason: "cancelled", Cancellation: &CancellationCharge{}},
		ChargesReversed{RequestID: "req_1", Calls: []string{"01M7Z925HBRKA1WVJHGF23GR62", "c2"}, RefundedMicros: 855500, Reason: "the query's events no longer record 1 of the 2 calls its settlement charged", LedgerLink: LedgerLink{PrevHash: "ef"}},
		ChargesReversed{RequestID: "req_2", Calls: []string{}},
	}
	types := Types()
	slices.Sort(types)
	for _, typ := range types {
		out = append(out, deref(registry[typ]()))
	}
	return out
}

// typeOf returns the registered type of ev.
func typeOf(t testing.TB, ev Event) string {
	for typ, mk := range registry {
		if reflect.TypeOf(deref(mk())) == reflect.TypeOf(ev) {
			return typ
		}
	}
	t.Fatalf("%T is not registered", ev)
	return ""
}

// agree checks that whatever the hand-written reader reads from data,
// encoding/json reads the same from it, and reports whether the reader took it.
func agree(t *testing.T, typ string, data []byte) bool {
	t.Helper()
	fast := dataDecoders[typ]
	if fast == nil {
		return false
	}
	r := dataReader{b: data}
	got := fast(&r)
	if r.end(); r.bad {
		return false
	}
	want := registry[typ]()
	if err := json.Unmarshal(data, want); err != nil {
		t.Fatalf("%s %s: read by hand as %+v, encoding/json refuses it: %v", typ, data, got, err)
	}
	if !reflect.DeepEqual(got, deref(want)) {
		t.Fatalf("%s %s:\n by hand       %#v\n encoding/json %#v", typ, data, got, deref(want))
	}
	return true
}

// Every event type's data is decoded as encoding/json decodes it, and the
// data of every event with a hand-written reader (the query's own events,
// the ledger's events of a query),
// as json.Marshal writes it, is read by hand, escapes included.
func TestDecodeDataMatchesEncodingJSON(t *testing.T) {
	// The ledger's events of a query: its reservation, its settlement, and
	// the reversal of a settlement.
	for _, typ := range []string{"account.credits_reserved", "account.charges_settled", "account.charges_reversed"} {
		if dataDecoders[typ] == nil {
			t.Errorf("%s has no hand-written reader", typ)
		}
	}
	for _, ev := range dataSamples() {
		typ := typeOf(t, ev)
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		byHand := agree(t, typ, data)
		if dataDecoders[typ] != nil && !byHand {
			t.Errorf("%s %s: not read by hand", typ, data)
		}
		got, err := decodeData(typ, data, registry[typ])
		if err != nil {
			t.Fatalf("%s %s: %v", typ, data, err)
		}
		want := registry[typ]()
		if err := json.Unmarshal(data, want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, deref(want)) {
			t.Errorf("%s: got %#v, encoding/json %#v", typ, got, deref(want))
		}
	}
}

// The forms the reader leaves to encoding/json get encoding/json's answer,
// errors included.
func TestDecodeDataLeavesOtherFormsToEncodingJSON(t *testing.T) {
	for _, c := range []struct{ typ, data string }{
		{"query.model_answered", `{"Answer":"case"}`},
		{"query.model_answered", `{"answer":"a","answer":"b"}`},
		{"query.model_answered", `{"answer":null,"citations":null}`},
		{"query.model_answered", `{"latency_ms":1.5}`},
		{"query.model_answered", `{"latency_ms":1e3}`},
		{"query.model_answered", `{"latency_ms":01}`},
		{"query.model_answered", `{"latency_ms":99999999999999999999}`},
		{"query.model_answered", `{"answer":"\u00e9\n\"\\\/\b\f\r\t\u003C\u2028"}`},
		{"query.model_answered", `{"answer":"\ud83d\ude00"}`},
		{"query.model_answered", `{"answer":"\ud83d"}`},
		{"query.model_answered", `{"answer":"\ude00x"}`},
		{"query.model_answered", `{"answer":"\u12"}`},
		{"query.model_answered", `{"answer":"\u12G4"}`},
		{"query.model_answered", `{"answer":"\x"}`},
		{"query.model_answered", `{"answer":"a\`},
		{"query.model_answered", "{\"answer\":\"\\n\xff\"}"},
		{"query.model_answered", "{\"answer\":\"\\n\x02\"}"},
		{"query.model_answered", "{\"answer\":\"\xff\"}"},
		{"query.model_answered", "{\"answer\":\"a\x01\"}"},
		{"query.model_answered", `{"unknown":{"x":[1,2]}}`},
		{"query.model_answered", `{"answer":"a"`},
		{"query.model_answered", `{"answer":"a"} x`},
		{"query.model_answered", ` { "answer" : "a" , "usage" : { "input_tokens" : 1 } } `},
		{"query.credits_settled", `{"failed":null}`},
		{"query.started", `{"x":1}`},
		{"query.started", `null`},
		{"query.completed", `[]`},
		{"query.submitted", `{"models":[{"simulated":tru}]}`},
		{"query.submitted", `{"models":[{"simulated":true},]}`},
		{"query.submitted", `{"models":[]}`},
		{"account.charges_settled", `{"calls":null,"ending":null}`},
		{"account.charges_settled", `{"ending":{}}`},
		{"account.charges_settled", `{"calls":[{"model":{"provider":"a"},"cost_micros":1000000000000000000}]}`},
		{"account.charges_settled", `{"calls":[{"call_id":"a","call_id":"b"}]}`},
		{"account.charges_settled", `{"calls":[{"Call_ID":"a"}]}`},
		{"account.credits_reserved", `{"amount_micros":-5,"prev_hash":""}`},
		{"account.charges_settled", `{"cancellation":null}`},
		{"account.charges_settled", `{"cancellation":{"percent":10,"percent":20}}`},
		{"account.charges_settled", `{"cancellation":{"percent":1.5}}`},
		{"account.charges_settled", `{"cancellation":{"basis_micros":"1"}}`},
		{"account.charges_reversed", `{"calls":null}`},
		{"account.charges_reversed", `{"calls":["a",1]}`},
		{"account.charges_reversed", `{"refunded_micros":-1,"reason":"\u00e9"}`},
		{"account.charges_reversed", `{"request_id":"a","Request_ID":"b"}`},
	} {
		_ = agree(t, c.typ, []byte(c.data))
		got, gotErr := decodeData(c.typ, []byte(c.data), registry[c.typ])
		want := registry[c.typ]()
		wantErr := json.Unmarshal([]byte(c.data), want)
		if (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s %s: error %v, encoding/json: %v", c.typ, c.data, gotErr, wantErr)
			continue
		}
		if gotErr == nil && !reflect.DeepEqual(got, deref(want)) {
			t.Errorf("%s %s: got %#v, encoding/json %#v", c.typ, c.data, got, deref(want))
		}
	}
}

// FuzzDecodeData checks that whatever the hand-written reader takes,
// encoding/json reads into the same event.
func FuzzDecodeData(f *testing.F) {
	types := Types()
	slices.Sort(types)
	for _, ev := range dataSamples() {
		data, err := json.Marshal(ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(slices.Index(types, typeOf(f, ev))), data)
	}
	f.Fuzz(func(t *testing.T, n uint8, data []byte) {
		typ := types[int(n)%len(types)]
		_ = agree(t, typ, data)
		if _, err := decodeData(typ, data, registry[typ]); err != nil {
			if json.Unmarshal(data, registry[typ]()) == nil {
				t.Fatalf("%s %s: refused, encoding/json takes it: %v", typ, data, err)
			}
		}
	})
}

// BenchmarkDecodeSettlement decodes the data of a settlement of five
// calls: by hand, and through encoding/json.
func BenchmarkDecodeSettlement(b *testing.B) {
	var calls []SettledCall
	for i := range 5 {
		calls = append(calls, SettledCall{CallID: NewID(), Step: "model_answered", Model: ModelRef{Provider: "provider_a", ModelID: "sim-alpha-standard", Simulated: true},
			InputTokens: 16 + i, OutputTokens: 52, InputPerMillion: 500, OutputPerMillion: 2000, CostMicros: 112000, AmountMicros: 112000})
	}
	data, _ := json.Marshal(ChargesSettled{RequestID: "req_01M7Z925H53KKRXE54AMR666N7", Calls: calls, ChargedMicros: 560000, ReleasedMicros: 640000,
		Reason: "settled", Ending: &QueryEnding{Status: "completed"}, LedgerLink: LedgerLink{PrevHash: "65b29917c1b5da3b7ec044875e1265427f503fabbcc29b8b4bc781c023d49a12"}})
	const typ = "account.charges_settled"
	b.Run("by-hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeData(typ, data, registry[typ]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ev := registry[typ]()
			if err := json.Unmarshal(data, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
