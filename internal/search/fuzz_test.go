package search

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/extract"
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
		if !extract.IsWebURL(r.URL) || seen[r.URL] {
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
