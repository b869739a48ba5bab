package events

import "testing"

// TestCrashedRuns: the runs in a row that began, recorded no step and no
// end of their own are counted; a run that recorded a step starts the count
// again; a failed or handed-back run neither counts nor resets it; the last
// run counts when it has not ended.
func TestCrashedRuns(t *testing.T) {
	m := ModelRef{Provider: "provider_a", ModelID: "m"}
	step := ModelAnswered{Model: m}
	for _, tc := range []struct {
		name string
		evs  []Event
		want int
	}{
		{"queued", nil, 0},
		{"the first run, open", []Event{QueryStarted{}}, 1},
		{"the first run recorded a step", []Event{QueryStarted{}, step}, 0},
		{"three runs died", []Event{QueryStarted{}, AttemptStarted{Delivery: 2}, AttemptStarted{Delivery: 3}}, 3},
		{"a step, then two died", []Event{QueryStarted{}, step, AttemptStarted{Delivery: 2}, AttemptStarted{Delivery: 3}}, 2},
		{"retries and progress messages are no step", []Event{QueryStarted{}, ModelRetried{Model: m}, ProgressReported{}, AttemptStarted{Delivery: 2}}, 2},
		{"a hand-back is no crash", []Event{QueryStarted{}, AttemptHandedBack{}, AttemptStarted{Delivery: 2}, AttemptHandedBack{}}, 0},
		{"a failure is no crash, nor a reset", []Event{QueryStarted{}, AttemptStarted{Delivery: 2}, AttemptFailed{Attempt: 1, RetryInMS: 1000}, AttemptStarted{Delivery: 3}}, 2},
		{"a failed run that recorded a step resets", []Event{QueryStarted{}, AttemptStarted{Delivery: 2}, StepFailed{Step: StepRevise}, AttemptFailed{Attempt: 1, RetryInMS: 1000}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &Query{}
			q.Apply(Record{Seq: 1, Event: QuerySubmitted{Models: []ModelRef{m}}})
			for i, ev := range tc.evs {
				q.Apply(Record{Seq: uint64(i + 2), Event: ev})
			}
			if got := q.CrashedRuns(); got != tc.want {
				t.Fatalf("CrashedRuns = %d, want %d", got, tc.want)
			}
			if got := q.Clone().CrashedRuns(); got != tc.want {
				t.Fatalf("a clone's CrashedRuns = %d, want %d", got, tc.want)
			}
		})
	}
}
