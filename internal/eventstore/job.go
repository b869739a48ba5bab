package eventstore

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Job is one delivery of a durable consumer's message: it is handled once
// acknowledged, and delivered again when it is not, or not in time.
//
// A job is acknowledged on its message's reply subject, in JetStream's
// acknowledgement protocol, as the JetStream client acknowledges a message:
// once it was acknowledged, negatively acknowledged or terminated, it sends
// nothing more. So it can let go of the message itself (Release) and still
// be acknowledged: a worker holds each of its jobs for as long as the query
// runs, and the message (its data and headers) is most of what a job holds.
type Job struct {
	nc        *nats.Conn
	reply     string
	delivered int

	mu    sync.Mutex
	msg   jetstream.Msg // nil once released
	ended bool          // acknowledged, negatively acknowledged or terminated
}

// The bodies of JetStream's acknowledgements.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// newJob is the job of msg, delivered on nc.
func newJob(nc *nats.Conn, msg jetstream.Msg) *Job {
	j := &Job{nc: nc, reply: msg.Reply(), delivered: 1, msg: msg}
	if meta, err := msg.Metadata(); err == nil {
		j.delivered = int(meta.NumDelivered)
	}
	return j
}

// message returns the delivered message, or nil once released.
func (j *Job) message() jetstream.Msg {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.msg
}

// Message returns the delivered message; the zero Message once the job
// was released.
func (j *Job) Message() Message {
	msg := j.message()
	if msg == nil {
		return Message{}
	}
	m := Message{Subject: msg.Subject(), Data: msg.Data()}
	if meta, err := msg.Metadata(); err == nil {
		m.Seq = meta.Sequence.Stream
	}
	return m
}

// Release lets go of the delivered message: Message, TraceContext and
// Stored return their zero values afterwards; Delivered and the
// acknowledgements work as before.
func (j *Job) Release() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.msg = nil
}

// Delivered is the number of times the message was delivered, this one
// included.
func (j *Job) Delivered() int { return j.delivered }

// Ack says the message is handled.
func (j *Job) Ack() { j.send(ackAck, true) }

// Nak hands the message back for redelivery at once.
func (j *Job) Nak() { j.send(ackNak, true) }

// NakWithDelay hands the message back for redelivery after d.
func (j *Job) NakWithDelay(d time.Duration) {
	if d <= 0 {
		j.Nak()
		return
	}
	body := append(append([]byte(nil), `-NAK {"delay": `...), strconv.FormatInt(d.Nanoseconds(), 10)...)
	j.send(append(body, '}'), true)
}

// Term says the message must never be delivered again.
func (j *Job) Term() { j.send(ackTerm, true) }

// InProgress restarts the wait for the acknowledgement.
func (j *Job) InProgress() { j.send(ackProgress, false) }

// send publishes body on the reply subject unless the job has ended; a
// final body, once published, ends it.
func (j *Job) send(body []byte, final bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ended || j.reply == "" {
		return
	}
	if j.nc.Publish(j.reply, body) == nil && final {
		j.ended = true
	}
}
