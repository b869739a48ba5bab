package app

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// listPage gets one page of GET /v1/queries with the parameters params and
// returns the rows' ids, has_more and next_after ("" when null).
func (h *harness) listPage(key string, params url.Values) (ids []string, rows []map[string]any, more bool, next string) {
	h.t.Helper()
	path := "/v1/queries"
	if len(params) > 0 {
		path += "?" + params.Encode()
	}
	r := h.api("GET", path, key, nil)
	must(h.t, r.status == 200, "GET %s: %d %s", path, r.status, r.body)
	v := r.json(h.t)
	must(h.t, v["object"] == "list", "object %v", v["object"])
	for _, row := range v["data"].([]any) {
		m := row.(map[string]any)
		ids = append(ids, m["request_id"].(string))
		rows = append(rows, m)
	}
	if s, ok := v["next_after"].(string); ok {
		next = s
	}
	return ids, rows, v["has_more"].(bool), next
}

// listAll follows the cursor from the first page with limit rows a page.
func (h *harness) listAll(key string, limit int, params url.Values) (ids []string, pages int) {
	h.t.Helper()
	p := url.Values{}
	for k, v := range params {
		p[k] = v
	}
	p.Set("limit", fmt.Sprint(limit))
	for {
		page, _, more, next := h.listPage(key, p)
		pages++
		must(h.t, len(page) <= limit, "a page of %d rows with limit %d", len(page), limit)
		ids = append(ids, page...)
		if !more {
			must(h.t, next == "", "next_after %q on the last page", next)
			return ids, pages
		}
		must(h.t, next != "", "has_more without next_after")
		p.Set("after", next)
	}
}

// GET /v1/queries lists the calling account's queries (every key's), newest
// first, a page at a time, filtered by status and mode; another account's
// queries never appear; bad parameters are invalid_request.
func TestListQueries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.accountWith("free", 100)
	k1, k2 := h.key(acct), h.key(acct)
	other := h.newKey()
	otherID := h.submitOK(other, "another account's question")

	modes := []string{"unify", "justify", "unify", "verify", "unify"}
	var ids []string
	for i, mode := range modes {
		key := []string{k1, k2}[i%2]
		r := h.submit(key, map[string]any{"mode": mode, "prompt": fmt.Sprintf("list me %d: the Moon", i)})
		must(t, r.status == 202, "submit: %d %s", r.status, r.body)
		ids = append(ids, r.json(t)["request_id"].(string))
	}
	for _, id := range ids {
		h.wait(k1, id, 60*time.Second)
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	eventually(t, 30*time.Second, "the list to show every query completed", func() bool {
		got, rows, _, _ := h.listPage(k1, url.Values{"status": {"completed"}})
		return slices.Equal(got, newest) && rows[0]["completed_at"] != nil
	})

	// Pages of two, newest first, the same from either key of the account.
	for _, key := range []string{k1, k2} {
		all, pages := h.listAll(key, 2, nil)
		must(t, slices.Equal(all, newest) && pages == 3, "pages of 2: %d pages %v, want %v", pages, all, newest)
	}
	all, pages := h.listAll(k1, 100, nil)
	must(t, slices.Equal(all, newest) && pages == 1, "one page: %v", all)
	_, rows, more, next := h.listPage(k1, url.Values{"limit": {"1"}})
	must(t, more && next != "", "limit 1: has_more %v next %q", more, next)
	row := rows[0]
	must(t, row["object"] == "query.summary" && row["mode"] == "unify" && row["status"] == "completed" && row["stage"] == "aggregating" &&
		row["progress_percent"] == 100.0 && jsonPath(row, "credits", "charged").(float64) > 0 && row["created_at"] != nil,
		"row: %v", row)
	_, hasModels := row["models"]
	must(t, !hasModels, "a row carries the models' answers: %v", row)

	// Filters.
	got, _ := h.listAll(k1, 2, url.Values{"mode": {"unify"}})
	must(t, slices.Equal(got, []string{ids[4], ids[2], ids[0]}), "mode unify: %v", got)
	got, _ = h.listAll(k1, 2, url.Values{"mode": {"verify"}, "status": {"completed"}})
	must(t, slices.Equal(got, []string{ids[3]}), "verify and completed: %v", got)
	got, _ = h.listAll(k1, 2, url.Values{"status": {"running"}})
	must(t, len(got) == 0, "running: %v", got)

	// The other account sees its own query only.
	got, _ = h.listAll(other, 100, nil)
	must(t, slices.Equal(got, []string{otherID}), "the other account's list: %v", got)
	must(t, !slices.Contains(all, otherID), "another account's query is listed")

	// Bad parameters.
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "limit=", "after=garbage", "after=" + ids[0], "status=cancelled",
		"mode=fast", "sort=asc", "limit=2&limit=3", "after=" + url.QueryEscape("cmVxXzAx")} {
		r := h.api("GET", "/v1/queries?"+q, k1, nil)
		must(t, r.status == 400 && r.errCode(t) == "invalid_request", "%s: %d %s", q, r.status, r.body)
	}
	r := h.api("GET", "/v1/queries", "", nil)
	must(t, r.status == 401, "no key: %d", r.status)
}

// A store written when the list kept a row per query in query_list
// (<account_id>.<request_id>) still lists correctly: the rows are ignored,
// each listed query is read from its document, so even a row that
// disagrees with the document changes nothing.
func TestListIgnoresRowsOfAnOlderStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	old := h.submitOK(key, "asked when the list had rows")
	h.wait(key, old, 30*time.Second)
	h.m.Close()
	h.offline(func(store *eventstore.Store) {
		// As an older version left it, with a row that says otherwise.
		row := `{"request_id":"` + old + `","object":"query.summary","mode":"verify","status":"running","stage":"queued","progress_percent":0,"credits":{"estimated":1,"charged":null},"created_at":"2026-01-01T00:00:00Z"}`
		for k, v := range map[string]string{acct + "." + old: row, "rows_complete": "1"} {
			if _, err := store.QueryList.Put(context.Background(), k, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
	})
	h.start()
	fresh := h.submitOK(key, "asked after the upgrade")
	h.wait(key, fresh, 30*time.Second)
	eventually(t, 30*time.Second, "both queries listed", func() bool {
		ids, _, _, _ := h.listPage(key, nil)
		return slices.Equal(ids, []string{fresh, old})
	})
	got, _ := h.listAll(key, 1, url.Values{"status": {"completed"}, "mode": {"unify"}})
	must(t, slices.Equal(got, []string{fresh, old}), "completed unify queries: %v, want both (the old row is ignored)", got)
	got, _ = h.listAll(key, 1, url.Values{"status": {"running"}})
	must(t, len(got) == 0, "running: %v (the old row is ignored)", got)
}

// The list is rebuilt with the query read model: the index to the same
// bytes, and so the same pages.
func TestListRebuildsToIdenticalBytes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	ids := []string{h.submitOK(key, "rebuild the list 1"), h.submitOK(key, "rebuild the list 2")}
	ctx := context.Background()
	for _, id := range ids {
		h.wait(key, id, 30*time.Second)
	}
	indexKeys := []string{projections.IndexHeadKey(acct), projections.IndexPageKey(acct, 0)}
	before := map[string]string{}
	var page string
	eventually(t, 10*time.Second, "the list", func() bool {
		r := h.api("GET", "/v1/queries", key, nil)
		page = string(r.body)
		return r.status == 200 && strings.Count(page, `"status":"completed"`) == len(ids)
	})
	for _, k := range indexKeys {
		raw, err := h.m.Store.QueryList.GetLatest(ctx, k)
		must(t, err == nil && raw != nil, "%s: %v", k, err)
		before[k] = string(raw)
	}
	h.m.Close()
	h.offline(func(store *eventstore.Store) {
		must(t, store.ResetQueryStatus(ctx) == nil, "reset")
		must(t, projections.Rewind(ctx, store.Projections, projections.ConsumerQueryStatus) == nil, "rewind")
		keys, err := store.QueryList.Keys(ctx, ">")
		must(t, err == nil && len(keys) == 0, "index entries after the reset: %v %v", keys, err)
	})
	h.start()
	eventually(t, 30*time.Second, "the rebuild of the list", func() bool {
		r := h.api("GET", "/v1/queries", key, nil)
		return r.status == 200 && string(r.body) == page
	})
	for _, k := range indexKeys {
		raw, err := h.m.Store.QueryList.GetLatest(ctx, k)
		must(t, err == nil && string(raw) == before[k], "%s after the rebuild: %s, want %s (%v)", k, raw, before[k], err)
	}
}
