package eventstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/synadia-io/orbit.go/jetstreamext"
)

// What the checks of a store after an unclean stop read of its buckets:
// where each ends, and what was written since a moment.

// LastSeq returns the sequence of the last write to the bucket (its
// stream's last sequence): it only grows, also when the bucket is purged.
func (b *Bucket) LastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	st, err := b.store.js.Stream(ctx, "KV_"+b.name)
	if err != nil {
		return 0, classify("info "+b.name, err)
	}
	return st.CachedInfo().State.LastSeq, nil
}

// PurgeAll removes every entry of the bucket; its last sequence stays.
func (b *Bucket) PurgeAll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	st, err := b.store.js.Stream(ctx, "KV_"+b.name)
	if err != nil {
		return classify("purge "+b.name, err)
	}
	if err := st.Purge(ctx); err != nil {
		return classify("purge "+b.name, err)
	}
	return nil
}

// Since calls fn with the key and value of every write to the bucket
// stored at or after t, in order (a key written twice comes twice; deletes
// and purges are left out), and returns the first error fn returns or the
// read's failure.
func (b *Bucket) Since(ctx context.Context, t time.Time, fn func(key string, value []byte) error) error {
	prefix := "$KV." + b.name + "."
	opts := []jetstreamext.GetBatchOpt{jetstreamext.GetBatchStartTime(t), jetstreamext.GetBatchSubject(prefix + ">")}
	for {
		reqCtx, cancel := context.WithTimeout(ctx, requestTimeout)
		msgs, err := jetstreamext.GetBatch(reqCtx, b.store.js, "KV_"+b.name, loadBatch, opts...)
		if err != nil {
			cancel()
			return classify("read "+b.name+" since "+t.Format(time.RFC3339Nano), err)
		}
		var next uint64
		pending := "0"
		for msg, err := range msgs {
			if err != nil {
				cancel()
				if err = classify("read "+b.name, err); errors.Is(err, ErrNotFound) {
					return nil
				}
				return err
			}
			next, pending = msg.Sequence+1, msg.Header.Get("Nats-Num-Pending")
			if op := msg.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
				continue
			}
			if err := fn(strings.TrimPrefix(msg.Subject, prefix), msg.Data); err != nil {
				cancel()
				return err
			}
		}
		cancel()
		if next == 0 || pending == "0" || pending == "" {
			return nil
		}
		opts = []jetstreamext.GetBatchOpt{jetstreamext.GetBatchSeq(next), jetstreamext.GetBatchSubject(prefix + ">")}
	}
}
