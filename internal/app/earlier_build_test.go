package app

import (
	"context"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/ledger"
	"github.com/crosscheck/crosscheck/internal/pricing"
)

// A data dir whose queries an earlier build ran, in its layout: a unify
// query's progress event before the synthesis, a credits_settled before
// the terminal event (which carried no charge), a settlement without an
// ending. This build reads them side by side with its own: the ended query
// shows its charge, a query the earlier build left between its
// credits_settled and its terminal event ends as that recorded (no model is
// called, nothing is settled again), a new query runs in this build's
// layout, and the audit passes over all of them.
func TestAnEarlierBuildsDataDirIsReadSideBySide(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 50)
	key := h.key(acct)
	h.m.Close()
	ended, between := "req_01M8000000000000000000000E", "req_01M8000000000000000000000B"
	charged := map[string]int64{}
	h.offline(func(store *eventstore.Store) {
		ctx := context.Background()
		led := &ledger.Service{Accounts: &accounts.Service{Store: store, Now: time.Now}, Estimator: &pricing.Estimator{Catalog: catalog.Simulated()}, Now: time.Now}
		refs := []events.ModelRef{}
		for _, p := range catalog.Simulated().Providers {
			refs = append(refs, events.ModelRef{Provider: p.Key, ModelID: p.Default().ID, Simulated: true})
		}
		for _, id := range []string{ended, between} {
			if err := led.Reserve(ctx, acct, id, 2*events.MicrosPerCredit, false); err != nil {
				t.Fatal(err)
			}
			q := &events.Query{}
			add := func(ev events.Event) {
				env, _ := events.Wrap(events.AggregateQuery, id, ev, time.Now())
				app, err := store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, id), Seq: q.LastSeq})
				if err != nil {
					t.Fatal(err)
				}
				q.Apply(events.Record{Seq: app.Seq, Envelope: env, Event: ev})
			}
			add(events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: key[5:13], Mode: events.ModeUnify, Prompt: "an earlier build's query " + id,
				Models: refs, EstimatedMicros: 2 * events.MicrosPerCredit})
			add(events.QueryStarted{})
			usage := events.Usage{InputTokens: 20, OutputTokens: 80}
			for _, m := range refs {
				add(events.ModelAnswered{Model: m, Answer: "an answer of " + m.Provider, Usage: usage, CostMicros: led.Estimator.Cost(m, usage)})
			}
			add(events.ProgressReported{Stage: events.StageAggregating, Percent: 85, Message: "synthesizing one answer from 4 model answers"})
			add(events.Synthesized{Model: refs[0], Answer: events.Answer{Text: "one answer", Conflicts: []events.Conflict{}}, Usage: usage, CostMicros: led.Estimator.Cost(refs[0], usage)})
			// The earlier build's settlement: no ending.
			var s events.ChargesSettled
			err := led.Accounts.Update(ctx, acct, nil, func(a *events.Account) ([]events.Event, error) {
				items := []events.SettledCall{}
				for _, c := range q.Calls {
					price := led.Estimator.Price(c.Model)
					items = append(items, events.SettledCall{CallID: c.ID, Step: c.Step, Model: c.Model, InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens,
						InputPerMillion: price.InputPerMillion, OutputPerMillion: price.OutputPerMillion, CostMicros: c.CostMicros})
				}
				s = a.DecideSettle(id, items, "settled").(events.ChargesSettled)
				return []events.Event{s}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			charged[id] = s.ChargedMicros
			add(events.CreditsSettled{ChargedMicros: s.ChargedMicros})
			if id == ended {
				add(events.QueryCompleted{})
			}
		}
	})
	h.start()
	for _, id := range []string{ended, between} {
		res := h.wait(key, id, 30*time.Second)
		got, _ := jsonPath(res, "credits", "charged").(float64)
		must(t, res["status"] == "completed" && got == events.Credits(charged[id]) && got > 0,
			"%s: %v charged %v; want completed, charged %v", id, res["status"], jsonPath(res, "credits", "charged"), events.Credits(charged[id]))
		must(t, h.countEvents(id, "model_answered") == 4 && h.countEvents(id, "synthesized") == 1 && h.countSettlements(id) == 1 && h.countEvents(id, "completed") == 1,
			"%s: a model was called, or it was settled or ended again", id)
	}
	fresh := h.submitOK(key, "a query of this build")
	res := h.wait(key, fresh, 30*time.Second)
	must(t, res["status"] == "completed" && h.countEvents(fresh, "credits_settled") == 0 && h.countSettlements(fresh) == 1,
		"this build's query: %v, %d credits_settled, %d settlements", res["status"], h.countEvents(fresh, "credits_settled"), h.countSettlements(fresh))
	view := h.accountView(acct)
	must(t, view["reserved"] == 0.0, "reserved after every query ended: %v", view["reserved"])
	h.closeAndAudit()
}

// A data dir whose ledgers the build before this one wrote, in its layout: a
// subject per event type, a settlement on a subject of its own per query,
// each ledger append conditional on the last of them all. This build reads
// it: a query that build settled and ended shows its charge; a query it
// settled (with its ending) and did not end, its process dead between the
// two, is ended as settled (no model is called, nothing is settled again);
// a new query is settled on the ledger's one subject, the hash chain going
// on from the layout before; balances and the audit agree.
func TestAPerTypeLedgerDataDirIsRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("enterprise", 0)
	key := h.key(acct)
	h.m.Close()
	ended, between := "req_01M8000000000000000000001E", "req_01M8000000000000000000001B"
	charged := map[string]int64{}
	h.offline(func(store *eventstore.Store) {
		ctx := context.Background()
		est := &pricing.Estimator{Catalog: catalog.Simulated()}
		a, err := store.LoadAccount(ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		// earlier appends a ledger event as the build before did.
		earlier := func(ev events.Event) {
			linked, _ := events.Linked(ev, a.Ledger.Head)
			env, _ := events.Wrap(events.AggregateAccount, acct, linked, time.Now())
			env.Subject = "ev.account." + acct + ".ledger." + ev.EventName()
			if s, ok := ev.(events.ChargesSettled); ok {
				env.Subject = events.EarlierSettlementSubject(acct, s.RequestID)
			}
			app, err := store.Append(ctx, env, &eventstore.Expect{Filter: events.LedgerFilter(acct), Seq: a.LedgerSeq})
			if err != nil {
				t.Fatal(err)
			}
			a.Apply(events.Record{Seq: app.Seq, Envelope: env, Event: linked, Raw: app.Data})
		}
		earlier(events.CreditsGranted{AmountMicros: 50 * events.MicrosPerCredit, Reason: "test balance"})
		refs := []events.ModelRef{}
		for _, p := range catalog.Simulated().Providers {
			refs = append(refs, events.ModelRef{Provider: p.Key, ModelID: p.Default().ID, Simulated: true})
		}
		for _, id := range []string{ended, between} {
			reserve, err := a.DecideReserve(id, 2*events.MicrosPerCredit, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			earlier(reserve)
			q := &events.Query{}
			add := func(ev events.Event) {
				env, _ := events.Wrap(events.AggregateQuery, id, ev, time.Now())
				app, err := store.Append(ctx, env, &eventstore.Expect{Filter: events.Filter(events.AggregateQuery, id), Seq: q.LastSeq})
				if err != nil {
					t.Fatal(err)
				}
				q.Apply(events.Record{Seq: app.Seq, Envelope: env, Event: ev})
			}
			add(events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: key[5:13], Mode: events.ModeUnify, Prompt: "the build before's query " + id,
				Models: refs, EstimatedMicros: 2 * events.MicrosPerCredit})
			add(events.QueryStarted{})
			usage := events.Usage{InputTokens: 20, OutputTokens: 80}
			for _, m := range refs {
				add(events.ModelAnswered{Model: m, Answer: "an answer of " + m.Provider, Usage: usage, CostMicros: est.Cost(m, usage)})
			}
			add(events.Synthesized{Model: refs[0], Answer: events.Answer{Text: "one answer", Conflicts: []events.Conflict{}}, Usage: usage, CostMicros: est.Cost(refs[0], usage)})
			var items []events.SettledCall
			for _, c := range q.Calls {
				p := est.Price(c.Model)
				items = append(items, events.SettledCall{CallID: c.ID, Step: c.Step, Model: c.Model, InputTokens: c.Usage.InputTokens, OutputTokens: c.Usage.OutputTokens,
					InputPerMillion: p.InputPerMillion, OutputPerMillion: p.OutputPerMillion, CostMicros: c.CostMicros})
			}
			s := a.DecideSettle(id, items, "settled").(events.ChargesSettled)
			s.Ending = events.EndingOf(events.QueryCompleted{})
			earlier(s)
			charged[id] = s.ChargedMicros
			if id == ended {
				add(events.WithCharge(events.QueryCompleted{}, s.ChargedMicros))
			}
		}
	})
	h.start()
	for _, id := range []string{ended, between} {
		res := h.wait(key, id, 30*time.Second)
		got, _ := jsonPath(res, "credits", "charged").(float64)
		must(t, res["status"] == "completed" && got == events.Credits(charged[id]) && got > 0,
			"%s: %v charged %v; want completed, charged %v", id, res["status"], jsonPath(res, "credits", "charged"), events.Credits(charged[id]))
		must(t, h.countEvents(id, "model_answered") == 4 && h.countEvents(id, "synthesized") == 1 && h.countSettlements(id) == 1 && h.countEvents(id, "completed") == 1,
			"%s: a model was called, or it was settled or ended again", id)
	}
	fresh := h.submitOK(key, "a query of this build")
	res := h.wait(key, fresh, 30*time.Second)
	must(t, res["status"] == "completed" && h.countSettlements(fresh) == 1, "this build's query: %v, %d settlements", res["status"], h.countSettlements(fresh))
	settled := h.ledgerEvents(acct, "charges_settled")
	must(t, len(settled) == 3 && settled[2].Envelope.Subject == events.LedgerSubject(acct), "settlements %d, the last on %s", len(settled), settled[len(settled)-1].Envelope.Subject)
	view := h.accountView(acct)
	spent := events.Credits(charged[ended] + charged[between] + settled[2].Event.(events.ChargesSettled).ChargedMicros)
	must(t, view["reserved"] == 0.0 && view["balance"] == 50-spent, "balance %v reserved %v; want %v and 0", view["balance"], view["reserved"], 50-spent)
	h.closeAndAudit()
}
