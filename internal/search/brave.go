package search

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/html"
)

const (
	braveBaseURL = "https://api.search.brave.com"
	bravePath    = "/res/v1/web/search"
	// The Brave API refuses a query longer than 400 characters or 50 words.
	braveMaxChars = 400
	braveMaxWords = 50
)

// brave searches the Brave Search web API: GET
// {base_url}/res/v1/web/search?q=...&count=N with the key in the
// X-Subscription-Token header.
type brave struct {
	endpoint *url.URL
	key      string
	client   *webClient
}

var _ Backend = (*brave)(nil)

// newBrave returns the backend; an empty baseURL means Brave's public API.
func newBrave(baseURL, key string, timeout time.Duration) (*brave, error) {
	if strings.TrimSpace(baseURL) == "" {
		baseURL = braveBaseURL
	}
	u, err := endpoint(baseURL, bravePath)
	if err != nil {
		return nil, err
	}
	return &brave{endpoint: u, key: key, client: newWebClient(NameBrave, timeout, key)}, nil
}

func (b *brave) Name() string { return NameBrave }

// Search asks for min(limit, 20) web results; a query past Brave's length
// limits is shortened at a word boundary.
func (b *brave) Search(ctx context.Context, query string, limit int) ([]Result, error) {
	if err := checkArgs(NameBrave, query, limit); err != nil {
		return nil, err
	}
	u := *b.endpoint
	u.RawQuery = url.Values{
		"q":     {clipQuery(query, braveMaxChars, braveMaxWords)},
		"count": {strconv.Itoa(min(limit, maxWebResults))},
	}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Subscription-Token", b.key)
	return b.client.results(ctx, req, limit, parseBrave)
}

// braveResponse is the part of Brave's WebSearchApiResponse a search reads.
// Brave leaves out "web" when it found no web pages.
type braveResponse struct {
	Type string `json:"type"`
	Web  *struct {
		Results []struct {
			Title       string `json:"title"`
			URL         string `json:"url"`
			Description string `json:"description"`
		} `json:"results"`
	} `json:"web"`
}

// parseBrave reads Brave's JSON answer. Titles and descriptions carry HTML
// markup (the <strong> around matched words, character references); the
// results carry plain text.
func parseBrave(body []byte, limit int) ([]Result, error) {
	var r braveResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	if r.Type != "search" {
		return nil, fmt.Errorf("type %q, want search", r.Type)
	}
	if r.Web == nil {
		return []Result{}, nil
	}
	hits := make([]Result, 0, len(r.Web.Results))
	for _, h := range r.Web.Results {
		hits = append(hits, Result{URL: h.URL, Title: htmlText(h.Title), Snippet: htmlText(h.Description)})
	}
	return webResults(hits, limit), nil
}

// htmlText returns the text of an HTML fragment: tags dropped, character
// references decoded.
func htmlText(fragment string) string {
	if !strings.ContainsAny(fragment, "<&") {
		return fragment
	}
	var b strings.Builder
	z := html.NewTokenizer(strings.NewReader(fragment))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return b.String()
		case html.TextToken:
			b.Write(z.Text())
		}
	}
}
