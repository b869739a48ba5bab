package eventstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is one key-value bucket. Its reads and writes return ErrNotFound
// for an absent key, ErrConflict for a write whose expected revision moved
// on, and errors wrapping ErrUnavailable when JetStream does not answer.
type Bucket struct {
	name  string
	store *Store
	kv    atomic.Pointer[jetstream.KeyValue]
}

// Entry is one key of a bucket: its value and the revision that wrote it.
// Revision 0 stands for a key that is absent.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
}

func (b *Bucket) handle() jetstream.KeyValue { return *b.kv.Load() }

// Name returns the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Get returns the entry of key, or ErrNotFound.
func (b *Bucket) Get(ctx context.Context, key string) (Entry, error) {
	ctx, cancel := request(ctx)
	defer cancel()
	e, err := b.handle().Get(ctx, key)
	if err != nil {
		return Entry{}, classify("get "+b.name+" "+key, err)
	}
	return Entry{Key: key, Value: e.Value(), Revision: e.Revision()}, nil
}

// Create writes key only if it is absent (or deleted) and returns the new
// revision; ErrConflict when it exists.
func (b *Bucket) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, cancel := request(ctx)
	defer cancel()
	rev, err := b.handle().Create(ctx, key, value)
	if err != nil {
		return 0, classify("create "+b.name+" "+key, err)
	}
	return rev, nil
}

// Update writes key only if its last revision is rev and returns the new
// revision; ErrConflict when another write came first.
func (b *Bucket) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	ctx, cancel := request(ctx)
	defer cancel()
	next, err := b.handle().Update(ctx, key, value, rev)
	if err != nil {
		return 0, classify("update "+b.name+" "+key, err)
	}
	return next, nil
}

// Put writes key whatever its revision and returns the new revision.
func (b *Bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, cancel := request(ctx)
	defer cancel()
	rev, err := b.handle().Put(ctx, key, value)
	if err != nil {
		return 0, classify("put "+b.name+" "+key, err)
	}
	return rev, nil
}

// Delete deletes key; with rev > 0 only if its last revision is rev
// (ErrConflict otherwise). Deleting an absent key succeeds.
func (b *Bucket) Delete(ctx context.Context, key string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev > 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	ctx, cancel := request(ctx)
	defer cancel()
	if err := b.handle().Delete(ctx, key, opts...); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return classify("delete "+b.name+" "+key, err)
	}
	return nil
}

// Purge removes key with every revision of it; with rev > 0 only if its
// last revision is rev (ErrConflict otherwise). The bucket keeps no
// marker of it for more than its marker TTL (the bucket must have one:
// MarkerTTL for the idempotency bucket), where a Delete leaves one for the
// bucket's whole TTL. Purging an absent key succeeds.
func (b *Bucket) Purge(ctx context.Context, key string, rev uint64, markerTTL time.Duration) error {
	opts := []jetstream.KVDeleteOpt{jetstream.PurgeTTL(markerTTL)}
	if rev > 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	ctx, cancel := request(ctx)
	defer cancel()
	if err := b.handle().Purge(ctx, key, opts...); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return classify("purge "+b.name+" "+key, err)
	}
	return nil
}

// ErrStale, returned by the decide function of Change, asks Change to read
// the entry from the bucket and decide again.
var ErrStale = errors.New("event store: decided on a stale entry")

// Change is the one compare-and-set loop over a bucket entry: load, decide,
// write with the revision, and on a conflict load and decide again. decide
// gets the current entry (Revision 0 when the key is absent) and whether it
// was just read from the bucket: known, when given, is used instead of a first
// read. decide returns the value to write, nil to write nothing, ErrStale to
// decide again on a fresh read, or an error that Change returns as it is.
// Change returns the entry as it stands after the last decision.
func (b *Bucket) Change(ctx context.Context, key string, known *Entry, decide func(cur Entry, fresh bool) ([]byte, error)) (Entry, error) {
	var cur Entry
	fresh := known == nil
	if known != nil {
		cur = *known
	}
	for {
		if fresh {
			e, err := b.Get(ctx, key)
			switch {
			case errors.Is(err, ErrNotFound):
				e = Entry{Key: key}
			case err != nil:
				return Entry{}, err
			}
			cur = e
		}
		next, err := decide(cur, fresh)
		if errors.Is(err, ErrStale) {
			fresh = true
			continue
		}
		if err != nil || next == nil {
			return cur, err
		}
		var rev uint64
		if cur.Revision == 0 {
			rev, err = b.Create(ctx, key, next)
		} else {
			rev, err = b.Update(ctx, key, next, cur.Revision)
		}
		switch {
		case err == nil:
			return Entry{Key: key, Value: next, Revision: rev}, nil
		case errors.Is(err, ErrConflict):
			fresh = true
		default:
			return Entry{}, err
		}
	}
}

// Watch calls put with every value written to the bucket, the current ones
// first, until ctx ends or the watch fails (its error is returned; nil when
// ctx ended). Deletes are not reported.
func (b *Bucket) Watch(ctx context.Context, put func(key string, value []byte)) error {
	w, err := b.handle().WatchAll(ctx)
	if err != nil {
		return classify("watch "+b.name, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case entry, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("watch %s: ended: %w", b.name, ErrUnavailable)
			}
			if entry != nil && entry.Operation() == jetstream.KeyValuePut {
				put(entry.Key(), entry.Value())
			}
		}
	}
}

// PutAll writes entries with asynchronous publishes and waits for every
// acknowledgement: a batch costs one round trip, not one per entry.
func (b *Bucket) PutAll(ctx context.Context, entries []Entry) error {
	puts, err := b.PutAsync(ctx, entries)
	if err != nil {
		return err
	}
	return puts.Wait(ctx)
}

// PutAsync publishes entries, in order, and returns without waiting for
// their acknowledgements: the caller goes on with other work while the
// server stores them, and learns the outcome from Wait or Done. When a
// publish fails, it waits for the answers of those published before it
// (see Wait), then returns the error.
func (b *Bucket) PutAsync(ctx context.Context, entries []Entry) (*Puts, error) {
	p := &Puts{bucket: b.name, futures: make([]jetstream.PubAckFuture, 0, len(entries))}
	for _, e := range entries {
		f, err := b.store.js.PublishAsync("$KV."+b.name+"."+e.Key, e.Value)
		if err != nil {
			_ = p.Wait(ctx)
			return nil, classify("put "+b.name, err)
		}
		p.futures = append(p.futures, f)
	}
	return p, nil
}

// Puts are the writes of one PutAsync, some of which may not be answered
// yet. It is used by one goroutine at a time.
type Puts struct {
	bucket  string
	futures []jetstream.PubAckFuture
	// next is the first write whose answer was not seen: each future's
	// answer can be received once.
	next int
	err  error // the first failure seen
}

// Wait waits until every write is answered and returns nil when every
// entry is stored, or the first failure. It waits for every answer, not
// only up to the first failure: a write the client is still retrying
// could otherwise land after a newer value of its key, written by a caller
// that took the failure for the end. It returns early only when ctx ends,
// or when an answer is lost (none after requestTimeout).
func (p *Puts) Wait(ctx context.Context) error {
	if p.next == len(p.futures) {
		return p.err
	}
	timeout := time.NewTimer(requestTimeout)
	defer timeout.Stop()
	for ; p.next < len(p.futures); p.next++ {
		f := p.futures[p.next]
		select {
		case <-f.Ok():
		case err := <-f.Err():
			p.failed(err)
		case <-timeout.C:
			return fmt.Errorf("put %s: no acknowledgement after %s: %w", p.bucket, requestTimeout, ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return p.err
}

// Done reports, without waiting, whether every write is answered, and
// when it is, what Wait returns.
func (p *Puts) Done() (bool, error) {
	for ; p.next < len(p.futures); p.next++ {
		f := p.futures[p.next]
		select {
		case <-f.Ok():
		case err := <-f.Err():
			p.failed(err)
		default:
			return false, nil
		}
	}
	return true, p.err
}

// failed keeps the first failure.
func (p *Puts) failed(err error) {
	if p.err == nil {
		p.err = classify("put "+p.bucket, err)
	}
}

// GetLatest reads the value of key from the bucket's stream leader, never
// from a replica that may lag (as a direct get may): a projection that reads
// what it wrote must see it. It returns nil when the key is absent or
// deleted.
func (b *Bucket) GetLatest(ctx context.Context, key string) ([]byte, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + b.name + "." + key})
	// A request lost with a leader that went down is never answered.
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	msg, err := b.store.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+b.name, req)
	if err != nil {
		return nil, classify("get "+b.name, err)
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
		return nil, fmt.Errorf("get %s %s: %w", b.name, key, err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("get %s %s: %s: %w", b.name, key, resp.Error.Description, ErrUnavailable)
	case resp.Message == nil:
		return nil, fmt.Errorf("get %s %s: empty answer: %w", b.name, key, ErrUnavailable)
	}
	if bytes.Contains(resp.Message.Hdrs, []byte("KV-Operation")) {
		return nil, nil // a delete or purge marker
	}
	return resp.Message.Data, nil
}

// Empty reports whether the bucket holds no entry, deleted ones included:
// true for a bucket nothing was ever written to since it was created or
// reset.
func (b *Bucket) Empty(ctx context.Context) (bool, error) {
	st, err := b.handle().Status(ctx)
	if err != nil {
		return false, classify("status "+b.name, err)
	}
	return st.Values() == 0, nil
}

// reset deletes the bucket and creates it empty, with the replicas the
// store was opened with.
func (b *Bucket) reset(ctx context.Context, description string) error {
	js := b.store.js
	if err := js.DeleteKeyValue(ctx, b.name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("delete %s: %w", b.name, err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: b.name, Description: description, Storage: jetstream.FileStorage, Replicas: b.store.replicas,
	})
	if err != nil {
		return fmt.Errorf("create %s: %w", b.name, err)
	}
	b.kv.Store(&kv)
	return nil
}

// Keys returns the keys of the bucket's live entries that match filter (a
// key pattern with * and > wildcards), in no particular order. Only the
// entries matching filter are read, and only their headers.
func (b *Bucket) Keys(ctx context.Context, filter string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	l, err := b.handle().ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, classify("list "+b.name, err)
	}
	defer func() { _ = l.Stop() }()
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, classify("list "+b.name, err)
	}
	return keys, nil
}

// Each calls fn with the key and value of every live entry of the bucket,
// in no particular order, and returns the first error fn returns or the
// read's failure.
func (b *Bucket) Each(ctx context.Context, fn func(key string, value []byte) error) error {
	w, err := b.handle().WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return classify("read "+b.name, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("read %s: ended: %w", b.name, ErrUnavailable)
			}
			if e == nil {
				return nil // every current entry was delivered
			}
			if err := fn(e.Key(), e.Value()); err != nil {
				return err
			}
		}
	}
}
