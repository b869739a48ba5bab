package projections

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// submissions returns the submitted records of n queries of acct, from
// sequence first, their request ids in order of admission.
func submissions(t *testing.T, acct string, first uint64, n int) ([]events.Record, []string) {
	t.Helper()
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var recs []events.Record
	var ids []string
	for i := range n {
		seq := first + uint64(i)
		at := t0.Add(time.Duration(seq) * time.Millisecond)
		id := "req_" + ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String()
		ev := events.QuerySubmitted{RequestID: id, AccountID: acct, KeyFingerprint: "abcdefgh", Mode: events.ModeUnify}
		env, err := events.Wrap(events.AggregateQuery, id, ev, at)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, events.Record{Seq: seq, Envelope: env, Event: ev})
		ids = append(ids, id)
	}
	return recs, ids
}

// readIndex returns acct's index as a list request sees it: the ids the
// head counts, oldest first. It fails the test on a page that is not full
// below the last.
func readIndex(t *testing.T, store *eventstore.Store, acct string) []string {
	t.Helper()
	ctx := context.Background()
	raw, err := store.QueryList.GetLatest(ctx, IndexHeadKey(acct))
	if err != nil {
		t.Fatal(err)
	}
	if raw == nil {
		return nil
	}
	head, err := ParseIndexHead(raw)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for n := 0; len(ids) < head.Count; n++ {
		raw, err := store.QueryList.GetLatest(ctx, IndexPageKey(acct, n))
		if err != nil {
			t.Fatal(err)
		}
		page, err := ParseIndexPage(raw)
		if err != nil {
			t.Fatalf("page %d: %v", n, err)
		}
		if len(page) < IndexPageSize && len(ids)+len(page) < head.Count {
			t.Fatalf("page %d holds %d ids and is not the last of %d", n, len(page), head.Count)
		}
		ids = append(ids, page[:min(len(page), head.Count-len(ids))]...)
	}
	return ids
}

func apply(t *testing.T, p *QueryStatus, recs []events.Record, replayed bool) {
	t.Helper()
	for i := range recs {
		recs[i].Replayed = replayed
	}
	if err := p.HandleBatch(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
}

// The index holds each submitted query of an account once, in order of
// admission, whatever part of a batch a crash let through before the
// batch came again: its pages (the head not yet written), its heads (the
// documents not yet written), or everything.
func TestIndexTakesEachQueryOnceAcrossCrashes(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	ctx := context.Background()
	const acct = "acct_index"
	recs, ids := submissions(t, acct, 1, 300)
	other, otherIDs := submissions(t, "acct_other", 301, 3)
	apply(t, &QueryStatus{Store: store}, recs[:200], false)
	apply(t, &QueryStatus{Store: store}, append(slices.Clone(recs[200:]), other...), false)
	if got := readIndex(t, store, acct); !slices.Equal(got, ids) {
		t.Fatalf("index of %d ids, want the %d submitted in order", len(got), len(ids))
	}
	if got := readIndex(t, store, "acct_other"); !slices.Equal(got, otherIDs) {
		t.Fatalf("the other account's index: %v, want %v", got, otherIDs)
	}
	headAfter, err := store.QueryList.GetLatest(ctx, IndexHeadKey(acct))
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name  string
		crash func()
	}{
		{"everything stored", func() {}},
		{"documents not stored", func() {
			for _, id := range ids[200:] {
				if err := store.QueryStatus.Delete(ctx, id, 0); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"heads and documents not stored", func() {
			for _, id := range ids[200:] {
				if err := store.QueryStatus.Delete(ctx, id, 0); err != nil {
					t.Fatal(err)
				}
			}
			h := IndexHead{Count: 200, Seq: 200}
			if _, err := store.QueryList.Put(ctx, IndexHeadKey(acct), fmt.Appendf(nil, `{"count":%d,"seq":%d}`, h.Count, h.Seq)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		c.crash()
		// A new run replays the last batch.
		apply(t, &QueryStatus{Store: store}, slices.Clone(recs[200:]), true)
		if got := readIndex(t, store, acct); !slices.Equal(got, ids) {
			t.Fatalf("%s: index of %d ids after the replay, want the %d submitted once each", c.name, len(got), len(ids))
		}
		head, err := store.QueryList.GetLatest(ctx, IndexHeadKey(acct))
		if err != nil || string(head) != string(headAfter) {
			t.Fatalf("%s: head %s %v, want %s", c.name, head, err, headAfter)
		}
	}
}

// A store written before the index has documents (and rows) but no index:
// the first run fills each account's index from the documents, by request
// id, then adds the queries it applies, each once.
func TestIndexIsFilledFromAnOlderStore(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	ctx := context.Background()
	const acct = "acct_older"
	recs, ids := submissions(t, acct, 1, 200)
	apply(t, &QueryStatus{Store: store}, recs, false)
	// As an older version left it: no index, and the document of the last
	// query not stored yet (its batch comes again).
	keys := []string{IndexHeadKey(acct), IndexPageKey(acct, 0), IndexPageKey(acct, 1), indexComplete}
	for _, k := range keys {
		if err := store.QueryList.Delete(ctx, k, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.QueryStatus.Delete(ctx, ids[199], 0); err != nil {
		t.Fatal(err)
	}
	more, moreIDs := submissions(t, acct, 201, 2)
	apply(t, &QueryStatus{Store: store}, append(slices.Clone(recs[190:]), more...), true)
	want := append(slices.Clone(ids), moreIDs...)
	if got := readIndex(t, store, acct); !slices.Equal(got, want) {
		t.Fatalf("index after the upgrade: %d ids, want %d (the older queries by request id, then the new)", len(got), len(want))
	}
}

// The index is rebuilt with the query read model to the same bytes.
func TestIndexRebuildsToIdenticalBytes(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	ctx := context.Background()
	const acct = "acct_rebuild"
	recs, ids := submissions(t, acct, 1, 2*IndexPageSize+5)
	project := func() map[string]string {
		t.Helper()
		apply(t, &QueryStatus{Store: store}, slices.Clone(recs[:100]), false)
		apply(t, &QueryStatus{Store: store}, slices.Clone(recs[100:]), false)
		got := map[string]string{}
		for _, k := range []string{IndexHeadKey(acct), IndexPageKey(acct, 0), IndexPageKey(acct, 1), IndexPageKey(acct, 2)} {
			raw, err := store.QueryList.GetLatest(ctx, k)
			if err != nil || raw == nil {
				t.Fatalf("%s: %q %v", k, raw, err)
			}
			got[k] = string(raw)
		}
		return got
	}
	before := project()
	if got := readIndex(t, store, acct); !slices.Equal(got, ids) {
		t.Fatalf("index of %d ids, want %d", len(got), len(ids))
	}
	if err := store.ResetQueryStatus(ctx); err != nil {
		t.Fatal(err)
	}
	after := project()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s after the rebuild: %s, want %s", k, after[k], v)
		}
	}
}
