package modes

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/providers"
)

// FileSource reads the files a query attaches.
type FileSource interface {
	// Content returns the file's bytes.
	Content(ctx context.Context, fileID string) ([]byte, error)
	// Text returns the file's extracted text, "" when none was extracted.
	// Pages of a PDF or document are separated by form feeds (\f).
	Text(ctx context.Context, fileID string) (string, error)
}

// Markers of the files block a call's user message starts with. The text of
// a file a model does not read natively follows a heading with its name.
const (
	filesHeading   = "Attached files:\n\n"
	fileHeading    = "## File: "
	filesEndMarker = "## End of attached files\n\n"
)

// ClassFileUnavailable is the failure class of a call whose files could not
// be read (expired or deleted meanwhile).
const ClassFileUnavailable = "file_unavailable"

// FilesBackend names the evidence a verify query finds in its own files.
const FilesBackend = "files"

// fileSet holds a run's files, each read at most once.
type fileSet struct {
	mu      sync.Mutex
	content map[string][]byte
	text    map[string]string
}

// load returns f's bytes (when a model reads it natively) and text.
func (s *fileSet) load(ctx context.Context, src FileSource, f events.FileRef) ([]byte, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.content == nil {
		s.content, s.text = map[string][]byte{}, map[string]string{}
	}
	if src == nil {
		return nil, "", &providers.Error{Class: ClassFileUnavailable, Message: "no file store is configured to read file " + f.ID}
	}
	if _, ok := s.text[f.ID]; !ok {
		text := ""
		if f.TextChars > 0 {
			var err error
			if text, err = src.Text(ctx, f.ID); err != nil {
				return nil, "", &providers.Error{Class: ClassFileUnavailable, Message: fmt.Sprintf("the text of file %s could not be read: %v", f.ID, err)}
			}
		}
		s.text[f.ID] = text
	}
	if _, ok := s.content[f.ID]; !ok && len(f.NativeFor) > 0 {
		data, err := src.Content(ctx, f.ID)
		if err != nil {
			return nil, "", &providers.Error{Class: ClassFileUnavailable, Message: fmt.Sprintf("file %s could not be read: %v", f.ID, err)}
		}
		s.content[f.ID] = data
	}
	return s.content[f.ID], s.text[f.ID], nil
}

// texts returns the extracted text of every file that has one, by id.
func (s *fileSet) texts(ctx context.Context, src FileSource, files []events.FileRef) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range files {
		if f.TextChars == 0 {
			continue
		}
		_, text, err := s.load(ctx, src, f)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(text) != "" {
			out[f.ID] = text
		}
	}
	return out, nil
}

// withFiles gives req the query's files as ref receives them: the files ref
// reads natively as attachments (with their text, which only a backend
// that plays a model reads), and, before the text of the last user message,
// the extracted text of every other file under a heading with its name, or a
// note naming a file ref cannot see.
func (j *job) withFiles(ctx context.Context, src FileSource, ref events.ModelRef, req providers.Request) (providers.Request, error) {
	files := j.q.Submitted.Files
	if len(files) == 0 {
		return req, nil
	}
	var b strings.Builder
	b.WriteString(filesHeading)
	for _, f := range files {
		data, text, err := j.files.load(ctx, src, f)
		if err != nil {
			return req, err
		}
		switch f.SeenBy(ref.Key()) {
		case events.FileSeenNative:
			req.Attachments = append(req.Attachments, providers.Attachment{Name: f.Name, MediaType: f.MediaType, Data: data, Text: text})
			fmt.Fprintf(&b, "%s%s (%s) is attached in its original form.\n\n", fileHeading, f.Name, f.ID)
		case events.FileSeenText:
			fmt.Fprintf(&b, "%s%s (%s), as extracted text\n%s\n\n", fileHeading, f.Name, f.ID, strings.TrimRight(text, "\n"))
		default:
			what := "file"
			if f.Kind == catalog.KindImage {
				what = "image"
			}
			fmt.Fprintf(&b, "%s%s (%s) is not visible to you\nThe %s %s is attached to the question, but you cannot see it (no text could be taken from it); say so if the question depends on it.\n\n", fileHeading, f.Name, f.ID, what, f.Name)
		}
	}
	b.WriteString(filesEndMarker)
	last := -1
	for i, m := range req.Messages {
		if m.Role == providers.RoleUser {
			last = i
		}
	}
	msgs := append([]providers.Message(nil), req.Messages...)
	if last < 0 {
		msgs = append(msgs, providers.Message{Role: providers.RoleUser, Content: b.String()})
	} else {
		msgs[last].Content = b.String() + msgs[last].Content
	}
	req.Messages = msgs
	return req, nil
}

// fileSources are the query's files as sources a research answer may cite.
func fileSources(files []events.FileRef) []events.Citation {
	var out []events.Citation
	for _, f := range files {
		out = append(out, events.Citation{URL: "file://" + f.ID, Title: f.Name})
	}
	return out
}

// findInFiles returns, for each file whose text has a passage that shares
// at least minOverlap words with query, one source: file://<id>, with
// #page=N when the text has several pages. No content goes into it.
func findInFiles(query string, files []events.FileRef, texts map[string]string) []events.Citation {
	out := []events.Citation{}
	for _, f := range files {
		page, _, ok := bestPassage(query, texts[f.ID])
		if !ok {
			continue
		}
		url := "file://" + f.ID
		if strings.Contains(texts[f.ID], "\f") {
			url += fmt.Sprintf("#page=%d", page)
		}
		out = append(out, events.Citation{URL: url, Title: f.Name})
	}
	return out
}

// minOverlap is the number of words a passage must share with a claim to
// be its evidence.
const minOverlap = 3

// bestPassage returns the page (from 1) and text of the passage of text
// (paragraphs and sentences, pages split at form feeds) that shares most
// words with query, if one shares at least minOverlap.
func bestPassage(query, text string) (int, string, bool) {
	want := wordSet(query)
	bestPage, best, bestN := 0, "", 0
	for p, page := range strings.Split(text, "\f") {
		for _, para := range strings.FieldsFunc(page, func(r rune) bool { return r == '\n' }) {
			for _, sentence := range splitSentences(para) {
				n := 0
				for w := range wordSet(sentence) {
					if want[w] {
						n++
					}
				}
				if n > bestN {
					bestPage, best, bestN = p+1, strings.TrimSpace(sentence), n
				}
			}
		}
	}
	return bestPage, best, bestN >= minOverlap
}

func splitSentences(s string) []string {
	var out []string
	for {
		i := strings.Index(s, ". ")
		if i < 0 {
			break
		}
		out = append(out, s[:i+1])
		s = s[i+2:]
	}
	if strings.TrimSpace(s) != "" {
		out = append(out, s)
	}
	return out
}

// wordSet is the lower-case words of s longer than three letters or
// holding a digit.
func wordSet(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range nonWord.Split(strings.ToLower(s), -1) {
		if len(w) > 3 || strings.ContainsAny(w, "0123456789") {
			out[w] = true
		}
	}
	return out
}

// passageOf returns the text of the passage a file source points at, for
// the prompt of the models that judge a claim against it; "" for a source
// that is not a file of the query.
func passageOf(claim string, src events.Citation, texts map[string]string) string {
	rest, ok := strings.CutPrefix(src.URL, "file://")
	if !ok {
		return ""
	}
	id, frag, _ := strings.Cut(rest, "#")
	text := texts[id]
	if page, ok := strings.CutPrefix(frag, "page="); ok {
		pages := strings.Split(text, "\f")
		var n int
		if _, err := fmt.Sscanf(page, "%d", &n); err == nil && n >= 1 && n <= len(pages) {
			text = pages[n-1]
		}
	}
	_, passage, _ := bestPassage(claim, text)
	return passage
}
