package app

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// A store written before the index of the list has rows but no index: the
// query projection fills each account's index from the query documents
// once, when it runs again, so the older queries are listed, in order, with
// the newer ones, and a cursor walks them all.
func TestListIncludesQueriesFromBeforeTheIndex(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	acct := h.account()
	key := h.key(acct)
	old := []string{h.submitOK(key, "asked before the index 1"), h.submitOK(key, "asked before the index 2")}
	for _, id := range old {
		h.wait(key, id, 30*time.Second)
	}
	eventually(t, 30*time.Second, "the rows", func() bool {
		ids, _, _, _ := h.listPage(key, nil)
		return slices.Equal(ids, []string{old[1], old[0]})
	})
	h.m.Close()
	h.offline(func(store *eventstore.Store) {
		// As a version before the index left it: rows, no index, no mark.
		for _, k := range []string{projections.IndexHeadKey(acct), projections.IndexPageKey(acct, 0), "index_complete"} {
			if err := store.QueryList.Delete(context.Background(), k, 0); err != nil {
				t.Fatal(err)
			}
		}
	})
	h.start()
	fresh := h.submitOK(key, "asked after the upgrade")
	want := []string{fresh, old[1], old[0]}
	eventually(t, 30*time.Second, "every query listed", func() bool {
		ids, _, _, _ := h.listPage(key, nil)
		return slices.Equal(ids, want)
	})
	all, pages := h.listAll(key, 1, nil)
	must(t, slices.Equal(all, want) && pages == 3, "pages of 1: %d pages %v, want %v", pages, all, want)
	h.wait(key, fresh, 30*time.Second)
}
