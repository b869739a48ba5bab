// Package extract reads the text of documents: plain text, Markdown, HTML
// PDF, DOCX and DOC, each into a title, a URL and paragraphs in reading
// order. The offline search backend indexes what it reads and the file
// service extracts uploads. It trusts no input, but the PDF reader it wraps
// can still crash the process on one kind of crafted file (see PDF): File
// and the file service read PDFs, DOCX and DOC only in a child process of
// the same binary (see Runner), under CPU, memory and time limits.
package extract

import (
	"bytes"
	"context"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync/atomic"
)

// Document is the text of one file of a corpus.
type Document struct {
	Title      string   // empty: the file name stands in
	URL        string   // empty: the corpus:// address stands in
	Paragraphs []string // in reading order
	// Skipped counts the pages left out because they are over the
	// reader's bounds (a PDF page's content over maxPDFStream, say).
	Skipped int
}

// Formats read, by file extension.
var extractors = map[string]func([]byte) (Document, error){
	".txt":      Text,
	".md":       Markdown,
	".markdown": Markdown,
	".html":     HTML,
	".htm":      HTML,
	".pdf":      pdfInChild,
}

// isolated is the runner of File for the formats that can crash the
// process that reads them.
var isolated atomic.Pointer[Runner]

func init() { isolated.Store(&Runner{}) }

// UseRunner makes File read the formats it isolates through r rather than
// through a Runner of the defaults. A process that extracts files of its
// own (an offline corpus) and uploads sets it once, at start, so that one
// memory budget bounds all its children.
func UseRunner(r *Runner) { isolated.Store(r) }

// pdfInChild reads a PDF as PDF does, in a child process (see Runner): a
// file that overflows the reader's stack ends the child, not the caller.
// The files are the service's own, bounded by no account.
func pdfInChild(data []byte) (Document, error) {
	res, err := isolated.Load().Run(context.Background(), "", FormatPDF, bytes.NewReader(data), Caps{})
	if err != nil {
		return Document{}, err
	}
	if len(res.Paragraphs) == 0 {
		return Document{}, errNoPDFText
	}
	return res.Document, nil
}

// Reads reports whether File reads the file called name: whether its
// extension is one of a format this package reads.
func Reads(name string) bool {
	_, ok := extractors[strings.ToLower(path.Ext(name))]
	return ok
}

// OneLine folds runs of whitespace in s into single spaces.
func OneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// IsWebURL reports whether s is an absolute http or https URL: a source
// shown to a user must never be a javascript: or data: link.
func IsWebURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// File returns the text of the file called name, chosen by its extension
// (a PDF read in a child process, see Runner),
// or ok false when its format is not one this package reads; err is the
// reader's failure on a file of a format it reads.
func File(name string, data []byte) (doc Document, ok bool, err error) {
	fn, ok := extractors[strings.ToLower(path.Ext(name))]
	if !ok {
		return Document{}, false, nil
	}
	doc, err = fn(data)
	return doc, true, err
}

// frontMatter splits text into its front matter, a block at the very start
// between lines of "---" (the closing line may also be "..."), and the rest.
// It reads the block's top-level "key: value" lines only, with keys in lower
// case and a value's surrounding quotes removed. Text without such a block
// is all body, and fields is nil.
func frontMatter(text string) (fields map[string]string, body string) {
	text = strings.TrimPrefix(text, "\uFEFF")
	first, rest, ok := strings.Cut(text, "\n")
	if !ok || strings.TrimRight(first, " \t\r") != "---" {
		return nil, text
	}
	fields = map[string]string{}
	for rest != "" {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		line = strings.TrimRight(line, " \t\r")
		if line == "---" || line == "..." {
			return fields, rest
		}
		if line == "" || line[0] == ' ' || line[0] == '\t' || line[0] == '#' {
			continue // nested values and comments
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		key = strings.ToLower(strings.TrimSpace(key))
		if key == "" || fields[key] != "" {
			continue
		}
		fields[key] = unquote(strings.TrimSpace(value))
	}
	return nil, text // never closed: not front matter
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

// fromFrontMatter fills a document's title and URL from its front matter:
// title, and source or else url.
func fromFrontMatter(fields map[string]string) Document {
	doc := Document{Title: OneLine(fields["title"]), URL: OneLine(fields["source"])}
	if doc.URL == "" {
		doc.URL = OneLine(fields["url"])
	}
	return doc
}

// Text reads plain text: optional front matter, then paragraphs
// separated by blank lines.
func Text(data []byte) (Document, error) {
	fields, body := frontMatter(string(data))
	doc := fromFrontMatter(fields)
	doc.Paragraphs = blankLineParagraphs(body)
	return doc, nil
}

func blankLineParagraphs(text string) []string {
	var paras []string
	var cur []string
	flush := func() {
		if p := OneLine(strings.Join(cur, " ")); p != "" {
			paras = append(paras, p)
		}
		cur = cur[:0]
	}
	for line := range strings.Lines(text) {
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return paras
}

var (
	mdHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	mdRule    = regexp.MustCompile(`^ {0,3}([-*_])(?:[ \t]*[-*_]){2,}[ \t]*$`)
	mdFence   = regexp.MustCompile("^ {0,3}(```|~~~)")
	mdBullet  = regexp.MustCompile(`^[ \t]*[-*+][ \t]+`)
	mdQuote   = regexp.MustCompile(`^ {0,3}(?:>[ \t]?)+`)
	mdLink    = regexp.MustCompile(`!?\[([^\]\n]*)\]\([^)\n]*\)`)
	mdMarks   = strings.NewReplacer("**", "", "__", "", "`", "")
)

// Markdown reads Markdown: optional front matter, then paragraphs
// separated by blank lines, with every heading a paragraph of its own. The
// title is the front matter's, else the first level-one heading's. Markup
// that is not text is dropped: heading markers, bullets, quote marks,
// emphasis, code marks, link targets. Numbered list markers stay: a line may
// as well start with a number that is text.
func Markdown(data []byte) (Document, error) {
	fields, body := frontMatter(string(data))
	doc := fromFrontMatter(fields)
	var heading string
	var cur []string
	flush := func() {
		if p := OneLine(strings.Join(cur, " ")); p != "" {
			doc.Paragraphs = append(doc.Paragraphs, p)
		}
		cur = cur[:0]
	}
	inFence := false
	for line := range strings.Lines(body) {
		line = strings.TrimRight(line, "\r\n")
		if mdFence.MatchString(line) {
			flush()
			inFence = !inFence
			continue
		}
		if inFence {
			cur = append(cur, line)
			continue
		}
		if strings.TrimSpace(line) == "" || mdRule.MatchString(line) {
			flush()
			continue
		}
		if m := mdHeading.FindStringSubmatch(line); m != nil {
			flush()
			text := inlineMarkdown(m[2])
			if heading == "" && len(m[1]) == 1 {
				heading = OneLine(text)
			}
			cur = append(cur, text)
			flush()
			continue
		}
		line = mdQuote.ReplaceAllString(line, "")
		line = mdBullet.ReplaceAllString(line, "")
		cur = append(cur, inlineMarkdown(line))
	}
	flush()
	if doc.Title == "" {
		doc.Title = heading
	}
	return doc, nil
}

func inlineMarkdown(s string) string {
	return mdMarks.Replace(mdLink.ReplaceAllString(s, "$1"))
}
