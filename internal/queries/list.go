package queries

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
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

// maxListScan bounds the rows one list request reads: with a filter that
// few rows match, a page may end with fewer rows than its limit, has_more
// set and a cursor that goes on from the last row read.
const maxListScan = 1000

// maxCursor bounds the length of an after cursor.
const maxCursor = 64

// ListParams are the parameters of GET /v1/queries.
type ListParams struct {
	// Limit is the most rows of the page, 1 to MaxListLimit.
	Limit int
	// After is the request id the page starts after (older than it); empty
	// for the first page.
	After string
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
			id, ok := decodeCursor(val)
			if !ok {
				return ListParams{}, apperr.New(apperr.InvalidRequest, "after is not a cursor this service gave: pass the next_after of the previous page as it is, or leave after out for the first page")
			}
			p.After = id
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

// EncodeCursor returns the opaque cursor of the page after the query with
// request id.
func EncodeCursor(requestID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(requestID))
}

// decodeCursor returns the request id of a cursor EncodeCursor made.
func decodeCursor(c string) (string, bool) {
	if c == "" || len(c) > maxCursor {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !ValidRequestID(string(raw)) {
		return "", false
	}
	return string(raw), true
}

// List returns a page of caller's account's queries, newest first (request
// ids are ULIDs, so their order is the order of submission), from the
// query_list read model: the account's keys are listed (only that account's
// rows are read) and each row of the page is read by its key. A query
// appears once the query projection has applied its submission, moments
// after it is accepted.
func (s *Service) List(ctx context.Context, caller accounts.Caller, p ListParams) (apiv1.QueryList, error) {
	page := apiv1.QueryList{Object: "list", Data: []apiv1.QuerySummary{}}
	keys, err := s.Store.QueryList.Keys(ctx, projections.ListPrefix(caller.AccountID))
	if err != nil {
		return page, err
	}
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		if id := projections.ListRequestID(k); id != "" && (p.After == "" || id < p.After) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(b, a) })
	ids = slices.Compact(ids) // a listing may report a key twice
	var last string
	for i, id := range ids {
		if i == maxListScan {
			page.HasMore = true
			break
		}
		entry, err := s.Store.QueryList.Get(ctx, projections.ListKey(caller.AccountID, id))
		switch {
		case errors.Is(err, eventstore.ErrNotFound):
			last = id
			continue
		case err != nil:
			return page, err
		}
		var row apiv1.QuerySummary
		if err := json.Unmarshal(entry.Value, &row); err != nil {
			return page, err
		}
		if (p.Status != "" && row.Status != p.Status) || (p.Mode != "" && row.Mode != p.Mode) {
			last = id
			continue
		}
		if len(page.Data) == p.Limit {
			page.HasMore = true
			break
		}
		page.Data = append(page.Data, row)
		last = id
	}
	if page.HasMore {
		if len(page.Data) > 0 && len(page.Data) == p.Limit {
			last = page.Data[len(page.Data)-1].RequestID
		}
		c := EncodeCursor(last)
		page.NextAfter = &c
	}
	return page, nil
}
