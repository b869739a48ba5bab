package search

import (
	"reflect"
	"strings"
	"testing"
)

func TestPassages(t *testing.T) {
	sentence := "The kiln must cool slowly overnight. " // 37 characters
	long := strings.TrimSpace(strings.Repeat(sentence, 40))
	tests := []struct {
		name  string
		paras []string
		want  []string
	}{
		{"short paragraphs join the next one",
			[]string{"Heading", "A short remark.", strings.Repeat("word ", 30)},
			[]string{"Heading\nA short remark.\n" + strings.TrimSpace(strings.Repeat("word ", 30))}},
		{"a short last paragraph joins the one before",
			[]string{strings.Repeat("x", 200), "tail"},
			[]string{strings.Repeat("x", 200) + "\ntail"}},
		{"whitespace folded, empty paragraphs dropped",
			[]string{"  ", "a\n\tb   c"},
			[]string{"a b c"}},
	}
	for _, tt := range tests {
		if got := passages(tt.paras); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: passages = %q, want %q", tt.name, got, tt.want)
		}
	}

	got := passages([]string{long})
	if len(got) < 2 {
		t.Fatalf("a paragraph of %d characters gave %d passages", len(long), len(got))
	}
	for _, p := range got {
		if length(p) > maxPassage || !strings.HasSuffix(p, ".") {
			t.Errorf("passage of %d characters not cut at a sentence end: %q", length(p), p)
		}
	}
	if strings.Join(got, " ") != long {
		t.Error("splitting lost or reordered words")
	}

	// No sentence ends, no spaces: cut anyway, within the bound.
	for _, p := range passages([]string{strings.Repeat("é", 1500)}) {
		if n := length(p); n > maxPassage || n == 0 {
			t.Errorf("passage of %d characters", n)
		}
	}
}

func TestClip(t *testing.T) {
	if got := clip("short text", 20); got != "short text" {
		t.Errorf("clip kept %q", got)
	}
	if got := clip("alpha beta gamma delta", 12); got != "alpha beta…" {
		t.Errorf("clip = %q, want a cut at a word boundary", got)
	}
	if got := clip(strings.Repeat("é", 30), 10); length(got) != 10 {
		t.Errorf("clip = %q (%d characters), want 10", got, length(got))
	}
}
