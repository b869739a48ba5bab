package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

// snapshotFold is an account with every part a snapshot holds: keys, a
// suspended one among them, customer-owned models (one tested, one with
// its key rotated), ledger events in this layout and in the one before it,
// open queries with calls charged, and a cap.
func snapshotFold(t *testing.T) *events.Account {
	t.Helper()
	const id = "acct_01m8000000000000000000snap"
	a := &events.Account{}
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	apply := func(subject string, ev events.Event) {
		t.Helper()
		seq := a.LastSeq + 3 // other accounts' events in between
		linked, _ := events.Linked(ev, a.Ledger.Head)
		env, err := events.Wrap(events.AggregateAccount, id, linked, at.Add(time.Duration(seq)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if subject != "" {
			env.Subject = subject
		}
		raw, _ := json.Marshal(env)
		a.Apply(events.Record{Seq: seq, Envelope: env, Event: linked, Raw: raw})
	}
	apply("", events.AccountCreated{AccountID: id, Name: "snap", Plan: events.PlanPro})
	apply("", events.KeyCreated{Fingerprint: "key00001", Name: "one", SecretHash: "h1", AUPAccepted: true})
	apply("", events.KeyCreated{Fingerprint: "key00002", Name: "two", SecretHash: "h2", AUPAccepted: true})
	apply("", events.KeySuspended{KeyStateChanged: events.KeyStateChanged{Fingerprint: "key00002", From: events.StateActive, To: events.StateSuspended}})
	apply("", events.BYOMConnected{ModelID: "byom_1", Name: "local", Kind: "openai-compatible", State: events.BYOMUnverified})
	apply("", events.BYOMConnected{ModelID: "byom_2", Name: "hosted", Kind: "openai-compatible", State: events.BYOMActive, Secret: &events.Sealed{KeyID: "mk_1", Ciphertext: "c1"}})
	apply("", events.BYOMTested{ModelID: "byom_1", OK: true})
	apply("", events.BYOMKeyRotated{ModelID: "byom_2", Secret: events.Sealed{KeyID: "mk_2", Ciphertext: "c2"}})
	apply("ev.account."+id+".ledger.credits_granted", events.CreditsGranted{AmountMicros: 300 * events.MicrosPerCredit, Reason: "plan pro", Period: "2026-11"})
	apply("", events.CreditsReserved{RequestID: "req_a", AmountMicros: 2 * events.MicrosPerCredit})
	apply(events.LedgerSubject(id), events.CreditsReserved{RequestID: "req_b", AmountMicros: 3 * events.MicrosPerCredit})
	apply(events.LedgerSubject(id), events.CreditsDebited{RequestID: "req_b", CallID: "c1", CostMicros: 500, AmountMicros: 500})
	capMicros := int64(100 * events.MicrosPerCredit)
	apply(events.LedgerSubject(id), events.MonthlyCapSet{CapMicros: &capMicros})
	return a
}

// A snapshot holds the whole account: decoded and taken again, it is the
// same bytes, and the account it decodes to decides and folds as the one
// it was taken of.
func TestSnapshotRoundTrip(t *testing.T) {
	a := snapshotFold(t)
	raw, err := events.EncodeSnapshot(a)
	if err != nil {
		t.Fatal(err)
	}
	b, err := events.DecodeSnapshot(a.ID, raw)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := events.EncodeSnapshot(b)
	if string(again) != string(raw) {
		t.Fatalf("a snapshot decoded and taken again differs:\n%s\n%s", raw, again)
	}
	if b.Folded != 13 || b.ChainSeq != a.LastSeq || b.OwnSeq == 0 || b.OwnHash == "" || b.Ledger.Head == "" || len(b.Ledger.Open) != 2 ||
		b.Keys["key00002"].State != events.StateSuspended || b.Keys["key00002"].Resume != events.StateActive ||
		b.BYOMs["byom_1"].State != events.BYOMActive || b.BYOMs["byom_2"].Secret.KeyID != "mk_2" || b.KeyOrder[1] != "key00002" || b.BYOMOrder[1] != "byom_2" {
		t.Fatalf("decoded account: %+v", b)
	}
	// Both decide the same next events.
	for _, acc := range []*events.Account{a, b} {
		if ev := acc.DecideSettle("req_b", []events.SettledCall{{CallID: "c2", CostMicros: 700}}, "settled"); ev.(events.ChargesSettled).ChargedMicros != 1200 {
			t.Fatalf("settlement decided on the account: %+v", ev)
		}
		if _, err := acc.DecideReserve("req_c", 200*events.MicrosPerCredit, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)); err == nil {
			t.Fatal("a reservation past the cap was decided")
		}
	}
	if _, err := events.DecodeSnapshot("acct_other", raw); err == nil || !strings.Contains(err.Error(), "holds account") {
		t.Fatalf("a snapshot of another account: %v", err)
	}
	if _, err := events.DecodeSnapshot(a.ID, []byte(strings.Replace(string(raw), `"schema":1`, `"schema":2`, 1))); err == nil {
		t.Fatal("a snapshot of another schema version was read")
	}
	// A Read past the last event would skip the events after it.
	ahead := events.SnapshotOf(a)
	ahead.Read = ahead.LastSeq + 1
	raw, _ = json.Marshal(ahead)
	if _, err := events.DecodeSnapshot(a.ID, raw); err == nil || !strings.Contains(err.Error(), "no fold's") {
		t.Fatalf("a snapshot read past its last event: %v", err)
	}
}

// Whatever the bytes in the bucket, a snapshot decodes or is refused, and
// the account it decodes to folds and decides without failing.
func FuzzDecodeSnapshot(f *testing.F) {
	a := &events.Account{}
	raw, _ := events.EncodeSnapshot(a)
	f.Add(raw)
	f.Add([]byte(`{"schema":1,"account_id":"acct_x","keys":[null],"ledger":{"open":{"req_a":null}}}`))
	f.Add([]byte(`{"schema":1,"account_id":"acct_x","last_seq":3,"own_seq":3,"ledger":{"open":{"req_a":{"reserved_micros":5}}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := events.DecodeSnapshot("acct_x", raw)
		if err != nil {
			return
		}
		for req := range a.Ledger.Open {
			a.DecideSettle(req, []events.SettledCall{{CallID: "c", CostMicros: 5}}, "settled")
			_ = a.DecideDebit(req, "d", events.ModelRef{}, 1, 1, 7)
		}
		_, _ = a.DecideReserve("req_new", 1, time.Now())
		for _, ev := range []events.Event{
			events.ChargesSettled{RequestID: "req_a", Calls: []events.SettledCall{{CallID: "c", AmountMicros: 5}}},
			events.CreditsDebited{RequestID: "req_a", CallID: "e", AmountMicros: 1},
			events.KeySuspended{KeyStateChanged: events.KeyStateChanged{Fingerprint: "key00001", To: events.StateSuspended}},
			events.BYOMTested{ModelID: "byom_1", OK: true},
		} {
			a.Apply(events.Record{Seq: a.LastSeq + 1, Envelope: events.Envelope{Subject: events.LedgerSubject("acct_x")}, Event: ev, Raw: []byte("x")})
		}
		if _, err := events.EncodeSnapshot(a); err != nil {
			t.Fatal(err)
		}
	})
}
