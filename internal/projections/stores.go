package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/events"
)

// QueryStatus projects QUERIES into the query_status bucket. It keeps the
// documents of unfinished queries in memory, as it is their only writer.
type QueryStatus struct {
	KV func() jetstream.KeyValue

	mu    sync.Mutex
	cache map[string]*QueryDoc
}

// Handle applies one query event.
func (p *QueryStatus) Handle(ctx context.Context, r events.Record) error {
	id := events.AggregateID(r.Envelope.Subject)
	p.mu.Lock()
	if p.cache == nil {
		p.cache = map[string]*QueryDoc{}
	}
	doc := p.cache[id]
	p.mu.Unlock()
	kv := p.KV()
	if doc == nil {
		doc = &QueryDoc{}
		entry, err := kv.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("get %s: %w", id, err)
		default:
			if err := json.Unmarshal(entry.Value(), doc); err != nil {
				return fmt.Errorf("decode %s: %w", id, err)
			}
		}
	}
	if r.Seq <= doc.Seq {
		return nil
	}
	next := *doc
	next.Result.Models = append([]ModelResult(nil), doc.Result.Models...)
	next.Apply(r)
	data, err := next.Encode()
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, id, data); err != nil {
		return fmt.Errorf("put %s: %w", id, err)
	}
	p.mu.Lock()
	if next.Result.Terminal() {
		delete(p.cache, id)
	} else {
		p.cache[id] = &next
	}
	p.mu.Unlock()
	return nil
}

// Reset forgets the cached documents, as a rebuild needs.
func (p *QueryStatus) Reset() {
	p.mu.Lock()
	p.cache = nil
	p.mu.Unlock()
}

// Keys projects ACCOUNTS into the keys bucket: each key's state by fingerprint.
type Keys struct {
	KV jetstream.KeyValue
}

// Handle applies one account event; events other than key events are ignored.
func (p *Keys) Handle(ctx context.Context, r events.Record) error {
	switch e := r.Event.(type) {
	case events.KeyCreated:
		k := events.Key{
			Fingerprint: e.Fingerprint, AccountID: events.AggregateID(r.Envelope.Subject), Name: e.Name,
			SecretHash: e.SecretHash, State: events.StateActive, CreatedAt: r.Envelope.Time, Seq: r.Seq,
		}
		return p.put(ctx, &k)
	default:
		ch, ok := events.StateChange(r.Event)
		if !ok {
			return nil
		}
		k, err := GetKey(ctx, p.KV, ch.Fingerprint)
		if err != nil {
			return err
		}
		if k == nil || r.Seq <= k.Seq {
			return nil
		}
		events.ApplyKeyChange(k, ch, r.Seq)
		return p.put(ctx, k)
	}
}

func (p *Keys) put(ctx context.Context, k *events.Key) error {
	data, err := json.Marshal(k)
	if err != nil {
		return err
	}
	if _, err := p.KV.Put(ctx, k.Fingerprint, data); err != nil {
		return fmt.Errorf("put key %s: %w", k.Fingerprint, err)
	}
	return nil
}

// GetKey reads one key's projected state; nil when the key is unknown.
func GetKey(ctx context.Context, kv jetstream.KeyValue, fingerprint string) (*events.Key, error) {
	entry, err := kv.Get(ctx, fingerprint)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get key %s: %w", fingerprint, err)
	}
	var k events.Key
	if err := json.Unmarshal(entry.Value(), &k); err != nil {
		return nil, fmt.Errorf("decode key %s: %w", fingerprint, err)
	}
	return &k, nil
}
