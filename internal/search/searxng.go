package search

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// searxng searches a SearXNG instance through its JSON API:
// GET {base_url}/search?q=...&format=json. The instance must have the json
// format enabled in its settings; one that has not answers 403.
type searxng struct {
	endpoint *url.URL
	client   *webClient
}

var _ Backend = (*searxng)(nil)

func newSearXNG(baseURL string, timeout time.Duration) (*searxng, error) {
	u, err := endpoint(baseURL, "search")
	if err != nil {
		return nil, err
	}
	return &searxng{endpoint: u, client: newWebClient(NameSearXNG, timeout, "")}, nil
}

func (s *searxng) Name() string { return NameSearXNG }

// Search returns the first limit results of the instance's first page. The
// API has no count parameter: a page holds what the instance's engines found.
func (s *searxng) Search(ctx context.Context, query string, limit int) ([]Result, error) {
	if err := checkArgs(NameSearXNG, query, limit); err != nil {
		return nil, err
	}
	u := *s.endpoint
	u.RawQuery = url.Values{"q": {query}, "format": {"json"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	return s.client.results(ctx, req, limit, parseSearXNG)
}

// parseSearXNG reads SearXNG's JSON answer; an answer without a results list
// is not SearXNG's, and an error.
func parseSearXNG(body []byte, limit int) ([]Result, error) { return parseContentResults(body, limit) }
