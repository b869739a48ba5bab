// Package export holds `crosscheck events export` and `crosscheck events
// tail`, which write the stored events as NDJSON for consumers that do not
// speak NATS.
//
// The output is a public format. Each line is one JSON object, terminated by
// "\n", with exactly these members in this order:
//
//	{"stream":"QUERIES","seq":123,"event":{"id":"01M7…","type":"query.completed","source":"crosscheck","subject":"ev.query.req_01M7….completed","time":"…","schema":1,"data":{}}}
//
// stream is the JetStream stream the event is stored in, "QUERIES",
// "ACCOUNTS" or "FILES". seq is the event's stream sequence, its position in that
// stream (the SSE id and the seq of the read models); sequences are per
// stream: the pair (stream, seq) identifies an event; resume an export with
// -from-seq seq+1. event is the stored envelope, byte for byte as stored (see
// docs/events.md, "The envelope"); it is never decoded and encoded again, so
// hashes over it (the ledger's prev_hash) can be checked from the output.
//
// Within a stream, lines are in stream order. export writes QUERIES, then
// ACCOUNTS, then FILES; tail with several streams interleaves them as they
// arrive.
package export

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
)

const eventsUsage = `Usage:
  crosscheck events export [flags]   write the stored events as NDJSON, oldest first, then exit
  crosscheck events tail [flags]     write the stored events, then follow new ones until interrupted

Each line is one JSON object:
  {"stream":"QUERIES","seq":123,"event":<the stored envelope, byte for byte>}
seq is the event's sequence in its stream (QUERIES, ACCOUNTS and FILES count separately).
export writes QUERIES first, then ACCOUNTS, then FILES; tail interleaves them as events arrive.
Times are the streams' storage times.

The store is CROSSCHECK_NATS_URL, or else the embedded store in CROSSCHECK_DATA_DIR,
which a running ` + "`crosscheck serve`" + ` holds: stop it first, or use CROSSCHECK_NATS_URL.
`

const eventsFlags = `
Flags:
  -stream queries|accounts|files|all   streams to read (default all)
  -subject FILTER                NATS subject filter, starting with "ev." (default ev.>), e.g.
                                 ev.query.*.verdicts_given, ev.query.<request_id>.>, ev.account.<account_id>.>
  -since TIME|DURATION           start at the events stored at or after TIME (RFC 3339, e.g.
                                 2026-11-01T00:00:00Z) or DURATION ago (e.g. 24h, 90m); default: the first event
  -from-seq N                    start at stream sequence N, in each stream read (not with -since)
  -until TIME                    export only: stop before the events stored at or after TIME (RFC 3339)
  -limit N                       export only: write at most N events in all (default 0: no limit)
`

// eventsExportIdleCheck is how long export waits for a message before it asks the
// server whether anything is left to deliver.
const eventsExportIdleCheck = 5 * time.Second

// eventsCommand is one parsed `crosscheck events` invocation.
type eventsCommand struct {
	follow bool
	// streams are the streams to read, in order, each with its own filter:
	// the -subject filter narrowed to the stream's subjects.
	streams []eventsSource
	since   time.Time
	until   time.Time
	fromSeq uint64
	limit   int
}

type eventsSource struct {
	name   string
	filter string
}

// Opener opens the store to read; close releases it. An error is written
// after "crosscheck events: " as it is.
type Opener func(ctx context.Context) (store *eventstore.Store, close func(), err error)

// Run runs `crosscheck events <args>` against the store that open opens,
// once the arguments are valid, and returns the exit code: 0 done (tail:
// interrupted by ctx), 1 the store cannot be opened or read, 2 bad
// arguments.
func Run(ctx context.Context, args []string, open Opener, out, errOut io.Writer) int {
	cmd, code := parseEventsArgs(args, out, errOut, time.Now())
	if cmd == nil {
		return code
	}
	store, closeStore, err := open(ctx)
	if err != nil {
		fmt.Fprintln(errOut, "crosscheck events:", err)
		return 1
	}
	defer closeStore()
	return cmd.run(ctx, store, out, errOut)
}

// RunOn runs `crosscheck events <args>` on an open store, with the exit
// codes of Run.
func RunOn(ctx context.Context, store *eventstore.Store, args []string, out, errOut io.Writer) int {
	cmd, code := parseEventsArgs(args, out, errOut, time.Now())
	if cmd == nil {
		return code
	}
	return cmd.run(ctx, store, out, errOut)
}

// parseEventsArgs parses the arguments after `events`. On a nil command, the
// usage or the reason has been written and code is the exit code.
func parseEventsArgs(args []string, out, errOut io.Writer, now time.Time) (cmd *eventsCommand, code int) {
	if len(args) == 0 {
		fmt.Fprintf(errOut, "crosscheck events: missing subcommand (export or tail)\n\n%s", eventsUsage)
		return nil, 2
	}
	sub := args[0]
	switch sub {
	case "export", "tail":
	case "help", "-h", "-help", "--help":
		fmt.Fprint(out, eventsUsage+eventsFlags)
		return nil, 0
	default:
		fmt.Fprintf(errOut, "crosscheck events: unknown subcommand %q (export or tail)\n\n%s", sub, eventsUsage)
		return nil, 2
	}
	help := eventsUsage + eventsFlags
	fs := flag.NewFlagSet("crosscheck events "+sub, flag.ContinueOnError)
	var msgs bytes.Buffer
	fs.SetOutput(&msgs)
	fs.Usage = func() {}
	streamFlag := fs.String("stream", "all", "")
	subject := fs.String("subject", "ev.>", "")
	since := fs.String("since", "", "")
	fromSeq := fs.Uint64("from-seq", 0, "")
	var until string
	var limit int
	if sub == "export" {
		fs.StringVar(&until, "until", "", "")
		fs.IntVar(&limit, "limit", 0, "")
	}
	bad := func(format string, a ...any) (*eventsCommand, int) {
		fmt.Fprintf(errOut, "crosscheck events %s: %s\n\n%s", sub, fmt.Sprintf(format, a...), help)
		return nil, 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(out, help)
			return nil, 0
		}
		return bad("%s", strings.TrimSpace(strings.SplitN(err.Error(), "\n", 2)[0]))
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cmd = &eventsCommand{follow: sub == "tail", fromSeq: *fromSeq, limit: limit}
	var names []string
	switch strings.ToLower(*streamFlag) {
	case "all":
		names = []string{eventstore.StreamQueries, eventstore.StreamAccounts, eventstore.StreamFiles}
	case "queries":
		names = []string{eventstore.StreamQueries}
	case "accounts":
		names = []string{eventstore.StreamAccounts}
	case "files":
		names = []string{eventstore.StreamFiles}
	default:
		return bad("-stream must be queries, accounts, files or all, not %q", *streamFlag)
	}
	if err := checkEventsSubject(*subject); err != nil {
		return bad("-subject %q: %v", *subject, err)
	}
	for _, name := range names {
		if f := narrowEventsSubject(*subject, eventsStreamAggregate(name)); f != "" {
			cmd.streams = append(cmd.streams, eventsSource{name: name, filter: f})
		}
	}
	if len(cmd.streams) == 0 {
		return bad("-subject %q matches no subject of %s", *subject, strings.Join(names, " or "))
	}
	if set["since"] {
		if set["from-seq"] {
			return bad("-since and -from-seq cannot be used together")
		}
		t, err := parseEventsSince(*since, now)
		if err != nil {
			return bad("-since %q: %v", *since, err)
		}
		cmd.since = t
	}
	if set["from-seq"] && *fromSeq == 0 {
		return bad("-from-seq must be 1 or more")
	}
	if set["until"] {
		t, err := time.Parse(time.RFC3339Nano, until)
		if err != nil {
			return bad("-until %q: not an RFC 3339 time (e.g. 2026-11-01T00:00:00Z)", until)
		}
		if !cmd.since.IsZero() && !t.After(cmd.since) {
			return bad("-until must be after -since")
		}
		cmd.until = t
	}
	if limit < 0 {
		return bad("-limit must be 0 (no limit) or more")
	}
	return cmd, 0
}

// checkEventsSubject accepts a NATS subject filter that can match an event
// subject, ev.<aggregate>.<id>.<event>.
func checkEventsSubject(s string) error {
	if strings.ContainsAny(s, " \t\r\n") {
		return errors.New("contains white space")
	}
	tokens := strings.Split(s, ".")
	if tokens[0] != "ev" || len(tokens) < 2 {
		return errors.New(`must start with "ev."`)
	}
	for i, t := range tokens {
		switch {
		case t == "":
			return errors.New("has an empty token")
		case t == ">" && i != len(tokens)-1:
			return errors.New(`">" must be the last token`)
		case t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return errors.New(`"*" and ">" must be whole tokens`)
		}
	}
	last := tokens[len(tokens)-1]
	if (last == ">" && len(tokens) > 4) || (last != ">" && len(tokens) != 4) {
		return errors.New("matches no event subject (ev.<aggregate>.<id>.<event>)")
	}
	return nil
}

func eventsStreamAggregate(stream string) string {
	switch stream {
	case eventstore.StreamAccounts:
		return events.AggregateAccount
	case eventstore.StreamFiles:
		return events.AggregateFile
	}
	return events.AggregateQuery
}

// narrowEventsSubject returns the part of filter that lies in the subjects of the
// aggregate's stream, ev.<aggregate>.>, as a filter; "" when none does.
func narrowEventsSubject(filter, aggregate string) string {
	tokens := strings.Split(filter, ".")
	switch tokens[1] {
	case ">":
		return "ev." + aggregate + ".>"
	case "*", aggregate:
		tokens[1] = aggregate
		return strings.Join(tokens, ".")
	}
	return ""
}

// parseEventsSince reads an RFC 3339 time, or a positive Go duration before now.
func parseEventsSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, errors.New("neither an RFC 3339 time (2026-11-01T00:00:00Z) nor a duration (24h)")
	}
	if d <= 0 {
		return time.Time{}, errors.New("the duration must be positive")
	}
	return now.Add(-d), nil
}

// from returns where a reader of the command starts.
func (c *eventsCommand) from() eventstore.ReadFrom {
	return eventstore.ReadFrom{Since: c.since, FromSeq: c.fromSeq}
}

func (c *eventsCommand) run(ctx context.Context, store *eventstore.Store, out, errOut io.Writer) int {
	name := "export"
	var err error
	if c.follow {
		name = "tail"
		err = c.tail(ctx, store, out)
	} else {
		err = c.export(ctx, store, out)
	}
	if err != nil {
		fmt.Fprintf(errOut, "crosscheck events %s: %v\n", name, err)
		return 1
	}
	return 0
}

// appendEventLine appends the output line of one stored message to buf.
func appendEventLine(buf []byte, stream string, seq uint64, data []byte) ([]byte, error) {
	buf = append(buf, `{"stream":"`...)
	buf = append(buf, stream...)
	buf = append(buf, `","seq":`...)
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, `,"event":`...)
	if bytes.ContainsAny(data, "\r\n") {
		// Not written by this service (it stores compact JSON), but a line
		// break would split the line: drop the insignificant white space.
		var compact bytes.Buffer
		if err := json.Compact(&compact, data); err != nil {
			return nil, fmt.Errorf("%s sequence %d: the stored message is not JSON: %w", stream, seq, err)
		}
		buf = append(buf, compact.Bytes()...)
	} else {
		if !json.Valid(data) {
			return nil, fmt.Errorf("%s sequence %d: the stored message is not JSON", stream, seq)
		}
		buf = append(buf, data...)
	}
	return append(buf, "}\n"...), nil
}

// export writes every stored event of each source, oldest first, up to the
// last sequence of the stream when the export reached it.
func (c *eventsCommand) export(ctx context.Context, store *eventstore.Store, out io.Writer) error {
	w := bufio.NewWriterSize(out, 64<<10)
	written := 0
	for _, src := range c.streams {
		if c.limit > 0 && written >= c.limit {
			break
		}
		n, err := c.exportStream(ctx, store, src, w, written)
		written += n
		if err != nil {
			_ = w.Flush()
			return err
		}
	}
	return w.Flush()
}

func (c *eventsCommand) exportStream(ctx context.Context, store *eventstore.Store, src eventsSource, w *bufio.Writer, before int) (written int, err error) {
	st, err := store.StreamNamed(src.name)
	if err != nil {
		return 0, err
	}
	state, err := st.State(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", src.name, err)
	}
	// Events appended from here on are left to the next export (or to tail).
	if state.Msgs == 0 || state.LastSeq < c.fromSeq {
		return 0, nil
	}
	rd, err := store.OpenReader(ctx, src.name, src.filter, c.from())
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", src.name, err)
	}
	defer rd.Close()
	// The consumer's creation reports what matches from the start position.
	if n, ok := rd.OpenedPending(); ok && n == 0 {
		return 0, nil
	}
	var line []byte
	for {
		nextCtx, cancel := context.WithTimeout(ctx, eventsExportIdleCheck)
		msg, err := rd.Next(nextCtx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return written, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// Nothing came for a while: done if nothing is left to deliver
				// (the matching events were removed after the consumer began).
				n, gone, ierr := rd.Pending(ctx)
				if ierr != nil {
					return written, fmt.Errorf("stream %s: %w", src.name, ierr)
				}
				if !gone && n == 0 {
					return written, nil
				}
				continue
			}
			return written, fmt.Errorf("stream %s: %w", src.name, err)
		}
		seq := msg.Seq
		if seq > state.LastSeq || (!c.until.IsZero() && !msg.Time.Before(c.until)) {
			return written, nil
		}
		if line, err = appendEventLine(line[:0], src.name, seq, msg.Data); err != nil {
			return written, err
		}
		if _, err := w.Write(line); err != nil {
			return written, err
		}
		written++
		if (c.limit > 0 && before+written >= c.limit) || seq >= state.LastSeq || msg.Pending == 0 {
			return written, nil
		}
	}
}

// tail writes the stored events of each source from the start position and
// then each new one as it is stored, until ctx ends. Each line is written
// with one Write and flushed when out can flush.
func (c *eventsCommand) tail(ctx context.Context, store *eventstore.Store, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	flusher, _ := out.(interface{ Flush() error })
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	write := func(line []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if firstErr != nil {
			return firstErr
		}
		if _, err := out.Write(line); err != nil {
			return err
		}
		if flusher != nil {
			return flusher.Flush()
		}
		return nil
	}
	for _, src := range c.streams {
		wg.Go(func() {
			if err := c.tailStream(ctx, store, src, write); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	return firstErr
}

func (c *eventsCommand) tailStream(ctx context.Context, store *eventstore.Store, src eventsSource, write func([]byte) error) error {
	rd, err := store.OpenReader(ctx, src.name, src.filter, c.from())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("stream %s: %w", src.name, err)
	}
	defer rd.Close()
	var line []byte
	for {
		msg, err := rd.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("stream %s: %w", src.name, err)
		}
		if line, err = appendEventLine(line[:0], src.name, msg.Seq, msg.Data); err != nil {
			return err
		}
		if err := write(line); err != nil {
			return err
		}
	}
}
