package events

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// A record decoded with the subject it is stored at shares that subject,
// the registered type and Source; it equals the record Decode gives.
func TestDecodeStoredSharesStrings(t *testing.T) {
	env, err := Wrap(AggregateQuery, "req_1", QueryCompleted{}, testTime)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := jsonMarshal(env)
	subject := strings.Clone(env.Subject)
	got, err := DecodeStored(3, subject, raw)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Decode(3, raw)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if !sameString(got.Envelope.Subject, subject) {
		t.Error("the subject was copied")
	}
	if !sameString(got.Envelope.Type, typeNames["query.completed"]) || !sameString(got.Envelope.Source, Source) {
		t.Error("the type or the source was copied")
	}
	// Another subject is not taken for the envelope's.
	other, err := DecodeStored(3, "ev.query.req_2.completed", raw)
	if err != nil || other.Envelope.Subject != env.Subject {
		t.Errorf("with another subject: %q, %v", other.Envelope.Subject, err)
	}
}

// sameString reports whether a and b are one string in memory.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// FuzzAggregateID: the id token is the third of at least four, of a
// subject starting with ev.
func FuzzAggregateID(f *testing.F) {
	for _, s := range []string{"ev.query.req_1.completed", "ev.account.a.ledger.x", "ev.query.req_1", "ev..x.y", "ev.query..y", "x.query.a.b", "ev", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := ""
		if parts := strings.SplitN(s, ".", 4); len(parts) == 4 && parts[0] == "ev" {
			want = parts[2]
		}
		if got := AggregateID(s); got != want {
			t.Fatalf("%q: %q, want %q", s, got, want)
		}
	})
}

// A long string whose first escape comes early is read whole, as
// encoding/json reads it.
func TestDecodeDataLongEscapedString(t *testing.T) {
	answer := "first line\n" + strings.Repeat("a \"quoted\" <b> & ✓ \u2028 tab\t ", 80) + "\\end"
	ev := ModelAnswered{Model: ModelRef{Provider: "provider_a", ModelID: "m"}, Answer: answer}
	data, _ := jsonMarshal(ev)
	got, err := decodeData("query.model_answered", data, registry["query.model_answered"])
	if err != nil {
		t.Fatal(err)
	}
	if got.(ModelAnswered).Answer != answer {
		t.Fatalf("got %q", got.(ModelAnswered).Answer)
	}
	r := dataReader{b: data}
	r.modelAnswered()
	if r.end(); r.bad {
		t.Fatal("the hand-written reader refused it")
	}
}
