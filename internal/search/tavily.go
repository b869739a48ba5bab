package search

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	tavilyBaseURL = "https://api.tavily.com"
	tavilyPath    = "/search"
	// The Tavily API refuses a query longer than 400 characters.
	tavilyMaxChars = 400
)

// tavily searches the Tavily search API: POST {base_url}/search with a JSON
// body and the key as a bearer token.
type tavily struct {
	endpoint *url.URL
	key      string
	client   *webClient
}

var _ Backend = (*tavily)(nil)

// newTavily returns the backend; an empty baseURL means Tavily's public API.
func newTavily(baseURL, key string, timeout time.Duration) (*tavily, error) {
	if strings.TrimSpace(baseURL) == "" {
		baseURL = tavilyBaseURL
	}
	u, err := endpoint(baseURL, tavilyPath)
	if err != nil {
		return nil, err
	}
	return &tavily{endpoint: u, key: key, client: newWebClient(NameTavily, timeout, key)}, nil
}

func (t *tavily) Name() string { return NameTavily }

// tavilyRequest is the body of a basic search, which costs one API credit.
type tavilyRequest struct {
	Query       string `json:"query"`
	MaxResults  int    `json:"max_results"`
	SearchDepth string `json:"search_depth"`
}

// Search asks for min(limit, 20) results of a basic search; a query past
// Tavily's length limit is shortened at a word boundary.
func (t *tavily) Search(ctx context.Context, query string, limit int) ([]Result, error) {
	if err := checkArgs(NameTavily, query, limit); err != nil {
		return nil, err
	}
	payload, err := json.Marshal(tavilyRequest{
		Query:       clipQuery(query, tavilyMaxChars, tavilyMaxChars),
		MaxResults:  min(limit, maxWebResults),
		SearchDepth: "basic",
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint.String(), bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+t.key)
	return t.client.results(ctx, req, limit, parseTavily)
}

// parseTavily reads Tavily's JSON answer (already ordered by score); an
// answer without a results list is not Tavily's, and an error.
func parseTavily(body []byte, limit int) ([]Result, error) { return parseContentResults(body, limit) }
