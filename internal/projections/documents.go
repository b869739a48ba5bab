package projections

import (
	"maps"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

// The read-model documents of the keys and balances buckets. They are this
// package's own types, not the aggregates' structs: renaming a field of an
// aggregate must not silently change what a bucket holds. Their JSON is the
// stored form: a field is never renamed or re-tagged (a test pins it).

// KeyDoc is one entry of the keys read model: an API key's state by
// fingerprint, after the event at Seq.
type KeyDoc struct {
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

// KeyDocOf is the document of an aggregate's key.
func KeyDocOf(k *events.Key) KeyDoc {
	return KeyDoc{Fingerprint: k.Fingerprint, AccountID: k.AccountID, Name: k.Name, SecretHash: k.SecretHash,
		State: k.State, CreatedAt: k.CreatedAt, Resume: k.Resume, Seq: k.Seq}
}

// key is the aggregate's key of the document, for the aggregate's rules to apply to.
func (d KeyDoc) key() *events.Key {
	return &events.Key{Fingerprint: d.Fingerprint, AccountID: d.AccountID, Name: d.Name, SecretHash: d.SecretHash,
		State: d.State, CreatedAt: d.CreatedAt, Resume: d.Resume, Seq: d.Seq}
}

// LedgerDoc is an account's money state inside a balances document.
type LedgerDoc struct {
	BalanceMicros    int64                    `json:"balance_micros"`
	ReservedMicros   int64                    `json:"reserved_micros"`
	Month            string                   `json:"month"`
	SpentMonthMicros int64                    `json:"spent_month_micros"`
	CapMicros        *int64                   `json:"cap_micros"`
	GrantedPeriod    string                   `json:"granted_period"`
	Open             map[string]*OpenQueryDoc `json:"open"`
	Head             string                   `json:"head"`
}

// OpenQueryDoc is a query whose reservation is open.
type OpenQueryDoc struct {
	ReservedMicros int64           `json:"reserved_micros"`
	ChargedMicros  int64           `json:"charged_micros"`
	Calls          map[string]bool `json:"calls"`
	At             time.Time       `json:"at"`
}

// LedgerDocOf is the document of an aggregate's ledger.
func LedgerDocOf(l events.Ledger) LedgerDoc {
	d := LedgerDoc{BalanceMicros: l.BalanceMicros, ReservedMicros: l.ReservedMicros, Month: l.Month,
		SpentMonthMicros: l.SpentMonthMicros, CapMicros: l.CapMicros, GrantedPeriod: l.GrantedPeriod, Head: l.Head}
	if l.Open != nil {
		d.Open = make(map[string]*OpenQueryDoc, len(l.Open))
		for id, o := range l.Open {
			d.Open[id] = &OpenQueryDoc{ReservedMicros: o.ReservedMicros, ChargedMicros: o.ChargedMicros, Calls: maps.Clone(o.Calls), At: o.At}
		}
	}
	return d
}

// ledger is the aggregate's ledger of the document, for the aggregate's
// folds to apply to.
func (d LedgerDoc) ledger() events.Ledger {
	l := events.Ledger{BalanceMicros: d.BalanceMicros, ReservedMicros: d.ReservedMicros, Month: d.Month,
		SpentMonthMicros: d.SpentMonthMicros, CapMicros: d.CapMicros, GrantedPeriod: d.GrantedPeriod, Head: d.Head}
	if d.Open != nil {
		l.Open = make(map[string]*events.OpenQuery, len(d.Open))
		for id, o := range d.Open {
			l.Open[id] = &events.OpenQuery{ReservedMicros: o.ReservedMicros, ChargedMicros: o.ChargedMicros, Calls: maps.Clone(o.Calls), At: o.At}
		}
	}
	return l
}
