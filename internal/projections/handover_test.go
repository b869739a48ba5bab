package projections

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// appendQuery appends ev to query id and returns its sequence.
func appendQuery(t *testing.T, store *eventstore.Store, id string, ev events.Event) uint64 {
	t.Helper()
	return storetest.AppendQuery(t, store, id, ev).Seq
}

// storedDoc reads query id's document from the query_status bucket.
func storedDoc(t *testing.T, store *eventstore.Store, id string) *QueryDoc {
	t.Helper()
	e, err := store.QueryStatus.Get(context.Background(), id)
	if err != nil {
		return &QueryDoc{}
	}
	var d QueryDoc
	if err := json.Unmarshal(e.Value, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// runQueryStatus runs p as the query-status projection until the stored
// document of id is at seq, then stops it, as a process losing the lease.
func runQueryStatus(t *testing.T, store *eventstore.Store, p *QueryStatus, id string, seq uint64) {
	t.Helper()
	stop := startRunner(t, &Runner{Name: ConsumerQueryStatus, Stream: store.Queries, Filters: []string{"ev.query.>"},
		HandleBatch: p.HandleBatch, Checkpoints: store.Projections, Log: zerolog.Nop()})
	storetest.WaitFor(t, 10*time.Second, "the document at its last event", func() bool { return storedDoc(t, store, id).Seq >= seq })
	stop(nil)
}

// Two processes take turns with the query-status projection: A applies the
// first events, B the next (model b answers), A the last. A must not apply
// the last event to the document it cached before B's turn.
func TestQueryStatusLeaseHandOverKeepsTheOtherHoldersChanges(t *testing.T) {
	stores := storetest.OpenMany(t, 2)
	a, b := &QueryStatus{Store: stores[0]}, &QueryStatus{Store: stores[1]}
	const id = "req_01M80000000000000000000042"
	ma, mb := events.ModelRef{Provider: "provider_a", ModelID: "a"}, events.ModelRef{Provider: "provider_b", ModelID: "b"}

	appendQuery(t, stores[0], id, events.QuerySubmitted{RequestID: id, Mode: events.ModeUnify, Models: []events.ModelRef{ma, mb}})
	seq := appendQuery(t, stores[0], id, events.QueryStarted{})
	runQueryStatus(t, stores[0], a, id, seq)

	seq = appendQuery(t, stores[0], id, events.ModelAnswered{Model: mb, Answer: "B"})
	runQueryStatus(t, stores[1], b, id, seq)

	seq = appendQuery(t, stores[0], id, events.ModelAnswered{Model: ma, Answer: "A"})
	runQueryStatus(t, stores[0], a, id, seq)

	got := storedDoc(t, stores[0], id)
	for _, m := range got.Result.Models {
		if m.Status != ModelAnswered {
			t.Errorf("model %s reads %s after the hand-overs; want %s", m.Provider, m.Status, ModelAnswered)
		}
	}
}

// A runner whose stream goes idle writes the checkpoint of the last batch
// it applied, however soon after the previous checkpoint that batch came.
func TestRunnerCheckpointCatchesUpWhenTheStreamIsIdle(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	a := &applied{replayed: map[uint64]bool{}}
	stop := run(t, store, a)
	defer stop()
	first := appendProgress(t, store, 1)
	waitApplied(t, a, first)
	storetest.WaitFor(t, 10*time.Second, "the first checkpoint", func() bool {
		pos, err := Checkpoint(ctx, store.Projections, "proj_test")
		return err == nil && pos == first
	})
	// Right after a checkpoint: this batch is applied within
	// checkpointEvery of it, and then nothing more comes.
	last := appendProgress(t, store, 30)
	waitApplied(t, a, last)
	storetest.WaitFor(t, 10*time.Second, "the checkpoint of the last event", func() bool {
		pos, err := Checkpoint(ctx, store.Projections, "proj_test")
		return err == nil && pos == last
	})
}

// The stored documents of the keys and balances buckets keep the JSON they
// have always had: existing buckets keep reading, and a rename of an
// aggregate's field does not change them.
func TestReadModelDocumentsKeepTheirJSON(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	capMicros := int64(5_000_000)
	key := KeyDoc{Fingerprint: "abcdefgh", AccountID: "acct_1", Name: "ci", SecretHash: "h", State: "suspended", CreatedAt: at, Resume: "active", Seq: 7}
	bal := BalanceDoc{Seq: 9, AccountID: "acct_1", Plan: "pro", Ledger: LedgerDoc{
		BalanceMicros: 1, ReservedMicros: 2, Month: "2026-11", SpentMonthMicros: 3, CapMicros: &capMicros, GrantedPeriod: "2026-11",
		Open: map[string]*OpenQueryDoc{"req_1": {ReservedMicros: 4, ChargedMicros: 5, Calls: map[string]bool{"c1": true}, At: at}}, Head: "hh",
	}}
	for _, tc := range []struct {
		name string
		doc  any
		want string
	}{
		{"key", key, `{"fingerprint":"abcdefgh","account_id":"acct_1","name":"ci","secret_hash":"h","state":"suspended","created_at":"2026-11-21T12:00:00Z","resume":"active","seq":7}`},
		{"balance", bal, `{"seq":9,"account_id":"acct_1","plan":"pro","ledger":{"balance_micros":1,"reserved_micros":2,"month":"2026-11","spent_month_micros":3,"cap_micros":5000000,"granted_period":"2026-11","open":{"req_1":{"reserved_micros":4,"charged_micros":5,"calls":{"c1":true},"at":"2026-11-21T12:00:00Z"}},"head":"hh"}}`},
	} {
		got, err := json.Marshal(tc.doc)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s document:\n got %s (%v)\nwant %s", tc.name, got, err, tc.want)
		}
	}
	// The aggregates' own JSON, which the buckets held before they had
	// their own types, reads back the same.
	k := key.key()
	old, _ := json.Marshal(k)
	var back KeyDoc
	if err := json.Unmarshal(old, &back); err != nil || back != key {
		t.Errorf("a key stored as the aggregate's struct reads back as %+v (%v)", back, err)
	}
	oldLedger, _ := json.Marshal(bal.Ledger.ledger())
	newLedger, _ := json.Marshal(bal.Ledger)
	if string(oldLedger) != string(newLedger) {
		t.Errorf("ledger document %s differs from the aggregate's %s", newLedger, oldLedger)
	}
}
