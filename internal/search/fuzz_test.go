package search

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// checkWebResults fails unless results keep the promises every web parser
// makes, whatever the engine sent: at most limit, each with an http or https
// URL of its own, a title, and a snippet on one line within the bound.
func checkWebResults(t *testing.T, results []Result, limit int) {
	t.Helper()
	if results == nil {
		t.Fatal("nil results without an error")
	}
	if len(results) > max(limit, 0) {
		t.Fatalf("%d results for limit %d", len(results), limit)
	}
	seen := map[string]bool{}
	for _, r := range results {
		if !isWebURL(r.URL) || seen[r.URL] {
			t.Fatalf("URL %q not a fresh http or https URL", r.URL)
		}
		seen[r.URL] = true
		if r.Title == "" || strings.ContainsAny(r.Title, "\n\t") || strings.ContainsAny(r.Snippet, "\n\t") {
			t.Fatalf("title %q or snippet %q not on one line", r.Title, r.Snippet)
		}
		if length(r.Snippet) > maxSnippet || !utf8.ValidString(r.Snippet) || !utf8.ValidString(r.Title) {
			t.Fatalf("snippet of %d characters, or invalid UTF-8", length(r.Snippet))
		}
	}
}

// webSeeds are answers of each engine, real in shape, and near misses.
func webSeeds(f *testing.F, v vendor) {
	for _, pages := range [][]page{fakeWeb, nil, {{URL: "javascript:alert(1)", Title: "x"}, {URL: "https://example.org/é", Title: "", Snippet: "<strong>a</strong> &amp; b"}}} {
		body, err := json.Marshal(v.answer("everest", pages))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body, 3)
		f.Add(body, 0)
	}
	f.Add([]byte(v.problem(401, "key")), 5)
	f.Add([]byte(`{"type":"search","results":null,"web":null}`), 5)
	f.Add([]byte(`{"type":"search","results":[{"url":1}],"web":{"results":[{"url":"https://a.example","description":"\u0000\ud800"}]}}`), 5)
	f.Add([]byte(`[]`), 1)
	f.Add([]byte("\xff\xfe"), 1)
}

func FuzzParseSearXNG(f *testing.F) {
	webSeeds(f, vendors[0])
	f.Fuzz(func(t *testing.T, body []byte, limit int) {
		results, err := parseSearXNG(body, limit)
		if err == nil {
			checkWebResults(t, results, limit)
		}
	})
}

func FuzzParseBrave(f *testing.F) {
	webSeeds(f, vendors[1])
	f.Fuzz(func(t *testing.T, body []byte, limit int) {
		results, err := parseBrave(body, limit)
		if err != nil {
			return
		}
		checkWebResults(t, results, limit)
		for _, r := range results {
			if strings.Contains(r.Snippet, "<strong>") || strings.Contains(r.Title, "<strong>") {
				t.Fatalf("markup left in %+v", r)
			}
		}
	})
}

func FuzzParseTavily(f *testing.F) {
	webSeeds(f, vendors[2])
	f.Fuzz(func(t *testing.T, body []byte, limit int) {
		results, err := parseTavily(body, limit)
		if err == nil {
			checkWebResults(t, results, limit)
		}
	})
}

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
func checkParagraphs(t *testing.T, doc document, validInput bool) {
	t.Helper()
	for _, p := range append([]string{doc.Title}, doc.Paragraphs...) {
		if p != oneLine(p) {
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
		doc, err := extractHTML(data)
		if err != nil {
			t.Fatalf("extractHTML: %v", err)
		}
		checkParagraphs(t, doc, utf8.Valid(data))
		if doc.URL != "" && !isWebURL(doc.URL) {
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
		doc, err := extractMarkdown(data)
		if err != nil {
			t.Fatalf("extractMarkdown: %v", err)
		}
		checkParagraphs(t, doc, utf8.Valid(data))
	})
}

func FuzzPassages(f *testing.F) {
	f.Add("Heading\n\nA short remark.\n\n"+strings.Repeat("The kiln must cool slowly overnight. ", 40), "tail")
	f.Add(strings.Repeat("é", 1500), "")
	f.Add(strings.Repeat("word ", 300)+"end. "+strings.Repeat("x", 700), "a! b? c.")
	f.Add("broken \xff\xfe utf-8", "\xe2\x82")
	f.Fuzz(func(t *testing.T, a, b string) {
		paras := append(strings.Split(a, "\n\n"), b)
		got := passages(paras)
		for _, p := range got {
			if p == "" || length(p) > maxPassage || !utf8.ValidString(p) {
				t.Fatalf("passage of %d characters: %q", length(p), p)
			}
		}
		for i, p := range paras {
			paras[i] = strings.ToValidUTF8(p, "\uFFFD")
		}
		if want, have := strings.Fields(strings.Join(paras, " ")), strings.Fields(strings.Join(got, " ")); strings.Join(want, " ") != strings.Join(have, " ") {
			// A split inside a word is allowed only for words longer than a passage.
			if strings.Join(want, "") != strings.Join(have, "") {
				t.Fatalf("words lost or reordered:\n%q\n%q", want, have)
			}
		}
	})
}

func FuzzExtractPDF(f *testing.F) {
	f.Add(minimalPDF("Report", "The harbour crane lifts heavy containers."))
	f.Add(minimalPDF("", "(", ")", `\`))
	f.Add(buildPDF(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
		"<< /Type /Page /Parent 3 0 R /Contents [4 0 R 4 0 R] /Resources << /Font << /F1 5 0 R >> >> >>",
		pdfStream("BT /F1 12 Tf <48656C6C6F> Tj [(a) -20 (b)] TJ ET\n"),
		"<< /Type /Font /Subtype /Type0 /Encoding /Identity-H /ToUnicode 6 0 R >>",
		pdfStream("begincmap 1 begincodespacerange <00> <FF> endcodespacerange 1 beginbfchar <48> <0041> endbfchar endcmap\n"),
	))
	f.Add([]byte("%PDF-1.4\n%%EOF\n"))
	f.Add([]byte("%PDF-1.7\nstartxref\n9\n%%EOF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		done := make(chan struct{})
		var doc document
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
