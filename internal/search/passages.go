package search

import (
	"strings"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/extract"
)

const (
	// minPassage and maxPassage bound a passage, in characters: a shorter
	// paragraph (a heading, a one-line remark) joins the next one, and a
	// longer one is split, at a sentence end where there is one.
	minPassage = 120
	maxPassage = 600
)

// passages cuts a document's paragraphs into the passages the offline index
// holds: every passage at most maxPassage characters of valid UTF-8, short
// paragraphs joined to the one that follows while the two fit, the words and
// their order kept.
func passages(paragraphs []string) []string {
	var pieces []string
	for _, p := range paragraphs {
		if p = extract.OneLine(strings.ToValidUTF8(p, "\uFFFD")); p != "" {
			pieces = append(pieces, splitLong(p)...)
		}
	}
	var out []string
	pending := ""
	for _, p := range pieces {
		if pending != "" {
			if joined := pending + "\n" + p; length(joined) <= maxPassage {
				p = joined
			} else {
				out = append(out, pending)
			}
			pending = ""
		}
		if length(p) < minPassage {
			pending = p
			continue
		}
		out = append(out, p)
	}
	if pending != "" {
		if n := len(out); n > 0 && length(out[n-1])+1+length(pending) <= maxPassage {
			out[n-1] += "\n" + pending
		} else {
			out = append(out, pending)
		}
	}
	return out
}

// splitLong cuts p, a paragraph on one line, into pieces of at most
// maxPassage characters: after the last sentence end that leaves a piece of
// a fair size, else at the last space, else (one enormous word) anywhere.
func splitLong(p string) []string {
	var out []string
	for length(p) > maxPassage {
		w := runeOffset(p, maxPassage) // p[:w] is the longest piece allowed
		cut := sentenceEnd(p[:w+1])
		if length(p[:max(cut, 0)]) < maxPassage/4 {
			cut = strings.LastIndexByte(p[:w+1], ' ')
		}
		if cut <= 0 {
			cut = w
		}
		out = append(out, strings.TrimSpace(p[:cut]))
		p = strings.TrimSpace(p[cut:])
	}
	if p != "" {
		out = append(out, p)
	}
	return out
}

// sentenceEnd returns the offset just past the last sentence end in s, a
// full stop, question or exclamation mark followed by a space, or -1.
func sentenceEnd(s string) int {
	end := -1
	for _, mark := range []string{". ", "? ", "! "} {
		if i := strings.LastIndex(s, mark); i >= 0 && i+1 > end {
			end = i + 1
		}
	}
	return end
}

func length(s string) int { return utf8.RuneCountInString(s) }
