package search

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/crosscheck/crosscheck/internal/extract"
)

// sample is the built-in corpus: short documents written for demonstration,
// not authoritative sources. Its README.md describes it and is not indexed.
//
//go:embed sample
var sample embed.FS

const (
	// sampleName is the corpus name in the sample's corpus:// URLs.
	sampleName = "sample"
	// maxFileSize bounds the files indexed; larger ones are skipped.
	maxFileSize = 32 << 20
	// perDocument bounds the passages of one document among a search's results.
	perDocument = 2
	// titleBoost weighs a match in a document's title against one in the
	// passage itself.
	titleBoost = 0.3
)

// Offline searches the passages of a folder of documents, held in an
// in-memory bleve index built when the folder is opened. It is safe for
// concurrent use.
type Offline struct {
	index     bleve.Index
	timeout   time.Duration
	documents int
	passages  int
}

var _ Backend = (*Offline)(nil)

// OpenOffline indexes the documents in dir and its subfolders: .txt, .md and
// .markdown (front matter read), .html and .htm, and .pdf. Hidden files and
// folders, files of other formats, files larger than 32 MiB and files that
// cannot be read are skipped without an error. A missing folder, or one with
// nothing to index, is an error wrapping ErrConfig and naming the folder.
//
// A passage's URL is its document's front matter source (or url), else
// corpus://<folder name>/<path within the folder>; its title is the
// document's front matter title, first level-one heading or HTML title, else
// the file name.
func OpenOffline(dir string) (*Offline, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: corpus_dir %q: %w", ErrConfig, dir, err)
	}
	info, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: corpus_dir %q: %w", ErrConfig, dir, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%w: corpus_dir %q is not a folder", ErrConfig, dir)
	}
	o, err := openFS(os.DirFS(abs), filepath.Base(abs), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: corpus_dir %q: %w", ErrConfig, dir, err)
	}
	return o, nil
}

// OpenSample indexes the built-in sample corpus, whose passages have URLs
// corpus://sample/<file>.
func OpenSample() (*Offline, error) {
	sub, err := fs.Sub(sample, "sample")
	if err != nil {
		return nil, err
	}
	return openFS(sub, sampleName, func(p string) bool { return p == "README.md" })
}

// errNoDocuments is the error for a folder with nothing to index.
var errNoDocuments = errors.New("no documents to index (.txt, .md, .markdown, .html, .htm, .pdf)")

// openFS indexes the documents of fsys, except those skip reports.
func openFS(fsys fs.FS, name string, skip func(path string) bool) (*Offline, error) {
	index, err := bleve.NewMemOnly(indexMapping())
	if err != nil {
		return nil, fmt.Errorf("create index: %w", err)
	}
	o := &Offline{index: index, timeout: DefaultTimeout}
	batch := index.NewBatch()
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if p == "." {
			return err // the folder itself cannot be read
		}
		hidden := strings.HasPrefix(d.Name(), ".")
		switch {
		case d.IsDir() && (hidden || err != nil):
			return fs.SkipDir
		case d.IsDir() || hidden || err != nil || skip != nil && skip(p):
			return nil
		}
		doc, ok := readDocument(fsys, p)
		if !ok {
			return nil
		}
		o.documents++
		doc.Title = strings.ToValidUTF8(doc.Title, "\uFFFD")
		doc.URL = strings.ToValidUTF8(doc.URL, "\uFFFD")
		if doc.Title == "" {
			doc.Title = path.Base(p)
		}
		if doc.URL == "" {
			doc.URL = corpusURL(name, p)
		}
		for i, text := range passages(doc.Paragraphs) {
			fields := map[string]any{"title": doc.Title, "url": doc.URL, "text": text}
			if err := batch.Index(fmt.Sprintf("%s#%d", p, i), fields); err != nil {
				return fmt.Errorf("index %s: %w", p, err)
			}
			o.passages++
		}
		return nil
	})
	if err == nil && o.passages == 0 {
		err = errNoDocuments
	}
	if err == nil {
		err = index.Batch(batch)
	}
	if err != nil {
		index.Close()
		return nil, err
	}
	return o, nil
}

// readDocument reads and extracts the file at p, or reports false for a file
// the index skips.
func readDocument(fsys fs.FS, p string) (extract.Document, bool) {
	info, err := fs.Stat(fsys, p) // follows a link to a file
	if err != nil || !info.Mode().IsRegular() || info.Size() > maxFileSize {
		return extract.Document{}, false
	}
	if !extract.Reads(p) {
		return extract.Document{}, false
	}
	data, err := fs.ReadFile(fsys, p)
	if err != nil {
		return extract.Document{}, false
	}
	doc, ok, err := extract.File(p, data)
	return doc, ok && err == nil && len(doc.Paragraphs) > 0
}

// corpusURL is the address of the file at p in the corpus called name.
func corpusURL(name, p string) string {
	segments := strings.Split(p, "/")
	for i, s := range segments {
		segments[i] = url.PathEscape(s)
	}
	return "corpus://" + url.PathEscape(name) + "/" + strings.Join(segments, "/")
}

// indexMapping indexes a passage's text and its document's title with the
// English analyzer, and stores them with the document's URL for the results.
func indexMapping() mapping.IndexMapping {
	url := bleve.NewKeywordFieldMapping()
	url.Analyzer = keyword.Name
	url.Index = false
	url.IncludeInAll = false
	url.DocValues = false

	doc := bleve.NewDocumentStaticMapping()
	doc.AddFieldMappingsAt("text", englishField())
	doc.AddFieldMappingsAt("title", englishField())
	doc.AddFieldMappingsAt("url", url)

	m := bleve.NewIndexMapping()
	m.DefaultMapping = doc
	m.DefaultAnalyzer = en.AnalyzerName
	m.StoreDynamic = false
	m.IndexDynamic = false
	m.DocValuesDynamic = false
	return m
}

func englishField() *mapping.FieldMapping {
	f := bleve.NewTextFieldMapping()
	f.Analyzer = en.AnalyzerName
	f.IncludeInAll = false
	f.IncludeTermVectors = false
	f.DocValues = false
	return f
}

func (o *Offline) Name() string { return NameOffline }

// Size reports how many documents and passages the index holds.
func (o *Offline) Size() (documents, passages int) { return o.documents, o.passages }

// Close releases the index; a search after Close fails.
func (o *Offline) Close() error { return o.index.Close() }

// Search returns the passages that best match query, at most two from any
// one document, with the passage as the snippet (clipped to about 400
// characters). Words the English analyzer drops (the, of, at…) do not count;
// a query of such words alone finds nothing.
func (o *Offline) Search(ctx context.Context, q string, limit int) ([]Result, error) {
	if err := checkArgs(NameOffline, q, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("offline: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	inText := bleve.NewMatchQuery(q)
	inText.SetField("text")
	inTitle := bleve.NewMatchQuery(q)
	inTitle.SetField("title")
	inTitle.SetBoost(titleBoost)
	// Ask for enough hits that the per-document bound still leaves limit.
	size := min(limit, o.passages)*perDocument*2 + 8
	req := bleve.NewSearchRequestOptions(query.NewDisjunctionQuery([]query.Query{inText, inTitle}), size, 0, false)
	req.Fields = []string{"title", "url", "text"}
	res, err := o.index.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("offline: %w", err)
	}

	out := []Result{}
	fromDoc := map[string]int{}
	for _, hit := range res.Hits {
		if len(out) == limit {
			break
		}
		u, _ := hit.Fields["url"].(string)
		if fromDoc[u] == perDocument {
			continue
		}
		fromDoc[u]++
		title, _ := hit.Fields["title"].(string)
		text, _ := hit.Fields["text"].(string)
		out = append(out, Result{URL: u, Title: title, Snippet: clip(text, maxSnippet)})
	}
	return out, nil
}
