package events

import (
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

// AggregateAccount is the aggregate name of account events:
// ev.account.<account_id>.<event>. Keys and plans live here; the ledger
// has a subject of its own under it (LedgerSubject).
const AggregateAccount = "account"

// Plans of spec section 1.7.
const (
	PlanFree       = "free"
	PlanBasic      = "basic"
	PlanPro        = "pro"
	PlanEnterprise = "enterprise"
)

// API key states of spec section 3.2.
const (
	StateActive    = "active"
	StateDisabled  = "disabled"
	StateRevoked   = "revoked"
	StateSuspended = "suspended"
)

// Key lifecycle actions of the admin API.
const (
	ActionDisable   = "disable"
	ActionEnable    = "enable"
	ActionRevoke    = "revoke"
	ActionSuspend   = "suspend"
	ActionUnsuspend = "unsuspend"
)

// AccountCreated opens an account.
type AccountCreated struct {
	AccountID string `json:"account_id"`
	Name      string `json:"name"`
	Plan      string `json:"plan"`
}

// KeyCreated records a new API key. Only the hash of the secret is kept.
type KeyCreated struct {
	Fingerprint string `json:"fingerprint"`
	Name        string `json:"name"`
	SecretHash  string `json:"secret_hash"`
	AUPAccepted bool   `json:"aup_accepted"`
}

// KeyStateChanged records one lifecycle transition of a key; each action has
// its own event type so the stream reads as history.
type KeyStateChanged struct {
	Fingerprint string `json:"fingerprint"`
	From        string `json:"from"`
	To          string `json:"to"`
}

// KeyDisabled, KeyEnabled, KeyRevoked, KeySuspended and KeyUnsuspended are the
// key lifecycle events.
type (
	KeyDisabled    struct{ KeyStateChanged }
	KeyEnabled     struct{ KeyStateChanged }
	KeyRevoked     struct{ KeyStateChanged }
	KeySuspended   struct{ KeyStateChanged }
	KeyUnsuspended struct{ KeyStateChanged }
)

func (AccountCreated) EventName() string { return "created" }
func (KeyCreated) EventName() string     { return "key_created" }
func (KeyDisabled) EventName() string    { return "key_disabled" }
func (KeyEnabled) EventName() string     { return "key_enabled" }
func (KeyRevoked) EventName() string     { return "key_revoked" }
func (KeySuspended) EventName() string   { return "key_suspended" }
func (KeyUnsuspended) EventName() string { return "key_unsuspended" }

func init() {
	register(AggregateAccount,
		func() Event { return &AccountCreated{} },
		func() Event { return &KeyCreated{} },
		func() Event { return &KeyDisabled{} },
		func() Event { return &KeyEnabled{} },
		func() Event { return &KeyRevoked{} },
		func() Event { return &KeySuspended{} },
		func() Event { return &KeyUnsuspended{} },
	)
}

// Key is one API key as the account aggregate knows it.
type Key struct {
	Fingerprint string    `json:"fingerprint"`
	AccountID   string    `json:"account_id"`
	Name        string    `json:"name"`
	SecretHash  string    `json:"secret_hash"`
	State       string    `json:"state"`
	CreatedAt   time.Time `json:"created_at"`
	// Resume is the state a suspension returns to when it is lifted.
	Resume string `json:"resume,omitempty"`
	// Seq is the stream sequence of the last event applied to this key.
	Seq uint64 `json:"seq"`
}

// Account is the account aggregate.
type Account struct {
	ID        string
	Name      string
	Plan      string
	CreatedAt time.Time
	Keys      map[string]*Key
	KeyOrder  []string
	// LastSeq is the sequence of the last event applied, OwnSeq that of the
	// last on the account's own subjects (OwnFilter), LedgerSeq that of the
	// last on the ledger's subjects in any layout (LedgerFilter), ChainSeq
	// that of the last on LedgerSubject. OwnSeq and ChainSeq are the
	// expected sequences of the two aggregates' appends.
	LastSeq   uint64
	OwnSeq    uint64
	LedgerSeq uint64
	ChainSeq  uint64
	// Read is the sequence up to which every event of the account has been
	// applied: a command's own append of one aggregate can land after an
	// event of the other that this copy has not read yet, so LastSeq is no
	// place to read on from.
	Read uint64
	// Folded is how many events were applied; OwnHash is the hash of the
	// stored bytes of the last of the account's own events (HashStored),
	// as Ledger.Head is that of the last ledger event.
	Folded  uint64
	OwnHash string
	Ledger  Ledger
	// BYOMs are the customer-owned models by model id, BYOMOrder their ids
	// in the order they were connected.
	BYOMs     map[string]*BYOM
	BYOMOrder []string
}

// Exists reports whether the account was created.
func (a *Account) Exists() bool { return a.ID != "" }

// Apply folds one stored event into the account.
func (a *Account) Apply(r Record) {
	a.LastSeq = r.Seq
	a.Folded++
	if OnLedger(r.Envelope.Subject) {
		a.LedgerSeq = r.Seq
		if OnChain(r.Envelope.Subject) {
			a.ChainSeq = r.Seq
		}
	} else {
		a.OwnSeq, a.OwnHash = r.Seq, HashStored(r.Raw)
	}
	switch e := r.Event.(type) {
	case AccountCreated:
		a.ID, a.Name, a.Plan, a.CreatedAt = e.AccountID, e.Name, e.Plan, r.Envelope.Time
		a.Keys = map[string]*Key{}
	case CreditsGranted, CreditsAdjusted, CreditsReserved, CreditsDebited, CreditsReleased, MonthlyCapSet, ChargesSettled, ChargesReversed:
		a.applyLedger(r)
	case KeyCreated:
		a.Keys[e.Fingerprint] = &Key{
			Fingerprint: e.Fingerprint, AccountID: a.ID, Name: e.Name,
			SecretHash: e.SecretHash, State: StateActive, CreatedAt: r.Envelope.Time, Seq: r.Seq,
		}
		a.KeyOrder = append(a.KeyOrder, e.Fingerprint)
	default:
		if a.applyBYOM(r) {
			return
		}
		if ch, ok := StateChange(r.Event); ok {
			if k := a.Keys[ch.Fingerprint]; k != nil {
				ApplyKeyChange(k, ch, r.Seq)
			}
		}
	}
}

// CatchUp applies r, read from the account's events after Read, unless r
// was applied already (an append of this copy's own), and moves Read to it.
// Reads in order from Read+1 therefore never skip nor apply twice an event
// of either aggregate: each aggregate's events up to its own sequence have
// all been applied, since each append expects that sequence.
func (a *Account) CatchUp(r Record) {
	if !a.Applied(r.Seq, r.Envelope.Subject) {
		last := max(a.LastSeq, r.Seq)
		a.Apply(r)
		a.LastSeq = last
	}
	a.Read = max(a.Read, r.Seq)
}

// Applied reports whether the account's event at seq, stored on subject,
// is applied already: an event of either aggregate up to that aggregate's
// last sequence (see CatchUp).
func (a *Account) Applied(seq uint64, subject string) bool {
	if OnLedger(subject) {
		return seq <= a.LedgerSeq
	}
	return seq <= a.OwnSeq
}

// StateChange returns the key transition an event carries, if it is one.
func StateChange(ev Event) (KeyStateChanged, bool) {
	switch e := ev.(type) {
	case KeyDisabled:
		return e.KeyStateChanged, true
	case KeyEnabled:
		return e.KeyStateChanged, true
	case KeyRevoked:
		return e.KeyStateChanged, true
	case KeySuspended:
		return e.KeyStateChanged, true
	case KeyUnsuspended:
		return e.KeyStateChanged, true
	}
	return KeyStateChanged{}, false
}

// ApplyKeyChange folds a transition into a key.
func ApplyKeyChange(k *Key, ch KeyStateChanged, seq uint64) {
	if ch.To == StateSuspended {
		k.Resume = ch.From
	} else {
		k.Resume = ""
	}
	k.State = ch.To
	k.Seq = seq
}

// DecideKey decides the event for a lifecycle action on k. It returns a nil
// event when k is already in the state the action leads to; an *apperr.Error
// of code invalid_transition when the action is not allowed from k's state (a
// revoked key stays revoked); and one of code not_found for an action it does
// not know. The messages are the ones the client sees.
func DecideKey(k *Key, action string) (Event, error) {
	from := k.State
	change := func(to string) KeyStateChanged {
		return KeyStateChanged{Fingerprint: k.Fingerprint, From: from, To: to}
	}
	bad := apperr.New(apperr.InvalidTransition, "cannot %s a key that is %s", action, from)
	switch action {
	case ActionDisable:
		switch from {
		case StateDisabled:
			return nil, nil
		case StateActive:
			return KeyDisabled{change(StateDisabled)}, nil
		}
	case ActionEnable:
		switch from {
		case StateActive:
			return nil, nil
		case StateDisabled:
			return KeyEnabled{change(StateActive)}, nil
		}
	case ActionRevoke:
		switch from {
		case StateRevoked:
			return nil, nil
		case StateActive, StateDisabled:
			return KeyRevoked{change(StateRevoked)}, nil
		}
	case ActionSuspend:
		switch from {
		case StateSuspended:
			return nil, nil
		case StateActive, StateDisabled:
			return KeySuspended{change(StateSuspended)}, nil
		}
	case ActionUnsuspend:
		switch from {
		case StateActive, StateDisabled:
			return nil, nil
		case StateSuspended:
			to := k.Resume
			if to == "" {
				to = StateActive
			}
			return KeyUnsuspended{change(to)}, nil
		}
	default:
		return nil, apperr.New(apperr.NotFound, "unknown key action %q: use disable, enable, revoke, suspend or unsuspend", action)
	}
	return nil, bad
}
