package extract

import (
	"reflect"
	"strings"
	"testing"
)

func TestFrontMatter(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		fields map[string]string
		body   string
	}{
		{"title and source", "---\ntitle: Rivers\nsource: corpus://sample/rivers.txt\n---\nBody.\n",
			map[string]string{"title": "Rivers", "source": "corpus://sample/rivers.txt"}, "Body.\n"},
		{"quotes, case, CRLF, BOM", "\uFEFF---\r\nTitle: \"A: B\"\r\nURL: 'https://example.org/x'\r\n---\r\nBody",
			map[string]string{"title": "A: B", "url": "https://example.org/x"}, "Body"},
		{"nested values and comments skipped", "---\ntags:\n  - a\n# note\ntitle: T\n...\nrest",
			map[string]string{"tags": "", "title": "T"}, "rest"},
		{"first of a repeated key wins", "---\ntitle: one\ntitle: other\n---\n",
			map[string]string{"title": "one"}, ""},
		{"never closed", "---\ntitle: T\nno end", nil, "---\ntitle: T\nno end"},
		{"not at the start", "text\n---\ntitle: T\n---\n", nil, "text\n---\ntitle: T\n---\n"},
		{"a rule alone", "---", nil, "---"},
	}
	for _, tt := range tests {
		fields, body := frontMatter(tt.text)
		if !reflect.DeepEqual(fields, tt.fields) || body != tt.body {
			t.Errorf("%s: frontMatter = %q, %q; want %q, %q", tt.name, fields, body, tt.fields, tt.body)
		}
	}
}

func TestExtractMarkdown(t *testing.T) {
	doc, err := Markdown([]byte(`---
source: https://example.org/notes
---
Intro line one
continues here.

# The **real** title #

- first [item](https://example.org/a)
* second ![chart](chart.png)
> quoted ` + "`code`" + `

***
## Sub heading
` + "```" + `
fenced
# not a heading
` + "```" + `
1. numbered stays
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Document{
		Title: "The real title",
		URL:   "https://example.org/notes",
		Paragraphs: []string{
			"Intro line one continues here.",
			"The real title",
			"first item second chart quoted code",
			"Sub heading",
			"fenced # not a heading",
			"1. numbered stays",
		},
	}
	if !reflect.DeepEqual(doc, want) {
		t.Errorf("Markdown =\n%#v\nwant\n%#v", doc, want)
	}

	doc, _ = Markdown([]byte("## Only a sub heading\n\ntext"))
	if doc.Title != "" {
		t.Errorf("title %q from a level-two heading, want none (the file name stands in)", doc.Title)
	}
}

func TestExtractHTML(t *testing.T) {
	doc, err := HTML([]byte(`<!DOCTYPE html><html><head>
<title> Kiln
 guide </title>
<link rel="stylesheet" href="x.css"><link rel="canonical" href="https://example.org/kiln">
<style>p { color: red }</style><script>var hidden = "script text";</script>
</head><body>
<h1>Firing &amp; glazing</h1>
<p>Load the kiln <b>slowly</b>,<br>then wait.</p>
<div>Outer <div>inner</div> tail</div>
<ul><li>one</li><li>two</li></ul>
<noscript>enable scripts</noscript><template><p>template text</p></template>
<svg><text>svg text</text></svg>
<p>Last &lt;word&gt;</p>
</body></html>`))
	if err != nil {
		t.Fatal(err)
	}
	want := Document{
		Title:      "Kiln guide",
		URL:        "https://example.org/kiln",
		Paragraphs: []string{"Firing & glazing", "Load the kiln slowly,", "then wait.", "Outer", "inner", "tail", "one", "two", "Last <word>"},
	}
	if !reflect.DeepEqual(doc, want) {
		t.Errorf("HTML =\n%#v\nwant\n%#v", doc, want)
	}

	doc, _ = HTML([]byte(`<link rel=canonical href="javascript:alert(1)"><p>x</p>`))
	if doc.URL != "" {
		t.Errorf("URL %q from a javascript: canonical link, want none", doc.URL)
	}

	// The parser refuses a page nested deeper than 512 elements; the page is
	// still read, by the same rules.
	deep := `<html><head><title>Deep</title><link href="https://example.org/deep" rel="canonical">` +
		`<script>var hidden = "<p>script text</p>";</script></head><body><p>top</p>` +
		strings.Repeat("<div>", 100000) + "bottom<svg><text>svg text</text></svg>" + strings.Repeat("</div>", 100000)
	doc, err = HTML([]byte(deep))
	want = Document{Title: "Deep", URL: "https://example.org/deep", Paragraphs: []string{"top", "bottom"}}
	if err != nil || !reflect.DeepEqual(doc, want) {
		t.Errorf("deep page: %#v, %v; want %#v", doc, err, want)
	}
}

func TestExtractChoosesByExtension(t *testing.T) {
	for name, want := range map[string]bool{
		"a.txt": true, "a.md": true, "a.MARKDOWN": true, "a.Html": true, "a.htm": true, "a.pdf": true,
		"a.docx": false, "a.png": false, "README": false,
	} {
		if _, ok, _ := File(name, []byte("text")); ok != want {
			t.Errorf("File(%s) ok = %v, want %v", name, ok, want)
		}
	}
}
