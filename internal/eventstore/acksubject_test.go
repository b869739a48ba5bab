package eventstore

import (
	"strings"
	"testing"
)

// referenceAckSeqs reads an ack subject as the client's Metadata does:
// 9 tokens (v1), or at least 11 (v2, the domain and account hash after
// $JS.ACK.); numbers are decimal digits.
func referenceAckSeqs(reply string) (seq, pending uint64, ok bool) {
	tokens := strings.Split(reply, ".")
	if !strings.HasPrefix(reply, "$JS.ACK.") {
		return 0, 0, false
	}
	var s, p string
	switch n := len(tokens); {
	case n == 9:
		s, p = tokens[5], tokens[8]
	case n >= 11:
		s, p = tokens[7], tokens[10]
	default:
		return 0, 0, false
	}
	num := func(d string) (uint64, bool) {
		if d == "" || len(d) > 19 {
			return 0, false
		}
		var v uint64
		for _, c := range d {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + uint64(c-'0')
		}
		return v, true
	}
	var ok1, ok2 bool
	seq, ok1 = num(s)
	pending, ok2 = num(p)
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	return seq, pending, true
}

// FuzzAckSeqs: the reply subject of a delivery is read as the client reads
// it, or left to the client.
func FuzzAckSeqs(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.QUERIES.cons.1.42.7.1700000000000000000.99",
		"$JS.ACK._.ACCHASH.QUERIES.cons.1.42.7.1700000000000000000.99.rand",
		"$JS.ACK._.ACCHASH.QUERIES.cons.1.42.7.1700000000000000000.99",
		"$JS.ACK.QUERIES.cons.1.42.7.1700000000000000000",
		"$JS.ACK.QUERIES.cons.1.42.7.1700000000000000000.99.x",
		"$JS.ACK.QUERIES.cons.1.4x2.7.17.99", "$JS.ACK.QUERIES.cons.1..7.17.99", "_INBOX.abc", "",
		"$JS.ACK.QUERIES.cons.1.99999999999999999999.7.17.1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		seq, pending, ok := ackSeqs(reply)
		wseq, wpending, wok := referenceAckSeqs(reply)
		if ok != wok || seq != wseq || pending != wpending {
			t.Fatalf("%q: %d %d %v, want %d %d %v", reply, seq, pending, ok, wseq, wpending, wok)
		}
	})
}
