package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// Summary is the query's row in GET /v1/queries: the result without the
// models' answers.
func (r *Result) Summary() apiv1.QuerySummary {
	return apiv1.QuerySummary{
		RequestID: r.RequestID, Object: "query.summary", Mode: r.Mode, Status: r.Status, Stage: r.Stage,
		ProgressPercent: r.ProgressPercent, Credits: r.Credits, Error: r.Error,
		CreatedAt: r.CreatedAt, CompletedAt: r.CompletedAt,
	}
}

// ListKey is the key of a query's row in the query_list bucket:
// <account_id>.<request_id>. An account's rows are the keys under
// ListPrefix(account_id).
func ListKey(accountID, requestID string) string { return accountID + "." + requestID }

// ListPrefix is the key filter of an account's rows in the query_list bucket.
func ListPrefix(accountID string) string { return accountID + ".>" }

// ListRequestID returns the request id of a query_list key.
func ListRequestID(key string) string {
	_, id, _ := strings.Cut(key, ".")
	return id
}

// listEntries returns the query_list rows of the documents of order, in
// the same order; a document not yet submitted has none.
func listEntries(order []string, changed map[string]*QueryDoc) ([]eventstore.Entry, error) {
	entries := make([]eventstore.Entry, 0, len(order))
	for _, id := range order {
		doc := changed[id]
		if doc.AccountID == "" || doc.Result.RequestID == "" {
			continue
		}
		data, err := json.Marshal(doc.Result.Summary())
		if err != nil {
			return nil, err
		}
		entries = append(entries, eventstore.Entry{Key: ListKey(doc.AccountID, id), Value: data})
	}
	return entries, nil
}

// listComplete is the key of the query_list bucket that says every query
// of query_status has its row. It has no dot, so no account's rows match it.
const listComplete = "rows_complete"

// completeList gives every query of the query_status bucket its row in
// query_list, once per store: a store written before the list existed has
// documents but no rows. It runs when a run of the projection begins, before
// the run's first batch, and marks the list complete when done.
func (p *QueryStatus) completeList(ctx context.Context) error {
	done, err := p.Store.QueryList.GetLatest(ctx, listComplete)
	if err != nil || done != nil {
		return err
	}
	const batch = 256
	rows := make([]eventstore.Entry, 0, batch)
	flush := func() error {
		err := p.Store.QueryList.PutAll(ctx, rows)
		rows = rows[:0]
		return err
	}
	if !p.fresh {
		err := p.Store.QueryStatus.Each(ctx, func(key string, value []byte) error {
			var doc QueryDoc
			if err := json.Unmarshal(value, &doc); err != nil {
				return fmt.Errorf("decode %s: %w", key, err)
			}
			more, err := listEntries([]string{key}, map[string]*QueryDoc{key: &doc})
			if err != nil {
				return err
			}
			if rows = append(rows, more...); len(rows) == batch {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if err != nil {
			return fmt.Errorf("complete query_list: %w", err)
		}
	}
	_, err = p.Store.QueryList.Put(ctx, listComplete, []byte("1"))
	return err
}
