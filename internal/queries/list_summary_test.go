package queries

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// A list row read from a stored document is the summary of its result,
// field for field, whatever the result holds besides; a document of
// another account, or one not submitted yet, gives no row.
func TestListRowIsTheSummaryOfTheDocument(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	ctx := context.Background()
	created := time.Date(2026, 11, 24, 3, 0, 0, 123456789, time.UTC)
	completed := created.Add(2 * time.Second)
	charged := 0.0123
	doc := projections.QueryDoc{Seq: 9, AccountID: "acct_sum", KeyFingerprint: "abcdefgh", Result: projections.Result{
		RequestID: "req_01KAW0000000000000000000AB", Object: "query", Mode: "unify", Status: "failed", Stage: "aggregating",
		ProgressPercent: 100, Models: []projections.ModelResult{{Status: "answered"}},
		Credits:   apiv1.QueryCredits{Estimated: 0.5, Charged: &charged},
		Error:     &projections.ResultError{Code: "provider_error", Message: "every model failed"},
		Missing:   []string{"file_x"},
		CreatedAt: created, CompletedAt: &completed,
	}}
	pending := projections.QueryDoc{Seq: 1, AccountID: "acct_sum"}
	for id, d := range map[string]*projections.QueryDoc{doc.Result.RequestID: &doc, "req_pending": &pending} {
		raw, err := d.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.QueryStatus.Put(ctx, id, raw); err != nil {
			t.Fatal(err)
		}
	}
	s := &Service{Store: store}
	row, ok, err := s.summary(ctx, "acct_sum", doc.Result.RequestID)
	if err != nil || !ok {
		t.Fatalf("summary: %v %v", ok, err)
	}
	if want := doc.Result.Summary(); !reflect.DeepEqual(row, want) {
		t.Fatalf("row %+v, want %+v", row, want)
	}
	for _, c := range []struct{ acct, id string }{{"acct_other", doc.Result.RequestID}, {"acct_sum", "req_pending"}, {"acct_sum", "req_absent"}} {
		if _, ok, err := s.summary(ctx, c.acct, c.id); ok || err != nil {
			t.Errorf("%s of %s: a row (%v), want none", c.id, c.acct, err)
		}
	}
}

// A listed query whose document is not stored yet (the projection holds a
// new query's document for a while) is folded from its events: the row is
// the summary of that fold; for another account there is no row.
func TestListRowOfAQueryWithoutADocumentIsFoldedFromItsEvents(t *testing.T) {
	t.Parallel()
	store := storetest.Open(t)
	ctx := context.Background()
	const id = "req_01KAW0000000000000000000AC"
	var recs []events.Record
	for _, ev := range []events.Event{
		events.QuerySubmitted{RequestID: id, AccountID: "acct_fold", KeyFingerprint: "abcdefgh", Mode: events.ModeUnify,
			Models: []events.ModelRef{{Provider: "provider_a", ModelID: "m"}}, EstimatedMicros: 500_000},
		events.QueryStarted{},
	} {
		env, err := events.Wrap(events.AggregateQuery, id, ev, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		app, err := store.Append(ctx, env, nil)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, events.Record{Seq: app.Seq, Envelope: env, Event: ev})
	}
	s := &Service{Store: store}
	row, ok, err := s.summary(ctx, "acct_fold", id)
	if err != nil || !ok {
		t.Fatalf("summary: %v %v", ok, err)
	}
	if want := projections.FoldQuery(recs).Result.Summary(); !reflect.DeepEqual(row, want) || row.Status != events.StatusRunning {
		t.Fatalf("row %+v, want %+v", row, want)
	}
	if _, ok, err := s.summary(ctx, "acct_other", id); ok || err != nil {
		t.Errorf("another account's query: a row (%v), want none", err)
	}
}
