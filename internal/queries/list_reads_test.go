package queries

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// countingBucket counts the entries a list request reads from a bucket
// (query_list or query_status): each Get, and each key a listing returns.
// Buckets that share reads count together.
type countingBucket struct {
	b     *eventstore.Bucket
	reads *atomic.Int64
}

func (c *countingBucket) Get(ctx context.Context, key string) (eventstore.Entry, error) {
	c.reads.Add(1)
	return c.b.Get(ctx, key)
}

func (c *countingBucket) GetLatest(ctx context.Context, key string) ([]byte, error) {
	c.reads.Add(1)
	return c.b.GetLatest(ctx, key)
}

func (c *countingBucket) Keys(ctx context.Context, filter string) ([]string, error) {
	keys, err := c.b.Keys(ctx, filter)
	c.reads.Add(int64(len(keys)) + 1)
	return keys, err
}

// projectSubmissions projects n submitted queries of account acct (and one of
// another account after each tenth) through the query projection, in
// batches as the runner would, and returns acct's request ids in order of
// admission.
func projectSubmissions(t *testing.T, p *projections.QueryStatus, seq *uint64, acct string, n int) []string {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var ids []string
	var batch []events.Record
	add := func(account, mode string) string {
		*seq++
		at := t0.Add(time.Duration(*seq) * time.Millisecond)
		id := "req_" + ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String()
		ev := events.QuerySubmitted{RequestID: id, AccountID: account, KeyFingerprint: "abcdefgh", Mode: mode,
			Models: []events.ModelRef{{Provider: "provider_a", ModelID: "m"}}}
		env, err := events.Wrap(events.AggregateQuery, id, ev, at)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, events.Record{Seq: *seq, Envelope: env, Event: ev})
		return id
	}
	flush := func() {
		if err := p.HandleBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for i := range n {
		mode := events.ModeUnify
		if i%500 == 7 {
			mode = events.ModeVerify
		}
		ids = append(ids, add(acct, mode))
		if i%10 == 9 {
			add("acct_other", events.ModeUnify)
		}
		if len(batch) >= 700 {
			flush()
		}
	}
	flush()
	// The last batch's documents are stored once their writes are answered.
	if _, _, err := p.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	return ids
}

// The work of one list request is bounded by its page, whatever the
// account's number of queries: a page of limit rows reads about limit rows
// and a few index entries, never a listing of every query of the account.
func TestListReadsAreBoundedByThePage(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	ctx := context.Background()
	var seq uint64
	p := &projections.QueryStatus{Store: store}
	const n = 3000
	ids := projectSubmissions(t, p, &seq, "acct_big", n)
	newest := slices.Clone(ids)
	slices.Reverse(newest)

	reads := &countingBucket{b: store.QueryList, reads: new(atomic.Int64)}
	s := &Service{Store: store, listReads: reads, docReads: &countingBucket{b: store.QueryStatus, reads: reads.reads}}
	caller := accounts.Caller{AccountID: "acct_big"}
	list := func(lp ListParams) ([]string, bool, string, int64) {
		t.Helper()
		reads.reads.Store(0)
		page, err := s.List(ctx, caller, lp)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range page.Data {
			got = append(got, r.RequestID)
		}
		next := ""
		if page.NextAfter != nil {
			next = *page.NextAfter
		}
		return got, page.HasMore, next, reads.reads.Load()
	}
	params := func(limit int, next string, status, mode string) ListParams {
		t.Helper()
		q := fmt.Sprintf("limit=%d", limit)
		if next != "" {
			q += "&after=" + next
		}
		if status != "" {
			q += "&status=" + status
		}
		if mode != "" {
			q += "&mode=" + mode
		}
		v, err := url.ParseQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		lp, err := ParseListParams(v)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return lp
	}

	// Pages of 5 from the newest: each reads its rows, one more, and a
	// constant number of index entries.
	const bound = 4 // the extra row, the head, two index pages
	next := ""
	var walked []string
	for range 3 {
		got, more, cursor, n := list(params(5, next, "", ""))
		if n > 5+bound {
			t.Fatalf("a page of 5 rows read %d entries of query_list and query_status (the account has %d queries); want at most %d", n, len(ids), 5+bound)
		}
		if !more || cursor == "" {
			t.Fatalf("page of 5: has_more %v next %q", more, cursor)
		}
		walked, next = append(walked, got...), cursor
	}
	if !slices.Equal(walked, newest[:15]) {
		t.Fatalf("three pages of 5: %v, want %v", walked, newest[:15])
	}

	// Every page of 100 to the end: newest first, each query once, the
	// other account's never.
	walked, next = nil, ""
	for pages := 0; ; pages++ {
		if pages > n/100+1 {
			t.Fatal("the pages do not end")
		}
		got, more, cursor, reads := list(params(100, next, "", ""))
		if reads > 100+bound {
			t.Fatalf("a page of 100 rows read %d entries", reads)
		}
		walked = append(walked, got...)
		if !more {
			if cursor != "" {
				t.Fatalf("next_after %q on the last page", cursor)
			}
			break
		}
		next = cursor
	}
	if !slices.Equal(walked, newest) {
		t.Fatalf("pages of 100: %d rows, want the %d of the account newest first", len(walked), len(newest))
	}

	// A filter few rows match reads at most 1000 rows, then gives has_more
	// and a cursor that goes on from the last row read.
	var verify []string
	for i, id := range ids {
		if i%500 == 7 {
			verify = append(verify, id)
		}
	}
	slices.Reverse(verify)
	walked, next = nil, ""
	for pages := 0; ; pages++ {
		if pages > n/maxListScan+1 {
			t.Fatal("the filtered pages do not end")
		}
		got, more, cursor, reads := list(params(20, next, "", events.ModeVerify))
		if reads > maxListScan+1+bound+maxListScan/64 {
			t.Fatalf("a filtered page read %d entries", reads)
		}
		walked = append(walked, got...)
		if !more {
			break
		}
		next = cursor
	}
	if !slices.Equal(walked, verify) {
		t.Fatalf("mode verify: %v, want %v", walked, verify)
	}

	// A cursor names a query of the account at its place, or it is
	// refused.
	for _, c := range []string{EncodeCursor(ids[10], 11), EncodeCursor(ids[10], n), EncodeCursor("req_"+ulid.Make().String(), 10)} {
		if _, err := s.List(ctx, caller, params(5, c, "", "")); apperr.Code(err) != apperr.InvalidRequest {
			t.Errorf("cursor %q: %v, want invalid_request", c, err)
		}
	}
	other, err := s.List(ctx, accounts.Caller{AccountID: "acct_other"}, params(100, "", "", ""))
	if err != nil || len(other.Data) != 100 || slices.Contains(newest, other.Data[0].RequestID) {
		t.Fatalf("the other account's page: %d rows, %v", len(other.Data), err)
	}
	if _, err := s.List(ctx, accounts.Caller{AccountID: "acct_other"}, params(5, EncodeCursor(ids[10], 10), "", "")); apperr.Code(err) != apperr.InvalidRequest {
		t.Fatalf("another account's cursor: %v, want invalid_request", err)
	}
}
