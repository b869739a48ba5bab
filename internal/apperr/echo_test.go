package apperr

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzEcho: whatever a client sends, its echo is valid UTF-8, holds nothing
// that does not print (every such character escaped), and is bounded by
// its limit (each kept character escaped at most to \U0010ffff).
func FuzzEcho(f *testing.F) {
	f.Add("evil\n\x1b[31mred", 64)
	f.Add("INJ3\u202egnp.py", 8)
	f.Add("\xff\xfe caf\xc3", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n = max(0, n%300)
		out := Echo(s, n)
		if !utf8.ValidString(out) {
			t.Fatalf("Echo(%q, %d) = %q is not UTF-8", s, n, out)
		}
		if strings.ContainsFunc(out, func(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }) {
			t.Fatalf("Echo(%q, %d) = %q holds what does not print", s, n, out)
		}
		if len(out) > 10*(n+len("…")) {
			t.Fatalf("Echo(%q, %d) is %d bytes", s, n, len(out))
		}
	})
}
