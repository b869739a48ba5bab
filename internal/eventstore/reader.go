package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamNamed returns the stream called name: StreamQueries, StreamAccounts
// or StreamExhausted.
func (s *Store) StreamNamed(name string) (*Stream, error) {
	switch name {
	case StreamQueries:
		return s.Queries, nil
	case StreamAccounts:
		return s.Accounts, nil
	case StreamExhausted:
		return s.Exhausted, nil
	case StreamFiles:
		return s.Files, nil
	}
	return nil, fmt.Errorf("event store: no stream %q", name)
}

// ReadFrom says where a Reader starts: at the messages stored at or after
// Since when it is set, else at sequence FromSeq when it is not zero, else
// at the first message.
type ReadFrom struct {
	Since   time.Time
	FromSeq uint64
}

// StoredMsg is one message as a Reader delivers it.
type StoredMsg struct {
	// Seq is the message's stream sequence.
	Seq uint64
	// Time is when the stream stored it.
	Time time.Time
	// Data is the message as stored, byte for byte.
	Data []byte
	// Pending is how many matching messages were left after this one when
	// it was delivered.
	Pending uint64
}

// Reader reads the messages of one stream that match a filter, in stream
// order, through an ordered consumer that it deletes on Close.
type Reader struct {
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
	it     jetstream.MessagesContext
}

// OpenReader opens a Reader on stream for the subjects matching filter,
// starting where from says. Errors are JetStream's, unwrapped.
func (s *Store) OpenReader(ctx context.Context, stream, filter string, from ReadFrom) (*Reader, error) {
	st, err := s.StreamNamed(stream)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch {
	case !from.Since.IsZero():
		since := from.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	case from.FromSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.FromSeq
	}
	cons, err := st.s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages()
	if err != nil {
		r := &Reader{js: s.js, stream: stream, cons: cons}
		r.deleteConsumer()
		return nil, err
	}
	return &Reader{js: s.js, stream: stream, cons: cons, it: it}, nil
}

// OpenedPending returns how many matching messages were left to deliver
// when the reader was opened; ok is false when the server did not say.
func (r *Reader) OpenedPending() (n uint64, ok bool) {
	if ci := r.cons.CachedInfo(); ci != nil {
		return ci.NumPending, true
	}
	return 0, false
}

// Pending asks the server how many matching messages are left to deliver;
// gone is true (and err nil) when the consumer no longer exists there.
func (r *Reader) Pending(ctx context.Context) (n uint64, gone bool, err error) {
	ci, err := r.cons.Info(ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, true, nil
	}
	if err != nil {
		return 0, false, err
	}
	return ci.NumPending, false, nil
}

// Next returns the next matching message, waiting for one as long as ctx
// allows; it then returns an error that wraps ctx's.
func (r *Reader) Next(ctx context.Context) (StoredMsg, error) {
	msg, err := r.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		return StoredMsg{}, err
	}
	meta, err := msg.Metadata()
	if err != nil {
		return StoredMsg{}, err
	}
	return StoredMsg{Seq: meta.Sequence.Stream, Time: meta.Timestamp, Data: msg.Data(), Pending: meta.NumPending}, nil
}

// Close stops the reader and deletes its consumer on the server rather than
// leaving it to expire.
func (r *Reader) Close() {
	if r.it != nil {
		r.it.Stop()
	}
	r.deleteConsumer()
}

func (r *Reader) deleteConsumer() {
	if ci := r.cons.CachedInfo(); ci != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = r.js.DeleteConsumer(ctx, r.stream, ci.Name)
	}
}
