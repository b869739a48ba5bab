package queries

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// The page sizes of GET /v1/queries.
const (
	DefaultListLimit = 20
	MaxListLimit     = 100
)

// maxListScan bounds the query documents one list request reads: with a
// filter that few queries match, a page may end with fewer rows than its
// limit, has_more set and a cursor that goes on from the last query read.
const maxListScan = 1000

// maxCursor bounds the length of an after cursor.
const maxCursor = 64

// ListParams are the parameters of GET /v1/queries.
type ListParams struct {
	// Limit is the most rows of the page, 1 to MaxListLimit.
	Limit int
	// After is the request id the page starts after (older than it); empty
	// for the first page. AfterPos is its place in the account's list
	// (from 0, the oldest), which the cursor carries too.
	After    string
	AfterPos int
	// Status and Mode, when set, keep only the queries with that status or
	// mode.
	Status, Mode string
}

// ParseListParams reads the query parameters of GET /v1/queries: limit
// (1–100, default 20), after (a cursor from next_after), status (queued,
// running, completed, failed) and mode (unify, justify, verify). A parameter
// given twice, an unknown one, or a value out of its range is
// invalid_request, with a message saying what is accepted.
func ParseListParams(v url.Values) (ListParams, error) {
	p := ListParams{Limit: DefaultListLimit}
	for name, vals := range v {
		if len(vals) != 1 {
			return ListParams{}, apperr.New(apperr.InvalidRequest, "the query parameter %q is given %d times; give it at most once", truncate(name), len(vals))
		}
		val := vals[0]
		switch name {
		case "limit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > MaxListLimit {
				return ListParams{}, apperr.New(apperr.InvalidRequest, "limit must be an integer from 1 to %d, not %q", MaxListLimit, truncate(val))
			}
			p.Limit = n
		case "after":
			id, pos, ok := decodeCursor(val)
			if !ok {
				return ListParams{}, apperr.New(apperr.InvalidRequest, "after is not a cursor this service gave: pass the next_after of the previous page as it is, or leave after out for the first page")
			}
			p.After, p.AfterPos = id, pos
		case "status":
			switch val {
			case events.StatusQueued, events.StatusRunning, events.StatusCompleted, events.StatusFailed:
			default:
				return ListParams{}, apperr.New(apperr.InvalidRequest, "status must be one of queued, running, completed, failed, not %q", truncate(val))
			}
			p.Status = val
		case "mode":
			switch val {
			case events.ModeUnify, events.ModeJustify, events.ModeVerify:
			default:
				return ListParams{}, apperr.New(apperr.InvalidRequest, "mode must be one of unify, justify, verify, not %q", truncate(val))
			}
			p.Mode = val
		default:
			return ListParams{}, apperr.New(apperr.InvalidRequest, "unknown query parameter %q; GET /v1/queries takes limit, after, status and mode", truncate(name))
		}
	}
	return p, nil
}

// maxCursorPos bounds the place a cursor names: it keeps a cursor within
// maxCursor.
const maxCursorPos = 999_999_999_999

// EncodeCursor returns the opaque cursor of the page after the query with
// request id, at place pos (from 0, the oldest) of its account's list: the
// base64url of "<request_id>.<pos>".
func EncodeCursor(requestID string, pos int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(requestID + "." + strconv.Itoa(pos)))
}

// decodeCursor returns the request id and place of a cursor EncodeCursor
// made; false for anything else (only the canonical form of a place is
// taken, so a cursor round-trips).
func decodeCursor(c string) (string, int, bool) {
	if c == "" || len(c) > maxCursor {
		return "", 0, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", 0, false
	}
	id, num, ok := strings.Cut(string(raw), ".")
	if !ok || !ValidRequestID(id) {
		return "", 0, false
	}
	pos, err := strconv.Atoi(num)
	if err != nil || pos < 0 || pos > maxCursorPos || strconv.Itoa(pos) != num {
		return "", 0, false
	}
	return id, pos, true
}

// List returns a page of caller's account's queries, newest first (in
// order of admission): it reads the head of the account's index in the
// query_list bucket, the index pages the page spans (from the newest, or
// from the cursor's place, checked against the request id the cursor
// names), and the query_status document of each query it needs, by key,
// as a poll does; each row is the summary of that document's result (of
// the query's events folded, when its document is not stored yet, as a
// poll does too). Its reads are bounded by the page, whatever the number of
// the account's queries: the documents of the page and one more, and at
// most maxListScan documents with a filter few queries match. A query
// appears once the query projection has added it to the index, moments
// after it is accepted. A cursor that does not name a query of the
// account at its place is invalid_request.
func (s *Service) List(ctx context.Context, caller accounts.Caller, p ListParams) (apiv1.QueryList, error) {
	page := apiv1.QueryList{Object: "list", Data: []apiv1.QuerySummary{}}
	idx := index{bucket: s.listBucket(), account: caller.AccountID}
	count, err := idx.count(ctx)
	if err != nil {
		return page, err
	}
	start := count - 1
	if p.After != "" {
		if p.AfterPos >= count {
			// A replica may not hold the head the cursor's page was read
			// from yet: the leader does.
			if count, err = idx.latestCount(ctx); err != nil {
				return page, err
			}
		}
		id := ""
		if p.AfterPos < count {
			if id, err = idx.at(ctx, p.AfterPos); err != nil {
				return page, err
			}
		}
		if id != p.After {
			return page, apperr.New(apperr.InvalidRequest, "after is not a cursor of this account's list: pass the next_after of the previous page as it is, or leave after out for the first page")
		}
		start = p.AfterPos - 1
	}
	// The place and id of the last row read, and of the page's last row.
	last, lastRow := -1, -1
	var lastID, lastRowID string
	for pos, read := start, 0; pos >= 0; pos, read = pos-1, read+1 {
		if read == maxListScan {
			page.HasMore = true
			break
		}
		id, err := idx.at(ctx, pos)
		if err != nil {
			return page, err
		}
		row, ok, err := s.summary(ctx, caller.AccountID, id)
		switch {
		case err != nil:
			return page, err
		case !ok:
			last, lastID = pos, id
			continue
		}
		if (p.Status != "" && row.Status != p.Status) || (p.Mode != "" && row.Mode != p.Mode) {
			last, lastID = pos, id
			continue
		}
		if len(page.Data) == p.Limit {
			page.HasMore = true
			break
		}
		page.Data = append(page.Data, row)
		last, lastID, lastRow, lastRowID = pos, id, pos, id
	}
	if page.HasMore {
		if len(page.Data) > 0 && len(page.Data) == p.Limit {
			last, lastID = lastRow, lastRowID
		}
		c := EncodeCursor(lastID, last)
		page.NextAfter = &c
	}
	return page, nil
}

// index reads an account's index in the query_list bucket, keeping the
// page it read last.
type index struct {
	bucket  listReader
	account string
	n       int // the number of the page held, when ids is not nil
	ids     []string
}

// count returns the number of queries of the index; 0 when it has none.
func (x *index) count(ctx context.Context) (int, error) {
	entry, err := x.bucket.Get(ctx, projections.IndexHeadKey(x.account))
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	head, err := projections.ParseIndexHead(entry.Value)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", x.account, err)
	}
	return head.Count, nil
}

// latestCount is count read from the bucket's leader.
func (x *index) latestCount(ctx context.Context) (int, error) {
	raw, err := x.bucket.GetLatest(ctx, projections.IndexHeadKey(x.account))
	if err != nil || raw == nil {
		return 0, err
	}
	head, err := projections.ParseIndexHead(raw)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", x.account, err)
	}
	return head.Count, nil
}

// at returns the request id at place pos of the index, which the head
// counts. A page that a replica does not yet hold in full is read again
// from the bucket's leader.
func (x *index) at(ctx context.Context, pos int) (string, error) {
	n, i := pos/projections.IndexPageSize, pos%projections.IndexPageSize
	if x.ids == nil || x.n != n || i >= len(x.ids) {
		key := projections.IndexPageKey(x.account, n)
		var raw []byte
		entry, err := x.bucket.Get(ctx, key)
		switch {
		case err == nil:
			raw = entry.Value
		case !errors.Is(err, eventstore.ErrNotFound):
			return "", err
		}
		ids, err := projections.ParseIndexPage(raw)
		if raw == nil || err != nil || i >= len(ids) {
			if raw, err = x.bucket.GetLatest(ctx, key); err != nil {
				return "", err
			}
			if ids, err = projections.ParseIndexPage(raw); err != nil {
				return "", fmt.Errorf("list %s: %s: %w", x.account, key, err)
			}
		}
		if i >= len(ids) {
			return "", fmt.Errorf("list %s: %s holds %d ids, the head counts more: %w", x.account, key, len(ids), eventstore.ErrUnavailable)
		}
		x.n, x.ids = n, ids
	}
	return x.ids[i], nil
}

// summary returns the row of query id of account acct, read from its
// query_status document, or folded from the query's events when no document
// is stored for it yet (the projection holds a new query's document for up
// to projections.RunningDocEvery, and stores the index before the
// documents); false when the query is not acct's.
func (s *Service) summary(ctx context.Context, acct, id string) (apiv1.QuerySummary, bool, error) {
	entry, err := s.docBucket().Get(ctx, id)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		doc, err := s.fold(ctx, id)
		if err != nil || doc == nil || doc.AccountID != acct {
			return apiv1.QuerySummary{}, false, err
		}
		return doc.Result.Summary(), true, nil
	case err != nil:
		return apiv1.QuerySummary{}, false, err
	}
	doc, err := projections.ParseStored(entry.Value)
	if err != nil {
		return apiv1.QuerySummary{}, false, fmt.Errorf("list %s: decode %s: %w", acct, id, err)
	}
	// A summary's fields are the result's, under the same names: decoding
	// the result into one skips the models' answers (what
	// projections.Result.Summary keeps of it).
	var row apiv1.QuerySummary
	if err := json.Unmarshal(doc.Result, &row); err != nil {
		return apiv1.QuerySummary{}, false, fmt.Errorf("list %s: decode %s: %w", acct, id, err)
	}
	if doc.AccountID != acct || row.RequestID == "" {
		return apiv1.QuerySummary{}, false, nil
	}
	row.Object = "query.summary"
	return row, true, nil
}

// listReader is what List reads of the query_list and query_status
// buckets.
type listReader interface {
	Get(ctx context.Context, key string) (eventstore.Entry, error)
	GetLatest(ctx context.Context, key string) ([]byte, error)
}

// listBucket returns the query_list bucket, or the reader a test put in
// its place.
func (s *Service) listBucket() listReader {
	if s.listReads != nil {
		return s.listReads
	}
	return s.Store.QueryList
}

// docBucket returns the query_status bucket, or the reader a test put in
// its place.
func (s *Service) docBucket() listReader {
	if s.docReads != nil {
		return s.docReads
	}
	return s.Store.QueryStatus
}

// Count returns the number of the account's queries, as its index in the
// query_list bucket holds them (the projection adds each one at its
// submission).
func (s *Service) Count(ctx context.Context, accountID string) (int, error) {
	x := &index{bucket: s.listBucket(), account: accountID}
	return x.count(ctx)
}
