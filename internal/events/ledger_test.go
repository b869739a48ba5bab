package events

import (
	"fmt"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

const credit = MicrosPerCredit

// ledgerAt folds evs into a new account, each stored at the given time, and
// returns it.
func ledgerAt(t *testing.T, at time.Time, evs ...Event) *Account {
	t.Helper()
	a := &Account{}
	apply(t, a, at, evs...)
	return a
}

// apply folds evs into a, each stored at at with the next sequence.
func apply(t *testing.T, a *Account, at time.Time, evs ...Event) {
	t.Helper()
	if !a.Exists() {
		a.Apply(Record{Seq: 1, Envelope: Envelope{Time: at}, Event: AccountCreated{AccountID: "acct_1", Name: "a", Plan: PlanFree}})
	}
	for _, ev := range evs {
		raw, err := jsonMarshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		seq := a.LastSeq + 1
		// The stored bytes differ per event, as the envelope's id does.
		raw = append([]byte(fmt.Sprintf("%d ", seq)), raw...)
		a.Apply(Record{Seq: seq, Envelope: Envelope{Time: at}, Event: ev, Raw: raw})
	}
}

func capOf(c int64) *int64 { return &c }

func TestDecideReserve(t *testing.T) {
	lastMonth := testTime.AddDate(0, -1, 0)
	cases := []struct {
		name      string
		history   []Event
		debitedAt time.Time // when history's debits were stored; testTime if zero
		amount    int64
		wantCode  string // "" = a reservation of amount, "none" = nil (held already)
		wantMsg   string
	}{
		{name: "within the balance", history: []Event{CreditsGranted{AmountMicros: 10 * credit}}, amount: 4 * credit},
		{name: "exactly the balance", history: []Event{CreditsGranted{AmountMicros: 10 * credit}}, amount: 10 * credit},
		{
			name: "one micro-credit over the balance", history: []Event{CreditsGranted{AmountMicros: 10 * credit}}, amount: 10*credit + 1,
			wantCode: apperr.InsufficientCredits, wantMsg: "the estimate is 10.000001 credits and 10 are available",
		},
		{
			name: "other reservations hold the balance", amount: 3 * credit,
			history:  []Event{CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q1", AmountMicros: 8 * credit}},
			wantCode: apperr.InsufficientCredits, wantMsg: "the estimate is 3 credits and 2 are available",
		},
		{
			name: "a negative balance reads as none available", amount: 1,
			history:  []Event{CreditsAdjusted{AmountMicros: -5 * credit}},
			wantCode: apperr.InsufficientCredits, wantMsg: "the estimate is 0.000001 credits and 0 are available",
		},
		{
			name: "the query holds a reservation already", amount: 50 * credit, wantCode: "none",
			history: []Event{CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
		},
		{
			name: "within the cap", amount: 2 * credit,
			history: []Event{CreditsGranted{AmountMicros: 10 * credit}, MonthlyCapSet{CapMicros: capOf(2 * credit)}},
		},
		{
			name: "the cap counts this month's spending and reservations", amount: 2 * credit,
			history: []Event{
				CreditsGranted{AmountMicros: 10 * credit}, MonthlyCapSet{CapMicros: capOf(4 * credit)},
				CreditsReserved{RequestID: "q1", AmountMicros: 2 * credit},
				CreditsDebited{RequestID: "q1", CallID: "c1", CostMicros: credit, AmountMicros: credit},
				CreditsReleased{RequestID: "q1"},
				CreditsReserved{RequestID: "q2", AmountMicros: credit + 1},
			},
			wantCode: apperr.MonthlyCapExceeded,
			wantMsg:  "1 credits spent and 1.000001 reserved this month; this query's estimate of 2 would pass the cap of 4",
		},
		{
			name: "last month's spending does not count", amount: 2 * credit, debitedAt: lastMonth,
			history: []Event{
				CreditsGranted{AmountMicros: 10 * credit}, MonthlyCapSet{CapMicros: capOf(2 * credit)},
				CreditsReserved{RequestID: "q1", AmountMicros: 2 * credit},
				CreditsDebited{RequestID: "q1", CallID: "c1", CostMicros: 2 * credit, AmountMicros: 2 * credit},
				CreditsReleased{RequestID: "q1"},
			},
		},
		{
			name: "a cap of zero refuses any query", amount: 1,
			history:  []Event{CreditsGranted{AmountMicros: 10 * credit}, MonthlyCapSet{CapMicros: capOf(0)}},
			wantCode: apperr.MonthlyCapExceeded, wantMsg: "0 credits spent and 0 reserved this month; this query's estimate of 0.000001 would pass the cap of 0",
		},
		{
			name: "the balance is checked before the cap", amount: 20 * credit,
			history:  []Event{CreditsGranted{AmountMicros: 10 * credit}, MonthlyCapSet{CapMicros: capOf(credit)}},
			wantCode: apperr.InsufficientCredits, wantMsg: "the estimate is 20 credits and 10 are available",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at := c.debitedAt
			if at.IsZero() {
				at = testTime
			}
			a := ledgerAt(t, at, c.history...)
			ev, err := a.DecideReserve("q", c.amount, testTime)
			switch c.wantCode {
			case "":
				want := CreditsReserved{RequestID: "q", AmountMicros: c.amount}
				if err != nil || ev != want {
					t.Fatalf("got %#v, %v; want %#v", ev, err, want)
				}
			case "none":
				if err != nil || ev != nil {
					t.Fatalf("got %#v, %v; want no event", ev, err)
				}
			default:
				e := apperr.From(err)
				if ev != nil || e.Code != c.wantCode || e.Message != c.wantMsg {
					t.Fatalf("got %#v, %v; want %s: %s", ev, err, c.wantCode, c.wantMsg)
				}
			}
		})
	}
}

func TestDecideDebit(t *testing.T) {
	model := ModelRef{Provider: "p", ModelID: "m"}
	cases := []struct {
		name       string
		history    []Event
		callID     string
		cost       int64
		wantNil    bool
		wantAmount int64 // charged; cost - amount is written off
	}{
		{name: "no reservation: settled or never admitted", history: []Event{CreditsGranted{AmountMicros: 10 * credit}}, callID: "c", cost: credit, wantNil: true},
		{
			name: "settled query", callID: "c", cost: credit, wantNil: true,
			history: []Event{CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}, CreditsReleased{RequestID: "q"}},
		},
		{
			name: "call charged before", callID: "c", cost: credit, wantNil: true,
			history: []Event{
				CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit},
				CreditsDebited{RequestID: "q", CallID: "c", CostMicros: credit, AmountMicros: credit},
			},
		},
		{
			name: "within the reservation", callID: "c", cost: credit, wantAmount: credit,
			history: []Event{CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
		},
		{
			name: "past the reservation, from the balance", callID: "c", cost: 5 * credit, wantAmount: 5 * credit,
			history: []Event{CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
		},
		{
			name: "past the reservation and the balance: the rest is written off", callID: "c", cost: 20 * credit, wantAmount: 10 * credit,
			history: []Event{CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
		},
		{
			name: "a negative balance adds nothing to the reservation", callID: "c", cost: 5 * credit, wantAmount: 2 * credit,
			history: []Event{
				CreditsGranted{AmountMicros: 2 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit},
				CreditsAdjusted{AmountMicros: -credit},
			},
		},
		{
			name: "a free call", callID: "c", cost: 0, wantAmount: 0,
			history: []Event{CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := ledgerAt(t, testTime, c.history...)
			ev := a.DecideDebit("q", c.callID, model, 10, 20, c.cost)
			if c.wantNil {
				if ev != nil {
					t.Fatalf("got %#v, want no event", ev)
				}
				return
			}
			want := CreditsDebited{
				RequestID: "q", CallID: c.callID, Model: model, InputTokens: 10, OutputTokens: 20,
				CostMicros: c.cost, AmountMicros: c.wantAmount, WrittenOffMicros: c.cost - c.wantAmount,
			}
			if ev != want {
				t.Fatalf("got %#v, want %#v", ev, want)
			}
			before, balance := a.Ledger.BalanceMicros+a.Ledger.ReservedMicros, a.Ledger.BalanceMicros
			apply(t, a, testTime, ev)
			if got := a.Ledger.BalanceMicros + a.Ledger.ReservedMicros; got != before-c.wantAmount {
				t.Errorf("balance + reserved %d after the debit, want %d", got, before-c.wantAmount)
			}
			if a.Ledger.BalanceMicros < min(balance, 0) {
				t.Errorf("balance %d after the debit, was %d: a debit took it below zero", a.Ledger.BalanceMicros, balance)
			}
		})
	}
}

func TestLedgerFold(t *testing.T) {
	nextMonth := testTime.AddDate(0, 1, 0)
	type step struct {
		at time.Time // testTime if zero
		ev Event
	}
	type state struct {
		balance, reserved, spent int64
		month                    string
		open                     int
	}
	cases := []struct {
		name  string
		steps []step
		want  state
	}{
		{name: "grant", steps: []step{{ev: CreditsGranted{AmountMicros: 10 * credit, Period: "signup"}}}, want: state{balance: 10 * credit}},
		{
			name:  "grants and adjustments add up",
			steps: []step{{ev: CreditsGranted{AmountMicros: 10 * credit}}, {ev: CreditsAdjusted{AmountMicros: -3 * credit}}, {ev: CreditsAdjusted{AmountMicros: credit}}},
			want:  state{balance: 8 * credit},
		},
		{
			name:  "a reservation moves credits from the balance",
			steps: []step{{ev: CreditsGranted{AmountMicros: 10 * credit}}, {ev: CreditsReserved{RequestID: "q", AmountMicros: 4 * credit}}},
			want:  state{balance: 6 * credit, reserved: 4 * credit, open: 1},
		},
		{
			name: "debits within the reservation, then the release returns the rest",
			steps: []step{
				{ev: CreditsGranted{AmountMicros: 10 * credit}}, {ev: CreditsReserved{RequestID: "q", AmountMicros: 4 * credit}},
				{ev: CreditsDebited{RequestID: "q", CallID: "a", AmountMicros: credit}},
				{ev: CreditsDebited{RequestID: "q", CallID: "b", AmountMicros: credit / 2}},
				{ev: CreditsReleased{RequestID: "q"}},
			},
			want: state{balance: 10*credit - credit - credit/2, spent: credit + credit/2, month: Period(testTime)},
		},
		{
			name: "a debit past the reservation takes the rest from the balance",
			steps: []step{
				{ev: CreditsGranted{AmountMicros: 10 * credit}}, {ev: CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
				{ev: CreditsDebited{RequestID: "q", CallID: "a", AmountMicros: 5 * credit}},
			},
			want: state{balance: 5 * credit, reserved: 0, spent: 5 * credit, month: Period(testTime), open: 1},
		},
		{
			name: "a debit of a settled or unknown query changes nothing",
			steps: []step{
				{ev: CreditsGranted{AmountMicros: 10 * credit}}, {ev: CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
				{ev: CreditsReleased{RequestID: "q"}},
				{ev: CreditsDebited{RequestID: "q", CallID: "a", AmountMicros: credit}},
				{ev: CreditsDebited{RequestID: "other", CallID: "a", AmountMicros: credit}},
			},
			want: state{balance: 10 * credit},
		},
		{
			name: "a second release changes nothing",
			steps: []step{
				{ev: CreditsGranted{AmountMicros: 10 * credit}}, {ev: CreditsReserved{RequestID: "q", AmountMicros: 2 * credit}},
				{ev: CreditsReleased{RequestID: "q"}}, {ev: CreditsReleased{RequestID: "q"}},
			},
			want: state{balance: 10 * credit},
		},
		{
			name: "the month's spending restarts in a new month",
			steps: []step{
				{ev: CreditsGranted{AmountMicros: 10 * credit}},
				{ev: CreditsReserved{RequestID: "q1", AmountMicros: 2 * credit}},
				{ev: CreditsDebited{RequestID: "q1", CallID: "a", AmountMicros: 2 * credit}},
				{ev: CreditsReleased{RequestID: "q1"}},
				{ev: CreditsReserved{RequestID: "q2", AmountMicros: 2 * credit}, at: nextMonth},
				{ev: CreditsDebited{RequestID: "q2", CallID: "a", AmountMicros: credit}, at: nextMonth},
			},
			want: state{balance: 6 * credit, reserved: credit, spent: credit, month: Period(nextMonth), open: 1},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := &Account{}
			heads := map[string]bool{}
			for i, s := range c.steps {
				at := s.at
				if at.IsZero() {
					at = testTime
				}
				apply(t, a, at, s.ev)
				if heads[a.Ledger.Head] {
					t.Fatalf("step %d: the chain head %q did not move", i, a.Ledger.Head)
				}
				heads[a.Ledger.Head] = true
			}
			l := a.Ledger
			got := state{balance: l.BalanceMicros, reserved: l.ReservedMicros, spent: l.SpentMonthMicros, month: l.Month, open: len(l.Open)}
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// TestLedgerConservation checks the ledger's invariant over a run of
// admissions, debits and settlements: balance + reserved + charged equals
// what was granted, as long as nothing is written off.
func TestLedgerConservation(t *testing.T) {
	a := ledgerAt(t, testTime, CreditsGranted{AmountMicros: 100 * credit})
	var charged int64
	for q := range 20 {
		id := fmt.Sprintf("q%d", q)
		ev, err := a.DecideReserve(id, 3*credit, testTime)
		if err != nil {
			t.Fatal(err)
		}
		apply(t, a, testTime, ev)
		for c := range q % 4 {
			d := a.DecideDebit(id, fmt.Sprint(c), ModelRef{}, 1, 1, int64(q*c)*credit/7).(CreditsDebited)
			if d.WrittenOffMicros != 0 {
				t.Fatalf("query %d call %d: %d written off", q, c, d.WrittenOffMicros)
			}
			charged += d.AmountMicros
			apply(t, a, testTime, d)
			if again := a.DecideDebit(id, fmt.Sprint(c), ModelRef{}, 1, 1, credit); again != nil {
				t.Fatalf("query %d call %d charged twice: %#v", q, c, again)
			}
		}
		if q%3 != 0 {
			apply(t, a, testTime, a.DecideRelease(id, "completed"))
		}
		l := a.Ledger
		if l.BalanceMicros+l.ReservedMicros+charged != 100*credit {
			t.Fatalf("after query %d: balance %d + reserved %d + charged %d != 100 credits", q, l.BalanceMicros, l.ReservedMicros, charged)
		}
	}
}

// A settlement whose query lost events that recorded its calls is reversed
// whole: every call it charged returns to the balance, the query is open
// again without a reservation, and its next settlement charges what it
// records; the balance ends as if only the recorded calls were charged.
func TestReverseAndSettleAgain(t *testing.T) {
	a := ledgerAt(t, testTime, CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 3 * credit})
	calls := []SettledCall{{CallID: "c1", CostMicros: credit}, {CallID: "c2", CostMicros: 2 * credit}}
	settled := a.DecideSettle("q", calls, "settled").(ChargesSettled)
	apply(t, a, testTime, settled)
	if a.Ledger.BalanceMicros != 7*credit || a.Ledger.Open["q"] != nil {
		t.Fatalf("after the settlement: balance %d open %v", a.Ledger.BalanceMicros, a.Ledger.Open["q"])
	}
	if ev := a.DecideReverse("q", settled, nil, "lost"); ev != nil {
		t.Fatalf("a settlement with nothing lost is reversed: %+v", ev)
	}
	rev := a.DecideReverse("q", settled, []string{"c2"}, "lost")
	want := ChargesReversed{RequestID: "q", Calls: []string{"c1", "c2"}, RefundedMicros: 3 * credit, Reason: "lost"}
	if fmt.Sprint(rev) != fmt.Sprint(want) {
		t.Fatalf("reversal %+v, want %+v", rev, want)
	}
	apply(t, a, testTime, rev)
	if o := a.Ledger.Open["q"]; o == nil || o.ReservedMicros != 0 || len(o.Calls) != 0 || a.Ledger.BalanceMicros != 10*credit || a.Ledger.SpentMonthMicros != 0 {
		t.Fatalf("after the reversal: open %+v balance %d spent %d", o, a.Ledger.BalanceMicros, a.Ledger.SpentMonthMicros)
	}
	if ev := a.DecideReverse("q", settled, []string{"c2"}, "lost"); ev != nil {
		t.Fatalf("a reversed settlement is reversed again: %+v", ev)
	}
	// The run records c1 and a new call c3 instead of the lost c2.
	again := a.DecideSettle("q", []SettledCall{{CallID: "c1", CostMicros: credit}, {CallID: "c3", CostMicros: 2 * credit}}, "settled").(ChargesSettled)
	apply(t, a, testTime, again)
	if again.ChargedMicros != 3*credit || a.Ledger.BalanceMicros != 7*credit || a.Ledger.Open["q"] != nil || a.Ledger.ReservedMicros != 0 {
		t.Fatalf("settled again: charged %d balance %d open %v reserved %d", again.ChargedMicros, a.Ledger.BalanceMicros, a.Ledger.Open["q"], a.Ledger.ReservedMicros)
	}
	if ev := a.DecideRestore("q"); ev == nil {
		t.Fatal("a settled query is restored to nothing")
	}
	if ev := ledgerAt(t, testTime, CreditsReserved{RequestID: "q", AmountMicros: 1}).DecideRestore("q"); ev != nil {
		t.Fatalf("an open query is restored: %+v", ev)
	}
	// A settlement that counted debits made before it is not reversed.
	b := ledgerAt(t, testTime, CreditsGranted{AmountMicros: 10 * credit}, CreditsReserved{RequestID: "q", AmountMicros: 3 * credit},
		CreditsDebited{RequestID: "q", CallID: "c0", CostMicros: credit, AmountMicros: credit})
	older := b.DecideSettle("q", calls, "settled").(ChargesSettled)
	apply(t, b, testTime, older)
	if ev := b.DecideReverse("q", older, []string{"c1"}, "lost"); ev != nil {
		t.Fatalf("a settlement after per-call debits is reversed: %+v", ev)
	}
}

func TestCancellationMinimum(t *testing.T) {
	cases := []struct {
		basis   int64
		percent int
		want    int64
	}{
		{1_164_375, 10, 116_438}, // rounded up to a whole micro-credit
		{1_000_000, 10, 100_000},
		{1, 10, 1},
		{0, 10, 0},
		{5 * credit, 0, 0},
		{5 * credit, 100, 5 * credit},
		{5 * credit, 150, 5 * credit}, // never more than the basis
		{MaxMicros, 99, MaxMicros / 100 * 99},
		{MaxMicros - 1, 37, (MaxMicros-1)/100*37 + ((MaxMicros-1)%100*37+99)/100},
	}
	for _, c := range cases {
		if got := CancellationMinimum(c.basis, c.percent); got != c.want {
			t.Errorf("CancellationMinimum(%d, %d) = %d, want %d", c.basis, c.percent, got, c.want)
		}
	}
}

// A cancelled query is charged at least its minimum: its calls, then a
// cancellation item for what they come short of it, drawn from the
// reservation, the rest released; the fold draws the same.
func TestDecideCancelledSettle(t *testing.T) {
	call := func(id string, cost int64) SettledCall {
		return SettledCall{CallID: id, Step: "model_answered", CostMicros: cost}
	}
	cases := []struct {
		name                   string
		balance, reserve       int64
		calls                  []SettledCall
		percent                int
		wantCost, wantAmount   int64
		wantOff, wantCharged   int64
		wantReleased, balance2 int64
		wantItem               bool
	}{
		{name: "no call: the minimum", balance: 10 * credit, reserve: 2 * credit, percent: 10,
			wantItem: true, wantCost: 200_000, wantAmount: 200_000, wantCharged: 200_000, wantReleased: 1_800_000, balance2: 9_800_000},
		{name: "calls short of the minimum", balance: 10 * credit, reserve: 2 * credit, percent: 10, calls: []SettledCall{call("c1", 50_000)},
			wantItem: true, wantCost: 150_000, wantAmount: 150_000, wantCharged: 200_000, wantReleased: 1_800_000, balance2: 9_800_000},
		{name: "calls past the minimum", balance: 10 * credit, reserve: 2 * credit, percent: 10, calls: []SettledCall{call("c1", 700_000)},
			wantItem: true, wantCharged: 700_000, wantReleased: 1_300_000, balance2: 9_300_000},
		{name: "no charge set", balance: 10 * credit, reserve: 2 * credit, percent: 0,
			wantReleased: 2 * credit, balance2: 10 * credit},
		{name: "a reservation of 0", balance: 10 * credit, reserve: 0, percent: 10,
			wantItem: true, balance2: 10 * credit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := ledgerAt(t, testTime, CreditsGranted{AmountMicros: c.balance}, CreditsReserved{RequestID: "q1", AmountMicros: c.reserve})
			ev := a.DecideCancelledSettle("q1", c.calls, "settled", c.percent).(ChargesSettled)
			if ev.ChargedMicros != c.wantCharged || ev.ReleasedMicros != c.wantReleased {
				t.Fatalf("charged %d released %d, want %d and %d", ev.ChargedMicros, ev.ReleasedMicros, c.wantCharged, c.wantReleased)
			}
			if (ev.Cancellation != nil) != c.wantItem {
				t.Fatalf("cancellation item %+v, want one: %v", ev.Cancellation, c.wantItem)
			}
			if it := ev.Cancellation; it != nil {
				if it.Percent != c.percent || it.BasisMicros != c.reserve || it.CostMicros != c.wantCost || it.AmountMicros != c.wantAmount || it.WrittenOffMicros != c.wantOff {
					t.Fatalf("cancellation item %+v", *it)
				}
			}
			apply(t, a, testTime, ev)
			if a.Ledger.BalanceMicros != c.balance2 || a.Ledger.ReservedMicros != 0 || len(a.Ledger.Open) != 0 {
				t.Fatalf("after the settlement: balance %d reserved %d open %d; want balance %d", a.Ledger.BalanceMicros, a.Ledger.ReservedMicros, len(a.Ledger.Open), c.balance2)
			}
			if a.Ledger.SpentMonthMicros != c.wantCharged {
				t.Fatalf("spent this month %d, want %d", a.Ledger.SpentMonthMicros, c.wantCharged)
			}
		})
	}
}
