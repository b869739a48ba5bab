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
	ConsumerKeys        = "proj_keys"
)

// Handler applies one event. It must be idempotent by sequence.
type Handler func(ctx context.Context, r events.Record) error

// Runner feeds a handler from a durable consumer, one event at a time in
// stream order. A failing event is retried in place, never skipped or
// reordered, so a read model never misses an event.
type Runner struct {
	Name    string
	Stream  jetstream.Stream
	Filters []string
	Handle  Handler
	Log     zerolog.Logger
}

// Run consumes until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	cons, err := r.Stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:        r.Name,
		FilterSubjects: r.Filters,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxAckPending:  4096,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", r.Name, err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("consume %s: %w", r.Name, err)
	}
	go func() {
		<-ctx.Done()
		msgs.Stop()
	}()
	for {
		msg, err := msgs.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			r.Log.Warn().Err(err).Str("consumer", r.Name).Msg("projection: next message")
			continue
		}
		meta, err := msg.Metadata()
		if err != nil {
			_ = msg.Term()
			continue
		}
		rec, err := events.Decode(meta.Sequence.Stream, msg.Data())
		if err != nil {
			r.Log.Error().Err(err).Str("consumer", r.Name).Msg("projection: undecodable event skipped")
			_ = msg.Term()
			continue
		}
		for backoff := 10 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
			if err = r.Handle(ctx, rec); err == nil {
				break
			}
			r.Log.Warn().Err(err).Str("consumer", r.Name).Uint64("seq", rec.Seq).Msg("projection: retrying event")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			_ = msg.InProgress()
		}
		_ = msg.Ack()
	}
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
