package extract

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
)

func FuzzFrontMatter(f *testing.F) {
	for _, s := range []string{
		"---\ntitle: Rivers\nsource: corpus://sample/rivers.txt\n---\nBody.\n",
		"\uFEFF---\r\nTitle: \"A: B\"\r\nurl: 'x'\r\n...\r\n",
		"---\ntags:\n  - a\n# c\n---",
		"---\ntitle: never closed",
		"---", "", "text\n---\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		fields, body := frontMatter(text)
		if !strings.HasSuffix(text, body) {
			t.Fatalf("body %q is not the end of the text", body)
		}
		if fields == nil {
			if body != strings.TrimPrefix(text, "\uFEFF") {
				t.Fatalf("no front matter, but body %q is not the text (less a byte order mark)", body)
			}
			return
		}
		if len(body) >= len(text) {
			t.Fatal("front matter read, but nothing taken from the text")
		}
		for k, v := range fields {
			if k == "" || k != strings.ToLower(k) || strings.ContainsAny(k+v, "\n") {
				t.Fatalf("field %q: %q", k, v)
			}
		}
		doc := fromFrontMatter(fields)
		if strings.ContainsAny(doc.Title+doc.URL, "\n\r\t") {
			t.Fatalf("title %q or URL %q not on one line", doc.Title, doc.URL)
		}
	})
}

// checkParagraphs fails unless paragraphs are trimmed, one-line, non-empty
// and valid UTF-8 wherever the input was.
func checkParagraphs(t *testing.T, doc Document, validInput bool) {
	t.Helper()
	for _, p := range append([]string{doc.Title}, doc.Paragraphs...) {
		if p != OneLine(p) {
			t.Fatalf("text %q not folded onto one line", p)
		}
		if validInput && !utf8.ValidString(p) {
			t.Fatalf("invalid UTF-8 in %q", p)
		}
	}
	for _, p := range doc.Paragraphs {
		if p == "" {
			t.Fatal("empty paragraph")
		}
	}
}

func FuzzExtractHTML(f *testing.F) {
	for _, s := range []string{
		`<!DOCTYPE html><html><head><title>T</title><link rel="canonical" href="https://example.org/"><script>var s = "<p>x</p>";</script></head><body><h1>H</h1><p>a <b>b</b><br>c</p></body></html>`,
		`<p>unclosed <div>nested <svg><text>svg</text></svg> &amp; &#x27; &bogus;`,
		`<title>only a title`,
		`<style>p{}</style><noscript><p>n</p></noscript><template><p>t</p></template>text`,
		strings.Repeat("<div>", 600) + "deep" + strings.Repeat("</div>", 600),
		"\x00<p>\xff</p>",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := HTML(data)
		if err != nil {
			t.Fatalf("HTML: %v", err)
		}
		checkParagraphs(t, doc, utf8.Valid(data))
		if doc.URL != "" && !IsWebURL(doc.URL) {
			t.Fatalf("URL %q", doc.URL)
		}
		// The tokens-only reading keeps the same promises.
		checkParagraphs(t, htmlTokenText(data), utf8.Valid(data))
	})
}

func FuzzExtractMarkdown(f *testing.F) {
	for _, s := range []string{
		"---\ntitle: T\nsource: corpus://sample/a.md\n---\n\n# Heading #\n\nText with [a link](https://x) and **bold**.\n\n- item\n> quote\n",
		"```\n# not a heading\n```\n## Sub\n***\n1. one\n",
		"#\n# \n#no-space\n######## too deep\n",
		"\r\n\r\n[unclosed](\n![img](x.png)",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Markdown(data)
		if err != nil {
			t.Fatalf("Markdown: %v", err)
		}
		checkParagraphs(t, doc, utf8.Valid(data))
	})
}

func FuzzExtractPDF(f *testing.F) {
	f.Add(extracttest.MinimalPDF("Report", "The harbour crane lifts heavy containers."))
	f.Add(extracttest.MinimalPDF("", "(", ")", `\`))
	f.Add(extracttest.BuildPDF(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
		"<< /Type /Page /Parent 3 0 R /Contents [4 0 R 4 0 R] /Resources << /Font << /F1 5 0 R >> >> >>",
		extracttest.PDFStream("BT /F1 12 Tf <48656C6C6F> Tj [(a) -20 (b)] TJ ET\n"),
		"<< /Type /Font /Subtype /Type0 /Encoding /Identity-H /ToUnicode 6 0 R >>",
		extracttest.PDFStream("begincmap 1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfchar <48> <0041> endbfchar endcmap\n"),
	))
	f.Add([]byte("%PDF-1.4\n%%EOF\n"))
	f.Add([]byte("%PDF-1.7\nstartxref\n9\n%%EOF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		done := make(chan struct{})
		var doc Document
		var err error
		go func() {
			defer close(done)
			doc, err = readPDF(data)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("readPDF did not come back")
		}
		if err == nil {
			checkParagraphs(t, doc, false)
		}
	})
}

// FuzzExtractDOCX feeds DOCX archives: it must come back with an error or
// valid UTF-8 paragraphs, within its bounds.
func FuzzExtractDOCX(f *testing.F) {
	f.Add(extracttest.DOCX("A title", "The ferry leaves at seven."))
	f.Add(extracttest.Zip(map[string]string{"word/document.xml": "<w:p><w:t>x</w:t>"}, "word/document.xml"))
	f.Add([]byte("PK\x03\x04"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := DOCX(data)
		if err != nil {
			return
		}
		for _, p := range doc.Paragraphs {
			if p == "" || p != OneLine(p) {
				t.Fatalf("paragraph %q is empty or not on one line", p)
			}
		}
	})
}

// FuzzExtractDOC feeds compound files: it must come back with an error or
// valid UTF-8 paragraphs, never panic.
func FuzzExtractDOC(f *testing.F) {
	f.Add(extracttest.DOC("Heading", "The ferry leaves at seven."))
	f.Add(extracttest.CompoundFile(map[string][]byte{"WordDocument": make([]byte, 4096)}, "WordDocument"))
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := DOC(data)
		if err != nil {
			return
		}
		for _, p := range doc.Paragraphs {
			if !utf8.ValidString(p) || p == "" {
				t.Fatalf("paragraph %q is empty or not UTF-8", p)
			}
		}
	})
}
