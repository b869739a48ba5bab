package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/crosscheck/crosscheck/internal/extract"
)

const (
	// maxResponse bounds the body read from a web engine.
	maxResponse = 4 << 20
	// maxErrorBody bounds the body read from a failed answer; excerptLen
	// bounds the part of it an error message quotes.
	maxErrorBody = 4 << 10
	excerptLen   = 200
	// maxWebResults is the most results a web engine is asked for: the Brave
	// and Tavily APIs refuse more.
	maxWebResults = 20
	// maxSnippet bounds a result's snippet, in characters.
	maxSnippet = 400
	// userAgent names crosscheck to the engines.
	userAgent = "crosscheck-search"
)

// webClient is the HTTP plumbing the web backends share: the timeout, the
// size bound, the status check and the key's removal from error messages.
type webClient struct {
	name    string
	http    *http.Client
	timeout time.Duration
	key     string // removed from anything an error quotes
}

func newWebClient(name string, timeout time.Duration, key string) *webClient {
	c := &http.Client{}
	if key != "" {
		// The key travels in a header that Go's client would carry along a
		// redirect to another host: follow none, and report the 3xx instead.
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return &webClient{name: name, http: c, timeout: timeout, key: key}
}

// do sends req within the timeout and returns the body of a 2xx answer. A
// non-2xx answer is a *StatusError; a timeout or the end of ctx is an error
// wrapping context.DeadlineExceeded or ctx's error. Keys travel only in
// headers, so the transport errors, which quote the URL, cannot contain one.
func (c *webClient) do(ctx context.Context, req *http.Request) ([]byte, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout,
		fmt.Errorf("no answer within %s: %w", c.timeout, context.DeadlineExceeded))
	defer cancel()
	req = req.WithContext(ctx)
	req.Header.Set("User-Agent", userAgent)

	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.failed(ctx, err)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, &StatusError{Backend: c.name, Status: resp.StatusCode, Body: excerpt(redact(string(body), c.key))}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, c.failed(ctx, err)
	}
	if len(body) > maxResponse {
		return nil, fmt.Errorf("%s: response larger than %d MiB", c.name, maxResponse>>20)
	}
	return body, nil
}

// results sends req and reads its answer with parse: a failed request, or
// an answer parse cannot read (reported as malformed), is an error.
func (c *webClient) results(ctx context.Context, req *http.Request, limit int, parse func([]byte, int) ([]Result, error)) ([]Result, error) {
	req.Header.Set("Accept", "application/json")
	body, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	results, err := parse(body, limit)
	if err != nil {
		return nil, c.malformed(body, err)
	}
	return results, nil
}

// contentResults is the answer of SearXNG and of Tavily: a list of results,
// each with a url, a title and the matching content.
type contentResults struct {
	Results *[]struct {
		URL     string `json:"url"`
		Title   string `json:"title"`
		Content string `json:"content"`
	} `json:"results"`
}

// parseContentResults reads a contentResults answer; one without a results
// list is not such an answer, and an error.
func parseContentResults(body []byte, limit int) ([]Result, error) {
	var r contentResults
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	if r.Results == nil {
		return nil, errors.New("no results list")
	}
	hits := make([]Result, 0, len(*r.Results))
	for _, h := range *r.Results {
		hits = append(hits, Result{URL: h.URL, Title: h.Title, Snippet: h.Content})
	}
	return webResults(hits, limit), nil
}

func (c *webClient) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", c.name, context.Cause(ctx))
	}
	return fmt.Errorf("%s: %w", c.name, err)
}

// malformed is the error for a 2xx answer that is not the engine's JSON.
func (c *webClient) malformed(body []byte, err error) error {
	return fmt.Errorf("%s: malformed response (%v): %s", c.name, err, excerpt(redact(string(body), c.key)))
}

// endpoint returns base with path appended. base must be an absolute http or
// https URL without query or fragment; the error names the base_url setting.
func endpoint(base, path string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(base))
	if err != nil {
		return nil, fmt.Errorf("%w: base_url %q: %v", ErrConfig, base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: base_url %q: want an http or https address", ErrConfig, base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: base_url %q: want no query or fragment", ErrConfig, base)
	}
	return u.JoinPath(path), nil
}

// redact removes key from s.
func redact(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}

// excerpt returns the start of s on one line, for an error message.
func excerpt(s string) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
	return clip(s, excerptLen)
}

// clip returns s cut to at most n characters at a word boundary, marked with
// an ellipsis when cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	cut := runeOffset(s, n-1) // room for the ellipsis
	if i := strings.LastIndexByte(s[:cut], ' '); i > 0 {
		cut = i
	}
	return strings.TrimRight(s[:cut], " ") + "…"
}

// clipQuery shortens query to what an engine accepts: at most maxChars
// characters and maxWords words.
func clipQuery(query string, maxChars, maxWords int) string {
	words := strings.Fields(query)
	if len(words) > maxWords {
		words = words[:maxWords]
	}
	q := strings.Join(words, " ")
	if utf8.RuneCountInString(q) <= maxChars {
		return q
	}
	cut := runeOffset(q, maxChars)
	if q[cut] != ' ' {
		if i := strings.LastIndexByte(q[:cut], ' '); i > 0 {
			cut = i
		}
	}
	return strings.TrimSpace(q[:cut])
}

// runeOffset returns the byte offset of the n-th character of s, or len(s).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// webResults turns an engine's hits into Results: whitespace folded,
// snippets clipped, hits without an http or https URL and repeated URLs
// dropped, at most limit kept. The slice is never nil.
func webResults(hits []Result, limit int) []Result {
	limit = max(limit, 0)
	out := make([]Result, 0, min(len(hits), limit))
	seen := make(map[string]bool, len(hits))
	for _, h := range hits {
		if len(out) == limit {
			break
		}
		u := strings.TrimSpace(h.URL)
		if !extract.IsWebURL(u) || seen[u] {
			continue
		}
		seen[u] = true
		title := extract.OneLine(h.Title)
		if title == "" {
			title = u
		}
		out = append(out, Result{URL: u, Title: title, Snippet: clip(extract.OneLine(h.Snippet), maxSnippet)})
	}
	return out
}
