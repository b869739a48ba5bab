package simulated

import (
	"fmt"
	"strings"

	"github.com/crosscheck/crosscheck/internal/providers"
)

// doc is one attached file the simulated model reads: its extracted text,
// whether it came in the prompt under its heading or with a native
// attachment; unseen, a file the prompt says it cannot see.
type doc struct {
	name, id, text string
	unseen         bool
}

// Markers of the files block the modes put before a call's text.
const (
	fileHeading    = "## File: "
	filesEndMarker = "## End of attached files\n\n"
)

// attached splits input into the files it carries (the extracted text under
// each heading, and the text of the native attachments) and the rest.
func attached(input string, atts []providers.Attachment) ([]doc, string) {
	block, rest, found := strings.Cut(input, filesEndMarker)
	if !found {
		return nil, input
	}
	var docs []doc
	ids := map[string]string{}
	for _, part := range strings.Split(block, fileHeading)[1:] {
		head, text, _ := strings.Cut(part, "\n")
		name, idPart, ok := strings.Cut(head, " (")
		if !ok {
			continue
		}
		id, how, _ := strings.Cut(idPart, ")")
		ids[name] = id
		switch {
		case strings.HasPrefix(how, ", as extracted text"):
			docs = append(docs, doc{name: name, id: id, text: text})
		case strings.HasPrefix(how, " is not visible to you"):
			docs = append(docs, doc{name: name, id: id, unseen: true})
		}
	}
	for _, a := range atts {
		if a.Text != "" {
			docs = append(docs, doc{name: a.Name, id: ids[a.Name], text: a.Text})
		}
	}
	return docs, rest
}

// fromFiles returns the sentences of docs that speak of question (sharing
// at least two of its words), at most three, each with its file.
func fromFiles(question string, docs []doc) []struct {
	doc      doc
	sentence string
} {
	var out []struct {
		doc      doc
		sentence string
	}
	for _, d := range docs {
		for _, line := range strings.FieldsFunc(d.text, func(r rune) bool { return r == '\n' || r == '\f' }) {
			for _, s := range strings.SplitAfter(line, ". ") {
				s = strings.TrimSpace(s)
				if s != "" && overlap(s, question) >= 2 && len(out) < 3 {
					out = append(out, struct {
						doc      doc
						sentence string
					}{d, s})
				}
			}
		}
	}
	return out
}

// fileLines are the answer lines a question's files call for, and one for
// each file the model was told it cannot see.
func fileLines(question string, docs []doc) string {
	var b strings.Builder
	for _, f := range fromFiles(question, docs) {
		fmt.Fprintf(&b, "- from %s: %s\n", f.doc.name, f.sentence)
	}
	for _, d := range docs {
		if d.unseen {
			fmt.Fprintf(&b, "- I cannot see %s, which is attached, so this answer does not use it\n", d.name)
		}
	}
	return b.String()
}

// attachmentBytes is what the attachments add to a call's input, in bytes
// of the usage's approximation: their text, and 258 tokens for each one's
// image (one tile of Gemini's rule).
func attachmentBytes(atts []providers.Attachment) int {
	n := 0
	for _, a := range atts {
		n += len(a.Text) + 258*4
	}
	return n
}
