package projections

import (
	"encoding/json"
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
