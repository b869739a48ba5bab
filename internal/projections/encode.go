package projections

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/events"
)

// Encode returns the stored form of d: its JSON, byte for byte as
// json.Marshal writes it (TestEncodeIsMarshal, FuzzEncodeIsMarshal). A
// document without a justify or verify block, files, tool calls, errors or
// missing notes (a unify query's, whole) is written here field by field;
// any other goes through json.Marshal. Encoding took ~8 % of a rebuild's
// CPU, more than half of it walking the document by reflection
// (docs/BENCHMARKS.md).
func (d *QueryDoc) Encode() ([]byte, error) {
	if b, ok := d.appendJSON(make([]byte, 0, d.sizeHint())); ok {
		return b, nil
	}
	return json.Marshal(d)
}

// sizeHint is about the length of d's JSON, so that it is written without
// growing its buffer.
func (d *QueryDoc) sizeHint() int {
	n := 640
	if a := d.Result.Answer; a != nil {
		n += len(a.Text) + len(a.Text)/8 + 160*len(a.Conflicts)
	}
	for _, m := range d.Result.Models {
		n += 224 + len(m.ModelID) + len(m.Answer) + len(m.Answer)/8 + 96*len(m.Citations)
	}
	return n
}

// appendJSON appends d's JSON to b; ok is false when d has a part it does
// not write (then b is to be dropped).
func (d *QueryDoc) appendJSON(b []byte) (_ []byte, ok bool) {
	r := &d.Result
	if len(r.ToolCalls) > 0 || len(r.Files) > 0 || r.Justify != nil || r.Verify != nil || r.Error != nil || len(r.Missing) > 0 {
		return b, false
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, d.Seq, 10)
	b = append(b, `,"account_id":`...)
	b = appendString(b, d.AccountID)
	b = append(b, `,"key_fingerprint":`...)
	b = appendString(b, d.KeyFingerprint)
	b = append(b, `,"result":{"request_id":`...)
	b = appendString(b, r.RequestID)
	b = append(b, `,"object":`...)
	b = appendString(b, r.Object)
	b = append(b, `,"mode":`...)
	b = appendString(b, r.Mode)
	b = append(b, `,"status":`...)
	b = appendString(b, r.Status)
	b = append(b, `,"stage":`...)
	b = appendString(b, r.Stage)
	b = append(b, `,"progress_percent":`...)
	b = strconv.AppendInt(b, int64(r.ProgressPercent), 10)
	if a := r.Answer; a != nil {
		b = append(b, `,"answer":`...)
		b = appendAnswer(b, a)
	}
	b = append(b, `,"models":`...)
	if r.Models == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Models {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendModel(b, &r.Models[i]); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if s := r.Synthesis; s != nil {
		b = append(b, `,"synthesis":`...)
		b = appendModelRef(b, s.Provider, s.ModelID, s.CustomModel, s.Simulated)
		b = append(b, `,"usage":`...)
		b = appendUsage(b, s.Usage)
		b = appendUsageSource(b, s.UsageSource)
		b = append(b, `,"credits":`...)
		if b, ok = appendFloat(b, s.Credits); !ok {
			return b, false
		}
		b = append(b, `,"latency_ms":`...)
		b = strconv.AppendInt(b, s.LatencyMS, 10)
		b = append(b, '}')
	}
	b = append(b, `,"justify":null,"verify":null,"credits":{"estimated":`...)
	if b, ok = appendFloat(b, r.Credits.Estimated); !ok {
		return b, false
	}
	b = append(b, `,"charged":`...)
	if c := r.Credits.Charged; c == nil {
		b = append(b, "null"...)
	} else if b, ok = appendFloat(b, *c); !ok {
		return b, false
	}
	b = append(b, `},"created_at":`...)
	if b, ok = appendTime(b, r.CreatedAt); !ok {
		return b, false
	}
	if t := r.StartedAt; t != nil {
		b = append(b, `,"started_at":`...)
		if b, ok = appendTime(b, *t); !ok {
			return b, false
		}
	}
	if t := r.CompletedAt; t != nil {
		b = append(b, `,"completed_at":`...)
		if b, ok = appendTime(b, *t); !ok {
			return b, false
		}
	}
	return append(b, '}', '}'), true
}

// appendModel appends one model's result; ok is false when it has a part
// appendJSON does not write.
func appendModel(b []byte, m *ModelResult) (_ []byte, ok bool) {
	if m.Error != nil || len(m.Files) > 0 || len(m.ToolCalls) > 0 {
		return b, false
	}
	b = appendModelRef(b, m.Provider, m.ModelID, m.CustomModel, m.Simulated)
	b = append(b, `,"status":`...)
	b = appendString(b, m.Status)
	if m.Answer != "" {
		b = append(b, `,"answer":`...)
		b = appendString(b, m.Answer)
	}
	b = append(b, `,"citations":`...)
	if m.Citations == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range m.Citations {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCitation(b, c)
		}
		b = append(b, ']')
	}
	if m.Usage != nil {
		b = append(b, `,"usage":`...)
		b = appendUsage(b, *m.Usage)
	}
	b = appendUsageSource(b, m.UsageSource)
	b = append(b, `,"credits":`...)
	if b, ok = appendFloat(b, m.Credits); !ok {
		return b, false
	}
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendInt(b, m.LatencyMS, 10)
	return append(b, '}'), true
}

// appendModelRef opens the object of a model's result or of the synthesis
// with the fields both begin with: provider, model_id, custom_model (when
// set) and simulated.
func appendModelRef(b []byte, provider, modelID, customModel string, simulated bool) []byte {
	b = append(b, `{"provider":`...)
	b = appendString(b, provider)
	b = append(b, `,"model_id":`...)
	b = appendString(b, modelID)
	if customModel != "" {
		b = append(b, `,"custom_model":`...)
		b = appendString(b, customModel)
	}
	b = append(b, `,"simulated":`...)
	return strconv.AppendBool(b, simulated)
}

func appendAnswer(b []byte, a *events.Answer) []byte {
	b = append(b, `{"text":`...)
	b = appendString(b, a.Text)
	b = append(b, `,"conflicts":`...)
	if a.Conflicts == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i, c := range a.Conflicts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"topic":`...)
		b = appendString(b, c.Topic)
		b = append(b, `,"positions":`...)
		if c.Positions == nil {
			b = append(b, "null"...)
		} else {
			b = append(b, '[')
			for j, p := range c.Positions {
				if j > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"model":`...)
				b = appendString(b, p.Model)
				b = append(b, `,"position":`...)
				b = appendString(b, p.Position)
				b = append(b, '}')
			}
			b = append(b, ']')
		}
		b = append(b, `,"resolution":`...)
		b = appendString(b, c.Resolution)
		b = append(b, '}')
	}
	return append(b, ']', '}')
}

func appendCitation(b []byte, c events.Citation) []byte {
	b = append(b, `{"url":`...)
	b = appendString(b, c.URL)
	if c.Title != "" {
		b = append(b, `,"title":`...)
		b = appendString(b, c.Title)
	}
	if c.Snippet != "" {
		b = append(b, `,"snippet":`...)
		b = appendString(b, c.Snippet)
	}
	return append(b, '}')
}

// appendUsageSource appends the usage_source field when source is set.
func appendUsageSource(b []byte, source string) []byte {
	if source == "" {
		return b
	}
	b = append(b, `,"usage_source":`...)
	return appendString(b, source)
}

func appendUsage(b []byte, u events.Usage) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
	return append(b, '}')
}

// appendFloat appends f as json.Marshal writes a float64 (ES6 number
// formatting); ok is false for a value it refuses (NaN, ±Inf).
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-09 → e-9
		b = b[:n-1]
	}
	return b, true
}

// appendTime appends t as json.Marshal writes a time.Time (RFC 3339 with
// nanoseconds, quoted); ok is false for one it refuses (a year outside
// 0–9999).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	b, err := t.AppendText(append(b, '"'))
	if err != nil {
		return b, false
	}
	return append(b, '"'), true
}

// plainByte tells the ASCII bytes a JSON string holds as they are.
var plainByte = func() (t [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendString appends s as a JSON string escaped as json.Marshal escapes
// it: quotes, backslashes, control characters, <, > and & (HTML-safe), the
// line and paragraph separators, and each byte of invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plainByte[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
