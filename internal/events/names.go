package events

import "unicode"

// UnprintableIn returns the first character of name that would make a
// name shown to people (an account's, a key's, a file's) display as
// something other than what it is, and true; false when there is none.
// Those are the control characters (C0, DEL, and C1 such as U+009B, the
// 8-bit escape that starts terminal sequences), the line and paragraph
// separators U+2028 and U+2029, and the invisible format characters
// (bidirectional overrides, embeddings, isolates and marks, zero-width
// spaces, the byte-order mark, soft hyphens), except a zero-width joiner
// or non-joiner alone between two other characters, which emoji sequences
// and some scripts need.
func UnprintableIn(name string) (rune, bool) {
	runes := []rune(name)
	for i, r := range runes {
		switch {
		case unicode.Is(unicode.Cc, r), r == '\u2028', r == '\u2029':
			return r, true
		case r == '\u200c' || r == '\u200d':
			if i == 0 || i == len(runes)-1 || unicode.Is(unicode.Cf, runes[i-1]) || unicode.Is(unicode.Cf, runes[i+1]) {
				return r, true
			}
		case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Bidi_Control, r):
			return r, true
		}
	}
	return 0, false
}
