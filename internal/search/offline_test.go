package search

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/extract"
	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
)

// sampleFacts are the facts the sample corpus states, each with the numerals
// that state it.
var sampleFacts = []struct {
	sentence string
	numbers  []string
}{
	{"Water boils at 100 degrees Celsius at sea level.", []string{"100"}},
	{"Mount Everest is 8,849 metres tall.", []string{"8,849"}},
	{"The Moon is on average 384,400 kilometres from Earth.", []string{"384,400"}},
	{"An adult human skeleton has 206 bones.", []string{"206"}},
	{"The Eiffel Tower was completed in 1889.", []string{"1889"}},
	{"The first crewed Moon landing took place in 1969.", []string{"1969"}},
	{"Sound travels at about 343 metres per second in dry air at 20 degrees Celsius.", []string{"343", "20"}},
	{"The Berlin Wall fell in 1989.", []string{"1989"}},
	{"Marie Curie was awarded the Nobel Prize in Chemistry in 1911.", []string{"1911"}},
	{"A marathon is 42.195 kilometres long.", []string{"42.195"}},
	{"Gold has the atomic number 79.", []string{"79"}},
	{"Earth orbits the Sun at an average distance of about 149.6 million kilometres.", []string{"149.6"}},
	{"Light travels at 299,792 kilometres per second in a vacuum.", []string{"299,792"}},
	{"The Danube flows through 10 countries.", []string{"10"}},
}

func openSample(t testing.TB) *Offline {
	t.Helper()
	o, err := OpenSample()
	if err != nil {
		t.Fatalf("OpenSample: %v", err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func TestSampleFindsEachFactFirst(t *testing.T) {
	o := openSample(t)
	for _, f := range sampleFacts {
		t.Run(f.sentence, func(t *testing.T) {
			got, err := o.Search(context.Background(), f.sentence, 5)
			if err != nil {
				t.Fatalf("Search: %v", err)
			}
			if len(got) == 0 {
				t.Fatal("no results")
			}
			for _, n := range f.numbers {
				if !containsNumeral(got[0].Snippet, n) {
					t.Errorf("first result %s %q lacks %s", got[0].URL, got[0].Snippet, n)
				}
			}
			if !strings.HasPrefix(got[0].URL, "corpus://sample/") {
				t.Errorf("URL %q, want corpus://sample/<file>", got[0].URL)
			}

			// A claim with a wrong figure must still find the passage that
			// refutes it.
			wrong := f.sentence
			for _, n := range f.numbers {
				wrong = strings.Replace(wrong, n, "7,777", 1)
			}
			got, err = o.Search(context.Background(), wrong, 5)
			if err != nil || len(got) == 0 || !containsNumeral(got[0].Snippet, f.numbers[0]) {
				t.Errorf("Search(%q) = %v, %v; want the passage stating %s first", wrong, got, err, f.numbers[0])
			}
		})
	}
}

var numeral = regexp.MustCompile(`[0-9](?:[0-9.,]*[0-9])?`)

func containsNumeral(text, n string) bool {
	return slices.Contains(numeral.FindAllString(text, -1), n)
}

// TestSampleStatesOnlyItsFacts reads the sample as the index does and checks
// that its only figures are the facts', each fact in a passage of its own.
func TestSampleStatesOnlyItsFacts(t *testing.T) {
	sub, err := fs.Sub(sample, "sample")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string][]string{} // numeral → the passages stating it
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == "README.md" {
			return err
		}
		data, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		doc, ok, err := extract.File(p, data)
		if !ok || err != nil {
			t.Errorf("%s: not read (%v)", p, err)
			return nil
		}
		if doc.Title == "" || doc.URL != "corpus://sample/"+p && !strings.HasSuffix(p, ".html") {
			t.Errorf("%s: title %q, URL %q", p, doc.Title, doc.URL)
		}
		for _, text := range passages(doc.Paragraphs) {
			nums := numeral.FindAllString(text, -1)
			if len(nums) == 0 {
				continue
			}
			fact := -1
			for i, f := range sampleFacts {
				if slices.Contains(f.numbers, nums[0]) {
					fact = i
				}
			}
			for _, n := range nums {
				if fact < 0 || !slices.Contains(sampleFacts[fact].numbers, n) {
					t.Errorf("%s: passage states %s beside the fact's figures: %q", p, n, text)
				}
				found[n] = append(found[n], p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range sampleFacts {
		for _, n := range f.numbers {
			if len(found[n]) != 1 {
				t.Errorf("%s is stated in %d passages (%v), want 1", n, len(found[n]), found[n])
			}
		}
	}
}

func TestSampleSourcesAndTitles(t *testing.T) {
	o := openSample(t)
	docs, passages := o.Size()
	if docs != 8 {
		t.Errorf("%d documents indexed, want the 8 of the sample without its README", docs)
	}
	if passages < docs {
		t.Errorf("%d passages for %d documents", passages, docs)
	}
	tests := []struct{ query, url, title string }{
		{"Mount Everest height", "corpus://sample/geography.md", "Mountains of the world"},
		{"crewed Moon landing Apollo", "corpus://sample/space-exploration.html", "Footprints on the Moon"},
		{"Danube countries", "corpus://sample/rivers.txt", "Rivers of Europe"},
	}
	for _, tt := range tests {
		got, err := o.Search(context.Background(), tt.query, 1)
		if err != nil {
			t.Fatalf("Search(%q): %v", tt.query, err)
		}
		if len(got) != 1 || got[0].URL != tt.url || got[0].Title != tt.title {
			t.Errorf("Search(%q) = %+v, want %s titled %q", tt.query, got, tt.url, tt.title)
		}
	}
}

func TestSampleLeavesOutReadmeAndMarkup(t *testing.T) {
	o := openSample(t)
	for _, q := range []string{
		"README describes the corpus; do not cite them", // the README's words
		"scripted documentElement classList",            // the HTML page's script
		"Georgia serif italic font",                     // its style sheet
		"Scripts are off",                               // its noscript
	} {
		got, err := o.Search(context.Background(), q, 10)
		if err != nil {
			t.Fatalf("Search(%q): %v", q, err)
		}
		for _, r := range got {
			if strings.Contains(r.URL, "README") || strings.Contains(r.Snippet, "scripted") ||
				strings.Contains(r.Snippet, "serif") || strings.Contains(r.Snippet, "Scripts are off") ||
				strings.Contains(r.Snippet, "cite them") {
				t.Errorf("Search(%q) found %s: %q", q, r.URL, r.Snippet)
			}
		}
	}
}

func TestOfflineAtMostTwoPassagesPerDocument(t *testing.T) {
	o := openSample(t)
	got, err := o.Search(context.Background(), "sample corpus demonstration authoritative source figures reference", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 8 {
		t.Errorf("%d results, want one per document at least", len(got))
	}
	per := map[string]int{}
	for _, r := range got {
		if per[r.URL]++; per[r.URL] > perDocument {
			t.Errorf("%d passages of %s", per[r.URL], r.URL)
		}
	}
}

func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOfflineUserFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "team notes")
	writeFiles(t, dir, map[string][]byte{
		"lighthouse.md": []byte("---\ntitle: \"The old lighthouse\"\nsource: https://example.org/lighthouse\n---\n\n" +
			"# Ignored heading\n\nThe old lighthouse keeper polished the brass lamp every evening before the fog rolled in across the bay.\n"),
		"orchard.txt": []byte("The orchard behind the mill grows quinces, medlars and a very old pear tree that still fruits every autumn without fail.\n"),
		"guide/kiln.html": []byte(`<html><head><title>Pottery kiln guide</title><script>var secretword = "zebracorn";</script></head>` +
			`<body><nav>Home</nav><p>Load the pottery kiln slowly and let the glaze cool overnight so the pots do not crack.</p></body></html>`),
		"reports/crane.pdf": extracttest.MinimalPDF("Harbour report", "The harbour crane lifts heavy containers onto the waiting cargo ships."),
		"broken.pdf":        []byte("%PDF-1.4\nthis file was cut short"),
		"photo.png":         {0x89, 'P', 'N', 'G'},
		".drafts/secret.md": []byte("The hidden draft mentions a zebracorn."),
		".secret.txt":       []byte("Another zebracorn hides here."),
	})
	o, err := OpenOffline(dir)
	if err != nil {
		t.Fatalf("OpenOffline: %v", err)
	}
	defer o.Close()
	if docs, _ := o.Size(); docs != 4 {
		t.Errorf("%d documents indexed, want 4 (md, txt, html, pdf)", docs)
	}
	tests := []struct{ query, url, title, snippet string }{
		{"lighthouse keeper brass lamp", "https://example.org/lighthouse", "The old lighthouse", "polished the brass lamp"},
		{"quinces medlars pear tree", "corpus://team%20notes/orchard.txt", "orchard.txt", "old pear tree"},
		{"pottery kiln glaze", "corpus://team%20notes/guide/kiln.html", "Pottery kiln guide", "let the glaze cool"},
		{"harbour crane containers", "corpus://team%20notes/reports/crane.pdf", "Harbour report", "crane lifts heavy containers"},
	}
	for _, tt := range tests {
		got, err := o.Search(context.Background(), tt.query, 3)
		if err != nil {
			t.Fatalf("Search(%q): %v", tt.query, err)
		}
		if len(got) == 0 {
			t.Errorf("Search(%q) found nothing", tt.query)
			continue
		}
		r := got[0]
		if r.URL != tt.url || r.Title != tt.title || !strings.Contains(r.Snippet, tt.snippet) {
			t.Errorf("Search(%q) = %+v, want %s titled %q with %q", tt.query, r, tt.url, tt.title, tt.snippet)
		}
	}
	got, err := o.Search(context.Background(), "zebracorn", 5)
	if err != nil || len(got) != 0 {
		t.Errorf("Search(zebracorn) = %v, %v; want nothing from hidden files or scripts", got, err)
	}
}

func TestOpenOfflineRefusesEmptyOrMissingFolders(t *testing.T) {
	base := t.TempDir()
	writeFiles(t, base, map[string][]byte{
		"unsupported/photo.png": {0x89, 'P', 'N', 'G'},
		"unsupported/.notes.md": []byte("hidden notes"),
		"blank/empty.md":        nil,
		"file.txt":              []byte("a file, not a folder"),
	})
	if err := os.Mkdir(filepath.Join(base, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"missing", "empty", "unsupported", "blank", "file.txt"} {
		p := filepath.Join(base, dir)
		o, err := OpenOffline(p)
		if err == nil {
			o.Close()
			t.Errorf("OpenOffline(%s) succeeded", dir)
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), p) {
			t.Errorf("OpenOffline(%s) = %v, want ErrConfig naming the folder", dir, err)
		}
	}
}

func TestOfflineSearchArguments(t *testing.T) {
	o := openSample(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.Search(ctx, "Everest", 3); !errors.Is(err, context.Canceled) {
		t.Errorf("Search with an ended context = %v, want context.Canceled", err)
	}
	got, err := o.Search(context.Background(), "the of at", 3)
	if err != nil || len(got) != 0 || got == nil {
		t.Errorf("Search(stop words) = %#v, %v; want an empty slice", got, err)
	}
	long, err := o.Search(context.Background(), "Earth", 1)
	if err != nil || len(long) != 1 {
		t.Fatalf("Search(Earth, 1) = %v, %v", long, err)
	}
	if n := length(long[0].Snippet); n > maxSnippet {
		t.Errorf("snippet of %d characters, want at most %d", n, maxSnippet)
	}
}

func BenchmarkOpenSample(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		o, err := OpenSample()
		if err != nil {
			b.Fatal(err)
		}
		o.Close()
	}
}

// BenchmarkSampleHeap reports the heap an open sample index keeps.
func BenchmarkSampleHeap(b *testing.B) {
	var before, after runtime.MemStats
	var open []*Offline
	runtime.GC()
	runtime.ReadMemStats(&before)
	for b.Loop() {
		o, err := OpenSample()
		if err != nil {
			b.Fatal(err)
		}
		open = append(open, o)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(open)), "heap-B/index")
	for _, o := range open {
		o.Close()
	}
}

func BenchmarkSampleSearch(b *testing.B) {
	o := openSample(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := o.Search(context.Background(), sampleFacts[6].sentence, 5); err != nil {
			b.Fatal(err)
		}
	}
}
