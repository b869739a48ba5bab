package projections

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
)

func record(seq uint64, ev events.Event) events.Record {
	env, _ := events.Wrap(events.AggregateQuery, "req_1", ev, time.Date(2026, 11, 21, 12, 0, int(seq), 0, time.UTC))
	return events.Record{Seq: seq, Envelope: env, Event: ev}
}

func TestParseStoredMatchesDecode(t *testing.T) {
	refs := []events.ModelRef{{Provider: "provider_a", ModelID: "m"}, {Provider: "provider_b", ModelID: "n"}}
	d := FoldQuery([]events.Record{
		record(1, events.QuerySubmitted{RequestID: "req_1", AccountID: `acct_"quoted"`, KeyFingerprint: "abcdefgh", Mode: "unify", Prompt: `a "result": } prompt`, Models: refs}),
		record(2, events.QueryStarted{}),
		record(3, events.ModelAnswered{Model: refs[0], Answer: `,"result":{"x":1}}`}),
	})
	for _, acct := range []string{"acct_plain", `acct_"quoted"`} {
		d.AccountID = acct
		raw, err := d.Encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseStored(raw)
		if err != nil {
			t.Fatal(err)
		}
		var want StoredQuery
		_ = json.Unmarshal(raw, &want)
		var a, b bytes.Buffer
		_ = json.Compact(&a, got.Result)
		_ = json.Compact(&b, want.Result)
		if got.Seq != 3 || got.AccountID != acct || a.String() != b.String() {
			t.Fatalf("ParseStored = seq %d account %q result %s; want 3 %q %s", got.Seq, got.AccountID, got.Result, acct, want.Result)
		}
	}
}

func TestProgressNeverGoesBackwards(t *testing.T) {
	refs := []events.ModelRef{{Provider: "provider_a"}, {Provider: "provider_b"}}
	recs := []events.Record{
		record(1, events.QuerySubmitted{RequestID: "req_1", Models: refs}),
		record(2, events.QueryStarted{}),
		record(3, events.ModelAnswered{Model: refs[0]}),
		record(4, events.ProgressReported{Stage: events.StageAggregating, Percent: 10}),
		record(5, events.ModelFailed{Model: refs[1], Class: "timeout"}),
		record(6, events.Synthesized{Model: refs[0]}),
		record(7, events.QueryCompleted{}),
	}
	d := &QueryDoc{}
	prev := -1
	for _, r := range recs {
		d.Apply(r)
		if d.Result.ProgressPercent < prev {
			t.Fatalf("progress went from %d to %d at %s", prev, d.Result.ProgressPercent, r.Envelope.Type)
		}
		prev = d.Result.ProgressPercent
	}
	if d.Result.Status != events.StatusCompleted || prev != 100 || d.Result.Models[1].Status != ModelFailed {
		t.Fatalf("final %s %d %s", d.Result.Status, prev, d.Result.Models[1].Status)
	}
	// A redelivered event changes nothing.
	before, _ := d.Encode()
	d.Apply(recs[2])
	after, _ := d.Encode()
	if !bytes.Equal(before, after) {
		t.Fatal("re-applying an old event changed the document")
	}
}
