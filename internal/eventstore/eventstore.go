// Package eventstore is the JetStream adapter: it creates the streams and
// buckets, appends events with optimistic concurrency, and loads an aggregate's
// events back.
package eventstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	BucketBalances    = "balances"
	BucketKeys        = "keys"
	BucketIdempotency = "idempotency"
	BucketInflight    = "inflight"
	BucketProjections = "projections"
	BucketLeases      = "leases"
)

// LeaseTTL is how long an entry of the leases bucket lives after its last
// write: how long a projection waits for the process that held it and died.
const LeaseTTL = 10 * time.Second

// requestTimeout bounds a request to JetStream that has no deadline of its
// own.
const requestTimeout = 10 * time.Second

// openTimeout bounds Open when its context has no deadline of its own.
const openTimeout = 30 * time.Second

// IdempotencyTTL is how long the idempotency bucket keeps an entry. The 24 h
// window of the contract is enforced from the entry's own time; the bucket
// keeps entries an hour longer so the check, not the expiry, decides.
const IdempotencyTTL = 25 * time.Hour

// ErrConflict is returned by Append when the aggregate moved on since it was loaded.
var ErrConflict = errors.New("event store: concurrent append")

// ErrUnavailable wraps failures to reach JetStream.
var ErrUnavailable = errors.New("event store unavailable")

// Store holds the streams and buckets of one JetStream domain.
type Store struct {
	NC *nats.Conn
	JS jetstream.JetStream

	Queries   jetstream.Stream
	Accounts  jetstream.Stream
	Exhausted jetstream.Stream

	QueryStatus jetstream.KeyValue
	Balances    jetstream.KeyValue
	Keys        jetstream.KeyValue
	Idempotency jetstream.KeyValue
	Inflight    jetstream.KeyValue
	// Projections holds each projection's checkpoint by name.
	Projections jetstream.KeyValue
	// Leases holds which process runs each projection.
	Leases jetstream.KeyValue

	replicas int
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
	s := &Store{NC: nc, JS: js, replicas: replicas}
	streams := []struct {
		st  *jetstream.Stream
		cfg jetstream.StreamConfig
	}{
		{&s.Queries, jetstream.StreamConfig{
			Name:        StreamQueries,
			Description: "Every event of every query: ev.query.<request_id>.<event>",
			Subjects:    []string{"ev.query.>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Duplicates:  2 * time.Minute,
			AllowDirect: true,
		}},
		{&s.Accounts, jetstream.StreamConfig{
			Name:        StreamAccounts,
			Description: "Every event of every account (keys, plans, ledger): ev.account.<account_id>.<event>",
			Subjects:    []string{"ev.account.>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Duplicates:  2 * time.Minute,
			DenyDelete:  true,
			DenyPurge:   true,
			AllowDirect: true,
		}},
		{&s.Exhausted, jetstream.StreamConfig{
			Name:        StreamExhausted,
			Description: "JetStream's advisories of the jobs " + ConsumerJobs + " stopped delivering, until a worker ends them",
			Subjects:    []string{SubjectExhausted},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.WorkQueuePolicy,
			MaxAge:      30 * 24 * time.Hour,
		}},
	}
	buckets := []struct {
		kv  *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{
		{&s.QueryStatus, jetstream.KeyValueConfig{Bucket: BucketQueryStatus, Description: "Query read model, a projection of QUERIES"}},
		{&s.Balances, jetstream.KeyValueConfig{Bucket: BucketBalances, Description: "Account money state by account id, a projection of ACCOUNTS"}},
		{&s.Keys, jetstream.KeyValueConfig{Bucket: BucketKeys, Description: "API key states by fingerprint, a projection of ACCOUNTS"}},
		{&s.Idempotency, jetstream.KeyValueConfig{Bucket: BucketIdempotency, Description: "Idempotency-Key claims", TTL: IdempotencyTTL}},
		{&s.Inflight, jetstream.KeyValueConfig{Bucket: BucketInflight, Description: "In-flight query slots by API key fingerprint"}},
		{&s.Projections, jetstream.KeyValueConfig{Bucket: BucketProjections, Description: "The last event each projection applied, by projection name"}},
		{&s.Leases, jetstream.KeyValueConfig{Bucket: BucketLeases, Description: "The process that runs each projection, by projection name", TTL: LeaseTTL}},
	}
	// Each stream and bucket is independent of the others: their creations
	// (and their groups' leader elections) overlap.
	var wg sync.WaitGroup
	errs := make([]error, len(streams)+len(buckets))
	for i, st := range streams {
		st.cfg.Replicas = replicas
		wg.Go(func() { *st.st, errs[i] = ensureStream(ctx, js, st.cfg) })
	}
	for i, b := range buckets {
		b.cfg.Storage, b.cfg.Replicas = jetstream.FileStorage, replicas
		wg.Go(func() { *b.kv, errs[len(streams)+i] = ensureBucket(ctx, js, b.cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// ResetQueryStatus deletes the query read model bucket and creates it empty.
func (s *Store) ResetQueryStatus(ctx context.Context) error {
	return s.reset(ctx, BucketQueryStatus, "Query read model, a projection of QUERIES", &s.QueryStatus)
}

// ResetBalances deletes the balances read model bucket and creates it empty.
func (s *Store) ResetBalances(ctx context.Context) error {
	return s.reset(ctx, BucketBalances, "Account money state by account id, a projection of ACCOUNTS", &s.Balances)
}

func (s *Store) reset(ctx context.Context, bucket, description string, dst *jetstream.KeyValue) error {
	if err := s.JS.DeleteKeyValue(ctx, bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("delete %s: %w", bucket, err)
	}
	kv, err := s.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Description: description, Storage: jetstream.FileStorage, Replicas: s.replicas,
	})
	if err != nil {
		return fmt.Errorf("create %s: %w", bucket, err)
	}
	*dst = kv
	return nil
}

// Expect makes an append conditional: it succeeds only when the last event
// matching filter has sequence seq (0: no event matches yet).
type Expect struct {
	Filter string
	Seq    uint64
}

// Append publishes env and returns its stream sequence. With expect, a
// concurrent append to the same aggregate yields ErrConflict. A publish the
// server has already seen (same event id within the dedup window) returns the
// original sequence with duplicate true.
func (s *Store) Append(ctx context.Context, env events.Envelope, expect *Expect) (seq uint64, duplicate bool, err error) {
	data, err := json.Marshal(env)
	if err != nil {
		return 0, false, err
	}
	msg := &nats.Msg{Subject: env.Subject, Data: data, Header: nats.Header{}}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(env.ID)}
	if expect != nil {
		opts = append(opts, jetstream.WithExpectLastSequenceForSubject(expect.Seq, expect.Filter))
	}
	ack, err := s.JS.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return 0, false, classify("append "+env.Type, err)
	}
	return ack.Sequence, ack.Duplicate, nil
}

func classify(op string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return fmt.Errorf("%s: %w", op, ErrConflict)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// Load returns every event of stream matching filter, in order, starting at
// sequence from (use 1 for all).
func (s *Store) Load(ctx context.Context, stream jetstream.Stream, filter string, from uint64) ([]events.Record, error) {
	var out []events.Record
	if from == 0 {
		from = 1
	}
	for {
		msg, err := stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, classify("load "+filter, err)
		}
		rec, err := events.Decode(msg.Sequence, msg.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
		from = msg.Sequence + 1
	}
}

// Last returns the last event on subject, or nil when there is none.
func (s *Store) Last(ctx context.Context, stream jetstream.Stream, subject string) (*events.Record, error) {
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
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
		a.Apply(r)
	}
	return a, nil
}

// Follow streams the events of stream matching filter, from the first one on
// and then live, through an ordered consumer, until ctx ends. The error
// channel receives at most one error and is closed with the record channel.
func (s *Store) Follow(ctx context.Context, stream jetstream.Stream, filter string) (<-chan events.Record, <-chan error) {
	out := make(chan events.Record, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		defer close(errc)
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{filter},
			DeliverPolicy:  jetstream.DeliverAllPolicy,
		})
		if err != nil {
			errc <- classify("follow "+filter, err)
			return
		}
		it, err := cons.Messages()
		if err != nil {
			errc <- classify("follow "+filter, err)
			return
		}
		go func() {
			<-ctx.Done()
			it.Stop()
		}()
		for {
			msg, err := it.Next()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
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

// FollowQuery follows the events of one query.
func (s *Store) FollowQuery(ctx context.Context, requestID string) (<-chan events.Record, <-chan error) {
	return s.Follow(ctx, s.Queries, events.Filter(events.AggregateQuery, requestID))
}

// Entry is one key and value of a bucket.
type Entry struct {
	Key   string
	Value []byte
}

// PutAll writes entries to the bucket with asynchronous publishes and waits
// for every acknowledgement: a batch costs one round trip, not one per entry.
func (s *Store) PutAll(ctx context.Context, bucket string, entries []Entry) error {
	futures := make([]jetstream.PubAckFuture, 0, len(entries))
	for _, e := range entries {
		f, err := s.JS.PublishAsync("$KV."+bucket+"."+e.Key, e.Value)
		if err != nil {
			return classify("put "+bucket, err)
		}
		futures = append(futures, f)
	}
	// An acknowledgement lost with a leader that went down never comes.
	timeout := time.NewTimer(requestTimeout)
	defer timeout.Stop()
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return classify("put "+bucket, err)
		case <-timeout.C:
			return fmt.Errorf("put %s: no acknowledgement after %s: %w", bucket, requestTimeout, ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// GetLatest reads the value of key in bucket from the bucket's stream leader,
// never from a replica that may lag (as a direct get may): a projection that
// reads what it wrote must see it. It returns nil when the key is absent or
// deleted.
func (s *Store) GetLatest(ctx context.Context, bucket, key string) ([]byte, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	// A request lost with a leader that went down is never answered.
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	msg, err := s.NC.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return nil, classify("get "+bucket, err)
	}
	var resp struct {
		Message *struct {
			Data []byte `json:"data"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("get %s %s: %w", bucket, key, err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("get %s %s: %s: %w", bucket, key, resp.Error.Description, ErrUnavailable)
	case resp.Message == nil:
		return nil, fmt.Errorf("get %s %s: empty answer: %w", bucket, key, ErrUnavailable)
	}
	if bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")) {
		return nil, nil // a delete or purge marker
	}
	return resp.Message.Data, nil
}
