package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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

// Balances projects ACCOUNTS into the balances bucket.
type Balances struct {
	Store *eventstore.Store
}

// HandleBatch applies account events in stream order, writing each account
// changed by the batch once.
func (p *Balances) HandleBatch(ctx context.Context, recs []events.Record) error {
	changed := map[string]*events.Account{}
	var order []string
	for _, r := range recs {
		id := events.AggregateID(r.Envelope.Subject)
		a := changed[id]
		if a == nil {
			var doc *BalanceDoc
			raw, err := p.Store.Balances.GetLatest(ctx, id)
			if err != nil {
				return err
			}
			if raw != nil {
				doc = &BalanceDoc{}
				if err := json.Unmarshal(raw, doc); err != nil {
					return fmt.Errorf("decode balance %s: %w", id, err)
				}
			}
			a = &events.Account{Keys: map[string]*events.Key{}}
			if doc != nil {
				a.ID, a.Plan, a.Ledger, a.LastSeq = doc.AccountID, doc.Plan, doc.Ledger.ledger(), doc.Seq
			}
			changed[id] = a
			order = append(order, id)
		}
		if r.Seq <= a.LastSeq {
			continue
		}
		a.Apply(r)
	}
	entries := make([]eventstore.Entry, 0, len(order))
	for _, id := range order {
		a := changed[id]
		if a.ID == "" {
			continue // events of an account whose creation this bucket never saw
		}
		data, err := json.Marshal(BalanceDoc{Seq: a.LastSeq, AccountID: a.ID, Plan: a.Plan, Ledger: LedgerDocOf(a.Ledger)})
		if err != nil {
			return err
		}
		entries = append(entries, eventstore.Entry{Key: id, Value: data})
	}
	return p.Store.Balances.PutAll(ctx, entries)
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
