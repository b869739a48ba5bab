package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// BalanceDoc is one entry of the balances read model: an account's money
// state after the event at Seq.
type BalanceDoc struct {
	Seq       uint64    `json:"seq"`
	AccountID string    `json:"account_id"`
	Plan      string    `json:"plan"`
	Ledger    LedgerDoc `json:"ledger"`
}

// BalanceDocEvery is how often at most the service stores an account's
// balance document (Balances.Every). Only the audit reads the balances
// bucket, and it checks each document at the document's own sequence, so a
// document behind its events is no difference; stored with every batch, the
// document took a write (an fsync under fsync always) per batch that
// touched the account: about one per query under load.
const BalanceDocEvery = time.Second

// Balances projects ACCOUNTS into the balances bucket.
type Balances struct {
	Store *eventstore.Store
	// Every, when set, is how long a change to an account's document may be
	// held in memory before it is stored: each document is then stored when
	// its account is created and at most once per Every after, instead of
	// once per batch that touches it. Held changes are stored through Flush
	// (the runner's Deferred).
	Every time.Duration

	// cache holds the accounts whose documents have held changes, as
	// applied; held tracks those changes. Used by the runner's goroutine
	// only, in the run they were filled in.
	cache map[string]*events.Account
	held  heldSet
	run   any
}

// HandleBatch applies account events in stream order, changing each
// account's document once.
func (p *Balances) HandleBatch(ctx context.Context, recs []events.Record) error {
	if run := runOf(ctx); p.cache == nil || run != p.run {
		// Another process may have run the projection since: the stored
		// documents are the truth.
		p.cache, p.run, p.held = map[string]*events.Account{}, run, heldSet{every: p.Every}
	}
	changed := map[string]*events.Account{}
	var order []string
	// from is, for each changed document stored before the batch, the
	// first event of the batch applied to it: where its change is held from.
	from := map[string]uint64{}
	for _, r := range recs {
		id := events.AggregateID(r.Envelope.Subject)
		a := changed[id]
		if a == nil {
			var err error
			if a, err = p.load(ctx, id); err != nil {
				return err
			}
			changed[id] = a
			order = append(order, id)
			if a.ID != "" {
				from[id] = r.Seq
			}
		}
		if r.Seq <= a.LastSeq {
			continue
		}
		// A batch that fails is retried: the events it applied to a cached
		// account are at or below its LastSeq then, and skipped.
		a.Apply(r)
	}
	now := time.Now()
	entries := make([]eventstore.Entry, 0, len(order))
	var hold []string
	for _, id := range order {
		a := changed[id]
		if a.ID == "" {
			continue // events of an account whose creation this bucket never saw
		}
		if _, stored := from[id]; stored && p.Every > 0 {
			p.cache[id] = a
			hold = append(hold, id)
			continue
		}
		data, err := encodeBalance(a)
		if err != nil {
			return err
		}
		entries = append(entries, eventstore.Entry{Key: id, Value: data})
	}
	if err := p.Store.Balances.PutAll(ctx, entries); err != nil {
		return err
	}
	for _, e := range entries {
		p.held.unhold(e.Key)
		delete(p.cache, e.Key)
	}
	for _, id := range hold {
		p.held.hold(id, from[id], now)
	}
	return nil
}

// load returns the account id as this projection has it: cached with held
// changes, stored, or new (ID empty).
func (p *Balances) load(ctx context.Context, id string) (*events.Account, error) {
	if a := p.cache[id]; a != nil {
		return a, nil
	}
	a := &events.Account{Keys: map[string]*events.Key{}}
	raw, err := p.Store.Balances.GetLatest(ctx, id)
	if err != nil || raw == nil {
		return a, err
	}
	var doc BalanceDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decode balance %s: %w", id, err)
	}
	a.ID, a.Plan, a.Ledger, a.LastSeq = doc.AccountID, doc.Plan, doc.Ledger.ledger(), doc.Seq
	return a, nil
}

func encodeBalance(a *events.Account) ([]byte, error) {
	return json.Marshal(BalanceDoc{Seq: a.LastSeq, AccountID: a.ID, Plan: a.Plan, Ledger: LedgerDocOf(a.Ledger)})
}

// Flush stores the documents whose changes were held for Every (all of
// them when all is set); see Deferring. Changes held by an earlier run are
// dropped, not stored: another process may have run the projection since,
// and this run applies their events again from its checkpoint.
func (p *Balances) Flush(ctx context.Context, all bool) (uint64, time.Time, error) {
	if runOf(ctx) != p.run {
		p.cache, p.held = nil, heldSet{every: p.Every}
		return 0, time.Time{}, nil
	}
	return p.held.flush(ctx, p.Store.Balances, all, func(id string) ([]byte, error) { return encodeBalance(p.cache[id]) },
		func(id string) { delete(p.cache, id) })
}

// GetBalance reads one account's projected money state; nil when unknown.
func GetBalance(ctx context.Context, kv *eventstore.Bucket, accountID string) (*BalanceDoc, error) {
	entry, err := kv.Get(ctx, accountID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get balance %s: %w", accountID, err)
	}
	var d BalanceDoc
	if err := json.Unmarshal(entry.Value, &d); err != nil {
		return nil, fmt.Errorf("decode balance %s: %w", accountID, err)
	}
	return &d, nil
}
