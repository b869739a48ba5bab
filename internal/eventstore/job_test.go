package eventstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// fetchJob pulls the next job, polling until one comes or the deadline.
func fetchJob(t *testing.T, jobs *eventstore.Jobs) *eventstore.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var got *eventstore.Job
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_ = jobs.Fetch(ctx, 1, func(j *eventstore.Job) { got = j })
		cancel()
		if got != nil {
			return got
		}
	}
	t.Fatal("no job was delivered")
	return nil
}

// A released job has let go of its message and is still acknowledged on
// it, as with the JetStream client's own acknowledgements: a negative
// acknowledgement hands it back at once (well before its AckWait), an
// acknowledgement ends it, and nothing is sent for it after that.
func TestReleasedJobIsStillAcknowledged(t *testing.T) {
	store := storetest.Open(t)
	id := "req_01M80000000000000000000042"
	env, _ := events.Wrap(events.AggregateQuery, id, events.QuerySubmitted{RequestID: id, AccountID: "acct_x", Mode: "unify", Prompt: "p"}, time.Now())
	if _, err := store.Append(context.Background(), env, nil); err != nil {
		t.Fatal(err)
	}
	jobs, err := store.Jobs(context.Background(), eventstore.JobsConfig{AckWait: time.Minute, MaxDeliver: 5})
	if err != nil {
		t.Fatal(err)
	}

	first := fetchJob(t, jobs)
	if got := events.AggregateID(first.Message().Subject); got != id || first.Delivered() != 1 || first.Stored().IsZero() {
		t.Fatalf("first delivery: query %q, delivered %d, stored %v; want %q, 1, a time", got, first.Delivered(), first.Stored(), id)
	}
	first.Release()
	if m := first.Message(); m.Subject != "" || m.Data != nil || !first.Stored().IsZero() {
		t.Fatalf("released job still holds its message: %+v", m)
	}
	first.InProgress()
	first.NakWithDelay(time.Millisecond)
	first.Ack() // not sent: the job was handed back

	second := fetchJob(t, jobs) // within seconds: the AckWait is a minute
	if got := events.AggregateID(second.Message().Subject); got != id || second.Delivered() != 2 {
		t.Fatalf("second delivery: query %q, delivered %d; want %q, 2", got, second.Delivered(), id)
	}
	second.Release()
	second.Ack()
	second.NakWithDelay(time.Millisecond) // not sent: the job has ended

	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(context.Background(), eventstore.StreamQueries, eventstore.ConsumerJobs)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == info.Delivered.Stream {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the acknowledged job is still pending: %d awaiting an ack, %d to deliver", info.NumAckPending, info.NumPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
