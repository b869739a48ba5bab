package eventstore

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The answers JetStream writes to a publish are read as encoding/json reads
// them: plain acknowledgements field by field, the rest through
// encoding/json.
func TestDecodeAck(t *testing.T) {
	for _, tc := range []struct {
		ack     string
		seq     uint64
		dup     bool
		scanned bool
		errCode jetstream.ErrorCode
		invalid bool
	}{
		{ack: `{"stream":"QUERIES","seq":42}`, seq: 42, scanned: true},
		{ack: `{"stream":"ACCOUNTS","seq":7,"duplicate":true}`, seq: 7, dup: true, scanned: true},
		{ack: `{"stream":"ACCOUNTS","domain":"hub","seq":18446744073709551615}`, seq: 18446744073709551615, scanned: true},
		{ack: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"ACCOUNTS","seq":0}`, errCode: 10071},
		{ack: `{"stream":"QUERIES","seq":3,"val":"1"}`, seq: 3}, // a field it does not know
		{ack: `{ "stream": "QUERIES", "seq": 9 }`, seq: 9},      // white space
		{ack: `{"stream":"Q\u0055ERIES","seq":1}`, seq: 1},      // an escape
		{ack: `{"stream":"","seq":1}`, invalid: true},           // no stream
		{ack: `{"seq":1}`, invalid: true},
		{ack: `not json`, invalid: true},
		{ack: `{"stream":"QUERIES","seq":01}`, invalid: true},
	} {
		seq, dup, err := decodeAck([]byte(tc.ack))
		_, _, scanned := scanAck([]byte(tc.ack))
		var apiErr *jetstream.APIError
		switch {
		case tc.errCode != 0:
			if !errors.As(err, &apiErr) || apiErr.ErrorCode != tc.errCode || !errors.Is(classify("append", err), ErrConflict) {
				t.Errorf("%s: %v, want the API error %d, a conflict", tc.ack, err, tc.errCode)
			}
		case tc.invalid:
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Errorf("%s: %d %v %v, want an invalid acknowledgement", tc.ack, seq, dup, err)
			}
		case err != nil || seq != tc.seq || dup != tc.dup:
			t.Errorf("%s: %d %v %v, want %d %v", tc.ack, seq, dup, err, tc.seq, tc.dup)
		}
		if scanned != tc.scanned {
			t.Errorf("%s: read field by field %v, want %v", tc.ack, scanned, tc.scanned)
		}
	}
}

// Whatever the bytes, an answer read field by field says what encoding/json
// reads in it, and is an acknowledgement of a stream.
func FuzzScanAck(f *testing.F) {
	for _, s := range []string{`{"stream":"QUERIES","seq":42}`, `{"stream":"A","seq":7,"duplicate":true}`, `{"stream":"A","domain":"d","seq":0,"duplicate":false}`,
		`{"error":{"code":400,"err_code":10071,"description":"x"},"stream":"A","seq":0}`, `{"stream":"A","seq":1,"seq":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seq, dup, ok := scanAck(data)
		if !ok {
			return
		}
		var a ackAnswer
		if err := json.Unmarshal(data, &a); err != nil {
			t.Fatalf("%q read field by field as %d %v, but encoding/json refuses it: %v", data, seq, dup, err)
		}
		if a.Error != nil || a.Stream == "" || a.Seq != seq || a.Duplicate != dup {
			t.Fatalf("%q read field by field as %d %v, by encoding/json as %+v", data, seq, dup, a)
		}
	})
}

// BenchmarkDecodeAck reads a plain acknowledgement field by field, and the
// same through encoding/json as nats.go reads it.
func BenchmarkDecodeAck(b *testing.B) {
	ack := []byte(`{"stream":"ACCOUNTS","seq":123456789}`)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := decodeAck(ack); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a ackAnswer
			if err := json.Unmarshal(ack, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
}
