package events

import (
	"encoding/json"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeData decodes the data of an event of type typ. The query events,
// which make most of a store, and the ledger's events of every query (a
// reservation, a settlement, and a reversal of it) are read by hand,
// without reflection; data in a form the hand-written reader does not take
// (a key it does not know or knows twice, another spelling of a key, a null
// but as a field's value, a number that is not a plain integer, a string
// with a surrogate escape, a control character or bytes that are not valid
// UTF-8, anything that is not JSON) and every other event type are decoded
// by encoding/json. Both give
// the same event and error for the same bytes. A field added to an event
// type and not to its reader here is therefore never lost: its key sends the
// data to encoding/json.
func decodeData(typ string, data []byte, mk func() Event) (Event, error) {
	if fast := dataDecoders[typ]; fast != nil {
		r := dataReader{b: data}
		ev := fast(&r)
		if r.end(); !r.bad {
			return ev, nil
		}
	}
	ev := mk()
	if err := json.Unmarshal(data, ev); err != nil {
		return nil, err
	}
	return deref(ev), nil
}

// dataDecoders are the hand-written readers by event type. Each returns the
// event by value; the reader's bad flag says the bytes were not read.
var dataDecoders = map[string]func(*dataReader) Event{
	"query.submitted":       func(r *dataReader) Event { return r.querySubmitted() },
	"query.started":         func(r *dataReader) Event { r.empty(); return QueryStarted{} },
	"query.model_answered":  func(r *dataReader) Event { return r.modelAnswered() },
	"query.model_failed":    func(r *dataReader) Event { return r.modelFailed() },
	"query.model_retried":   func(r *dataReader) Event { return r.modelRetried() },
	"query.progress":        func(r *dataReader) Event { return r.progressReported() },
	"query.synthesized":     func(r *dataReader) Event { return r.synthesized() },
	"query.credits_settled": func(r *dataReader) Event { return r.creditsSettled() },
	"query.attempt_failed":  func(r *dataReader) Event { return r.attemptFailed() },
	"query.completed":       func(r *dataReader) Event { return r.queryCompleted() },
	"query.failed":          func(r *dataReader) Event { return r.queryFailed() },
	// The ledger's two events of every query: the balances projection and
	// a process catching up with an account read one of each per query;
	// and the reversal of a settlement, read with them.
	"account.credits_reserved": func(r *dataReader) Event { return r.creditsReserved() },
	"account.charges_settled":  func(r *dataReader) Event { return r.chargesSettled() },
	"account.charges_reversed": func(r *dataReader) Event { return r.chargesReversed() },
}

// dataReader reads the strict subset of JSON described at decodeData. Once
// bad is set, every later read returns a zero value and reads nothing.
type dataReader struct {
	b   []byte
	i   int
	bad bool
}

func (r *dataReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// is consumes c, after any white space, and reports whether it was there.
func (r *dataReader) is(c byte) bool {
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

func (r *dataReader) want(c byte) {
	if !r.bad && !r.is(c) {
		r.bad = true
	}
}

// end requires nothing but white space after the value read.
func (r *dataReader) end() {
	if r.ws(); r.i != len(r.b) {
		r.bad = true
	}
}

// fields reads an object, calling field with the index of each key in keys
// (a key read twice or not in keys makes the reader bad) to read its value.
func (r *dataReader) fields(keys []string, field func(int)) {
	if r.bad {
		return
	}
	r.want('{')
	if r.is('}') {
		return
	}
	var seen uint64
	for !r.bad {
		k := r.key()
		n := -1
		for j, name := range keys {
			if string(k) == name {
				n = j
				break
			}
		}
		if n < 0 || seen&(1<<n) != 0 {
			r.bad = true
			return
		}
		seen |= 1 << n
		r.want(':')
		// A null leaves the field as it is, as encoding/json leaves it: zero,
		// as the key is read once into a new event.
		if !r.null() {
			field(n)
		}
		if r.is('}') {
			return
		}
		r.want(',')
	}
}

// null consumes a null, after any white space, and reports whether it was there.
func (r *dataReader) null() bool {
	r.ws()
	if !r.bad && len(r.b)-r.i >= 4 && string(r.b[r.i:r.i+4]) == "null" {
		r.i += 4
		return true
	}
	return false
}

// empty reads an object without fields.
func (r *dataReader) empty() { r.fields(nil, nil) }

// key reads an object key without escapes.
func (r *dataReader) key() []byte {
	r.want('"')
	if r.bad {
		return nil
	}
	for j := r.i; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			k := r.b[r.i:j]
			r.i = j + 1
			return k
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			r.bad = true
			return nil
		}
	}
	r.bad = true
	return nil
}

// str reads a string. Its escapes are those of JSON but a surrogate
// (\uD800-\uDFFF, which encoding/json pairs or replaces), and its other bytes
// valid UTF-8 without control characters: anything else makes the reader bad.
func (r *dataReader) str() string {
	r.want('"')
	if r.bad {
		return ""
	}
	ascii := true
	for j := r.i; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			s := r.b[r.i:j]
			if !ascii && !utf8.Valid(s) {
				r.bad = true
				return ""
			}
			r.i = j + 1
			return string(s)
		case c == '\\':
			return r.unescape(j)
		case c < 0x20:
			r.bad = true
			return ""
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	r.bad = true
	return ""
}

// unescape reads the rest of a string whose first escape is at j. The
// string ends at the first quote no backslash escapes, and its unescaped
// form is never longer than its escaped bytes: it is built in one buffer of
// that size, the runs between escapes copied whole.
func (r *dataReader) unescape(j int) string {
	end := j
	for end < len(r.b) && r.b[end] != '"' {
		if r.b[end] == '\\' {
			end++
		}
		end++
	}
	if end >= len(r.b) {
		r.bad = true
		return ""
	}
	var out strings.Builder
	out.Grow(end - r.i)
	out.Write(r.b[r.i:j])
	for j < end {
		if c := r.b[j]; c != '\\' {
			k := j
			for k < end && r.b[k] != '\\' {
				if r.b[k] < 0x20 {
					r.bad = true
					return ""
				}
				k++
			}
			out.Write(r.b[j:k])
			j = k
			continue
		}
		switch e := r.b[j+1]; e {
		case '"', '\\', '/':
			out.WriteByte(e)
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			rn, ok := hex4(r.b[j+2 : end])
			if !ok || utf16.IsSurrogate(rn) {
				r.bad = true
				return ""
			}
			out.WriteRune(rn)
			j += 4
		default:
			r.bad = true
			return ""
		}
		j += 2
	}
	v := out.String()
	if !utf8.ValidString(v) {
		r.bad = true
		return ""
	}
	r.i = end + 1
	return v
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var v rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | rune(c)
	}
	return v, true
}

// int64 reads an integer written as encoding/json writes one: an optional
// minus and at most 18 digits without a leading zero.
func (r *dataReader) int64() int64 {
	r.ws()
	if r.bad {
		return 0
	}
	neg := r.i < len(r.b) && r.b[r.i] == '-'
	if neg {
		r.i++
	}
	start := r.i
	var v int64
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		v = v*10 + int64(r.b[r.i]-'0')
		r.i++
	}
	n := r.i - start
	if n == 0 || n > 18 || (n > 1 && r.b[start] == '0') {
		r.bad = true
		return 0
	}
	if r.i < len(r.b) {
		if c := r.b[r.i]; c == '.' || c == 'e' || c == 'E' {
			r.bad = true
			return 0
		}
	}
	if neg {
		return -v
	}
	return v
}

// int64Ptr reads an integer into a new variable.
func (r *dataReader) int64Ptr() *int64 {
	n := r.int64()
	return &n
}

func (r *dataReader) int() int {
	v := r.int64()
	if int64(int(v)) != v {
		r.bad = true
		return 0
	}
	return int(v)
}

func (r *dataReader) bool() bool {
	r.ws()
	if r.bad {
		return false
	}
	switch rest := r.b[r.i:]; {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		r.i += 4
		return true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		r.i += 5
		return false
	}
	r.bad = true
	return false
}

// array reads an array, calling elem once per element; an empty array
// gives a non-nil empty slice, as encoding/json does.
func array[T any](r *dataReader, elem func() T) []T {
	if r.bad {
		return nil
	}
	r.want('[')
	out := []T{}
	if r.is(']') {
		return out
	}
	for !r.bad {
		out = append(out, elem())
		if r.is(']') {
			return out
		}
		r.want(',')
	}
	return nil
}

func (r *dataReader) strings() []string { return array(r, r.str) }

var modelRefKeys = []string{"provider", "model_id", "custom_model", "simulated"}

func (r *dataReader) modelRef() (m ModelRef) {
	r.fields(modelRefKeys, func(k int) {
		switch k {
		case 0:
			m.Provider = r.str()
		case 1:
			m.ModelID = r.str()
		case 2:
			m.CustomModel = r.str()
		case 3:
			m.Simulated = r.bool()
		}
	})
	return m
}

var usageKeys = []string{"input_tokens", "output_tokens"}

func (r *dataReader) usage() (u Usage) {
	r.fields(usageKeys, func(k int) {
		switch k {
		case 0:
			u.InputTokens = r.int()
		case 1:
			u.OutputTokens = r.int()
		}
	})
	return u
}

var citationKeys = []string{"url", "title", "snippet"}

func (r *dataReader) citation() (c Citation) {
	r.fields(citationKeys, func(k int) {
		switch k {
		case 0:
			c.URL = r.str()
		case 1:
			c.Title = r.str()
		case 2:
			c.Snippet = r.str()
		}
	})
	return c
}

var fileRefKeys = []string{"id", "name", "kind", "media_type", "bytes", "sha256", "pages", "text_chars", "native_for"}

func (r *dataReader) fileRef() (f FileRef) {
	r.fields(fileRefKeys, func(k int) {
		switch k {
		case 0:
			f.ID = r.str()
		case 1:
			f.Name = r.str()
		case 2:
			f.Kind = r.str()
		case 3:
			f.MediaType = r.str()
		case 4:
			f.Bytes = r.int64()
		case 5:
			f.SHA256 = r.str()
		case 6:
			f.Pages = r.int()
		case 7:
			f.TextChars = r.int()
		case 8:
			f.NativeFor = r.strings()
		}
	})
	return f
}

var querySubmittedKeys = []string{"request_id", "account_id", "key_fingerprint", "mode", "prompt", "models", "estimated_micros", "files"}

func (r *dataReader) querySubmitted() (e QuerySubmitted) {
	r.fields(querySubmittedKeys, func(k int) {
		switch k {
		case 0:
			e.RequestID = r.str()
		case 1:
			e.AccountID = r.str()
		case 2:
			e.KeyFingerprint = r.str()
		case 3:
			e.Mode = r.str()
		case 4:
			e.Prompt = r.str()
		case 5:
			e.Models = array(r, r.modelRef)
		case 6:
			e.EstimatedMicros = r.int64()
		case 7:
			e.Files = array(r, r.fileRef)
		}
	})
	return e
}

var modelAnsweredKeys = []string{"model", "answer", "citations", "usage", "latency_ms", "cost_micros", "usage_source"}

func (r *dataReader) modelAnswered() (e ModelAnswered) {
	r.fields(modelAnsweredKeys, func(k int) {
		switch k {
		case 0:
			e.Model = r.modelRef()
		case 1:
			e.Answer = r.str()
		case 2:
			e.Citations = array(r, r.citation)
		case 3:
			e.Usage = r.usage()
		case 4:
			e.LatencyMS = r.int64()
		case 5:
			e.CostMicros = r.int64()
		case 6:
			e.UsageSource = r.str()
		}
	})
	return e
}

var modelFailedKeys = []string{"model", "class", "message", "upstream_status", "latency_ms", "usage", "usage_source"}

func (r *dataReader) modelFailed() (e ModelFailed) {
	r.fields(modelFailedKeys, func(k int) {
		switch k {
		case 0:
			e.Model = r.modelRef()
		case 1:
			e.Class = r.str()
		case 2:
			e.Message = r.str()
		case 3:
			e.UpstreamStatus = r.int()
		case 4:
			e.LatencyMS = r.int64()
		case 5:
			u := r.usage()
			e.Usage = &u
		case 6:
			e.UsageSource = r.str()
		}
	})
	return e
}

var modelRetriedKeys = []string{"model", "attempt", "class", "message", "upstream_status", "retry_in_ms"}

func (r *dataReader) modelRetried() (e ModelRetried) {
	r.fields(modelRetriedKeys, func(k int) {
		switch k {
		case 0:
			e.Model = r.modelRef()
		case 1:
			e.Attempt = r.int()
		case 2:
			e.Class = r.str()
		case 3:
			e.Message = r.str()
		case 4:
			e.UpstreamStatus = r.int()
		case 5:
			e.RetryInMS = r.int64()
		}
	})
	return e
}

var progressKeys = []string{"stage", "progress_percent", "message"}

func (r *dataReader) progressReported() (e ProgressReported) {
	r.fields(progressKeys, func(k int) {
		switch k {
		case 0:
			e.Stage = r.str()
		case 1:
			e.Percent = r.int()
		case 2:
			e.Message = r.str()
		}
	})
	return e
}

var positionKeys = []string{"model", "position"}

func (r *dataReader) position() (p Position) {
	r.fields(positionKeys, func(k int) {
		switch k {
		case 0:
			p.Model = r.str()
		case 1:
			p.Position = r.str()
		}
	})
	return p
}

var conflictKeys = []string{"topic", "positions", "resolution"}

func (r *dataReader) conflict() (c Conflict) {
	r.fields(conflictKeys, func(k int) {
		switch k {
		case 0:
			c.Topic = r.str()
		case 1:
			c.Positions = array(r, r.position)
		case 2:
			c.Resolution = r.str()
		}
	})
	return c
}

var answerKeys = []string{"text", "conflicts"}

func (r *dataReader) answer() (a Answer) {
	r.fields(answerKeys, func(k int) {
		switch k {
		case 0:
			a.Text = r.str()
		case 1:
			a.Conflicts = array(r, r.conflict)
		}
	})
	return a
}

var synthesizedKeys = []string{"model", "answer", "usage", "latency_ms", "cost_micros", "usage_source"}

func (r *dataReader) synthesized() (e Synthesized) {
	r.fields(synthesizedKeys, func(k int) {
		switch k {
		case 0:
			e.Model = r.modelRef()
		case 1:
			e.Answer = r.answer()
		case 2:
			e.Usage = r.usage()
		case 3:
			e.LatencyMS = r.int64()
		case 4:
			e.CostMicros = r.int64()
		case 5:
			e.UsageSource = r.str()
		}
	})
	return e
}

var creditsSettledKeys = []string{"charged_micros", "failed"}

func (r *dataReader) creditsSettled() (e CreditsSettled) {
	r.fields(creditsSettledKeys, func(k int) {
		switch k {
		case 0:
			e.ChargedMicros = r.int64()
		case 1:
			f := r.queryFailed()
			e.Failed = &Failure{Code: f.Code, Message: f.Message}
		}
	})
	return e
}

var attemptFailedKeys = []string{"attempt", "message", "retry_in_ms"}

func (r *dataReader) attemptFailed() (e AttemptFailed) {
	r.fields(attemptFailedKeys, func(k int) {
		switch k {
		case 0:
			e.Attempt = r.int()
		case 1:
			e.Message = r.str()
		case 2:
			e.RetryInMS = r.int64()
		}
	})
	return e
}

var queryFailedKeys = []string{"code", "message", "charged_micros"}

func (r *dataReader) queryFailed() (e QueryFailed) {
	r.fields(queryFailedKeys, func(k int) {
		switch k {
		case 0:
			e.Code = r.str()
		case 1:
			e.Message = r.str()
		case 2:
			e.ChargedMicros = r.int64Ptr()
		}
	})
	return e
}

var queryCompletedKeys = []string{"charged_micros"}

func (r *dataReader) queryCompleted() (e QueryCompleted) {
	r.fields(queryCompletedKeys, func(int) { e.ChargedMicros = r.int64Ptr() })
	return e
}

var creditsReservedKeys = []string{"request_id", "amount_micros", "prev_hash"}

func (r *dataReader) creditsReserved() (e CreditsReserved) {
	r.fields(creditsReservedKeys, func(k int) {
		switch k {
		case 0:
			e.RequestID = r.str()
		case 1:
			e.AmountMicros = r.int64()
		case 2:
			e.PrevHash = r.str()
		}
	})
	return e
}

var settledCallKeys = []string{"call_id", "step", "model", "input_tokens", "output_tokens", "input_per_million", "output_per_million", "cost_micros", "amount_micros", "written_off_micros"}

func (r *dataReader) settledCall() (c SettledCall) {
	r.fields(settledCallKeys, func(k int) {
		switch k {
		case 0:
			c.CallID = r.str()
		case 1:
			c.Step = r.str()
		case 2:
			c.Model = r.modelRef()
		case 3:
			c.InputTokens = r.int()
		case 4:
			c.OutputTokens = r.int()
		case 5:
			c.InputPerMillion = r.int64()
		case 6:
			c.OutputPerMillion = r.int64()
		case 7:
			c.CostMicros = r.int64()
		case 8:
			c.AmountMicros = r.int64()
		case 9:
			c.WrittenOffMicros = r.int64()
		}
	})
	return c
}

var queryEndingKeys = []string{"status", "code", "message"}

func (r *dataReader) queryEnding() *QueryEnding {
	e := &QueryEnding{}
	r.fields(queryEndingKeys, func(k int) {
		switch k {
		case 0:
			e.Status = r.str()
		case 1:
			e.Code = r.str()
		case 2:
			e.Message = r.str()
		}
	})
	return e
}

var cancellationKeys = []string{"percent", "basis_micros", "minimum_micros", "cost_micros", "amount_micros", "written_off_micros"}

func (r *dataReader) cancellation() *CancellationCharge {
	c := &CancellationCharge{}
	r.fields(cancellationKeys, func(k int) {
		switch k {
		case 0:
			c.Percent = r.int()
		case 1:
			c.BasisMicros = r.int64()
		case 2:
			c.MinimumMicros = r.int64()
		case 3:
			c.CostMicros = r.int64()
		case 4:
			c.AmountMicros = r.int64()
		case 5:
			c.WrittenOffMicros = r.int64()
		}
	})
	return c
}

var chargesSettledKeys = []string{"request_id", "calls", "charged_micros", "released_micros", "reason", "ending", "cancellation", "prev_hash"}

func (r *dataReader) chargesSettled() (e ChargesSettled) {
	r.fields(chargesSettledKeys, func(k int) {
		switch k {
		case 0:
			e.RequestID = r.str()
		case 1:
			e.Calls = array(r, r.settledCall)
		case 2:
			e.ChargedMicros = r.int64()
		case 3:
			e.ReleasedMicros = r.int64()
		case 4:
			e.Reason = r.str()
		case 5:
			e.Ending = r.queryEnding()
		case 6:
			e.Cancellation = r.cancellation()
		case 7:
			e.PrevHash = r.str()
		}
	})
	return e
}

var chargesReversedKeys = []string{"request_id", "calls", "refunded_micros", "reason", "prev_hash"}

func (r *dataReader) chargesReversed() (e ChargesReversed) {
	r.fields(chargesReversedKeys, func(k int) {
		switch k {
		case 0:
			e.RequestID = r.str()
		case 1:
			e.Calls = r.strings()
		case 2:
			e.RefundedMicros = r.int64()
		case 3:
			e.Reason = r.str()
		case 4:
			e.PrevHash = r.str()
		}
	})
	return e
}
