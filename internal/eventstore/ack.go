package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishRetries and publishRetryWait are how often, and after how long, a
// publish that no server answered (a stream leader being elected) is sent
// again, as nats.go's synchronous publish does.
const (
	publishRetries   = 2
	publishRetryWait = 250 * time.Millisecond
)

// publish sends msg to its stream as JetStream's synchronous publish does,
// with the headers of a publish with the event id id and, with expect, the
// expected last sequence of a subject, and returns the stream's answer: the
// message's stream sequence and whether the stream had it already (its id
// within the dedup window). The answer is read without reflection
// (decodeAck).
func (s *Store) publish(ctx context.Context, msg *nats.Msg, id string, expect *Expect) (seq uint64, duplicate bool, err error) {
	msg.Header.Set(jetstream.MsgIDHeader, id)
	if expect != nil {
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect.Seq, 10))
		msg.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, expect.Filter)
	}
	ctx, cancel := request(ctx)
	defer cancel()
	resp, err := s.nc.RequestMsgWithContext(ctx, msg)
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < publishRetries; r++ {
		select {
		case <-ctx.Done():
		case <-time.After(publishRetryWait):
		}
		resp, err = s.nc.RequestMsgWithContext(ctx, msg)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, false, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return 0, false, err
	}
	return decodeAck(resp.Data)
}

// ackAnswer is JetStream's answer to a publish, as encoding/json reads it.
type ackAnswer struct {
	Error     *jetstream.APIError `json:"error"`
	Stream    string              `json:"stream"`
	Seq       uint64              `json:"seq"`
	Duplicate bool                `json:"duplicate"`
}

// decodeAck reads JetStream's answer to a publish: an acknowledgement, or
// the error the stream refused the message with (a *jetstream.APIError,
// as nats.go returns it). A plain acknowledgement, an object of "stream",
// "seq" and optionally "domain" and "duplicate" as the server writes it, is
// read field by field; anything else (an error, a field this reader does
// not know) through encoding/json.
func decodeAck(data []byte) (seq uint64, duplicate bool, err error) {
	if seq, duplicate, ok := scanAck(data); ok {
		return seq, duplicate, nil
	}
	var a ackAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	if a.Error != nil {
		return 0, false, fmt.Errorf("nats: %w", a.Error)
	}
	if a.Stream == "" {
		return 0, false, jetstream.ErrInvalidJSAck
	}
	return a.Seq, a.Duplicate, nil
}

// scanAck reads a plain acknowledgement: one JSON object without white
// space whose keys are "stream" (a string, not empty), "seq" (a whole
// number), and optionally "domain" (a string) and "duplicate" (true or
// false), each once, with no escape in any string. ok is false for
// anything else.
func scanAck(b []byte) (seq uint64, duplicate bool, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return 0, false, false
	}
	var seen [4]bool // stream, seq, domain, duplicate
	i := 1
	// str reads a string at i without escapes and returns it.
	str := func() ([]byte, bool) {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		start := i + 1
		for j := start; j < len(b); j++ {
			switch c := b[j]; {
			case c == '"':
				i = j + 1
				return b[start:j], true
			case c == '\\' || c < 0x20 || c >= 0x80:
				return nil, false
			}
		}
		return nil, false
	}
	for {
		key, good := str()
		if !good || i >= len(b) || b[i] != ':' {
			return 0, false, false
		}
		i++
		field := -1
		switch string(key) {
		case "stream":
			field = 0
			v, good := str()
			if !good || len(v) == 0 {
				return 0, false, false
			}
		case "seq":
			field = 1
			start := i
			for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			}
			n, err := strconv.ParseUint(string(b[start:i]), 10, 64)
			if err != nil || (i-start > 1 && b[start] == '0') {
				return 0, false, false
			}
			seq = n
		case "domain":
			field = 2
			if _, good := str(); !good {
				return 0, false, false
			}
		case "duplicate":
			field = 3
			switch {
			case len(b)-i >= 4 && string(b[i:i+4]) == "true":
				duplicate, i = true, i+4
			case len(b)-i >= 5 && string(b[i:i+5]) == "false":
				duplicate, i = false, i+5
			default:
				return 0, false, false
			}
		default:
			return 0, false, false
		}
		if seen[field] {
			return 0, false, false
		}
		seen[field] = true
		if i >= len(b) {
			return 0, false, false
		}
		switch b[i] {
		case ',':
			i++
			continue
		case '}':
			return seq, duplicate, i == len(b)-1 && seen[0] && seen[1]
		}
		return 0, false, false
	}
}
