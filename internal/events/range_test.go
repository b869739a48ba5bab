package events

import (
	"math"
	"testing"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

// full is an account that holds the whole safe range: its balance and a
// reservation add up to MaxMicros.
func full() []Event {
	return []Event{CreditsGranted{AmountMicros: MaxMicros}, CreditsReserved{RequestID: "q1", AmountMicros: 3 * credit}}
}

// The money decisions refuse, with invalid_request and no event, whatever
// would take an account's holdings (balance plus reservations), a cap or an
// amount out of the safe range; at its bounds they decide as before.
func TestDecisionsKeepMoneyInTheSafeRange(t *testing.T) {
	type decide func(a *Account) (Event, error)
	grant := func(amount int64) decide {
		return func(a *Account) (Event, error) { return a.DecideGrant(amount, "r") }
	}
	adjust := func(amount int64) decide {
		return func(a *Account) (Event, error) { return a.DecideAdjust(amount, "r") }
	}
	setCap := func(c *int64) decide { return func(a *Account) (Event, error) { return a.DecideCap(c) } }
	reserve := func(amount int64) decide {
		return func(a *Account) (Event, error) { return a.DecideReserve("q", amount, testTime) }
	}
	cases := []struct {
		name    string
		history []Event
		decide  decide
		want    Event // nil: refused with invalid_request
	}{
		{name: "a grant up to the limit", history: []Event{CreditsGranted{AmountMicros: 5 * credit}}, decide: grant(MaxMicros - 5*credit),
			want: CreditsGranted{AmountMicros: MaxMicros - 5*credit, Reason: "r"}},
		{name: "a grant one micro-credit past the limit", history: []Event{CreditsGranted{AmountMicros: 5 * credit}}, decide: grant(MaxMicros - 5*credit + 1)},
		{name: "a grant past the limit with reservations", history: full(), decide: grant(1)},
		{name: "a grant past the limit of an account at none", decide: grant(MaxMicros + 1)},
		{name: "the largest grant", decide: grant(math.MaxInt64)},
		{name: "a grant of zero", decide: grant(0)},
		{name: "a negative grant", decide: grant(-credit)},
		{name: "the repeated grant that would overflow", history: []Event{CreditsGranted{AmountMicros: math.MaxInt64 - credit}}, decide: grant(1e9 * credit)},
		{name: "a positive adjustment past the limit", history: full(), decide: adjust(1)},
		{name: "a positive adjustment up to the limit", history: []Event{CreditsGranted{AmountMicros: credit}}, decide: adjust(MaxMicros - credit),
			want: CreditsAdjusted{AmountMicros: MaxMicros - credit, Reason: "r"}},
		{name: "the smallest adjustment", history: []Event{CreditsGranted{AmountMicros: credit}}, decide: adjust(math.MinInt64)},
		{name: "a negative adjustment down to zero", history: full(), decide: adjust(-(MaxMicros - 3*credit)),
			want: CreditsAdjusted{AmountMicros: -(MaxMicros - 3*credit), Reason: "r"}},
		{name: "a cap at the limit", decide: setCap(capOf(MaxMicros)), want: MonthlyCapSet{CapMicros: capOf(MaxMicros)}},
		{name: "no cap", decide: setCap(nil), want: MonthlyCapSet{}},
		{name: "a cap past the limit", decide: setCap(capOf(MaxMicros + 1))},
		{name: "a negative cap", decide: setCap(capOf(-1))},
		{name: "a negative reservation", history: []Event{CreditsGranted{AmountMicros: credit}}, decide: reserve(-1)},
		{name: "a reservation past the limit", history: []Event{CreditsGranted{AmountMicros: credit}}, decide: reserve(math.MaxInt64)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := ledgerAt(t, testTime, c.history...)
			ev, err := c.decide(a)
			if c.want != nil {
				if err != nil || !sameEvent(ev, c.want) {
					t.Fatalf("got %#v, %v; want %#v", ev, err, c.want)
				}
				apply(t, a, testTime, ev)
				if h := a.Ledger.Held(); h < 0 || h > MaxMicros {
					t.Fatalf("the account holds %d micro-credits, out of [0, %d]", h, MaxMicros)
				}
				return
			}
			if e := apperr.From(err); ev != nil || e.Code != apperr.InvalidRequest {
				t.Fatalf("got %#v, %v; want a refusal with invalid_request", ev, err)
			}
		})
	}
}

func sameEvent(got, want Event) bool {
	if g, ok := got.(MonthlyCapSet); ok {
		w := want.(MonthlyCapSet)
		return (g.CapMicros == nil) == (w.CapMicros == nil) && (g.CapMicros == nil || *g.CapMicros == *w.CapMicros)
	}
	return got == want
}

// The refusal of a grant says what the account holds and how much more it
// may be granted.
func TestDecideGrantRefusalMessage(t *testing.T) {
	a := ledgerAt(t, testTime, CreditsGranted{AmountMicros: MaxMicros - 2*credit}, CreditsReserved{RequestID: "q1", AmountMicros: credit})
	_, err := a.DecideGrant(1e9*credit, "r")
	want := "a grant of 1000000000 credits would take the account past the limit of 1000000000000 credits: it holds 999999999998 (balance and reservations), so at most 2 more can be granted"
	if e := apperr.From(err); e.Code != apperr.InvalidRequest || e.Message != want {
		t.Fatalf("got %v, want invalid_request: %s", err, want)
	}
}

// A plan grant is cut to the room the safe range leaves, and is not decided
// while there is none.
func TestRolloverWithinTheSafeRange(t *testing.T) {
	a := ledgerAt(t, testTime, CreditsGranted{AmountMicros: MaxMicros - credit, Reason: "contract"})
	a.Plan = PlanPro
	ev := a.Rollover(testTime)
	if g, ok := ev.(CreditsGranted); !ok || g.AmountMicros != credit || g.Period != Period(testTime) {
		t.Fatalf("got %#v, want a grant of the 1 credit of room for %s", ev, Period(testTime))
	}
	apply(t, a, testTime, ev)
	if ev := a.Rollover(testTime.AddDate(0, 1, 0)); ev != nil {
		t.Fatalf("got %#v with no room, want none", ev)
	}
}

// A call's cost outside the safe range is taken as its nearest bound.
func TestDecideDebitCostInTheSafeRange(t *testing.T) {
	model := ModelRef{Provider: "p", ModelID: "m"}
	const held = MaxMicros - credit
	for _, c := range []struct {
		cost, wantCost, wantAmount int64
	}{{-5 * credit, 0, 0}, {math.MaxInt64, MaxMicros, held}} {
		a := ledgerAt(t, testTime, CreditsGranted{AmountMicros: held}, CreditsReserved{RequestID: "q", AmountMicros: credit})
		ev, ok := a.DecideDebit("q", "c", model, 1, 1, c.cost).(CreditsDebited)
		if !ok || ev.CostMicros != c.wantCost || ev.AmountMicros != c.wantAmount || ev.WrittenOffMicros != c.wantCost-c.wantAmount {
			t.Fatalf("cost %d: got %#v, want a cost of %d and a charge of %d", c.cost, ev, c.wantCost, c.wantAmount)
		}
		apply(t, a, testTime, ev)
		if h := a.Ledger.Held(); h != held-c.wantAmount {
			t.Fatalf("cost %d: holds %d after the debit, want %d", c.cost, h, held-c.wantAmount)
		}
	}
}
