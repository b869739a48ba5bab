package events

import "testing"

// TestUnprintableIn: a name shown to people (an account's, a key's, a
// file's) holds no character that makes it display as something else:
// control characters (C0, DEL, C1 such as U+009B, the 8-bit escape that
// starts terminal sequences), line and paragraph separators, bidirectional
// controls (INJ3\u202egnp.py displays as INJ3yp.png), and invisible format
// characters; a lone zero-width joiner between two characters (emoji
// sequences, some scripts) is text.
func TestUnprintableIn(t *testing.T) {
	for _, name := range []string{"INJ3\u202egnp.py", "a\u009bb.py", "a\u2028b.py", "a\u2029b", "a\u200b\u200bb.py", "\u200ba.py",
		"a\u2066b\u2069.py", "a\u200eb", "\ufeffa.py", "a\u00adb", "a\nb", "a\x1b[31mb", "a\x7f", "a\u200d\u200db", "\u200da", "a\u200d"} {
		if _, bad := UnprintableIn(name); !bad {
			t.Errorf("%q was taken as printable", name)
		}
	}
	for _, name := range []string{"report.py", "résumé.pdf", "日本語.txt", "👨\u200d👩\u200d👧.png", "a b-c_d (1).py", ""} {
		if r, bad := UnprintableIn(name); bad {
			t.Errorf("%q was refused for %U", name, r)
		}
	}
}
