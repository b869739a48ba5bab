package events_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

// An envelope's encoding is json.Marshal's, byte for byte: the stored
// bytes are what the hash chain hashes and what every reader reads.
func TestEnvelopeEncodeIsMarshal(t *testing.T) {
	at := time.Date(2026, 11, 21, 14, 44, 43, 686479527, time.UTC)
	var envs []events.Envelope
	for _, ev := range []events.Event{
		events.QuerySubmitted{RequestID: "req_01M7Z925H53KKRXE54AMR666N7", Prompt: "¿Qué <b>tal</b> & \"más\"?\u2028\x01"},
		events.ChargesSettled{RequestID: "req_01M7Z925H53KKRXE54AMR666N7", Calls: []events.SettledCall{{CallID: "c", CostMicros: 5}}, Ending: &events.QueryEnding{Status: "completed"}},
		events.AccountCreated{AccountID: "acct_x", Name: "n", Plan: events.PlanFree},
	} {
		env, err := events.Wrap(events.AggregateQuery, "req_01M7Z925H53KKRXE54AMR666N7", ev, at)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
		for _, odd := range []string{"ev.query.<x>.y", "ev.query.ä.y", "ev.query.\"x\".y", "ev.query.x\\.y", "ev.query.&.y"} {
			e := env
			e.Subject = odd
			envs = append(envs, e)
		}
		e := env
		e.Time = at.In(time.FixedZone("x", 3600)).Truncate(time.Second)
		envs = append(envs, e)
	}
	for _, env := range envs {
		want, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		got, err := env.Encode()
		if err != nil || string(got) != string(want) {
			t.Errorf("Encode:\n%s (%v)\njson.Marshal:\n%s", got, err, want)
		}
	}
	bad := envs[0]
	bad.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := bad.Encode(); err == nil {
		t.Error("an envelope of the year 10000 was encoded; json.Marshal refuses it")
	}
}

// Whatever its strings, an envelope of compact data encodes as json.Marshal
// encodes it.
func FuzzEnvelopeEncode(f *testing.F) {
	f.Add("01M7Z925H53KKRXE54AMR666N7", "query.submitted", "ev.query.req_1.submitted", "a prompt", int64(1763736283686479527))
	f.Add("<", "&", "\u2028", "\xff", int64(0))
	f.Fuzz(func(t *testing.T, id, typ, subject, text string, nanos int64) {
		data, _ := json.Marshal(map[string]string{"text": text})
		env := events.Envelope{ID: id, Type: typ, Source: events.Source, Subject: subject, Time: time.Unix(0, nanos).UTC(), Schema: events.SchemaVersion, Data: data}
		want, werr := json.Marshal(env)
		got, gerr := env.Encode()
		if (werr == nil) != (gerr == nil) || string(got) != string(want) {
			t.Fatalf("Encode %q (%v), json.Marshal %q (%v)", got, gerr, want, werr)
		}
	})
}

// BenchmarkEnvelopeEncode encodes a settlement of five calls as stored, by
// hand and through json.Marshal.
func BenchmarkEnvelopeEncode(b *testing.B) {
	var calls []events.SettledCall
	for i := range 5 {
		calls = append(calls, events.SettledCall{CallID: events.NewID(), Step: "model_answered", Model: events.ModelRef{Provider: "provider_a", ModelID: "sim-alpha-standard", Simulated: true},
			InputTokens: 16 + i, OutputTokens: 52, InputPerMillion: 500, OutputPerMillion: 2000, CostMicros: 112000, AmountMicros: 112000})
	}
	env, err := events.WrapLedger("acct_01m7z91y1xvh71xatygj0mvpqm", events.ChargesSettled{RequestID: "req_01M7Z925H53KKRXE54AMR666N7", Calls: calls,
		ChargedMicros: 560000, ReleasedMicros: 640000, Reason: "settled", Ending: &events.QueryEnding{Status: "completed"}}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := env.Encode(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(env); err != nil {
				b.Fatal(err)
			}
		}
	})
}
