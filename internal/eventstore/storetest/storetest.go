// Package storetest opens an event store on a fresh embedded JetStream for a
// test: a real server on a random port with its data in the test's temp dir.
package storetest

import (
	"context"
	"testing"

	"github.com/crosscheck/crosscheck/internal/embedded"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

// Open starts the server, opens the store and stops both when t ends.
func Open(t testing.TB) *eventstore.Store {
	t.Helper()
	srv, err := embedded.Start(embedded.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	store, err := eventstore.Open(context.Background(), nc, 1)
	if err != nil {
		t.Fatal(err)
	}
	return store
}
