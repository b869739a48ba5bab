package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Stream is one stream of the store.
type Stream struct {
	name  string
	s     jetstream.Stream
	store *Store
}

// Name returns the stream's name.
func (st *Stream) Name() string { return st.name }

// replicated reports whether the stream had more than one replica when the
// store was opened.
func (st *Stream) replicated() bool {
	info := st.s.CachedInfo()
	return info != nil && info.Config.Replicas > 1
}

// State is what a stream holds.
type State struct {
	// Msgs is the number of messages stored.
	Msgs uint64
	// LastSeq is the sequence of the last message stored; 0 when none ever was.
	LastSeq uint64
	// LastTime is when the last message was stored; zero when none was.
	LastTime time.Time
	// Consumers is the number of consumers the stream has, durable and
	// ephemeral, of every process.
	Consumers int
}

// State reads the stream's state from the server.
func (st *Stream) State(ctx context.Context) (State, error) {
	info, err := st.s.Info(ctx)
	if err != nil {
		return State{}, classify("info "+st.name, err)
	}
	return State{Msgs: info.State.Msgs, LastSeq: info.State.LastSeq, LastTime: info.State.LastTime, Consumers: info.State.Consumers}, nil
}

// Message is one stored message of a stream.
type Message struct {
	Seq     uint64
	Subject string
	Data    []byte
	// Pending is, for a message an ordered consumer delivered, how many
	// messages matching its filters the stream held after this one when it
	// was delivered; 0 otherwise.
	Pending uint64
}

// Record decodes the message's event.
func (m Message) Record() (events.Record, error) {
	return events.DecodeStored(m.Seq, m.Subject, m.Data)
}

// Message returns the message at seq, or ErrNotFound.
func (st *Stream) Message(ctx context.Context, seq uint64) (Message, error) {
	msg, err := st.s.GetMsg(ctx, seq)
	if err != nil {
		return Message{}, classify(fmt.Sprintf("get %s %d", st.name, seq), err)
	}
	return Message{Seq: msg.Sequence, Subject: msg.Subject, Data: msg.Data}, nil
}

// Next returns the first message at or after seq whose subject matches
// filter, or ErrNotFound.
func (st *Stream) Next(ctx context.Context, filter string, seq uint64) (Message, error) {
	msg, err := st.s.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(filter))
	if err != nil {
		return Message{}, classify("next "+filter, err)
	}
	return Message{Seq: msg.Sequence, Subject: msg.Subject, Data: msg.Data}, nil
}

// DeleteConsumer deletes the consumer name of the stream; deleting one
// that does not exist succeeds.
func (st *Stream) DeleteConsumer(ctx context.Context, name string) error {
	if err := st.s.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return classify("delete consumer "+name, err)
	}
	return nil
}

// Consumption is a running consumer; Stop ends it, and Closed is closed
// once its handler has returned for the last time.
type Consumption struct{ cc jetstream.ConsumeContext }

// Stop stops the delivery of messages.
func (c *Consumption) Stop() { c.cc.Stop() }

// Closed is closed when no handler runs any more after Stop.
func (c *Consumption) Closed() <-chan struct{} { return c.cc.Closed() }

// orderedHeartbeat is how often the server tells an ordered consumer that
// its waiting pull is alive; once two are missed, the client recreates the
// consumer after the last message it handed over. It bounds a stall:
// nats.go does not ask for more messages while it is still sending its
// previous pull, and when every message still to come is handed over
// meanwhile, nothing asks again until the heartbeats are missed (seen on a
// loaded machine with small batches: 3 runners in 300 stalled). With
// nats.go's default of 5 s such a reader stood still for 10 s.
const orderedHeartbeat = time.Second

// Ordered delivers the messages of the stream matching filters to handle,
// in stream order, from the one after sequence after (0: from the first),
// through an ordered consumer: the client checks each delivery's sequence
// and recreates the consumer after the last message it saw on any gap, so
// a message is never skipped or reordered. Up to batch messages are pulled
// at a time. handle runs on the consumer's goroutine; onRestart, when set,
// is told of each error that made the consumer restart.
func (st *Stream) Ordered(ctx context.Context, filters []string, after uint64, batch int, handle func(Message), onRestart func(error)) (*Consumption, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := st.s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, classify("ordered consumer "+st.name, err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		m := Message{Subject: msg.Subject(), Data: msg.Data()}
		var ok bool
		if m.Seq, m.Pending, ok = ackSeqs(msg.Reply()); !ok {
			if meta, err := msg.Metadata(); err == nil {
				m.Seq, m.Pending = meta.Sequence.Stream, meta.NumPending
			}
		}
		handle(m)
	}, jetstream.PullMaxMessages(batch), jetstream.PullHeartbeat(orderedHeartbeat), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if onRestart != nil {
			onRestart(err)
		}
	}))
	if err != nil {
		return nil, classify("consume "+st.name, err)
	}
	return &Consumption{cc: cc}, nil
}

// JobsConfig configures the workers' durable consumer.
type JobsConfig struct {
	// AckWait is how long a job may go without an acknowledgement or an
	// in-progress signal before it is delivered again.
	AckWait time.Duration
	// MaxDeliver is how many deliveries of a job are made at most.
	MaxDeliver int
}

// Jobs is the workers' durable pull consumer of submitted queries.
type Jobs struct {
	cons jetstream.Consumer
	nc   *nats.Conn
}

// Jobs creates or updates the workers' durable consumer, ConsumerJobs, on
// the submitted events of QUERIES. MaxAckPending is unbounded: each worker
// pulls only what it has room for.
func (s *Store) Jobs(ctx context.Context, cfg JobsConfig) (*Jobs, error) {
	cons, err := s.Queries.s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       ConsumerJobs,
		FilterSubject: "ev." + events.AggregateQuery + ".*." + events.QuerySubmitted{}.EventName(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		MaxAckPending: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", ConsumerJobs, classify("create", err))
	}
	return &Jobs{cons: cons, nc: s.nc}, nil
}

// jobsHeartbeat is how often the server tells a waiting pull of jobs that
// it is alive; after two missed, the pull ends with an error and the
// worker pulls again. A pull the server lost (its JetStream restarted on
// a full disk that was freed, say) is thus noticed in 2 s instead of
// nats.go's 10 s. A pull whose context ends sooner than a few heartbeats
// has none (nats.go refuses a heartbeat above half the pull's expiry).
const jobsHeartbeat = time.Second

// Fetch pulls up to n jobs and calls each with every one as it arrives,
// until the pull is complete or ctx ends; it returns the pull's error.
func (j *Jobs) Fetch(ctx context.Context, n int, each func(*Job)) error {
	opts := []jetstream.FetchOpt{jetstream.FetchContext(ctx)}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 4*jobsHeartbeat {
		opts = append(opts, jetstream.FetchHeartbeat(jobsHeartbeat))
	}
	batch, err := j.cons.Fetch(n, opts...)
	if err != nil {
		return classify("fetch "+ConsumerJobs, err)
	}
	for msg := range batch.Messages() {
		each(newJob(j.nc, msg))
	}
	if err := batch.Error(); err != nil {
		return classify("fetch "+ConsumerJobs, err)
	}
	return nil
}

// ConsumerExhausted is the workers' durable consumer of StreamExhausted.
// It is persistent state: never rename it.
const ConsumerExhausted = "worker_exhausted"

// ConsumeExhausted delivers JetStream's advisories of the jobs the workers'
// consumer stopped delivering to handle, each to one process of those that
// consume it, until the returned consumption is stopped. An advisory that is
// not acknowledged within a minute comes again.
func (s *Store) ConsumeExhausted(ctx context.Context, handle func(*Job)) (*Consumption, error) {
	cons, err := s.Exhausted.s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   ConsumerExhausted,
		AckPolicy: jetstream.AckExplicitPolicy,
		AckWait:   time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", ConsumerExhausted, classify("create", err))
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { handle(newJob(s.nc, m)) })
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", ConsumerExhausted, classify("consume", err))
	}
	return &Consumption{cc: cc}, nil
}

// ackSeqs reads the stream sequence and the pending count from the reply
// subject of a consumer's delivery, $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
// or, from newer servers, $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>[.<token>...],
// as the client's Metadata does, without allocating. ok is false for any
// other form (the caller asks Metadata) and for numbers that are not plain
// decimal digits.
func ackSeqs(reply string) (seq, pending uint64, ok bool) {
	rest, found := strings.CutPrefix(reply, "$JS.ACK.")
	if !found {
		return 0, 0, false
	}
	var tokens [9]string // the tokens after $JS.ACK. up to the pending count
	n := 0
	for n < len(tokens) {
		tokens[n], rest, found = strings.Cut(rest, ".")
		n++
		if !found {
			break
		}
	}
	// v1 has 7 tokens after $JS.ACK., v2 at least 9.
	var seqTok, pendTok string
	switch {
	case n == 7 && !found:
		seqTok, pendTok = tokens[3], tokens[6]
	case n == 9:
		seqTok, pendTok = tokens[5], tokens[8]
	default:
		return 0, 0, false
	}
	if seq, ok = decimal(seqTok); !ok {
		return 0, 0, false
	}
	if pending, ok = decimal(pendTok); !ok {
		return 0, 0, false
	}
	return seq, pending, true
}

// decimal reads a non-empty run of decimal digits that fits in a uint64.
func decimal(s string) (uint64, bool) {
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}
