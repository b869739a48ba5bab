package events_test

import (
	"testing"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
)

func TestDecideBYOM(t *testing.T) {
	a := &events.Account{}
	apply := func(ev events.Event) {
		a.Apply(events.Record{Seq: a.LastSeq + 1, Envelope: events.Envelope{Subject: "ev.account.acct_x." + ev.EventName()}, Event: ev})
	}
	apply(events.AccountCreated{AccountID: "acct_x", Name: "n", Plan: events.PlanFree})
	apply(events.BYOMConnected{ModelID: "byom_1", State: events.BYOMUnverified})
	b := a.BYOMs["byom_1"]
	step := func(action, wantTo string) {
		t.Helper()
		ev, err := events.DecideBYOM(b, action)
		if err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		if wantTo == "" {
			if ev != nil {
				t.Fatalf("%s from %s: %v, want nothing", action, b.State, ev)
			}
			return
		}
		apply(ev)
		if b.State != wantTo {
			t.Fatalf("%s: state %s, want %s", action, b.State, wantTo)
		}
	}
	step(events.BYOMActionEnable, "")
	step(events.BYOMActionDisable, events.BYOMDisabled)
	step(events.BYOMActionDisable, "")
	// Never tested: enabling returns it to unverified.
	step(events.BYOMActionEnable, events.BYOMUnverified)
	apply(events.BYOMTested{ModelID: "byom_1", OK: true})
	if b.State != events.BYOMActive || !b.Usable() {
		t.Fatalf("a passing test leaves %s", b.State)
	}
	apply(events.BYOMTested{ModelID: "byom_1", OK: false, Class: "timeout"})
	if b.State != events.BYOMActive {
		t.Fatalf("a failing test of an active model moved it to %s", b.State)
	}
	step(events.BYOMActionDisable, events.BYOMDisabled)
	if b.Usable() {
		t.Fatal("a disabled model is usable")
	}
	step(events.BYOMActionEnable, events.BYOMActive)
	apply(events.BYOMKeyRotated{ModelID: "byom_1", Secret: events.Sealed{KeyID: "mk_2", Ciphertext: "x"}})
	if b.Secret == nil || b.Secret.KeyID != "mk_2" {
		t.Fatalf("rotation not applied: %+v", b.Secret)
	}
	step(events.BYOMActionDelete, events.BYOMDeleted)
	for _, action := range []string{events.BYOMActionEnable, events.BYOMActionDisable, events.BYOMActionDelete} {
		if _, err := events.DecideBYOM(b, action); apperr.Code(err) != apperr.NotFound {
			t.Fatalf("%s of a deleted model: %v", action, err)
		}
	}
	if _, err := events.DecideBYOM(&events.BYOM{BYOMConnected: events.BYOMConnected{ModelID: "byom_2"}, State: events.BYOMActive}, "explode"); apperr.Code(err) != apperr.NotFound {
		t.Fatalf("unknown action: %v", err)
	}
}
