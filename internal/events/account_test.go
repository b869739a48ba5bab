package events

import (
	"testing"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

func TestDecideKey(t *testing.T) {
	cases := []struct {
		from, resume, action string
		want                 string // resulting state; "" = no event; "invalid" = an invalid_transition error
	}{
		{StateActive, "", ActionDisable, StateDisabled},
		{StateDisabled, "", ActionDisable, ""},
		{StateDisabled, "", ActionEnable, StateActive},
		{StateActive, "", ActionEnable, ""},
		{StateActive, "", ActionRevoke, StateRevoked},
		{StateDisabled, "", ActionRevoke, StateRevoked},
		{StateRevoked, "", ActionRevoke, ""},
		{StateRevoked, "", ActionEnable, "invalid"},
		{StateRevoked, "", ActionDisable, "invalid"},
		{StateRevoked, "", ActionSuspend, "invalid"},
		{StateRevoked, "", ActionUnsuspend, "invalid"},
		{StateActive, "", ActionSuspend, StateSuspended},
		{StateDisabled, "", ActionSuspend, StateSuspended},
		{StateSuspended, StateDisabled, ActionUnsuspend, StateDisabled},
		{StateSuspended, StateActive, ActionUnsuspend, StateActive},
		{StateSuspended, "", ActionEnable, "invalid"},
		{StateSuspended, "", ActionDisable, "invalid"},
		{StateSuspended, "", ActionRevoke, "invalid"},
		{StateActive, "", ActionUnsuspend, ""},
	}
	for _, c := range cases {
		k := &Key{Fingerprint: "abcdefgh", State: c.from, Resume: c.resume}
		ev, err := DecideKey(k, c.action)
		switch {
		case c.want == "invalid":
			if apperr.Code(err) != apperr.InvalidTransition || ev != nil {
				t.Errorf("%s from %s: %v %v, want an invalid_transition error", c.action, c.from, ev, err)
			}
		case c.want == "":
			if err != nil || ev != nil {
				t.Errorf("%s from %s: %v %v, want no event", c.action, c.from, ev, err)
			}
		default:
			ch, ok := StateChange(ev)
			if err != nil || !ok || ch.To != c.want || ch.From != c.from {
				t.Errorf("%s from %s: %+v %v, want to %s", c.action, c.from, ch, err, c.want)
				continue
			}
			ApplyKeyChange(k, ch, 9)
			if k.State != c.want || k.Seq != 9 {
				t.Errorf("%s from %s: applied state %s seq %d", c.action, c.from, k.State, k.Seq)
			}
		}
	}
	if _, err := DecideKey(&Key{State: StateActive}, "explode"); apperr.Code(err) != apperr.NotFound {
		t.Errorf("unknown action: %v", err)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, ev := range []Event{
		QuerySubmitted{RequestID: "req_1", Models: []ModelRef{{Provider: "provider_a", ModelID: "m"}}},
		ModelAnswered{Model: ModelRef{Provider: "provider_b"}, Answer: "x", Usage: Usage{1, 2}},
		KeyRevoked{KeyStateChanged{Fingerprint: "abcdefgh", From: StateActive, To: StateRevoked}},
	} {
		agg := AggregateQuery
		if _, ok := ev.(KeyRevoked); ok {
			agg = AggregateAccount
		}
		env, err := Wrap(agg, "id1", ev, testTime)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := jsonMarshal(env)
		rec, err := Decode(5, raw)
		if err != nil {
			t.Fatalf("decode %s: %v", env.Type, err)
		}
		if rec.Seq != 5 || rec.Envelope.Subject != "ev."+agg+".id1."+ev.EventName() || AggregateID(rec.Envelope.Subject) != "id1" {
			t.Errorf("%s: envelope %+v", env.Type, rec.Envelope)
		}
		a, _ := jsonMarshal(rec.Event)
		b, _ := jsonMarshal(ev)
		if string(a) != string(b) {
			t.Errorf("%s: round trip %s != %s", env.Type, a, b)
		}
	}
	if _, err := Decode(1, []byte(`{"type":"query.exploded","data":{}}`)); err == nil {
		t.Error("an unknown event type decoded")
	}
}

func TestDecodeForeignFieldOrder(t *testing.T) {
	// An envelope written by another producer, data first, with a "type" key
	// inside its data, still decodes by its own type.
	raw := []byte(`{"data":{"code":"x","message":"type","type":"query.completed"},"schema":1,"time":"2026-11-21T12:00:00Z","subject":"ev.query.r1.failed","source":"s","type":"query.failed","id":"1"}`)
	rec, err := Decode(3, raw)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := rec.Event.(QueryFailed); !ok || f.Code != "x" || rec.Envelope.Type != "query.failed" {
		t.Fatalf("decoded %T %+v", rec.Event, rec.Event)
	}
}
