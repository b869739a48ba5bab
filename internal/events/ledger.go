package events

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

// MicrosPerCredit: amounts are integers of micro-credits (1e-6 credit), so
// sums are exact.
const MicrosPerCredit = 1_000_000

// MaxCredits is the safe range of an account's money: what an account holds
// (its balance plus its reservations), a single grant, adjustment,
// reservation or charge, and a monthly cap are each at most MaxCredits
// credits. The decisions refuse what would leave the range before anything is
// appended.
const MaxCredits = 1_000_000_000_000

// MaxMicros is MaxCredits in micro-credits, 1e18: any three amounts of the
// range add up without overflowing an int64 (at most about 9.2e18).
const MaxMicros int64 = MaxCredits * MicrosPerCredit

// Plan grants of spec 1.7, in micro-credits.
var planGrant = map[string]int64{
	PlanFree:  50 * MicrosPerCredit, // once, at creation
	PlanBasic: 100 * MicrosPerCredit,
	PlanPro:   300 * MicrosPerCredit,
}

// Monthly reports whether a plan is granted credits every calendar month.
func Monthly(plan string) bool { return plan == PlanBasic || plan == PlanPro }

// Period is the calendar month (UTC) of t, "2006-01".
func Period(t time.Time) string { return t.UTC().Format("2006-01") }

// LedgerLink chains an account's ledger events: PrevHash is the hex SHA-256
// of the account's previous ledger event as stored, "" for the first.
type LedgerLink struct {
	PrevHash string `json:"prev_hash"`
}

// CreditsGranted adds plan or custom credits to an account.
type CreditsGranted struct {
	AmountMicros int64  `json:"amount_micros"`
	Reason       string `json:"reason"`
	// Period is the calendar month a monthly plan grant is for.
	Period string `json:"period,omitempty"`
	LedgerLink
}

// CreditsAdjusted is an administrator's correction, positive or negative.
type CreditsAdjusted struct {
	AmountMicros int64  `json:"amount_micros"`
	Reason       string `json:"reason"`
	LedgerLink
}

// CreditsReserved holds a query's estimated cost out of the balance.
type CreditsReserved struct {
	RequestID    string `json:"request_id"`
	AmountMicros int64  `json:"amount_micros"`
	LedgerLink
}

// CreditsDebited charges one model call of a query. Cost is the call's
// metered price; Amount is what was charged: the cost, unless the query's
// reservation and the whole balance could not cover it, when the rest is
// written off (the balance never goes below zero).
type CreditsDebited struct {
	RequestID        string   `json:"request_id"`
	CallID           string   `json:"call_id"`
	Model            ModelRef `json:"model"`
	InputTokens      int      `json:"input_tokens"`
	OutputTokens     int      `json:"output_tokens"`
	CostMicros       int64    `json:"cost_micros"`
	AmountMicros     int64    `json:"amount_micros"`
	WrittenOffMicros int64    `json:"written_off_micros"`
	LedgerLink
}

// CreditsReleased settles a query: the unused part of its reservation
// returns to the balance. Charged is the sum of the query's debits.
type CreditsReleased struct {
	RequestID     string `json:"request_id"`
	AmountMicros  int64  `json:"amount_micros"`
	ChargedMicros int64  `json:"charged_micros"`
	Reason        string `json:"reason"`
	LedgerLink
}

// SettledCall is one model call of a query as its settlement charges it:
// the call id (the id of the query event that recorded the call), the step
// (that event's name), the model, its tokens, the model's price in credits per
// million tokens, the call's metered cost as the query recorded it, and what
// was charged for it: the cost, less what could not be covered and was
// written off.
type SettledCall struct {
	CallID           string   `json:"call_id"`
	Step             string   `json:"step"`
	Model            ModelRef `json:"model"`
	InputTokens      int      `json:"input_tokens"`
	OutputTokens     int      `json:"output_tokens"`
	InputPerMillion  int64    `json:"input_per_million"`
	OutputPerMillion int64    `json:"output_per_million"`
	CostMicros       int64    `json:"cost_micros"`
	AmountMicros     int64    `json:"amount_micros"`
	WrittenOffMicros int64    `json:"written_off_micros"`
}

// ChargesSettled settles a query in one event: it charges every model call
// the query made that was not charged before (Calls, drawn from the
// reservation first, then from the balance) and returns the rest of the
// reservation to the balance (ReleasedMicros). ChargedMicros is everything
// the query was charged, these calls and any debits recorded before it.
type ChargesSettled struct {
	RequestID      string        `json:"request_id"`
	Calls          []SettledCall `json:"calls"`
	ChargedMicros  int64         `json:"charged_micros"`
	ReleasedMicros int64         `json:"released_micros"`
	Reason         string        `json:"reason"`
	// Ending is how the query ends, decided before it was settled: the
	// query's terminal event, appended after the settlement, says the same,
	// and a run of the query resumed after the settlement appends it without
	// running anything again. Nil in settlements of builds that recorded the
	// ending on the query (credits_settled).
	Ending *QueryEnding `json:"ending,omitempty"`
	// Cancellation is the charge that brings a cancelled query's charge up
	// to its minimum; nil for a query that was not cancelled, and in
	// settlements of builds without the charge. ChargedMicros includes its
	// amount.
	Cancellation *CancellationCharge `json:"cancellation,omitempty"`
	LedgerLink
}

// CancellationCharge is the item of a cancelled query's settlement that
// makes the query cost at least Percent % of its reservation (BasisMicros):
// MinimumMicros, rounded up to a whole micro-credit. Its cost is what the
// query's calls were charged short of that minimum (0 when they were
// charged as much or more); as for a call, AmountMicros is what was charged
// and WrittenOffMicros what the reservation and the balance could not
// cover.
type CancellationCharge struct {
	Percent          int   `json:"percent"`
	BasisMicros      int64 `json:"basis_micros"`
	MinimumMicros    int64 `json:"minimum_micros"`
	CostMicros       int64 `json:"cost_micros"`
	AmountMicros     int64 `json:"amount_micros"`
	WrittenOffMicros int64 `json:"written_off_micros"`
}

// cancellationItem is the key under which a settlement's cancellation
// charge is drawn from its open query.
const cancellationItem = "cancellation"

// CancellationMinimum is percent % of basis micro-credits, rounded up; 0
// for a percent or a basis of 0 or less. It never overflows within the
// safe range.
func CancellationMinimum(basis int64, percent int) int64 {
	if basis <= 0 || percent <= 0 {
		return 0
	}
	p := int64(min(percent, 100))
	return basis/100*p + (basis%100*p+99)/100
}

// CancellationBasis is the reservation a cancellation charge is a share
// of: what the open query o still holds plus what it was charged before its
// settlement (the per-call debits of earlier builds, drawn from the
// reservation first). That is the query's whole reservation whenever the
// charge can be above zero: a query charged more than its reservation owes
// no cancellation charge.
func CancellationBasis(o OpenQuery) int64 { return o.ReservedMicros + o.ChargedMicros }

// ChargesReversed reverses a query's settlement whose record the store lost
// in part: a power cut under an fsync interval left QUERIES without events
// that recorded calls the settlement charged. Every call the settlement
// charged (Calls, by call id) returns to the balance (RefundedMicros, their
// amounts), and the query is open again, without a reservation: a later
// settlement charges what the query records by then, so each call it
// records is charged once. A query whose events are all gone is then
// released as abandoned.
type ChargesReversed struct {
	RequestID      string   `json:"request_id"`
	Calls          []string `json:"calls"`
	RefundedMicros int64    `json:"refunded_micros"`
	Reason         string   `json:"reason"`
	LedgerLink
}

// MonthlyCapSet sets or (nil) removes the account's monthly spending cap.
type MonthlyCapSet struct {
	CapMicros *int64 `json:"cap_micros"`
	LedgerLink
}

func (CreditsGranted) EventName() string  { return "credits_granted" }
func (CreditsAdjusted) EventName() string { return "credits_adjusted" }
func (CreditsReserved) EventName() string { return "credits_reserved" }
func (CreditsDebited) EventName() string  { return "credits_debited" }
func (CreditsReleased) EventName() string { return "credits_released" }
func (MonthlyCapSet) EventName() string   { return "monthly_cap_set" }
func (ChargesSettled) EventName() string  { return "charges_settled" }
func (ChargesReversed) EventName() string { return "charges_reversed" }

func init() {
	register(AggregateAccount,
		func() Event { return &CreditsGranted{} },
		func() Event { return &CreditsAdjusted{} },
		func() Event { return &CreditsReserved{} },
		func() Event { return &CreditsDebited{} },
		func() Event { return &CreditsReleased{} },
		func() Event { return &MonthlyCapSet{} },
		func() Event { return &ChargesSettled{} },
		func() Event { return &ChargesReversed{} },
	)
}

// Linked returns ev with its PrevHash set, if it is a ledger event.
func Linked(ev Event, prev string) (Event, bool) {
	link := LedgerLink{PrevHash: prev}
	switch e := ev.(type) {
	case CreditsGranted:
		e.LedgerLink = link
		return e, true
	case CreditsAdjusted:
		e.LedgerLink = link
		return e, true
	case CreditsReserved:
		e.LedgerLink = link
		return e, true
	case CreditsDebited:
		e.LedgerLink = link
		return e, true
	case CreditsReleased:
		e.LedgerLink = link
		return e, true
	case MonthlyCapSet:
		e.LedgerLink = link
		return e, true
	case ChargesSettled:
		e.LedgerLink = link
		return e, true
	case ChargesReversed:
		e.LedgerLink = link
		return e, true
	}
	return ev, false
}

// PrevHashOf returns the PrevHash a ledger event carries.
func PrevHashOf(ev Event) (string, bool) {
	switch e := ev.(type) {
	case CreditsGranted:
		return e.PrevHash, true
	case CreditsAdjusted:
		return e.PrevHash, true
	case CreditsReserved:
		return e.PrevHash, true
	case CreditsDebited:
		return e.PrevHash, true
	case CreditsReleased:
		return e.PrevHash, true
	case MonthlyCapSet:
		return e.PrevHash, true
	case ChargesSettled:
		return e.PrevHash, true
	case ChargesReversed:
		return e.PrevHash, true
	}
	return "", false
}

// The money events of an account are an aggregate of their own, the
// account's ledger, on one subject of its own in the ACCOUNTS stream:
// ev.account.<account_id>.ledger.chain (LedgerSubject), every event of the
// hash chain in its order. A ledger append is conditional on the last event
// of that one subject, an append of the account's other events (keys) on
// the last of OwnFilter, so the two never contend, and the server's check
// of a ledger append looks up one subject however many queries the account
// settled.
//
// Two earlier layouts are read alike: ledger events on the account's own
// subjects (ev.account.<account_id>.<event>), and ledger events on a subject
// per event type (ev.account.<account_id>.ledger.<event>), a settlement on
// one per query (ev.account.<account_id>.ledger.charges_settled.<request_id>,
// EarlierSettlementSubject).
const (
	ledgerToken = "ledger"
	chainToken  = "chain"
)

// LedgerSubject is the subject of every ledger event of an account.
func LedgerSubject(accountID string) string {
	return "ev." + AggregateAccount + "." + accountID + "." + ledgerToken + "." + chainToken
}

// EarlierSettlementSubject is where the layout before LedgerSubject put the
// settlement of query requestID.
func EarlierSettlementSubject(accountID, requestID string) string {
	return "ev." + AggregateAccount + "." + accountID + "." + ledgerToken + "." + ChargesSettled{}.EventName() + "." + requestID
}

// LedgerFilter matches every ledger event of an account written on a
// ledger subject, in this layout or the one before it.
func LedgerFilter(accountID string) string {
	return "ev." + AggregateAccount + "." + accountID + "." + ledgerToken + ".>"
}

// OwnFilter matches the account's own events (creation, keys) and the
// ledger events written before the ledger had subjects of its own.
func OwnFilter(accountID string) string {
	return "ev." + AggregateAccount + "." + accountID + ".*"
}

// OnLedger reports whether subject is one of the ledger's subjects, in this
// layout or the one before it.
func OnLedger(subject string) bool {
	// ev.account.<id>.ledger.<event>[.<request_id>]
	parts := strings.SplitN(subject, ".", 5)
	return len(parts) == 5 && parts[3] == ledgerToken
}

// OnChain reports whether subject is an account's LedgerSubject.
func OnChain(subject string) bool {
	parts := strings.SplitN(subject, ".", 6)
	return len(parts) == 5 && parts[3] == ledgerToken && parts[4] == chainToken
}

// WrapLedger puts a ledger event of an account into a new envelope on the
// ledger's subject; its type is account.<event>, as in every layout.
func WrapLedger(accountID string, ev Event, now time.Time) (Envelope, error) {
	env, err := Wrap(AggregateAccount, accountID, ev, now)
	env.Subject = LedgerSubject(accountID)
	return env, err
}

// HashStored is the chain hash of a stored event: hex SHA-256 of its bytes.
func HashStored(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// OpenQuery is a query whose reservation has not been settled.
type OpenQuery struct {
	ReservedMicros int64           `json:"reserved_micros"`
	ChargedMicros  int64           `json:"charged_micros"`
	Calls          map[string]bool `json:"calls"`
	At             time.Time       `json:"at"`
}

// Ledger is the money state of an account.
type Ledger struct {
	BalanceMicros    int64                 `json:"balance_micros"`
	ReservedMicros   int64                 `json:"reserved_micros"`
	Month            string                `json:"month"`
	SpentMonthMicros int64                 `json:"spent_month_micros"`
	CapMicros        *int64                `json:"cap_micros"`
	GrantedPeriod    string                `json:"granted_period"`
	Open             map[string]*OpenQuery `json:"open"`
	Head             string                `json:"head"`
}

// applyLedger folds a money event into the account.
func (a *Account) applyLedger(r Record) bool {
	l := &a.Ledger
	if l.Open == nil {
		l.Open = map[string]*OpenQuery{}
	}
	if _, ok := PrevHashOf(r.Event); ok {
		// Every ledger event moves the chain, whatever it changes.
		l.Head = HashStored(r.Raw)
	}
	switch e := r.Event.(type) {
	case CreditsGranted:
		l.BalanceMicros += e.AmountMicros
		if e.Period != "" {
			l.GrantedPeriod = e.Period
		}
	case CreditsAdjusted:
		l.BalanceMicros += e.AmountMicros
	case CreditsReserved:
		l.BalanceMicros -= e.AmountMicros
		l.ReservedMicros += e.AmountMicros
		l.Open[e.RequestID] = &OpenQuery{ReservedMicros: e.AmountMicros, Calls: map[string]bool{}, At: r.Envelope.Time}
	case CreditsDebited:
		if o := l.Open[e.RequestID]; o != nil && !o.Calls[e.CallID] {
			l.charge(o, e.CallID, e.AmountMicros, r.Envelope.Time)
		}
	case ChargesSettled:
		// A settlement of a query settled already (replayed) changes nothing.
		if o := l.Open[e.RequestID]; o != nil {
			for _, c := range e.Calls {
				if !o.Calls[c.CallID] {
					l.charge(o, c.CallID, c.AmountMicros, r.Envelope.Time)
				}
			}
			if c := e.Cancellation; c != nil && c.AmountMicros > 0 {
				l.charge(o, cancellationItem, c.AmountMicros, r.Envelope.Time)
			}
			l.release(e.RequestID, o)
		}
	case CreditsReleased:
		if o := l.Open[e.RequestID]; o != nil {
			l.release(e.RequestID, o)
		}
	case ChargesReversed:
		// A reversal of a query open already (replayed) changes nothing.
		if _, open := l.Open[e.RequestID]; !open {
			l.BalanceMicros += e.RefundedMicros
			if Period(r.Envelope.Time) == l.Month {
				l.SpentMonthMicros = max(l.SpentMonthMicros-e.RefundedMicros, 0)
			}
			l.Open[e.RequestID] = &OpenQuery{Calls: map[string]bool{}, At: r.Envelope.Time}
		}
	case MonthlyCapSet:
		l.CapMicros = e.CapMicros
	default:
		return false
	}
	return true
}

// charge draws amount for call of the open query o, from its reservation
// first, then from the balance, and counts it towards the spending of the
// month of at.
func (l *Ledger) charge(o *OpenQuery, call string, amount int64, at time.Time) {
	o.Calls[call] = true
	o.ChargedMicros += amount
	fromReservation := min(amount, o.ReservedMicros)
	o.ReservedMicros -= fromReservation
	l.ReservedMicros -= fromReservation
	l.BalanceMicros -= amount - fromReservation
	if m := Period(at); m != l.Month {
		l.Month, l.SpentMonthMicros = m, 0
	}
	l.SpentMonthMicros += amount
}

// release returns the rest of o's reservation to the balance and closes it.
func (l *Ledger) release(requestID string, o *OpenQuery) {
	l.ReservedMicros -= o.ReservedMicros
	l.BalanceMicros += o.ReservedMicros
	delete(l.Open, requestID)
}

// Rollover returns the plan grant due at now: the Free plan's one grant at
// creation, or a monthly plan's grant for a calendar month not yet granted.
// It returns nil when nothing is due. A grant is cut to the room the safe
// range leaves (MaxCredits); with no room at all it is nil, and stays due.
func (a *Account) Rollover(now time.Time) Event {
	var g CreditsGranted
	switch {
	case a.Plan == PlanFree && a.Ledger.GrantedPeriod == "":
		g = CreditsGranted{AmountMicros: planGrant[PlanFree], Reason: "plan free: credits granted once at sign-up", Period: "signup"}
	case Monthly(a.Plan) && a.Ledger.GrantedPeriod != Period(now):
		g = CreditsGranted{AmountMicros: planGrant[a.Plan], Reason: "plan " + a.Plan + ": monthly credits", Period: Period(now)}
	default:
		return nil
	}
	if g.AmountMicros = min(g.AmountMicros, a.Ledger.room()); g.AmountMicros <= 0 {
		return nil
	}
	return g
}

// DecideGrant decides an administrator's grant of amount micro-credits. It
// refuses with an *apperr.Error of code invalid_request when amount is not
// positive, or when the account would then hold (balance plus reservations)
// more than MaxCredits.
func (a *Account) DecideGrant(amount int64, reason string) (Event, error) {
	if amount <= 0 {
		return nil, apperr.New(apperr.InvalidRequest, "a grant must be a positive amount of credits")
	}
	if amount > a.Ledger.room() {
		return nil, a.Ledger.outOfRange(amount)
	}
	return CreditsGranted{AmountMicros: amount, Reason: reason}, nil
}

// DecideCap decides the monthly cap, nil for none. It refuses with an
// *apperr.Error of code invalid_request a cap below zero or above
// MaxCredits.
func (a *Account) DecideCap(capMicros *int64) (Event, error) {
	if capMicros != nil && (*capMicros < 0 || *capMicros > MaxMicros) {
		return nil, apperr.New(apperr.InvalidRequest, "a monthly cap is a number of credits from 0 to %s, or null for no cap", FormatCredits(MaxMicros))
	}
	return MonthlyCapSet{CapMicros: capMicros}, nil
}

// Held is what the account holds: its balance plus its reservations. It is
// what the balance comes back to when every open query is released unused.
func (l Ledger) Held() int64 { return l.BalanceMicros + l.ReservedMicros }

// room is how much more the account may hold within the safe range.
func (l Ledger) room() int64 { return MaxMicros - min(max(l.Held(), 0), MaxMicros) }

// outOfRange is the refusal of a grant of amount that the account has no
// room for.
func (l Ledger) outOfRange(amount int64) error {
	return apperr.New(apperr.InvalidRequest, "a grant of %s credits would take the account past the limit of %s credits: it holds %s (balance and reservations), so at most %s more can be granted",
		FormatCredits(amount), FormatCredits(MaxMicros), FormatCredits(l.Held()), FormatCredits(l.room()))
}

// SpentThisMonth is what the account was charged in now's calendar month.
func (a *Account) SpentThisMonth(now time.Time) int64 {
	if a.Ledger.Month != Period(now) {
		return 0
	}
	return a.Ledger.SpentMonthMicros
}

// DecideReserve decides the reservation of amount for a new query. It is nil
// when the query holds a reservation already. It refuses with an
// *apperr.Error of code insufficient_credits when amount exceeds the balance,
// and of code monthly_cap_exceeded when it would take the month's spending and
// reservations past the cap; the message is the one the client sees. An
// amount below zero or above MaxCredits is refused with invalid_request.
func (a *Account) DecideReserve(requestID string, amount int64, now time.Time) (Event, error) {
	l := &a.Ledger
	if _, open := l.Open[requestID]; open {
		return nil, nil
	}
	if amount < 0 || amount > MaxMicros {
		return nil, apperr.New(apperr.InvalidRequest, "the estimate must be from 0 to %s credits", FormatCredits(MaxMicros))
	}
	if amount > l.BalanceMicros {
		return nil, apperr.New(apperr.InsufficientCredits, "the estimate is %s credits and %s are available", FormatCredits(amount), FormatCredits(max(l.BalanceMicros, 0)))
	}
	if l.CapMicros != nil && a.SpentThisMonth(now)+l.ReservedMicros+amount > *l.CapMicros {
		return nil, apperr.New(apperr.MonthlyCapExceeded, "%s credits spent and %s reserved this month; this query's estimate of %s would pass the cap of %s",
			FormatCredits(a.SpentThisMonth(now)), FormatCredits(l.ReservedMicros), FormatCredits(amount), FormatCredits(*l.CapMicros))
	}
	return CreditsReserved{RequestID: requestID, AmountMicros: amount}, nil
}

// DecideDebit decides the charge of one model call. It is nil when the query
// is settled already or the call was charged before: a call is charged once.
// A cost outside the safe range is taken as the nearest bound of it (0 or
// MaxCredits); what is charged never exceeds what the query's reservation
// and the balance hold.
func (a *Account) DecideDebit(requestID, callID string, model ModelRef, in, out int, cost int64) Event {
	o := a.Ledger.Open[requestID]
	if o == nil || o.Calls[callID] {
		return nil
	}
	cost = min(max(cost, 0), MaxMicros)
	amount := min(cost, o.ReservedMicros+max(a.Ledger.BalanceMicros, 0))
	return CreditsDebited{
		RequestID: requestID, CallID: callID, Model: model, InputTokens: in, OutputTokens: out,
		CostMicros: cost, AmountMicros: amount, WrittenOffMicros: cost - amount,
	}
}

// DecideRelease decides the settlement of a query; nil when it is settled.
func (a *Account) DecideRelease(requestID, reason string) Event {
	o := a.Ledger.Open[requestID]
	if o == nil {
		return nil
	}
	return CreditsReleased{RequestID: requestID, AmountMicros: o.ReservedMicros, ChargedMicros: o.ChargedMicros, Reason: reason}
}

// DecideSettle decides the settlement of a query: one event that charges
// every call of calls not charged before (by call id; a call listed twice is
// charged once), each for its CostMicros taken into the safe range, and
// releases the rest of the reservation. A call that the reservation and the
// balance cannot cover is charged what they hold and the rest is written
// off: the balance never goes below zero. It is nil when the query holds no
// open reservation: a query is settled once.
func (a *Account) DecideSettle(requestID string, calls []SettledCall, reason string) Event {
	return a.DecideCancelledSettle(requestID, calls, reason, 0)
}

// DecideCancelledSettle decides the settlement of a cancelled query as
// DecideSettle does, and charges it at least percent % of its reservation
// (CancellationMinimum of CancellationBasis): when its calls come to less,
// the settlement carries a CancellationCharge for the rest, drawn like a
// call, from the reservation first, then the balance, the rest written off.
// A percent of 0 or less charges nothing beyond the calls, with no item.
func (a *Account) DecideCancelledSettle(requestID string, calls []SettledCall, reason string, percent int) Event {
	o := a.Ledger.Open[requestID]
	if o == nil {
		return nil
	}
	reserved, balance := o.ReservedMicros, max(a.Ledger.BalanceMicros, 0)
	charged := o.ChargedMicros
	seen := map[string]bool{}
	out := make([]SettledCall, 0, len(calls))
	for _, c := range calls {
		if o.Calls[c.CallID] || seen[c.CallID] {
			continue
		}
		seen[c.CallID] = true
		c.CostMicros = min(max(c.CostMicros, 0), MaxMicros)
		c.AmountMicros = min(c.CostMicros, reserved+balance)
		c.WrittenOffMicros = c.CostMicros - c.AmountMicros
		fromReservation := min(c.AmountMicros, reserved)
		reserved -= fromReservation
		balance -= c.AmountMicros - fromReservation
		charged += c.AmountMicros
		out = append(out, c)
	}
	s := ChargesSettled{RequestID: requestID, Calls: out, ChargedMicros: charged, ReleasedMicros: reserved, Reason: reason}
	if percent > 0 {
		c := CancellationDue(*o, charged, percent)
		c.AmountMicros = min(c.CostMicros, reserved+balance)
		c.WrittenOffMicros = c.CostMicros - c.AmountMicros
		fromReservation := min(c.AmountMicros, reserved)
		s.ReleasedMicros -= fromReservation
		s.ChargedMicros += c.AmountMicros
		s.Cancellation = &c
	}
	return s
}

// CancellationDue is the cancellation charge of the open query o, settled
// with its calls charged charged micro-credits in all, at percent: its
// basis, minimum and cost (AmountMicros and WrittenOffMicros are left to
// the settlement, which knows what the reservation and the balance hold).
// The audit recomputes each settlement's charge with it.
func CancellationDue(o OpenQuery, charged int64, percent int) CancellationCharge {
	c := CancellationCharge{Percent: percent, BasisMicros: CancellationBasis(o)}
	c.MinimumMicros = CancellationMinimum(c.BasisMicros, percent)
	c.CostMicros = max(c.MinimumMicros-charged, 0)
	return c
}

// DecideReverse decides the reversal of settled, the settlement of query
// requestID, because the query no longer records the calls of lost (each a
// call id of settled): every call settled charged is refunded and the query
// is open again. It is nil when the query is open (reversed already, or
// never settled), when nothing of the settlement is lost, and for a
// settlement that counted debits made before it (a ledger of an earlier
// layout), which a reversal of its calls alone would not undo.
func (a *Account) DecideReverse(requestID string, settled ChargesSettled, lost []string, reason string) Event {
	if _, open := a.Ledger.Open[requestID]; open || settled.RequestID != requestID || len(lost) == 0 {
		return nil
	}
	ev := ChargesReversed{RequestID: requestID, Calls: make([]string, 0, len(settled.Calls)), Reason: reason}
	for _, c := range settled.Calls {
		ev.Calls = append(ev.Calls, c.CallID)
		ev.RefundedMicros += c.AmountMicros
	}
	if ev.RefundedMicros != settled.ChargedMicros {
		return nil
	}
	return ev
}

// DecideRestore decides a reservation of nothing for query requestID, whose
// admission's reservation the store lost (the query is recorded, the ledger
// has no reservation or settlement of it): its settlement then charges its
// calls from the balance, as a reservation that ran out would. The caller
// knows the query was never settled; it is nil when the query is open.
func (a *Account) DecideRestore(requestID string) Event {
	if _, open := a.Ledger.Open[requestID]; open {
		return nil
	}
	return CreditsReserved{RequestID: requestID, AmountMicros: 0}
}

// DecideAdjust decides an administrator's adjustment. It refuses with an
// *apperr.Error of code invalid_request when the adjustment would take the
// balance below zero, or the account's holdings (balance plus reservations)
// above MaxCredits.
func (a *Account) DecideAdjust(amount int64, reason string) (Event, error) {
	if amount > a.Ledger.room() {
		return nil, a.Ledger.outOfRange(amount)
	}
	if amount < -a.Ledger.BalanceMicros {
		return nil, apperr.New(apperr.InvalidRequest, "the balance would go below zero: the balance is %s credits", FormatCredits(a.Ledger.BalanceMicros))
	}
	return CreditsAdjusted{AmountMicros: amount, Reason: reason}, nil
}

// FormatCredits writes micro-credits as a decimal number of credits.
func FormatCredits(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	s := fmt.Sprintf("%s%d.%06d", sign, micros/MicrosPerCredit, micros%MicrosPerCredit)
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}

// Credits converts micro-credits to credits for JSON answers.
func Credits(micros int64) float64 { return float64(micros) / MicrosPerCredit }
