package projections

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

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

// IndexPageSize is the number of request ids of a full page of an
// account's index.
const IndexPageSize = 128

// IndexHeadKey is the key of the head of an account's index in the
// query_list bucket: <account_id>.head, an IndexHead.
func IndexHeadKey(accountID string) string { return accountID + ".head" }

// IndexPageKey is the key of page n (from 0, the oldest) of an account's
// index in the query_list bucket: <account_id>.page.<n>, a JSON array of
// request ids in order of admission. Every page but the last holds
// IndexPageSize ids; query i of the account (from 0) is entry
// i%IndexPageSize of page i/IndexPageSize.
func IndexPageKey(accountID string, n int) string {
	return accountID + ".page." + strconv.Itoa(n)
}

// IndexHead says how far an account's index goes. A page may hold more
// ids than the head counts (written before a crash, before the head): only
// the first Count ids of the index are the account's queries.
type IndexHead struct {
	// Count is the number of queries the index holds.
	Count int `json:"count"`
	// Seq is the stream sequence of the last submitted event the index
	// took: an event at or below it is in the index already. Zero for an
	// index filled from the documents of an older store.
	Seq uint64 `json:"seq"`
}

// maxIndexCount bounds the count of a head that ParseIndexHead accepts.
const maxIndexCount = 1 << 40

// ParseIndexHead reads a stored IndexHead; an error when it is not one.
func ParseIndexHead(raw []byte) (IndexHead, error) {
	var h IndexHead
	if err := json.Unmarshal(raw, &h); err != nil {
		return IndexHead{}, fmt.Errorf("decode index head: %w", err)
	}
	if h.Count < 0 || h.Count > maxIndexCount {
		return IndexHead{}, fmt.Errorf("decode index head: count %d out of range", h.Count)
	}
	return h, nil
}

// ParseIndexPage reads a stored page of an index; an error when it is not
// a JSON array of at most IndexPageSize strings.
func ParseIndexPage(raw []byte) ([]string, error) {
	var ids []string
	if err := json.Unmarshal(raw, &ids); err != nil {
		return nil, fmt.Errorf("decode index page: %w", err)
	}
	if len(ids) > IndexPageSize {
		return nil, fmt.Errorf("decode index page: %d ids, more than %d", len(ids), IndexPageSize)
	}
	return ids, nil
}

// indexed is a query to add to its account's index: the request id and
// the stream sequence of its submitted event.
type indexed struct {
	accountID, requestID string
	seq                  uint64
	// applied says the query's document had applied the submission: it
	// joins an index that has sequences (or none) only if the index lost
	// it, and an index of an older store (its head's Seq zero) never.
	applied bool
}

// indexTail is the end of an account's index as last stored: its head
// and the ids of its last page when that page is not full.
type indexTail struct {
	head IndexHead
	last []string
}

// maxIndexTails bounds the accounts whose index tail the projection keeps
// in memory between batches.
const maxIndexTails = 1024

// indexEntries returns the pages and heads that add adds, in order, to
// the accounts' indexes, and the tails they leave. Each account's tail is
// the one this run kept, or read from the bucket's leader; a query at or
// below its head's Seq is skipped (it is in the index already). The pages
// must be stored before the heads.
func (p *QueryStatus) indexEntries(ctx context.Context, add []indexed) (pages, heads []eventstore.Entry, tails map[string]indexTail, err error) {
	var accounts []string
	byAccount := map[string][]indexed{}
	for _, a := range add {
		if _, ok := byAccount[a.accountID]; !ok {
			accounts = append(accounts, a.accountID)
		}
		byAccount[a.accountID] = append(byAccount[a.accountID], a)
	}
	tails = map[string]indexTail{}
	for _, acct := range accounts {
		tail, ok := p.tails[acct]
		if !ok {
			if tail, err = p.readTail(ctx, acct); err != nil {
				return nil, nil, nil, err
			}
		}
		head := tail.head
		var ids []string
		for _, a := range byAccount[acct] {
			if a.seq > head.Seq && (!a.applied || head.Seq > 0 || head.Count == 0) {
				ids = append(ids, a.requestID)
				head.Seq = a.seq
			}
		}
		if len(ids) == 0 {
			continue
		}
		more, next, last, err := appendIndex(acct, head, tail.last, ids)
		if err != nil {
			return nil, nil, nil, err
		}
		pages = append(pages, more...)
		heads = append(heads, next)
		head.Count += len(ids)
		tails[acct] = indexTail{head: head, last: last}
	}
	return pages, heads, tails, nil
}

// keepTails keeps the tails a batch stored, within maxIndexTails
// accounts; nil forgets every tail (what is stored is then unknown).
func (p *QueryStatus) keepTails(tails map[string]indexTail) {
	if tails == nil || p.tails == nil || len(p.tails)+len(tails) > maxIndexTails {
		p.tails = map[string]indexTail{}
	}
	maps.Copy(p.tails, tails)
}

// readTail returns the tail of acct's index as last stored, read from the
// bucket's leader; the zero tail when it has no index.
func (p *QueryStatus) readTail(ctx context.Context, acct string) (indexTail, error) {
	head, err := p.readHead(ctx, acct)
	if err != nil || head.Count%IndexPageSize == 0 {
		return indexTail{head: head}, err
	}
	key := IndexPageKey(acct, head.Count/IndexPageSize)
	raw, err := p.Store.QueryList.GetLatest(ctx, key)
	if err != nil {
		return indexTail{}, err
	}
	last, err := ParseIndexPage(raw)
	if err != nil {
		return indexTail{}, fmt.Errorf("%s: %w", key, err)
	}
	if len(last) < head.Count%IndexPageSize {
		return indexTail{}, fmt.Errorf("%s: %d ids, the head counts %d", key, len(last), head.Count%IndexPageSize)
	}
	return indexTail{head: head, last: last[:head.Count%IndexPageSize]}, nil
}

// readHead returns the head of acct's index as last written (from the
// bucket's leader); the zero head when it has none.
func (p *QueryStatus) readHead(ctx context.Context, acct string) (IndexHead, error) {
	raw, err := p.Store.QueryList.GetLatest(ctx, IndexHeadKey(acct))
	if err != nil || raw == nil {
		return IndexHead{}, err
	}
	h, err := ParseIndexHead(raw)
	if err != nil {
		return IndexHead{}, fmt.Errorf("%s: %w", IndexHeadKey(acct), err)
	}
	return h, nil
}

// appendIndex returns the pages that add ids to an index of head whose
// last, partly filled page holds last (nil when it is full or there is
// none), the head to store after them, and the ids of the new last page
// when it is not full. head.Seq must already be the new one; last is not
// changed.
func appendIndex(acct string, head IndexHead, last, ids []string) ([]eventstore.Entry, eventstore.Entry, []string, error) {
	var pages []eventstore.Entry
	page := head.Count / IndexPageSize
	cur := slices.Clone(last)
	for i, id := range ids {
		cur = append(cur, id)
		if len(cur) == IndexPageSize || i == len(ids)-1 {
			data, err := json.Marshal(cur)
			if err != nil {
				return nil, eventstore.Entry{}, nil, err
			}
			pages = append(pages, eventstore.Entry{Key: IndexPageKey(acct, page), Value: data})
			if len(cur) == IndexPageSize {
				page, cur = page+1, nil
			}
		}
	}
	head.Count += len(ids)
	data, err := json.Marshal(head)
	if err != nil {
		return nil, eventstore.Entry{}, nil, err
	}
	return pages, eventstore.Entry{Key: IndexHeadKey(acct), Value: data}, cur, nil
}

// indexComplete is the key of the query_list bucket that says every query
// of query_status is in its account's index. It has no dot, so it is no
// account's key. (A store written before the list was read from the
// documents also holds a row per query, <account_id>.<request_id>, and the
// key rows_complete: nothing reads them any more.)
const indexComplete = "index_complete"

// completeIndex gives every query of the query_status bucket its place in
// its account's index, once per store: a store written before the index
// has documents but no index. It runs when a run of the projection
// begins, before the run's first batch, and marks the index complete when
// done. An index filled here orders each account's queries by request id
// (ULIDs, in order of admission) and holds every request id of the bucket
// in memory while it is written; the queries whose submission the run then
// applies for the first time follow them, since the batches add to the
// index only the queries they store first.
func (p *QueryStatus) completeIndex(ctx context.Context) error {
	done, err := p.Store.QueryList.GetLatest(ctx, indexComplete)
	if err != nil || done != nil {
		return err
	}
	byAccount := map[string][]string{}
	if !p.fresh {
		err := p.Store.QueryStatus.Each(ctx, func(key string, value []byte) error {
			var doc QueryDoc
			if err := json.Unmarshal(value, &doc); err != nil {
				return fmt.Errorf("decode %s: %w", key, err)
			}
			if doc.AccountID != "" && doc.Result.RequestID != "" {
				byAccount[doc.AccountID] = append(byAccount[doc.AccountID], key)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("complete the index: %w", err)
		}
	}
	for _, acct := range slices.Sorted(maps.Keys(byAccount)) {
		ids := byAccount[acct]
		slices.Sort(ids)
		pages, head, _, err := appendIndex(acct, IndexHead{}, nil, ids)
		if err != nil {
			return err
		}
		if err := p.Store.QueryList.PutAll(ctx, pages); err != nil {
			return fmt.Errorf("complete the index of %s: %w", acct, err)
		}
		if _, err := p.Store.QueryList.Put(ctx, head.Key, head.Value); err != nil {
			return fmt.Errorf("complete the index of %s: %w", acct, err)
		}
	}
	_, err = p.Store.QueryList.Put(ctx, indexComplete, []byte("1"))
	return err
}
