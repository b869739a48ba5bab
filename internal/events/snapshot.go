package events

import (
	"encoding/json"
	"fmt"
	"time"
)

// SnapshotSchema is the version of AccountSnapshot's shape. A snapshot of
// another version is not read: the account is replayed from its events.
const SnapshotSchema = 1

// AccountSnapshot is an account aggregate as stored in the snapshots
// bucket: the state a fold of the account's events reaches, and where in
// the stream that fold stands. A snapshot is never trusted over the
// stream: it is used only while the stream holds, at the later of
// LedgerSeq and OwnSeq, the event whose stored bytes hash to Ledger.Head
// or OwnHash, and the events after Read are read from the stream on top of
// it.
//
// The state is that of every event of the account up to Read, and of its
// own events up to OwnSeq and its ledger events up to LedgerSeq (a
// process's copy of an account applies its own appends before it reads
// the other aggregate's events in between): Folded is how many events
// that is.
type AccountSnapshot struct {
	Schema    int       `json:"schema"`
	AccountID string    `json:"account_id"`
	Name      string    `json:"name"`
	Plan      string    `json:"plan"`
	CreatedAt time.Time `json:"created_at"`
	LastSeq   uint64    `json:"last_seq"`
	OwnSeq    uint64    `json:"own_seq"`
	LedgerSeq uint64    `json:"ledger_seq"`
	ChainSeq  uint64    `json:"chain_seq"`
	Read      uint64    `json:"read"`
	Folded    uint64    `json:"folded"`
	OwnHash   string    `json:"own_hash"`
	// Keys and BYOMs are in the order they were created and connected.
	Keys   []*Key  `json:"keys"`
	BYOMs  []*BYOM `json:"byoms"`
	Ledger Ledger  `json:"ledger"`
}

// SnapshotOf returns the snapshot of a.
func SnapshotOf(a *Account) AccountSnapshot {
	s := AccountSnapshot{
		Schema: SnapshotSchema, AccountID: a.ID, Name: a.Name, Plan: a.Plan, CreatedAt: a.CreatedAt,
		LastSeq: a.LastSeq, OwnSeq: a.OwnSeq, LedgerSeq: a.LedgerSeq, ChainSeq: a.ChainSeq, Read: a.Read,
		Folded: a.Folded, OwnHash: a.OwnHash, Keys: []*Key{}, BYOMs: []*BYOM{}, Ledger: a.Ledger,
	}
	for _, fp := range a.KeyOrder {
		s.Keys = append(s.Keys, a.Keys[fp])
	}
	for _, id := range a.BYOMOrder {
		s.BYOMs = append(s.BYOMs, a.BYOMs[id])
	}
	return s
}

// EncodeSnapshot encodes the snapshot of a as stored.
func EncodeSnapshot(a *Account) ([]byte, error) { return json.Marshal(SnapshotOf(a)) }

// DecodeSnapshot decodes a stored snapshot of account id into the
// account it holds. It refuses a snapshot of another schema version, of
// another account, whose sequences are no fold's, or with a part missing
// (a key, a model or an open query's state).
func DecodeSnapshot(id string, raw []byte) (*Account, error) {
	var s AccountSnapshot
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	if s.Schema != SnapshotSchema {
		return nil, fmt.Errorf("snapshot of %s: schema %d, this build reads %d", id, s.Schema, SnapshotSchema)
	}
	if s.AccountID != id {
		return nil, fmt.Errorf("snapshot of %s holds account %q", id, s.AccountID)
	}
	// Its sequences are those of a fold: Read, at an event applied, is no
	// later than the last of either aggregate's, which is LastSeq.
	if s.LastSeq != max(s.OwnSeq, s.LedgerSeq) || s.Read > s.LastSeq || s.ChainSeq > s.LedgerSeq {
		return nil, fmt.Errorf("snapshot of %s: sequences last %d, own %d, ledger %d, chain %d, read %d are no fold's", id, s.LastSeq, s.OwnSeq, s.LedgerSeq, s.ChainSeq, s.Read)
	}
	a := &Account{
		ID: s.AccountID, Name: s.Name, Plan: s.Plan, CreatedAt: s.CreatedAt, Keys: map[string]*Key{},
		LastSeq: s.LastSeq, OwnSeq: s.OwnSeq, LedgerSeq: s.LedgerSeq, ChainSeq: s.ChainSeq, Read: s.Read,
		Folded: s.Folded, OwnHash: s.OwnHash, Ledger: s.Ledger,
	}
	for _, k := range s.Keys {
		if k == nil || a.Keys[k.Fingerprint] != nil {
			return nil, fmt.Errorf("snapshot of %s: a key missing or listed twice", id)
		}
		a.Keys[k.Fingerprint] = k
		a.KeyOrder = append(a.KeyOrder, k.Fingerprint)
	}
	for _, b := range s.BYOMs {
		if a.BYOMs == nil {
			a.BYOMs = map[string]*BYOM{}
		}
		if b == nil || a.BYOMs[b.ModelID] != nil {
			return nil, fmt.Errorf("snapshot of %s: a model missing or listed twice", id)
		}
		a.BYOMs[b.ModelID] = b
		a.BYOMOrder = append(a.BYOMOrder, b.ModelID)
	}
	if a.Ledger.Open == nil {
		a.Ledger.Open = map[string]*OpenQuery{}
	}
	for req, o := range a.Ledger.Open {
		if o == nil || o.Calls == nil {
			return nil, fmt.Errorf("snapshot of %s: open query %q without its state", id, req)
		}
	}
	return a, nil
}

// Covers reports whether the state of a snapshot taken at a includes the
// event r of the account: one up to a's Read, or one of the account's own
// events up to OwnSeq, or a ledger event up to LedgerSeq.
func (a *Account) Covers(r Record) bool {
	if r.Seq <= a.Read {
		return true
	}
	if OnLedger(r.Envelope.Subject) {
		return r.Seq <= a.LedgerSeq
	}
	return r.Seq <= a.OwnSeq
}
