package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Durable consumer names are persistent state: never rename them.
const (
	ConsumerQueryStatus = "proj_query_status"
	// ConsumerAccounts feeds the keys and balances projections from one
	// delivery of each account event.
	ConsumerAccounts = "proj_accounts"
)

// Handler applies one event. It must be idempotent by sequence.
type Handler func(ctx context.Context, r events.Record) error

// BatchHandler applies events in stream order. It must be idempotent by
// sequence.
type BatchHandler func(ctx context.Context, recs []events.Record) error

// Runner feeds a handler from a durable consumer in stream order: one event
// at a time (Handle), or every event already delivered, up to Batch, at once
// (HandleBatch). A failing event or batch is retried in place, never skipped
// or reordered, so a read model never misses an event. A batch is
// acknowledged by its last event (AckAll).
type Runner struct {
	Name        string
	Stream      jetstream.Stream
	Filters     []string
	Handle      Handler
	HandleBatch BatchHandler
	// Batch bounds a batch; zero means 1024.
	Batch int
	Log   zerolog.Logger
}

// Run consumes until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	cons, err := r.Stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        r.Name,
		FilterSubjects: r.Filters,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckAllPolicy,
		AckWait:        30 * time.Second,
		MaxAckPending:  8192,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", r.Name, err)
	}
	size := r.Batch
	if size <= 0 {
		size = 1024
	}
	// Events are decoded on the consumer's delivery goroutine, so decoding
	// and applying run side by side.
	in := make(chan delivered, 2*size)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		d := r.decode(msg)
		select {
		case in <- d:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(size))
	if err != nil {
		return fmt.Errorf("consume %s: %w", r.Name, err)
	}
	defer cc.Stop()
	handle := r.HandleBatch
	if handle == nil {
		handle = func(ctx context.Context, recs []events.Record) error {
			for _, rec := range recs {
				if err := r.Handle(ctx, rec); err != nil {
					return err
				}
			}
			return nil
		}
	}
	recs := make([]events.Record, 0, size)
	for {
		var last jetstream.Msg
		recs = recs[:0]
		add := func(d delivered) {
			last = d.msg
			if d.ok {
				recs = append(recs, d.rec)
			}
		}
		var stuck *delivered
		select {
		case <-ctx.Done():
			return nil
		case d := <-in:
			if !d.ok {
				stuck = &d
			} else {
				add(d)
			}
		}
	drain:
		for len(recs) < size && stuck == nil {
			select {
			case d := <-in:
				if !d.ok {
					stuck = &d
					break drain
				}
				add(d)
			default:
				break drain
			}
		}
		for backoff := 10 * time.Millisecond; len(recs) > 0; backoff = min(2*backoff, 2*time.Second) {
			if err := handle(ctx, recs); err == nil {
				break
			} else {
				r.Log.Warn().Err(err).Str("consumer", r.Name).Uint64("seq", recs[0].Seq).Msg("projection: retrying events")
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			_ = last.InProgress()
		}
		if last != nil {
			_ = last.Ack()
		}
		if stuck != nil {
			// An event this build cannot read (a newer type, or corrupt
			// bytes) is never skipped: the read model would silently
			// diverge. The projection stops here until a build that reads
			// it runs.
			r.Log.Error().Str("consumer", r.Name).Str("subject", stuck.msg.Subject()).
				Msg("projection stopped at an event it cannot decode; run a build that knows it")
			<-ctx.Done()
			return nil
		}
	}
}

// delivered is one message and its event; ok is false for a message whose
// event could not be decoded, which is logged and left out.
type delivered struct {
	msg jetstream.Msg
	rec events.Record
	ok  bool
}

func (r *Runner) decode(msg jetstream.Msg) delivered {
	meta, err := msg.Metadata()
	if err != nil {
		return delivered{msg: msg}
	}
	rec, err := events.Decode(meta.Sequence.Stream, msg.Data())
	if err != nil {
		r.Log.Error().Err(err).Str("consumer", r.Name).Uint64("seq", meta.Sequence.Stream).Msg("projection: undecodable event")
		return delivered{msg: msg}
	}
	rec.Redelivered = meta.NumDelivered > 1
	return delivered{msg: msg, rec: rec, ok: true}
}

// DeleteConsumer removes a runner's durable consumer so it starts over from
// the first event, as a rebuild needs.
func DeleteConsumer(ctx context.Context, stream jetstream.Stream, name string) error {
	err := stream.DeleteConsumer(ctx, name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete consumer %s: %w", name, err)
	}
	return nil
}
