package projections

import (
	"bytes"
	"encoding/json"
	"strings"
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

// A unify query as this build records it (its last answer starts the
// aggregating stage, its terminal event carries the charge) and as earlier
// builds did (a progress event, then credits_settled before the terminal
// event) fold to the same result; after the last answer both are
// aggregating.
func TestUnifyOldAndNewEventsFoldAlike(t *testing.T) {
	refs := []events.ModelRef{{Provider: "provider_a", ModelID: "m"}, {Provider: "provider_b", ModelID: "n"}}
	sub := events.QuerySubmitted{RequestID: "req_1", AccountID: "acct_1", Mode: events.ModeUnify, Models: refs, EstimatedMicros: 2_000_000}
	answers := []events.Event{events.ModelAnswered{Model: refs[0], Answer: "a", CostMicros: 300_000}, events.ModelFailed{Model: refs[1], Class: "timeout"}}
	syn := events.Synthesized{Model: refs[0], Answer: events.Answer{Text: "one", Conflicts: []events.Conflict{}}}
	fold := func(evs ...events.Event) (*QueryDoc, []Result) {
		d := &QueryDoc{}
		var steps []Result
		for i, ev := range evs {
			d.Apply(record(uint64(i+1), ev))
			steps = append(steps, d.Result)
		}
		return d, steps
	}
	newer, newSteps := fold(append([]events.Event{sub, events.QueryStarted{}}, append(answers, syn, events.WithCharge(events.QueryCompleted{}, 300_000))...)...)
	older, oldSteps := fold(append([]events.Event{sub, events.QueryStarted{}}, append(answers,
		events.ProgressReported{Stage: events.StageAggregating, Percent: 85, Message: "synthesizing one answer from 1 model answers"},
		syn, events.CreditsSettled{ChargedMicros: 300_000}, events.QueryCompleted{})...)...)
	for name, steps := range map[string][]Result{"this build's": newSteps, "an earlier build's": oldSteps} {
		if s := steps[3]; s.Stage != events.StageAggregating || s.ProgressPercent != 85 {
			t.Errorf("%s events: after the last answer, stage %s %d%%; want aggregating 85%%", name, s.Stage, s.ProgressPercent)
		}
		if s := steps[2]; s.Stage != events.StageRunningModels {
			t.Errorf("%s events: after the first answer, stage %s; want running_models", name, s.Stage)
		}
	}
	// The events' times differ by sequence: the result's completed_at is the
	// terminal event's time.
	older.Result.CompletedAt = newer.Result.CompletedAt
	a, _ := json.Marshal(newer.Result)
	b, _ := json.Marshal(older.Result)
	if !bytes.Equal(a, b) || newer.Result.Credits.Charged == nil || *newer.Result.Credits.Charged != 0.3 {
		t.Fatalf("the results differ or carry no charge:\n this build:    %s\n earlier build: %s", a, b)
	}
}

// TestEarlierClassesReadAsToday: a query recorded by an earlier build, with
// the failure classes of that build, reads with today's classes in its
// result (the models' errors, the missing steps) and its progress messages.
func TestEarlierClassesReadAsToday(t *testing.T) {
	refs := []events.ModelRef{{Provider: "provider_a", ModelID: "m"}, {Provider: "provider_b", ModelID: "n"}, {Provider: "provider_c", ModelID: "o"}}
	failedB := events.ModelFailed{Model: refs[1], Class: "bad_request", Message: "request (1321 tokens) exceeds the available context size (1024 tokens)", UpstreamStatus: 400}
	retried := events.ModelRetried{Model: refs[2], Attempt: 1, Class: "server_error", Message: "boom", UpstreamStatus: 503, RetryInMS: 1000}
	d := FoldQuery([]events.Record{
		record(1, events.QuerySubmitted{RequestID: "req_1", Mode: events.ModeJustify, Models: refs}),
		record(2, events.QueryStarted{}),
		record(3, events.ModelAnswered{Model: refs[0], Answer: "a"}),
		record(4, failedB),
		record(5, retried),
		record(6, events.ModelFailed{Model: refs[2], Class: "server_error", Message: "boom", UpstreamStatus: 503}),
		record(7, events.StepFailed{Step: events.StepRevise, Model: &refs[0], Class: "invalid_output", Message: "the answer hit the output token limit"}),
	})
	res := d.Result
	if e := res.Models[1].Error; e == nil || e.Class != events.ClassContextOverflow {
		t.Errorf("provider_b's error %+v, want context_overflow", e)
	}
	if e := res.Models[2].Error; e == nil || e.Class != events.ClassHostError {
		t.Errorf("provider_c's error %+v, want host_error", e)
	}
	if len(res.Justify.Missing) != 1 || !strings.Contains(res.Justify.Missing[0], "(output_limit: ") {
		t.Errorf("missing %q, want the revise step's output_limit", res.Justify.Missing)
	}
	if got := Describe(record(5, retried)); !strings.Contains(got, "(host_error)") {
		t.Errorf("progress message %q, want host_error", got)
	}
}
