package accounts

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

// grants makes n grants of one credit on account id, one command each, as
// the ledger's commands do.
func grants(t *testing.T, s *Service, id string, n int) {
	t.Helper()
	for range n {
		err := s.Update(context.Background(), id, nil, func(a *events.Account) ([]events.Event, error) {
			ev, err := a.DecideGrant(events.MicrosPerCredit, "one more")
			return []events.Event{ev}, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// snapshotOf waits for account id's snapshot to fold at least folded
// events and returns it as stored.
func snapshotOf(t *testing.T, store *eventstore.Store, id string, folded uint64) (eventstore.Entry, events.AccountSnapshot) {
	t.Helper()
	var entry eventstore.Entry
	var snap events.AccountSnapshot
	storetest.WaitFor(t, 5*time.Second, "the account's snapshot", func() bool {
		var err error
		if entry, err = store.Snapshots.Get(context.Background(), id); err != nil {
			return false
		}
		return json.Unmarshal(entry.Value, &snap) == nil && snap.Folded >= folded
	})
	return entry, snap
}

// A process that has not an account in memory starts it from its snapshot
// and reads only the events after it; what it holds is what a process that
// ran every command holds.
func TestColdAccountLoadsFromItsSnapshot(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	warm := &Service{Store: store, Now: time.Now, SnapshotEvery: 50, SnapshotInterval: time.Hour}
	view, err := warm.CreateAccount(ctx, "snapshotted", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	id := view.ID
	err = warm.Update(ctx, id, nil, func(a *events.Account) ([]events.Event, error) {
		return []events.Event{events.KeyCreated{Fingerprint: "key00001", Name: "a key", SecretHash: "h", AUPAccepted: true}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	grants(t, warm, id, 120)
	_, snap := snapshotOf(t, store, id, 100)
	if snap.Folded > 122 || snap.Ledger.BalanceMicros != int64(snap.Folded-2)*events.MicrosPerCredit {
		t.Fatalf("snapshot of %d events with the balance %d", snap.Folded, snap.Ledger.BalanceMicros)
	}

	cold := &Service{Store: store, Now: time.Now, SnapshotEvery: 50, SnapshotInterval: time.Hour}
	got, err := cold.Account(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want, err := warm.Account(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := cold.eventsRead.Load(); n != int64(122-snap.Folded) {
		t.Fatalf("the cold process read %d events, want the %d after the snapshot of %d (of 122)", n, 122-snap.Folded, snap.Folded)
	}
	if got.BalanceMicros != 120*events.MicrosPerCredit || got.BalanceMicros != want.BalanceMicros || len(got.Keys) != 1 || got.Keys[0].Name != "a key" {
		t.Fatalf("the account loaded from its snapshot: %+v; the warm one: %+v", got, want)
	}
	// The cold process goes on from there: its commands chain and expect as
	// the warm one's.
	grants(t, cold, id, 3)
	grants(t, warm, id, 1)
	full := &Service{Store: store, Now: time.Now}
	if err := full.Update(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	a := full.cached(id).a
	if a.Ledger.BalanceMicros != 124*events.MicrosPerCredit || a.Folded != 126 {
		t.Fatalf("after commands of both processes: balance %d over %d events", a.Ledger.BalanceMicros, a.Folded)
	}
}

// A snapshot the stream does not hold (the stream restored to an earlier
// state, the bucket not) is not used: the account is read from every
// event, and its state is the stream's.
func TestSnapshotNotTrustedOverTheStream(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	warm := &Service{Store: store, Now: time.Now, SnapshotEvery: 10, SnapshotInterval: time.Hour}
	view, err := warm.CreateAccount(ctx, "restored", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	id := view.ID
	grants(t, warm, id, 20)
	entry, snap := snapshotOf(t, store, id, 20)
	for name, change := range map[string]func(s *events.AccountSnapshot){
		// Its last ledger event is another than the stream holds there.
		"another head": func(s *events.AccountSnapshot) {
			s.Ledger.Head = events.HashStored([]byte("another event"))
			s.Ledger.BalanceMicros += 1000 * events.MicrosPerCredit
		},
		// It folds events past the stream's end.
		"past the end": func(s *events.AccountSnapshot) {
			s.LedgerSeq, s.ChainSeq, s.LastSeq, s.Read = s.LedgerSeq+100, s.ChainSeq+100, s.LastSeq+100, s.Read+100
			s.Ledger.BalanceMicros += 1000 * events.MicrosPerCredit
		},
	} {
		tampered := snap
		change(&tampered)
		raw, _ := json.Marshal(tampered)
		if _, err := store.Snapshots.Put(ctx, id, raw); err != nil {
			t.Fatal(err)
		}
		cold := &Service{Store: store, Now: time.Now, SnapshotEvery: 1000, SnapshotInterval: time.Hour}
		got, err := cold.Account(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := cold.eventsRead.Load(); n != 21 || got.BalanceMicros != 20*events.MicrosPerCredit {
			t.Fatalf("%s: read %d events, balance %d; want every one of 21 and the stream's balance", name, n, got.BalanceMicros)
		}
	}
	// The true snapshot, stored again, is used.
	if _, err := store.Snapshots.Put(ctx, id, entry.Value); err != nil {
		t.Fatal(err)
	}
	cold := &Service{Store: store, Now: time.Now}
	if _, err := cold.Account(ctx, id); err != nil || cold.eventsRead.Load() != int64(21-snap.Folded) {
		t.Fatalf("the true snapshot: %v, %d events read; want the %d after it", err, cold.eventsRead.Load(), 21-snap.Folded)
	}
	// A snapshot whose last event is one of the account's own (a key) is
	// checked on that one.
	keyer := &Service{Store: store, Now: time.Now, SnapshotEvery: 1, SnapshotInterval: time.Hour}
	err = keyer.Update(ctx, id, nil, func(a *events.Account) ([]events.Event, error) {
		return []events.Event{events.KeyCreated{Fingerprint: "key00001", Name: "k", SecretHash: "h", AUPAccepted: true}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, snap = snapshotOf(t, store, id, 22)
	if snap.OwnSeq <= snap.LedgerSeq {
		t.Fatalf("the key's snapshot: own %d, ledger %d; want the key last", snap.OwnSeq, snap.LedgerSeq)
	}
	snap.OwnHash = events.HashStored([]byte("another key"))
	raw, _ := json.Marshal(snap)
	if _, err := store.Snapshots.Put(ctx, id, raw); err != nil {
		t.Fatal(err)
	}
	cold = &Service{Store: store, Now: time.Now}
	if got, err := cold.Account(ctx, id); err != nil || cold.eventsRead.Load() != 22 || len(got.Keys) != 1 {
		t.Fatalf("another last own event: %v, %d events read; want every one of 22", err, cold.eventsRead.Load())
	}
}

// Two processes change one account, its keys and its ledger, each writing
// snapshots of its own copy: a third process that starts the account from
// the last snapshot holds what a replay of every event holds.
func TestSnapshotsOfTwoProcesses(t *testing.T) {
	stores := storetest.OpenMany(t, 3)
	ctx := context.Background()
	one := &Service{Store: stores[0], Now: time.Now, SnapshotEvery: 3, SnapshotInterval: time.Hour}
	two := &Service{Store: stores[1], Now: time.Now, SnapshotEvery: 3, SnapshotInterval: time.Hour}
	view, err := one.CreateAccount(ctx, "shared", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	id := view.ID
	for i := range 12 {
		grants(t, one, id, 1)
		grants(t, two, id, 1)
		if i%4 == 0 {
			err := two.Update(ctx, id, nil, func(a *events.Account) ([]events.Event, error) {
				return []events.Event{events.KeyCreated{Fingerprint: fmt.Sprintf("key%05d", i), Name: "k", SecretHash: "h", AUPAccepted: true}}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	snapshotOf(t, stores[0], id, 20)
	full, err := stores[2].LoadAccount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cold := &Service{Store: stores[2], Now: time.Now}
	if err := cold.Update(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	got := cold.cached(id).a
	if cold.eventsRead.Load() >= int64(full.Folded) {
		t.Fatalf("the cold process read %d of %d events: no snapshot used", cold.eventsRead.Load(), full.Folded)
	}
	want, _ := json.Marshal(events.SnapshotOf(full))
	got.Read, got.Folded = full.Read, full.Folded
	have, _ := json.Marshal(events.SnapshotOf(got))
	if string(have) != string(want) {
		t.Fatalf("the account from the snapshot:\n%s\nfrom every event:\n%s", have, want)
	}
}

// A process's snapshot never folds past a ledger event of another process
// it has not read: here the first process, holding the account, writes a
// snapshot after another process's grant and key, which it has not read,
// and reads the key (an event of the account's own) to write it. A process
// that starts from the snapshot reads that grant.
func TestSnapshotStopsBeforeAnUnreadLedgerEvent(t *testing.T) {
	stores := storetest.OpenMany(t, 3)
	ctx := context.Background()
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	one := &Service{Store: stores[0], Now: now, SnapshotEvery: 1000, SnapshotInterval: time.Hour}
	two := &Service{Store: stores[1], Now: time.Now, SnapshotEvery: 1000, SnapshotInterval: time.Hour}
	view, err := one.CreateAccount(ctx, "unread", events.PlanEnterprise)
	if err != nil {
		t.Fatal(err)
	}
	id := view.ID
	grants(t, one, id, 1)
	grants(t, two, id, 1)
	err = two.Update(ctx, id, nil, func(a *events.Account) ([]events.Event, error) {
		return []events.Event{events.KeyCreated{Fingerprint: "key00001", Name: "k", SecretHash: "h", AUPAccepted: true}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// An hour on, the first process's next command writes its snapshot;
	// it appends nothing, so it does not read the other's grant.
	clock.Add(int64(2 * time.Hour))
	if err := one.Update(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	if b := one.cached(id).a.Ledger.BalanceMicros; b != events.MicrosPerCredit {
		t.Fatalf("the first process holds %d: it read the other's grant, the test proves nothing", b)
	}
	_, snap := snapshotOf(t, stores[0], id, 3)
	if len(snap.Keys) != 1 {
		t.Fatalf("the snapshot holds %d keys; want the other process's key, read to write it", len(snap.Keys))
	}
	cold := &Service{Store: stores[2], Now: time.Now}
	got, err := cold.Account(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.BalanceMicros != 2*events.MicrosPerCredit || len(got.Keys) != 1 {
		t.Fatalf("started from the first process's snapshot: balance %d, %d keys; want both grants and the key", got.BalanceMicros, len(got.Keys))
	}
}
