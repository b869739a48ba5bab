package eventstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
)

func appendProgress(t testing.TB, store *eventstore.Store, id string, n int) []eventstore.Appended {
	t.Helper()
	var out []eventstore.Appended
	for i := range n {
		env, err := events.Wrap(events.AggregateQuery, id, events.ProgressReported{Stage: "answering", Percent: i % 100, Message: "<b>&</b>"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		app, err := store.Append(context.Background(), env, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, app)
	}
	return out
}

// Append returns the bytes the stream stored, which a load reads back: the
// ledger's hash chain is computed over them.
func TestAppendReturnsTheStoredBytes(t *testing.T) {
	store := storetest.Open(t)
	apps := appendProgress(t, store, "req_bytes", 3)
	recs, err := store.Load(context.Background(), store.Queries, events.Filter(events.AggregateQuery, "req_bytes"), 1)
	if err != nil || len(recs) != 3 {
		t.Fatalf("load: %d records, %v", len(recs), err)
	}
	for i, r := range recs {
		if r.Seq != apps[i].Seq || !bytes.Equal(r.Raw, apps[i].Data) {
			t.Errorf("event %d: stored seq %d %s; Append said seq %d %s", i, r.Seq, r.Raw, apps[i].Seq, apps[i].Data)
		}
	}
}

// Load returns every matching event once, in order, across more than one
// batch and with other aggregates' events in between; from skips the
// earlier ones.
func TestLoadReadsEveryEventInBatches(t *testing.T) {
	store := storetest.Open(t)
	var want []uint64
	for i := range 1300 {
		id := "req_other"
		if i%2 == 0 {
			id = "req_mine"
		}
		app := appendProgress(t, store, id, 1)[0]
		if id == "req_mine" {
			want = append(want, app.Seq)
		}
	}
	filter := events.Filter(events.AggregateQuery, "req_mine")
	for _, from := range []uint64{1, want[400]} {
		recs, err := store.Load(context.Background(), store.Queries, filter, from)
		if err != nil {
			t.Fatal(err)
		}
		var exp []uint64
		for _, s := range want {
			if s >= from {
				exp = append(exp, s)
			}
		}
		if len(recs) != len(exp) {
			t.Fatalf("from %d: %d events, want %d", from, len(recs), len(exp))
		}
		for i, r := range recs {
			if r.Seq != exp[i] {
				t.Fatalf("from %d: event %d is seq %d, want %d", from, i, r.Seq, exp[i])
			}
		}
	}
	if recs, err := store.Load(context.Background(), store.Queries, events.Filter(events.AggregateQuery, "req_none"), 1); err != nil || len(recs) != 0 {
		t.Fatalf("an aggregate without events: %d events, %v", len(recs), err)
	}
}

// Stored tells which subjects have an event, in one request per batch.
func TestStoredTellsWhichSubjectsHaveEvents(t *testing.T) {
	store := storetest.Open(t)
	appendProgress(t, store, "req_a", 2)
	subj := func(id string) string {
		return events.Subject(events.AggregateQuery, id, events.ProgressReported{}.EventName())
	}
	got, err := store.Stored(context.Background(), store.Queries, []string{subj("req_a"), subj("req_b")})
	if err != nil || !got[subj("req_a")] || got[subj("req_b")] {
		t.Fatalf("Stored = %v, %v; want only req_a", got, err)
	}
}

// The bucket operations report conflicts and absence with the store's own
// errors, and a failure to reach JetStream is service_restarting.
func TestBucketErrors(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	kv := store.Inflight
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("get of an absent key: %v, want ErrNotFound", err)
	}
	rev, err := kv.Create(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "k", []byte("2")); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("create of a present key: %v, want ErrConflict", err)
	}
	if _, err := kv.Update(ctx, "k", []byte("2"), rev+10); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("update at a wrong revision: %v, want ErrConflict", err)
	}
	if err := kv.Delete(ctx, "k", rev+10); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("delete at a wrong revision: %v, want ErrConflict", err)
	}
	if err := kv.Delete(ctx, "k", rev); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("get of a deleted key: %v, want ErrNotFound", err)
	}
	store.Conn().Close()
	_, err = kv.Get(ctx, "k")
	if !errors.Is(err, eventstore.ErrUnavailable) || apperr.Code(err) != apperr.ServiceRestarting {
		t.Fatalf("get on a closed connection: %v (code %s), want ErrUnavailable, service_restarting", err, apperr.Code(err))
	}
}

// A key purged from the idempotency bucket leaves nothing after the
// bucket's marker TTL: the bucket's stream holds no message of it. A purge
// at a wrong revision is a conflict and removes nothing; a purged key can
// be created again at once.
func TestPurgeLeavesNothing(t *testing.T) {
	store := storetest.Open(t)
	ctx := context.Background()
	kv := store.Idempotency
	rev, err := kv.Create(ctx, "bound", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "bound", rev+1, eventstore.MarkerTTL); !errors.Is(err, eventstore.ErrConflict) {
		t.Fatalf("purge at a wrong revision: %v, want ErrConflict", err)
	}
	if err := kv.Purge(ctx, "bound", rev, eventstore.MarkerTTL); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "bound"); !errors.Is(err, eventstore.ErrNotFound) {
		t.Fatalf("get of a purged key: %v, want ErrNotFound", err)
	}
	st, err := storetest.JetStream(t, store).Stream(ctx, "KV_"+eventstore.BucketIdempotency)
	if err != nil {
		t.Fatal(err)
	}
	storetest.WaitFor(t, 10*time.Second, "the purge marker to expire", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
	if _, err := kv.Create(ctx, "bound", []byte("2")); err != nil {
		t.Fatalf("create after a purge: %v", err)
	}
	if err := kv.Purge(ctx, "absent", 0, eventstore.MarkerTTL); err != nil {
		t.Fatalf("purge of an absent key: %v", err)
	}
}

// Change is a compare-and-set: concurrent changes from several processes
// each land once.
func TestChangeAppliesEveryConcurrentChangeOnce(t *testing.T) {
	stores := storetest.OpenMany(t, 3)
	const each = 20
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for range each {
				_, err := s.Inflight.Change(context.Background(), "counter", nil, func(cur eventstore.Entry, _ bool) ([]byte, error) {
					n := 0
					if cur.Revision != 0 {
						fmt.Sscan(string(cur.Value), &n)
					}
					return []byte(fmt.Sprint(n + 1)), nil
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	e, err := stores[0].Inflight.Get(context.Background(), "counter")
	if err != nil || string(e.Value) != fmt.Sprint(len(stores)*each) {
		t.Fatalf("counter %q (%v), want %d", e.Value, err, len(stores)*each)
	}
	// A known entry saves the first read; a stale one is read again.
	stale := eventstore.Entry{Key: "counter", Value: []byte("1"), Revision: 1}
	reads := 0
	got, err := stores[0].Inflight.Change(context.Background(), "counter", &stale, func(cur eventstore.Entry, fresh bool) ([]byte, error) {
		if fresh {
			reads++
		}
		return []byte("x"), nil
	})
	if err != nil || string(got.Value) != "x" || reads != 1 {
		t.Fatalf("change from a stale entry: %+v %v after %d reads; want x after 1 read", got, err, reads)
	}
}

// loadOrdered is the other way to load a batch: an ordered consumer.
func loadOrdered(ctx context.Context, js jetstream.JetStream, stream, filter string) (int, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return 0, err
	}
	defer func() { _ = st.DeleteConsumer(context.Background(), cons.CachedInfo().Name) }()
	if cons.CachedInfo().NumPending == 0 {
		return 0, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	for n := 1; ; n++ {
		msg, err := it.Next()
		if err != nil {
			return n - 1, err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return n, err
		}
		if _, err := events.Decode(meta.Sequence.Stream, msg.Data()); err != nil {
			return n, err
		}
		if meta.NumPending == 0 {
			return n, nil
		}
	}
}

// loadOneByOne is how Load worked before: one request per event.
func loadOneByOne(ctx context.Context, js jetstream.JetStream, stream, filter string) (int, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	n := 0
	for from := uint64(1); ; n++ {
		msg, err := st.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if _, err := events.Decode(msg.Sequence, msg.Data); err != nil {
			return n, err
		}
		from = msg.Sequence + 1
	}
}

// BenchmarkLoad compares the ways to load an aggregate's events: the batched
// direct get Load uses, an ordered consumer, and one request per event.
func BenchmarkLoad(b *testing.B) {
	for _, size := range []int{10, 40, 300} {
		store := storetest.Open(b)
		appendProgress(b, store, "req_bench", size)
		appendProgress(b, store, "req_other", 50)
		filter := events.Filter(events.AggregateQuery, "req_bench")
		js := storetest.JetStream(b, store)
		ctx := context.Background()
		for _, way := range []struct {
			name string
			load func() (int, error)
		}{
			{"batch", func() (int, error) {
				recs, err := store.Load(ctx, store.Queries, filter, 1)
				return len(recs), err
			}},
			{"ordered", func() (int, error) { return loadOrdered(ctx, js, eventstore.StreamQueries, filter) }},
			{"one_by_one", func() (int, error) { return loadOneByOne(ctx, js, eventstore.StreamQueries, filter) }},
		} {
			b.Run(fmt.Sprintf("%s/events=%d", way.name, size), func(b *testing.B) {
				for b.Loop() {
					n, err := way.load()
					if err != nil || n != size {
						b.Fatalf("%d events, %v", n, err)
					}
				}
			})
		}
	}
}

// An append whose acknowledgement never comes (the stream's leader went
// away with the request, say) ends within the store's own bound, as
// unavailable, whatever its context allows: a worker's run has the
// query's whole time (minutes), and waiting that long on one lost
// acknowledgement held its job in progress, never redelivered.
func TestAppendIsBounded(t *testing.T) {
	store := storetest.Open(t)
	// A subscriber that takes the publish and never answers stands in
	// for the lost acknowledgement.
	sub, err := store.Conn().SubscribeSync("lost.acks.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	env, err := events.Wrap(events.AggregateQuery, "req_lost", events.ProgressReported{Stage: "answering"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	env.Subject = "lost.acks.req_lost"
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		_, err := store.Append(ctx, env, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, eventstore.ErrUnavailable) {
			t.Fatalf("an append without an acknowledgement: %v, want unavailable", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("an append whose acknowledgement never comes still waits after a minute")
	}
}
