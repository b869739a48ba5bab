// Package storetest opens an event store on a fresh embedded JetStream for a
// test: a real server on a random port with its data in the test's temp dir.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// Open starts the server, opens the store and stops both when t ends.
func Open(t testing.TB) *eventstore.Store {
	t.Helper()
	return OpenMany(t, 1)[0]
}

// OpenMany opens n stores on one fresh embedded JetStream, each on its own
// connection, as n processes sharing a server would: closing one's
// connection is that process dying.
func OpenMany(t testing.TB, n int) []*eventstore.Store {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	stores := make([]*eventstore.Store, n)
	for i := range n {
		nc, err := srv.Connect("test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if stores[i], err = eventstore.Open(context.Background(), nc, 1); err != nil {
			t.Fatal(err)
		}
	}
	return stores
}

// JetStream returns a JetStream client on store's connection, for a test
// that reaches past the store (to block a stream, or read a consumer's
// state).
func JetStream(t testing.TB, store *eventstore.Store) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(store.Conn())
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// WaitFor polls cond until it holds, and fails the test with what when it
// does not hold within d: the way a test waits for an eventual result.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

// AppendQuery appends ev to query id, whatever the query's last event, and
// returns it as recorded.
func AppendQuery(t testing.TB, store *eventstore.Store, id string, ev events.Event) events.Record {
	t.Helper()
	env, err := events.Wrap(events.AggregateQuery, id, ev, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	app, err := store.Append(context.Background(), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	return events.Record{Seq: app.Seq, Envelope: env, Event: ev}
}
