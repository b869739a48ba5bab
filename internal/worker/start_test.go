package worker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// TestWorkerKeepsTryingToCreateItsConsumer: a worker whose consumer cannot
// be created when it starts (here a consumer of the same name that JetStream
// refuses to change, as a lost request on a starting cluster would fail it)
// keeps trying instead of stopping for good, and takes jobs once it can.
func TestWorkerKeepsTryingToCreateItsConsumer(t *testing.T) {
	store := storetest.Open(t)
	js := storetest.JetStream(t, store)
	ctx := context.Background()
	// A consumer's ack policy cannot be changed: the worker's update of it is
	// refused until it is gone.
	if _, err := js.CreateOrUpdateConsumer(ctx, eventstore.StreamQueries, jetstream.ConsumerConfig{
		Durable: eventstore.ConsumerJobs, AckPolicy: jetstream.AckNonePolicy,
	}); err != nil {
		t.Fatal(err)
	}
	mode := &scripted{script: func(int64, context.Context) (events.Event, error) { return events.QueryCompleted{}, nil }}
	w := newTestWorker(store, mode, &fakeLedger{debits: map[string]int{}})
	id := "req_01M80000000000000000000031"
	submitJob(t, store, id)

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	select {
	case err := <-done:
		done <- err
		t.Fatalf("the worker stopped while its consumer could not be created: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := js.DeleteConsumer(ctx, eventstore.StreamQueries, eventstore.ConsumerJobs); err != nil {
		t.Fatal(err)
	}
	if q, _ := ended(t, store, id); q.Status != events.StatusCompleted {
		t.Fatalf("status %s, want completed once the consumer could be created", q.Status)
	}
}
