package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/eventstore/storetest"
	"github.com/crosscheck/crosscheck/internal/export"
)

// exportedEvent is a stored event with its stream and storage time.
type exportedEvent struct {
	stream string
	rec    events.Record
	at     time.Time
}

// wantEventLine is the expected output line of an event, built independently of
// the command's own encoder: the public NDJSON shape.
func wantEventLine(e exportedEvent) string {
	return fmt.Sprintf(`{"stream":%q,"seq":%d,"event":%s}`+"\n", e.stream, e.rec.Seq, e.rec.Raw)
}

func wantEventLines(evs []exportedEvent) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(wantEventLine(e))
	}
	return b.String()
}

func filterStoredEvents(evs []exportedEvent, keep func(exportedEvent) bool) []exportedEvent {
	var out []exportedEvent
	for _, e := range evs {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// loadStoredEvents reads every event of the stream with its storage time.
func loadStoredEvents(t *testing.T, store *eventstore.Store, stream string) []exportedEvent {
	t.Helper()
	ctx := context.Background()
	st := store.Queries
	if stream == eventstore.StreamAccounts {
		st = store.Accounts
	}
	recs, err := store.Load(ctx, st, ">", 1)
	if err != nil {
		t.Fatalf("load %s: %v", stream, err)
	}
	raw, err := storetest.JetStream(t, store).Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	out := make([]exportedEvent, 0, len(recs))
	for _, r := range recs {
		msg, err := raw.GetMsg(ctx, r.Seq)
		if err != nil {
			t.Fatalf("get %s %d: %v", stream, r.Seq, err)
		}
		out = append(out, exportedEvent{stream: stream, rec: r, at: msg.Time})
	}
	return out
}

// checkEventLines checks that out is NDJSON in the public shape: an object per
// line with stream, seq and event, in that order, the event being an object.
func checkEventLines(t *testing.T, out string) {
	t.Helper()
	if out == "" {
		return
	}
	must(t, strings.HasSuffix(out, "\n"), "output does not end with a new line: %q", out)
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var v struct {
			Stream string          `json:"stream"`
			Seq    uint64          `json:"seq"`
			Event  json.RawMessage `json:"event"`
		}
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("line %d is not the NDJSON shape: %v: %s", i+1, err, line)
		}
		must(t, v.Stream == "QUERIES" || v.Stream == "ACCOUNTS", "line %d: stream %q", i+1, v.Stream)
		must(t, v.Seq > 0 && len(v.Event) > 0 && v.Event[0] == '{', "line %d: %s", i+1, line)
		must(t, strings.HasPrefix(line, `{"stream":"`+v.Stream+`","seq":`+strconv.FormatUint(v.Seq, 10)+`,"event":{`), "line %d: members out of order: %s", i+1, line)
	}
}

// eventLinesOf returns the lines of out that belong to stream, in order.
func eventLinesOf(out, stream string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(line, `{"stream":"`+stream+`"`) {
			b.WriteString(line)
		}
	}
	return b.String()
}

func TestEventsExport(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key1 := h.newKey()
	id1 := h.submitOK(key1, "first question")
	h.wait(key1, id1, 60*time.Second)
	last := time.Now()
	eventually(t, 5*time.Second, "the clock to move on", func() bool { return time.Since(last) > 30*time.Millisecond })
	mid := time.Now()
	eventually(t, 5*time.Second, "the clock to move on", func() bool { return time.Since(mid) > 30*time.Millisecond })
	key2 := h.newKey()
	id2 := h.submitOK(key2, "second question")
	h.wait(key2, id2, 60*time.Second)
	h.m.Close()

	var qs, as []exportedEvent
	h.offline(func(store *eventstore.Store) {
		qs = loadStoredEvents(t, store, eventstore.StreamQueries)
		as = loadStoredEvents(t, store, eventstore.StreamAccounts)
	})
	must(t, len(qs) > 4 && len(as) > 4, "too few events to test with: %d queries, %d accounts", len(qs), len(as))
	all := append(append([]exportedEvent{}, qs...), as...)
	cfg := config.Config{DataDir: h.dir, Replicas: 1}

	run := func(t *testing.T, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		code := Events(ctx, cfg, append([]string{"export"}, args...), &out, &errOut)
		must(t, code == 0, "export %v: exit %d: %s", args, code, errOut.String())
		must(t, errOut.Len() == 0, "export %v wrote to stderr: %s", args, errOut.String())
		checkEventLines(t, out.String())
		return out.String()
	}
	expect := func(t *testing.T, want []exportedEvent, args ...string) {
		t.Helper()
		got := run(t, args...)
		if got != wantEventLines(want) {
			t.Fatalf("export %v:\n got %d lines:\n%s\nwant %d lines:\n%s", args, strings.Count(got, "\n"), got, len(want), wantEventLines(want))
		}
	}
	before := func(at time.Time) func(exportedEvent) bool {
		return func(e exportedEvent) bool { return e.at.Before(at) }
	}
	notBefore := func(at time.Time) func(exportedEvent) bool {
		return func(e exportedEvent) bool { return !e.at.Before(at) }
	}

	t.Run("everything", func(t *testing.T) {
		expect(t, all)
		expect(t, all, "-stream", "all", "-subject", "ev.>")
	})
	t.Run("one stream", func(t *testing.T) {
		expect(t, as, "-stream", "accounts")
		expect(t, qs, "-stream", "queries")
		expect(t, qs, "-subject", "ev.query.>")
	})
	t.Run("subject filter", func(t *testing.T) {
		expect(t, filterStoredEvents(qs, func(e exportedEvent) bool { return events.AggregateID(e.rec.Envelope.Subject) == id1 }),
			"-subject", "ev.query."+id1+".>")
		completed := filterStoredEvents(qs, func(e exportedEvent) bool { return strings.HasSuffix(e.rec.Envelope.Subject, ".completed") })
		must(t, len(completed) == 2, "%d completed events", len(completed))
		expect(t, completed, "-subject", "ev.query.*.completed")
		// A wildcard aggregate reads both streams, each narrowed to its own.
		created := filterStoredEvents(all, func(e exportedEvent) bool { return strings.HasSuffix(e.rec.Envelope.Subject, ".created") })
		must(t, len(created) == 2, "%d created events", len(created))
		expect(t, created, "-subject", "ev.*.*.created")
		acct := events.AggregateID(created[0].rec.Envelope.Subject)
		expect(t, filterStoredEvents(as, func(e exportedEvent) bool { return events.AggregateID(e.rec.Envelope.Subject) == acct }),
			"-stream", "accounts", "-subject", "ev.account."+acct+".>")
	})
	t.Run("since and until", func(t *testing.T) {
		later := filterStoredEvents(all, notBefore(mid))
		earlier := filterStoredEvents(all, before(mid))
		must(t, len(later) > 0 && len(earlier) > 0, "mid does not split the events: %d before, %d after", len(earlier), len(later))
		expect(t, later, "-since", mid.Format(time.RFC3339Nano))
		expect(t, earlier, "-until", mid.Format(time.RFC3339Nano))
		expect(t, all, "-since", "1h")
		expect(t, all, "-since", "24h", "-until", time.Now().Add(time.Minute).Format(time.RFC3339))
		// A window: from the second query's submission to just before its end.
		var sub2, done2 time.Time
		for _, e := range qs {
			switch e.rec.Envelope.Subject {
			case events.Subject(events.AggregateQuery, id2, "submitted"):
				sub2 = e.at
			case events.Subject(events.AggregateQuery, id2, "completed"):
				done2 = e.at
			}
		}
		window := filterStoredEvents(all, func(e exportedEvent) bool { return !e.at.Before(sub2) && e.at.Before(done2) })
		must(t, len(window) > 0, "empty window")
		expect(t, window, "-since", sub2.Format(time.RFC3339Nano), "-until", done2.Format(time.RFC3339Nano))
		expect(t, filterStoredEvents(qs, func(e exportedEvent) bool { return !e.at.Before(sub2) && e.at.Before(done2) }),
			"-stream", "queries", "-since", sub2.Format(time.RFC3339Nano), "-until", done2.Format(time.RFC3339Nano))
	})
	t.Run("from-seq", func(t *testing.T) {
		from := qs[len(qs)/2].rec.Seq
		expect(t, qs[len(qs)/2:], "-stream", "queries", "-from-seq", strconv.FormatUint(from, 10))
		expect(t, filterStoredEvents(all, func(e exportedEvent) bool { return e.rec.Seq >= 3 }), "-from-seq", "3")
		expect(t, qs[len(qs)-1:], "-stream", "queries", "-from-seq", strconv.FormatUint(qs[len(qs)-1].rec.Seq, 10))
	})
	t.Run("limit", func(t *testing.T) {
		expect(t, qs[:3], "-limit", "3")
		expect(t, all[:len(qs)+2], "-limit", strconv.Itoa(len(qs)+2))
		expect(t, as[:1], "-stream", "accounts", "-limit", "1")
		expect(t, all, "-limit", "0")
		expect(t, all, "-limit", "100000")
		expect(t, qs[len(qs)/2:len(qs)/2+2], "-stream", "queries", "-from-seq", strconv.FormatUint(qs[len(qs)/2].rec.Seq, 10), "-limit", "2")
	})
	t.Run("empty results", func(t *testing.T) {
		expect(t, nil, "-subject", "ev.query.req_NOSUCHQUERY.>")
		expect(t, nil, "-subject", "ev.query.*.no_such_event")
		expect(t, nil, "-from-seq", "1000000")
		expect(t, nil, "-since", time.Now().Add(time.Hour).Format(time.RFC3339))
		expect(t, nil, "-until", "2000-01-01T00:00:00Z")
	})
}

// An empty store: export writes nothing and exits 0 rather than waiting.
func TestEventsExportEmptyStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.m.Close()
	cfg := config.Config{DataDir: h.dir, Replicas: 1}
	for _, args := range [][]string{{"export"}, {"export", "-stream", "queries"}, {"export", "-stream", "accounts", "-since", "1h"}, {"export", "-from-seq", "5"}} {
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code := Events(ctx, cfg, args, &out, &errOut)
		cancel()
		must(t, code == 0 && out.Len() == 0 && errOut.Len() == 0, "%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
	}
}

func TestEventsStoreUnavailable(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := Events(context.Background(), config.Config{DataDir: filepath.Join(t.TempDir(), "none"), Replicas: 1}, []string{"export"}, &out, &errOut)
	must(t, code == 1 && out.Len() == 0 && strings.Contains(errOut.String(), "no event store"), "missing data dir: exit %d, stderr %q", code, errOut.String())

	out.Reset()
	errOut.Reset()
	cfg := config.Config{NATSURL: "nats://alice:s3cret-pass@127.0.0.1:1", Replicas: 1}
	code = Events(context.Background(), cfg, []string{"export"}, &out, &errOut)
	must(t, code == 1 && out.Len() == 0 && errOut.Len() > 0, "unreachable NATS: exit %d, stderr %q", code, errOut.String())
	must(t, !strings.Contains(errOut.String(), "s3cret") && !strings.Contains(errOut.String(), "alice"), "the credentials were printed: %s", errOut.String())

	must(t, eventstore.RedactURLs("connect to nats://tok3n@h:4222,nats://u:p@h2:4222: x", "nats://tok3n@h:4222,nats://u:p@h2:4222") ==
		"connect to nats://REDACTED@h:4222,nats://REDACTED@h2:4222: x", "redact: %s", eventstore.RedactURLs("connect to nats://tok3n@h:4222,nats://u:p@h2:4222: x", "nats://tok3n@h:4222,nats://u:p@h2:4222"))
}

// tail runs against the live store: it writes what is stored, then each new
// event as it is appended, and stops when its context ends.
func TestEventsTail(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	id1 := h.submitOK(key, "before the tail")
	h.wait(key, id1, 60*time.Second)

	type tailRun struct {
		out, errOut *syncBuffer
		done        chan int
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func(args ...string) *tailRun {
		r := &tailRun{out: &syncBuffer{}, errOut: &syncBuffer{}, done: make(chan int, 1)}
		go func() { r.done <- export.RunOn(ctx, h.m.Store, append([]string{"tail"}, args...), r.out, r.errOut) }()
		return r
	}
	toStored := func(stream string) []exportedEvent {
		var out []exportedEvent
		for _, r := range h.streamRecords(stream) {
			out = append(out, exportedEvent{stream: stream, rec: r})
		}
		return out
	}
	qs, as := toStored("QUERIES"), toStored("ACCOUNTS")
	lastQuery := qs[len(qs)-1].rec.Seq

	baseline := countOrderedConsumers(t, h.m.Store)
	everything := start()
	queries := start("-stream", "queries")
	completed := start("-subject", "ev.query.*.completed")
	newOnly := start("-stream", "queries", "-from-seq", strconv.FormatUint(lastQuery+1, 10))
	recent := start("-since", "1h")

	// The stored events first.
	eventually(t, 30*time.Second, "tail to write the stored events", func() bool {
		o := everything.out.String()
		return eventLinesOf(o, "QUERIES") == wantEventLines(qs) && eventLinesOf(o, "ACCOUNTS") == wantEventLines(as) &&
			queries.out.String() == wantEventLines(qs) && recent.out.String() != "" &&
			completed.out.String() != ""
	})
	must(t, completed.out.String() == wantEventLines(filterStoredEvents(qs, func(e exportedEvent) bool { return strings.HasSuffix(e.rec.Envelope.Subject, ".completed") })),
		"completed filter: %s", completed.out.String())
	never(t, 200*time.Millisecond, "-from-seq past the end wrote stored events", func() bool { return newOnly.out.String() != "" })

	// Then new events as they are appended, in both streams.
	id2 := h.submitOK(key, "during the tail")
	h.wait(key, id2, 60*time.Second)
	qs, as = toStored("QUERIES"), toStored("ACCOUNTS")
	newQueries := filterStoredEvents(qs, func(e exportedEvent) bool { return e.rec.Seq > lastQuery })
	must(t, len(newQueries) > 0 && events.AggregateID(newQueries[0].rec.Envelope.Subject) == id2, "no new query events")
	eventually(t, 30*time.Second, "tail to write the new events", func() bool {
		o := everything.out.String()
		ro := recent.out.String()
		return eventLinesOf(o, "QUERIES") == wantEventLines(qs) && eventLinesOf(o, "ACCOUNTS") == wantEventLines(as) &&
			eventLinesOf(ro, "QUERIES") == wantEventLines(qs) && eventLinesOf(ro, "ACCOUNTS") == wantEventLines(as) &&
			queries.out.String() == wantEventLines(qs) && newOnly.out.String() == wantEventLines(newQueries) &&
			strings.Count(completed.out.String(), "\n") == 2
	})
	for _, r := range []*tailRun{everything, queries, completed, newOnly, recent} {
		checkEventLines(t, r.out.String())
	}
	must(t, strings.Contains(completed.out.String(), events.Subject(events.AggregateQuery, id2, "completed")), "completed filter missed the new query: %s", completed.out.String())

	// Interrupted: each tail stops, exit 0, nothing on stderr.
	cancel()
	for i, r := range []*tailRun{everything, queries, completed, newOnly, recent} {
		select {
		case code := <-r.done:
			must(t, code == 0 && r.errOut.String() == "", "tail %d: exit %d: %s", i, code, r.errOut.String())
		case <-time.After(10 * time.Second):
			t.Fatalf("tail %d did not stop after its context ended", i)
		}
	}
	// Their consumers are gone from the server.
	eventually(t, 10*time.Second, "the tail consumers to be deleted", func() bool { return countOrderedConsumers(t, h.m.Store) == baseline })
}

// countOrderedConsumers counts the consumers without acknowledgements (ordered
// consumers) on both streams.
func countOrderedConsumers(t *testing.T, store *eventstore.Store) int {
	t.Helper()
	n := 0
	for _, name := range []string{eventstore.StreamQueries, eventstore.StreamAccounts} {
		st, err := storetest.JetStream(t, store).Stream(context.Background(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		infos := st.ListConsumers(context.Background())
		for ci := range infos.Info() {
			if ci.Config.AckPolicy == jetstream.AckNonePolicy {
				n++
			}
		}
		if err := infos.Err(); err != nil {
			t.Fatalf("list consumers: %v", err)
		}
	}
	return n
}

// export on a live store while events are appended: each run ends (at the
// last event stored when it began, at the latest) and writes a prefix of each
// stream, with no gap.
func TestEventsExportWhileWriting(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	type result struct {
		code     int
		out, err string
	}
	stop := make(chan struct{})
	results := make(chan result, 1024)
	go func() {
		defer close(results)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			code := export.RunOn(ctx, h.m.Store, []string{"export"}, &out, &errOut)
			cancel()
			results <- result{code, out.String(), errOut.String()}
		}
	}()
	var ids []string
	for i := range 5 {
		ids = append(ids, h.submitOK(key, fmt.Sprintf("question %d", i)))
	}
	for _, id := range ids {
		h.wait(key, id, 60*time.Second)
	}
	close(stop)
	var runs []result
	for r := range results {
		runs = append(runs, r)
	}
	final := map[string]string{}
	for _, stream := range []string{"QUERIES", "ACCOUNTS"} {
		var evs []exportedEvent
		for _, r := range h.streamRecords(stream) {
			evs = append(evs, exportedEvent{stream: stream, rec: r})
		}
		final[stream] = wantEventLines(evs)
	}
	must(t, len(runs) > 1, "only %d export runs", len(runs))
	for i, r := range runs {
		must(t, r.code == 0 && r.err == "", "run %d: exit %d: %s", i, r.code, r.err)
		checkEventLines(t, r.out)
		for stream, want := range final {
			must(t, strings.HasPrefix(want, eventLinesOf(r.out, stream)), "run %d: the %s lines are not a prefix of the stream:\n%s", i, stream, eventLinesOf(r.out, stream))
		}
	}
	t.Logf("%d export runs while writing", len(runs))
}
