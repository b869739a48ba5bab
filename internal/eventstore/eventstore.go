// Package eventstore is the JetStream adapter: it creates the streams and
// buckets, appends events with optimistic concurrency, and loads an aggregate's
// events back.
package eventstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
)

// Stream and bucket names. They are persistent state: never rename them.
const (
	StreamQueries  = "QUERIES"
	StreamAccounts = "ACCOUNTS"
	// StreamExhausted keeps JetStream's advisories of the jobs the workers'
	// consumer stopped delivering, for a worker to end them: an advisory is
	// a plain publish, lost if no process listens at that moment.
	StreamExhausted = "EXHAUSTED_JOBS"

	// ConsumerJobs is the workers' durable consumer on QUERIES.
	ConsumerJobs = "worker_queries"
	// SubjectExhausted is where JetStream publishes those advisories.
	SubjectExhausted = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamQueries + "." + ConsumerJobs

	BucketQueryStatus = "query_status"
	BucketQueryList   = "query_list"
	BucketBalances    = "balances"
	BucketKeys        = "keys"
	BucketIdempotency = "idempotency"
	BucketInflight    = "inflight"
	BucketProjections = "projections"
	BucketLeases      = "leases"
	BucketSnapshots   = "account_snapshots"
)

// LeaseTTL is how long an entry of the leases bucket lives after its last
// write: how long a projection waits for the process that held it and died.
const LeaseTTL = 10 * time.Second

// requestTimeout bounds one request to JetStream, whatever the caller's
// context allows: a worker's context has the query's whole time, and a
// request whose answer was lost (its stream's leader went away with it)
// would otherwise wait that long.
const requestTimeout = 10 * time.Second

// request returns ctx bounded by requestTimeout, for one request.
func request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, requestTimeout)
}

// openTimeout bounds Open when its context has no deadline of its own.
const openTimeout = 30 * time.Second

// IdempotencyTTL is how long the idempotency bucket keeps an entry. The 24 h
// window of the contract is enforced from the entry's own time; the bucket
// keeps entries an hour longer so the check, not the expiry, decides.
const IdempotencyTTL = 25 * time.Hour

// MarkerTTL is how long the idempotency bucket keeps the marker of a key it
// no longer holds (a binding removed with Purge, or expired): the least
// JetStream allows. A removed binding leaves nothing after it.
const MarkerTTL = time.Second

// ErrConflict is returned when a write was conditional on a state that
// moved on: an append whose aggregate has a later event than expected, or a
// bucket write whose entry has a later revision (or exists, for Create).
var ErrConflict = errors.New("event store: concurrent write")

// ErrNotFound is returned by a bucket read of a key that is absent or deleted.
var ErrNotFound = errors.New("event store: key not found")

// ErrUnavailable is in the chain of every failure to reach JetStream or to
// have it take a write. It is the application error service_restarting, so
// the HTTP layer maps it without knowing this package; the JetStream cause
// stays in the chain beside it for the one log line that reports it.
var ErrUnavailable error = &apperr.Error{Code: apperr.ServiceRestarting, Message: "the event store is unavailable; retry shortly (a submission with the same Idempotency-Key)", RetryAfter: 1}

// Store holds the streams and buckets of one JetStream domain. Its fields
// are set by Open and never change.
type Store struct {
	nc *nats.Conn
	js jetstream.JetStream

	Queries   *Stream
	Accounts  *Stream
	Exhausted *Stream
	Files     *Stream

	// FileObjects holds uploaded files' bytes and extracted text.
	FileObjects *Objects

	QueryStatus *Bucket
	// QueryList holds each account's index of its queries, in order of
	// admission (<account_id>.head and <account_id>.page.<n>). A store
	// written before the index also holds a list row per query under
	// <account_id>.<request_id>, which nothing reads any more.
	QueryList   *Bucket
	Balances    *Bucket
	Keys        *Bucket
	Idempotency *Bucket
	Inflight    *Bucket
	// Projections holds each projection's checkpoint by name.
	Projections *Bucket
	// Leases holds which process runs each projection.
	Leases *Bucket
	// Snapshots holds the latest snapshot of each account aggregate
	// (events.AccountSnapshot) by account id: where a process starts an
	// account it has not in memory, never trusted over the stream.
	Snapshots *Bucket

	replicas int
}

// Conn returns the NATS connection the store uses.
func (s *Store) Conn() *nats.Conn { return s.nc }

// Ping reports whether JetStream answers: nil, or an error wrapping
// ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.js.AccountInfo(ctx); err != nil {
		return classify("ping", err)
	}
	return nil
}

// eventStream is the configuration of a stream of events: kept on disk, with
// the server's dedup window for retried publishes and direct reads; a kept
// stream (the ledger's, the files') refuses deletes and purges.
func eventStream(name, description, subjects string, kept bool) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        name,
		Description: description,
		Subjects:    []string{subjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  2 * time.Minute,
		DenyDelete:  kept,
		DenyPurge:   kept,
		AllowDirect: true,
	}
}

// Open creates or updates every stream and bucket, idempotently and
// concurrently; it never lowers the replicas of an existing one. Several
// processes may open the same store at the same moment on a cluster that is
// still electing its leaders: Open retries what JetStream cannot answer yet,
// each request with a short deadline of its own, until ctx ends, and then
// returns the last error; with no deadline on ctx it retries for at most
// openTimeout.
func Open(ctx context.Context, nc *nats.Conn, replicas int) (*Store, error) {
	if replicas < 1 {
		replicas = 1
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, openTimeout)
		defer cancel()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	s := &Store{nc: nc, js: js, replicas: replicas}
	files := eventStream(StreamFiles, "Every event of every account's files (uploaded, extracted, deleted, expired): ev.file.<account_id>.<event>; each kept for the file's 48 h and a day", "ev.file.>", true)
	files.MaxAge = FileEventsMaxAge
	streams := []struct {
		dst **Stream
		cfg jetstream.StreamConfig
	}{
		{&s.Queries, eventStream(StreamQueries, "Every event of every query: ev.query.<request_id>.<event>", "ev.query.>", false)},
		{&s.Accounts, eventStream(StreamAccounts, "Every event of every account (keys, plans, ledger): ev.account.<account_id>.<event>", "ev.account.>", true)},
		{&s.Exhausted, jetstream.StreamConfig{
			Name:        StreamExhausted,
			Description: "JetStream's advisories of the jobs " + ConsumerJobs + " stopped delivering, until a worker ends them",
			Subjects:    []string{SubjectExhausted},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.WorkQueuePolicy,
			MaxAge:      30 * 24 * time.Hour,
		}},
		{&s.Files, files},
	}
	buckets := []struct {
		dst **Bucket
		cfg jetstream.KeyValueConfig
	}{
		{&s.QueryStatus, jetstream.KeyValueConfig{Bucket: BucketQueryStatus, Description: queryStatusDescription}},
		{&s.QueryList, jetstream.KeyValueConfig{Bucket: BucketQueryList, Description: queryListDescription}},
		{&s.Balances, jetstream.KeyValueConfig{Bucket: BucketBalances, Description: balancesDescription}},
		{&s.Keys, jetstream.KeyValueConfig{Bucket: BucketKeys, Description: "API key states by fingerprint, a projection of ACCOUNTS"}},
		{&s.Idempotency, jetstream.KeyValueConfig{Bucket: BucketIdempotency, Description: "Idempotency-Key claims", TTL: IdempotencyTTL, LimitMarkerTTL: MarkerTTL}},
		{&s.Inflight, jetstream.KeyValueConfig{Bucket: BucketInflight, Description: "In-flight query slots by account id, every API key of the account in one set"}},
		{&s.Projections, jetstream.KeyValueConfig{Bucket: BucketProjections, Description: "The last event each projection applied, by projection name"}},
		{&s.Leases, jetstream.KeyValueConfig{Bucket: BucketLeases, Description: "The process that runs each projection, by projection name", TTL: LeaseTTL}},
		{&s.Snapshots, jetstream.KeyValueConfig{Bucket: BucketSnapshots, Description: "The latest snapshot of each account aggregate by account id, verified against ACCOUNTS before use"}},
	}
	// Each stream and bucket is independent of the others: their creations
	// (and their groups' leader elections) overlap.
	var wg sync.WaitGroup
	errs := make([]error, len(streams)+len(buckets))
	for i, st := range streams {
		st.cfg.Replicas = replicas
		wg.Go(func() {
			h, err := ensureStream(ctx, js, st.cfg)
			if errs[i] = err; err == nil {
				*st.dst = &Stream{name: st.cfg.Name, s: h, store: s}
			}
		})
	}
	for i, b := range buckets {
		b.cfg.Storage, b.cfg.Replicas = jetstream.FileStorage, replicas
		wg.Go(func() {
			kv, err := ensureBucket(ctx, js, b.cfg)
			if errs[len(streams)+i] = err; err == nil {
				*b.dst = &Bucket{name: b.cfg.Bucket, store: s}
				(*b.dst).kv.Store(&kv)
			}
		})
	}
	var objErr error
	wg.Go(func() {
		s.FileObjects, objErr = ensureObjects(ctx, js, jetstream.ObjectStoreConfig{
			Bucket: ObjectsFiles, Description: "Uploaded files and their extracted text, by file id", TTL: FilesTTL,
			Storage: jetstream.FileStorage, Replicas: replicas,
		})
	})
	wg.Wait()
	if err := errors.Join(append(errs, objErr)...); err != nil {
		return nil, err
	}
	return s, nil
}

const (
	queryStatusDescription = "Query read model, a projection of QUERIES"
	queryListDescription   = "Each account's index of its queries in order of admission under <account_id>.head and <account_id>.page.<n>, a projection of QUERIES"
	balancesDescription    = "Account money state by account id, a projection of ACCOUNTS"
)

// ResetQueryStatus deletes the query read model buckets (the results and
// the list rows, one projection) and creates them empty.
func (s *Store) ResetQueryStatus(ctx context.Context) error {
	if err := s.QueryList.reset(ctx, queryListDescription); err != nil {
		return err
	}
	return s.QueryStatus.reset(ctx, queryStatusDescription)
}

// ResetBalances deletes the balances read model bucket and creates it empty.
func (s *Store) ResetBalances(ctx context.Context) error {
	return s.Balances.reset(ctx, balancesDescription)
}

// Expect makes an append conditional: it succeeds only when the last event
// matching filter has sequence seq (0: no event matches yet).
type Expect struct {
	Filter string
	Seq    uint64
}

// Appended is the outcome of an append.
type Appended struct {
	// Seq is the event's stream sequence.
	Seq uint64
	// Duplicate is true when the server had stored the event already (same
	// event id within the dedup window): Seq is the original's.
	Duplicate bool
	// Data is the bytes stored for the event, what a reader of the stream
	// gets back (for a duplicate, the bytes of this append, which carry the
	// same event id).
	Data []byte
}

// Append publishes env. With expect, a concurrent append to the same
// aggregate yields ErrConflict; a failure to reach JetStream or to have it
// take the event wraps ErrUnavailable. The trace context of ctx, if any,
// goes with the event in the message's headers (traceparent).
func (s *Store) Append(ctx context.Context, env events.Envelope, expect *Expect) (_ Appended, err error) {
	data, err := env.Encode()
	if err != nil {
		return Appended{}, err
	}
	defer func(start time.Time) { observeAppend(env.Subject, start, err) }(time.Now())
	msg := &nats.Msg{Subject: env.Subject, Data: data, Header: nats.Header{}}
	injectTrace(ctx, msg.Header)
	seq, dup, err := s.publish(ctx, msg, env.ID, expect)
	if err != nil {
		return Appended{}, classify("append "+env.Type, err)
	}
	return Appended{Seq: seq, Duplicate: dup, Data: data}, nil
}

// AppendRaw publishes data, already encoded, on subject with the event id
// id, unconditionally, and returns its stream sequence: for loading events
// in bulk (an import, a benchmark), not for commands.
func (s *Store) AppendRaw(ctx context.Context, subject string, data []byte, id string) (uint64, error) {
	ack, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}, jetstream.WithMsgID(id))
	if err != nil {
		return 0, classify("append "+subject, err)
	}
	return ack.Sequence, nil
}

// RawEvent is an event already encoded, for AppendAll: its subject, its
// event id and its stored bytes.
type RawEvent struct {
	Subject, ID string
	Data        []byte
}

// AppendAll publishes evs unconditionally, in order, with asynchronous
// publishes, and waits for every acknowledgement: for loading events in
// bulk (a benchmark's history), not for commands. It returns the stream
// sequence of each, or the first failure.
func (s *Store) AppendAll(ctx context.Context, evs []RawEvent) ([]uint64, error) {
	futures := make([]jetstream.PubAckFuture, 0, len(evs))
	for _, ev := range evs {
		msg := &nats.Msg{Subject: ev.Subject, Data: ev.Data, Header: nats.Header{}}
		f, err := s.js.PublishMsgAsync(msg, jetstream.WithMsgID(ev.ID))
		if err != nil {
			return nil, classify("append "+ev.Subject, err)
		}
		futures = append(futures, f)
	}
	seqs := make([]uint64, len(futures))
	var first error
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			seqs[i] = ack.Sequence
		case err := <-f.Err():
			if first == nil {
				first = classify("append "+f.Msg().Subject, err)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return seqs, first
}

// Stored reports which of subjects have at least one event in stream, with
// one request per lastBatch subjects rather than one each.
func (s *Store) Stored(ctx context.Context, stream *Stream, subjects []string) (map[string]bool, error) {
	out := make(map[string]bool, len(subjects))
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	for chunk := range slices.Chunk(subjects, lastBatch) {
		msgs, err := jetstreamext.GetLastMsgsFor(ctx, s.js, stream.name, chunk)
		if err != nil {
			return nil, classify("last of "+stream.name, err)
		}
		for msg, err := range msgs {
			if errors.Is(err, jetstreamext.ErrNoMessages) {
				break
			}
			if err != nil {
				return nil, classify("last of "+stream.name, err)
			}
			out[msg.Subject] = true
		}
	}
	return out, nil
}

// lastBatch bounds the subjects of one request of Stored.
const lastBatch = 256

// classify is the one place that reads JetStream's errors: a failed
// expectation becomes ErrConflict, an absent key or message ErrNotFound, a
// cancelled context stays itself, and anything else wraps ErrUnavailable
// beside its cause.
func classify(op string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("%s: %w", op, ErrConflict)
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return fmt.Errorf("%s: %w", op, ErrConflict)
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrMsgNotFound), errors.Is(err, jetstreamext.ErrNoMessages):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// loadSingly is how many events Load reads one request each before it
// reads the rest in batches, and loadBatch bounds the events of one batch.
// A batch request costs about as much as loadSingly single ones, so short
// histories (an account's few new events, a query) are read singly and long
// ones (an account's whole ledger) in batches: BenchmarkLoad measures both.
const (
	loadSingly = 16
	loadBatch  = 512
)

// Load returns every event of stream matching filter, in order, starting at
// sequence from (use 1 for all): the first loadSingly with a request each,
// the rest in batches of up to loadBatch a request (a direct batch get).
//
// Direct gets are answered by any replica of a replicated stream, and a
// follower may not have stored yet what the leader acknowledged: a read
// right after an append can miss it (read-after-write is not guaranteed;
// on a 3-node cluster about 2 % of the reads of a query right after its
// submission found nothing). An aggregate that is not there at all would be
// answered "not found" (a 404 for an accepted query), so on a replicated
// stream a direct read that finds nothing asks the stream's leader, which
// has every acknowledged event (Last does the same). A stale read that
// finds some events is a view of an earlier moment, which a writer's
// expected sequence catches.
func (s *Store) Load(ctx context.Context, stream *Stream, filter string, from uint64) ([]events.Record, error) {
	out, err := s.loadDirect(ctx, stream, filter, from)
	if err == nil && len(out) == 0 && stream.replicated() {
		return s.loadFromLeader(ctx, stream, filter, from)
	}
	return out, err
}

// loadDirect is Load with direct gets only.
func (s *Store) loadDirect(ctx context.Context, stream *Stream, filter string, from uint64) ([]events.Record, error) {
	return s.loadRange(ctx, stream, filter, from, 0)
}

// LoadNew is Load for a reader that has some of the events already: it
// neither decodes nor returns those for which known (by their sequence
// and subject) says so, and returns beside the others the sequence of the
// last event it read, of either kind (0: none).
func (s *Store) LoadNew(ctx context.Context, stream *Stream, filter string, from uint64, known func(seq uint64, subject string) bool) ([]events.Record, uint64, error) {
	var last uint64
	out, err := s.readRange(ctx, stream, filter, from, 0, func(seq uint64, subject string) bool {
		last = seq
		return known(seq, subject)
	})
	if err == nil && last == 0 && stream.replicated() {
		out, err = s.loadFromLeader(ctx, stream, filter, from)
		if len(out) > 0 {
			last = out[len(out)-1].Seq
		}
	}
	return out, last, err
}

// loadRange is loadDirect up to sequence to (0: to the end).
func (s *Store) loadRange(ctx context.Context, stream *Stream, filter string, from, to uint64) ([]events.Record, error) {
	return s.readRange(ctx, stream, filter, from, to, nil)
}

// readRange is loadRange that skips, undecoded, the events for which skip
// (when set) says so.
func (s *Store) readRange(ctx context.Context, stream *Stream, filter string, from, to uint64, skip func(seq uint64, subject string) bool) ([]events.Record, error) {
	var out []events.Record
	if from == 0 {
		from = 1
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	// add decodes one answer into out and says whether more may follow.
	add := func(msg *jetstream.RawStreamMsg, err error) (bool, error) {
		if err != nil {
			if err = classify("load "+filter, err); errors.Is(err, ErrNotFound) {
				return false, nil
			}
			return false, err
		}
		if to > 0 && msg.Sequence > to {
			return false, nil
		}
		if skip != nil && skip(msg.Sequence, msg.Subject) {
			from = msg.Sequence + 1
			return true, nil
		}
		rec, err := events.DecodeStored(msg.Sequence, msg.Subject, msg.Data)
		if err != nil {
			return false, err
		}
		out, from = append(out, rec), msg.Sequence+1
		return true, nil
	}
	end := func(err error) ([]events.Record, error) {
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	for range loadSingly {
		if more, err := add(stream.s.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))); !more {
			return end(err)
		}
	}
	for {
		msgs, err := jetstreamext.GetBatch(ctx, s.js, stream.name, loadBatch, jetstreamext.GetBatchSeq(from), jetstreamext.GetBatchSubject(filter))
		if err != nil {
			return nil, classify("load "+filter, err)
		}
		pending := "0"
		for msg, err := range msgs {
			if more, err := add(msg, err); !more {
				return end(err)
			}
			pending = msg.Header.Get("Nats-Num-Pending")
		}
		if pending == "0" || pending == "" {
			return out, nil
		}
	}
}

// loadFromLeader is Load through the stream leader's message API, one
// request an event: slower than direct gets, but never behind what was
// acknowledged.
func (s *Store) loadFromLeader(ctx context.Context, stream *Stream, filter string, from uint64) ([]events.Record, error) {
	return s.rangeFromLeader(ctx, stream, filter, from, 0)
}

// rangeFromLeader is loadFromLeader up to sequence to (0: to the end).
func (s *Store) rangeFromLeader(ctx context.Context, stream *Stream, filter string, from, to uint64) ([]events.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var out []events.Record
	for from = max(from, 1); ; {
		rec, err := s.leaderGet(ctx, stream, leaderRequest{Seq: from, NextFor: filter})
		if err != nil || rec == nil || (to > 0 && rec.Seq > to) {
			return out, err
		}
		out, from = append(out, *rec), rec.Seq+1
	}
}

// searchWindow is the first window of LastWhere, in stream sequences; each
// next one, further back, is four times as long.
const searchWindow = 1024

// LastWhere searches the events on subject (one literal subject, or a
// filter) of stream from sequence until back to the subject's first event,
// newest first: it returns the first for which match says found, or nil at
// the first for which match says stop, or when none is left. It reads
// windows of sequences that grow fourfold going back, so an event near
// until costs one read whatever lies before it. On a replicated stream, a
// search that finds nothing by direct gets is made again from the stream's
// leader, which has every acknowledged event.
func (s *Store) LastWhere(ctx context.Context, stream *Stream, subject string, until uint64, match func(events.Record) (found, stop bool)) (*events.Record, error) {
	first, err := stream.Next(ctx, subject, 1)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	search := func(load func(ctx context.Context, stream *Stream, filter string, from, to uint64) ([]events.Record, error)) (*events.Record, bool, error) {
		for hi, w := until, uint64(searchWindow); hi >= first.Seq; w *= 4 {
			lo := first.Seq
			if hi-first.Seq >= w {
				lo = hi - w + 1
			}
			recs, err := load(ctx, stream, subject, lo, hi)
			if err != nil {
				return nil, false, err
			}
			for i := len(recs) - 1; i >= 0; i-- {
				switch found, stop := match(recs[i]); {
				case found:
					return &recs[i], true, nil
				case stop:
					return nil, true, nil
				}
			}
			hi = lo - 1
		}
		return nil, false, nil
	}
	rec, ended, err := search(s.loadRange)
	if err != nil || rec != nil || ended || !stream.replicated() {
		return rec, err
	}
	rec, _, err = search(s.rangeFromLeader)
	return rec, err
}

// leaderRequest asks a stream's leader for a message: the first at or
// after Seq on NextFor, or the last on LastFor.
type leaderRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

// leaderGet returns the event the stream's leader answers req with; nil
// when there is none.
func (s *Store) leaderGet(ctx context.Context, stream *Stream, req leaderRequest) (*events.Record, error) {
	op := "read " + req.NextFor + req.LastFor + " from the leader"
	body, _ := json.Marshal(req)
	msg, err := s.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream.name, body)
	if err != nil {
		return nil, classify(op, err)
	}
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, classify(op, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case resp.Error != nil:
		return nil, classify(op, resp.Error)
	case resp.Message == nil:
		return nil, classify(op, jetstream.ErrInvalidJetStreamResponse)
	}
	rec, err := events.Decode(resp.Message.Seq, resp.Message.Data)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// Last returns the last event on subject, or nil when there is none. On a
// replicated stream, "none" is the leader's answer, as for Load.
func (s *Store) Last(ctx context.Context, stream *Stream, subject string) (*events.Record, error) {
	msg, err := stream.s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		if stream.replicated() {
			ctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			return s.leaderGet(ctx, stream, leaderRequest{LastFor: subject})
		}
		return nil, nil
	}
	if err != nil {
		return nil, classify("last "+subject, err)
	}
	rec, err := events.Decode(msg.Sequence, msg.Data)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// LoadQuery folds the events of one query. It returns a query with a nil
// Submitted when the query does not exist.
func (s *Store) LoadQuery(ctx context.Context, requestID string) (*events.Query, []events.Record, error) {
	recs, err := s.Load(ctx, s.Queries, events.Filter(events.AggregateQuery, requestID), 1)
	if err != nil {
		return nil, nil, err
	}
	q := &events.Query{}
	for _, r := range recs {
		q.Apply(r)
	}
	return q, recs, nil
}

// LoadAccount folds the events of one account.
func (s *Store) LoadAccount(ctx context.Context, accountID string) (*events.Account, error) {
	recs, err := s.Load(ctx, s.Accounts, events.Filter(events.AggregateAccount, accountID), 1)
	if err != nil {
		return nil, err
	}
	a := &events.Account{}
	for _, r := range recs {
		a.CatchUp(r)
	}
	return a, nil
}

// followInactive is how long JetStream keeps a follow's consumer that no
// client pulls from: a safety net for a consumer whose deletion at the end of
// its follow did not reach the server (the process died, or lost NATS).
const followInactive = 30 * time.Second

// followResetAttempts is how many times a follow tries to recreate its
// consumer after losing it (a gap, a missed heartbeat, a leader change)
// before it fails: the attempts are about 1, 2 and 4 s apart.
const followResetAttempts = 4

// Follow streams the events of stream matching filter, from the first one on
// and then live, through an ordered consumer, until ctx ends. The error
// channel receives at most one error and is closed with the record channel:
// the follow fails when its consumer cannot be created, or cannot be
// recreated within followResetAttempts tries after it was lost. When the
// follow ends, for whatever reason, its consumer is deleted from the server
// before the channels close, so an ended follow holds none of the stream's
// consumers.
func (s *Store) Follow(ctx context.Context, stream *Stream, filter string) (<-chan events.Record, <-chan error) {
	out := make(chan events.Record, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		defer close(errc)
		// The consumer's names are the prefix, "_" and a serial from 1 on.
		// Its creation is not cut short when ctx ends (the server could
		// still create it after the client gave up, and nobody would
		// delete it); a creation that fails is deleted by its name all the
		// same, in case it happened.
		prefix := rand.Text()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		defer cancel()
		cons, err := stream.s.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{
			FilterSubjects:    []string{filter},
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			InactiveThreshold: followInactive,
			MaxResetAttempts:  followResetAttempts,
			NamePrefix:        prefix,
		})
		if err != nil {
			if ctx.Err() == nil {
				errc <- classify("follow "+filter, err)
			}
			s.deleteConsumer(stream, prefix+"_1")
			return
		}
		it, err := cons.Messages()
		if err != nil {
			errc <- classify("follow "+filter, err)
			s.deleteFollow(stream, cons)
			return
		}
		done := make(chan struct{})
		defer func() {
			close(done)
			it.Stop()
			s.deleteFollow(stream, cons)
		}()
		go func() {
			select {
			case <-ctx.Done():
				it.Stop()
			case <-done:
			}
		}()
		for {
			msg, err := it.Next()
			if err != nil {
				if ctx.Err() == nil {
					// Only the end of ctx stops the iterator on purpose;
					// closed otherwise, the connection closed under it.
					if errors.Is(err, jetstream.ErrMsgIteratorClosed) && s.nc.IsClosed() {
						err = nats.ErrConnectionClosed
					}
					errc <- classify("follow "+filter, err)
				}
				return
			}
			meta, err := msg.Metadata()
			if err != nil {
				errc <- err
				return
			}
			rec, err := events.Decode(meta.Sequence.Stream, msg.Data())
			if err != nil {
				errc <- err
				return
			}
			select {
			case out <- rec:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc
}

// deleteFollow deletes the consumer an ended follow used last. The ordered
// consumer recreates its consumer only inside the iterator's Next, which has
// returned for the last time, so the cached name is the last one; the ones
// before it the client library deleted as it replaced them.
func (s *Store) deleteFollow(stream *Stream, cons jetstream.Consumer) {
	if info := cons.CachedInfo(); info != nil {
		s.deleteConsumer(stream, info.Name)
	}
}

// deleteConsumer deletes the consumer name of stream, if it exists, within
// requestTimeout; a failure is left to the consumer's inactive threshold.
func (s *Store) deleteConsumer(stream *Stream, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	_ = stream.DeleteConsumer(ctx, name)
}

// FollowQuery follows the events of one query.
func (s *Store) FollowQuery(ctx context.Context, requestID string) (<-chan events.Record, <-chan error) {
	return s.Follow(ctx, s.Queries, events.Filter(events.AggregateQuery, requestID))
}
