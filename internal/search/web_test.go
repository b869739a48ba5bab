package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testKey is the API key the tests configure; no error may ever quote it.
const testKey = "tvly-test-7f3c9a1e5b2d4c6a8e0f"

// page is one page of the fake web the fake engines search.
type page struct{ URL, Title, Snippet string }

var fakeWeb = []page{
	{"https://example.org/everest", "Mount Everest", "Mount Everest is the highest mountain above sea level."},
	{"https://example.org/himalaya", "The Himalaya", "The Himalaya hold most of the highest peaks on Earth."},
	{"https://example.org/survey", "Surveying a summit", "How surveyors measure the height of a mountain."},
	{"https://example.org/climbing", "Climbing at altitude", "Climbers adjust to thin air before a summit push."},
	{"https://example.org/nepal", "Nepal", "Nepal is home to many of the world's tallest mountains."},
}

// nothing is the query for which the fake engines find nothing.
const nothing = "zzqx no such thing"

// vendor is what the tests know of one web engine's API.
type vendor struct {
	name string
	key  string
	// request returns the query and the number of results asked for in r
	// (0 when the API has no such parameter), or an error saying how r is not
	// the request the API expects.
	request func(r *http.Request, body []byte) (query string, count int, err error)
	// answer is the engine's JSON answer listing pages.
	answer func(query string, pages []page) any
	// problem is the engine's answer with an error status. It quotes the key
	// it was sent, as an engine or a proxy might.
	problem func(status int, key string) string
}

var vendors = []vendor{
	{
		name: NameSearXNG,
		request: func(r *http.Request, _ []byte) (string, int, error) {
			if r.Method != http.MethodGet || r.URL.Path != "/searxng/search" {
				return "", 0, fmt.Errorf("%s %s, want GET /searxng/search", r.Method, r.URL.Path)
			}
			if f := r.URL.Query().Get("format"); f != "json" {
				return "", 0, fmt.Errorf("format %q, want json", f)
			}
			return r.URL.Query().Get("q"), 0, nil
		},
		answer: func(query string, pages []page) any {
			results := []map[string]any{}
			for i, p := range pages {
				results = append(results, map[string]any{
					"url": p.URL, "title": p.Title, "content": p.Snippet,
					"engine": "duckduckgo", "engines": []string{"duckduckgo", "brave"},
					"parsed_url": []string{"https", "example.org", strings.TrimPrefix(p.URL, "https://example.org"), "", "", ""},
					"template":   "default.html", "positions": []int{i + 1}, "score": 2.0 / float64(i+1),
					"category": "general", "publishedDate": nil, "thumbnail": "",
				})
			}
			return map[string]any{
				"query": query, "number_of_results": 0, "results": results,
				"answers": []any{}, "corrections": []any{}, "infoboxes": []any{},
				"suggestions":          []string{"everest height"},
				"unresponsive_engines": [][]string{{"wikidata", "timeout"}},
			}
		},
		problem: func(status int, key string) string {
			return "<!DOCTYPE html><html><body><h1>" + http.StatusText(status) + "</h1><p>" + key + "</p></body></html>"
		},
	},
	{
		name: NameBrave,
		key:  testKey,
		request: func(r *http.Request, _ []byte) (string, int, error) {
			if r.Method != http.MethodGet || r.URL.Path != "/res/v1/web/search" {
				return "", 0, fmt.Errorf("%s %s, want GET /res/v1/web/search", r.Method, r.URL.Path)
			}
			if got := r.Header.Get("X-Subscription-Token"); got != testKey {
				return "", 0, fmt.Errorf("X-Subscription-Token %q, want the key", got)
			}
			if got := r.Header.Get("Accept"); got != "application/json" {
				return "", 0, fmt.Errorf("Accept %q, want application/json", got)
			}
			count, err := strconv.Atoi(r.URL.Query().Get("count"))
			if err != nil {
				return "", 0, fmt.Errorf("count: %v", err)
			}
			return r.URL.Query().Get("q"), count, nil
		},
		answer: func(query string, pages []page) any {
			answer := map[string]any{
				"type":  "search",
				"query": map[string]any{"original": query, "more_results_available": false},
				"mixed": map[string]any{"type": "mixed", "main": []any{}},
			}
			if len(pages) == 0 {
				return answer // Brave leaves out "web" when it found no pages
			}
			results := []map[string]any{}
			for _, p := range pages {
				results = append(results, map[string]any{
					"title": p.Title, "url": p.URL, "is_source_local": false, "is_source_both": false,
					// Brave marks the matched words and escapes characters.
					"description":     strings.ReplaceAll(strings.ReplaceAll(p.Snippet, "'", "&#x27;"), "mountain", "<strong>mountain</strong>"),
					"page_age":        "2025-01-08T02:07:48",
					"profile":         map[string]any{"name": "Example", "url": p.URL, "long_name": "example.org"},
					"language":        "en",
					"family_friendly": true, "type": "search_result", "subtype": "generic",
					"meta_url": map[string]any{"scheme": "https", "netloc": "example.org", "hostname": "example.org"},
				})
			}
			answer["web"] = map[string]any{"type": "search", "results": results, "family_friendly": true}
			return answer
		},
		problem: func(status int, key string) string {
			return fmt.Sprintf(`{"type":"ErrorResponse","error":{"id":"0c9a","status":%d,"code":"SUBSCRIPTION_TOKEN_INVALID","detail":"The provided subscription token %s is invalid.","meta":{"component":"authentication"}},"time":1736300868}`, status, key)
		},
	},
	{
		name: NameTavily,
		key:  testKey,
		request: func(r *http.Request, body []byte) (string, int, error) {
			if r.Method != http.MethodPost || r.URL.Path != "/search" {
				return "", 0, fmt.Errorf("%s %s, want POST /search", r.Method, r.URL.Path)
			}
			if got := r.Header.Get("Authorization"); got != "Bearer "+testKey {
				return "", 0, fmt.Errorf("Authorization %q, want Bearer and the key", got)
			}
			if got := r.Header.Get("Content-Type"); got != "application/json" {
				return "", 0, fmt.Errorf("Content-Type %q, want application/json", got)
			}
			var req struct {
				Query       string `json:"query"`
				MaxResults  int    `json:"max_results"`
				SearchDepth string `json:"search_depth"`
			}
			dec := json.NewDecoder(strings.NewReader(string(body)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return "", 0, fmt.Errorf("body %s: %v", body, err)
			}
			if req.SearchDepth != "basic" {
				return "", 0, fmt.Errorf("search_depth %q, want basic", req.SearchDepth)
			}
			return req.Query, req.MaxResults, nil
		},
		answer: func(query string, pages []page) any {
			results := []map[string]any{}
			for i, p := range pages {
				results = append(results, map[string]any{
					"title": p.Title, "url": p.URL, "content": p.Snippet,
					"score": 0.9 - float64(i)/10, "raw_content": nil,
				})
			}
			return map[string]any{
				"query": query, "follow_up_questions": nil, "answer": nil, "images": []any{},
				"results": results, "response_time": "1.67", "request_id": "123e4567-e89b-12d3-a456-426614174111",
			}
		},
		problem: func(status int, key string) string {
			return fmt.Sprintf(`{"detail":{"error":"Unauthorized: missing or invalid API key %s."}}`, key)
		},
	},
}

// fakeEngine is an httptest server speaking one vendor's API over fakeWeb.
type fakeEngine struct {
	t        *testing.T
	v        vendor
	srv      *httptest.Server
	requests atomic.Int32
	// lastQuery and lastCount are what the last request asked for.
	lastQuery atomic.Value
	lastCount atomic.Int32
	// answer, when set, replaces the normal handling of a valid request.
	answer func(w http.ResponseWriter, r *http.Request)
}

func newFakeEngine(t *testing.T, v vendor) *fakeEngine {
	f := &fakeEngine{t: t, v: v}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEngine) serve(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("User-Agent") != userAgent {
		f.t.Errorf("%s: User-Agent %q, want %q", f.v.name, r.Header.Get("User-Agent"), userAgent)
	}
	query, count, err := f.v.request(r, body)
	if err != nil {
		f.t.Errorf("%s: request: %v", f.v.name, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.lastQuery.Store(query)
	f.lastCount.Store(int32(count))
	if f.answer != nil {
		f.answer(w, r)
		return
	}
	pages := fakeWeb
	if strings.Contains(query, nothing) {
		pages = nil
	}
	if count > 0 && count < len(pages) {
		pages = pages[:count]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(f.v.answer(query, pages))
}

// baseURL is where Config.BaseURL points for the vendor: SearXNG is often
// served under a path.
func (f *fakeEngine) baseURL() string {
	if f.v.name == NameSearXNG {
		return f.srv.URL + "/searxng/"
	}
	return f.srv.URL
}

func (f *fakeEngine) backend(t *testing.T, timeout time.Duration) Backend {
	t.Helper()
	b, err := New(Config{Backend: f.v.name, BaseURL: f.baseURL(), APIKey: f.v.key, Timeout: timeout})
	if err != nil {
		t.Fatalf("New(%s): %v", f.v.name, err)
	}
	return b
}

func TestWebSearchRequestAndResults(t *testing.T) {
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			f := newFakeEngine(t, v)
			b := f.backend(t, 0)
			const query = "How tall is Mount Everest? (in metres) & why"
			got, err := b.Search(context.Background(), query, 3)
			if err != nil {
				t.Fatalf("Search: %v", err)
			}
			if q := f.lastQuery.Load(); q != query {
				t.Errorf("engine got query %q, want %q", q, query)
			}
			wantCount := int32(3)
			if v.name == NameSearXNG {
				wantCount = 0 // SearXNG takes no count
			}
			if c := f.lastCount.Load(); c != wantCount {
				t.Errorf("engine asked for %d results, want %d", c, wantCount)
			}
			want := []Result{
				{URL: fakeWeb[0].URL, Title: fakeWeb[0].Title, Snippet: fakeWeb[0].Snippet},
				{URL: fakeWeb[1].URL, Title: fakeWeb[1].Title, Snippet: fakeWeb[1].Snippet},
				{URL: fakeWeb[2].URL, Title: fakeWeb[2].Title, Snippet: fakeWeb[2].Snippet},
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Search =\n%q\nwant\n%q", got, want)
			}
		})
	}
}

func TestWebSearchAsksForAtMostTwenty(t *testing.T) {
	for _, v := range vendors {
		if v.name == NameSearXNG {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			f := newFakeEngine(t, v)
			got, err := f.backend(t, 0).Search(context.Background(), "everest", 50)
			if err != nil {
				t.Fatal(err)
			}
			if c := f.lastCount.Load(); c != maxWebResults {
				t.Errorf("asked for %d results, want the API's maximum %d", c, maxWebResults)
			}
			if len(got) != len(fakeWeb) {
				t.Errorf("%d results, want %d", len(got), len(fakeWeb))
			}
		})
	}
}

func TestWebSearchShortensLongQueries(t *testing.T) {
	long := strings.Repeat("mountain height survey ", 60) // 180 words, 1380 characters
	for _, v := range vendors {
		if v.name == NameSearXNG {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			f := newFakeEngine(t, v)
			if _, err := f.backend(t, 0).Search(context.Background(), long, 5); err != nil {
				t.Fatal(err)
			}
			q := f.lastQuery.Load().(string)
			if length(q) > 400 || len(strings.Fields(q)) > 50 && v.name == NameBrave || !strings.HasPrefix(long, q) {
				t.Errorf("query sent: %d characters, %d words: %q", length(q), len(strings.Fields(q)), q)
			}
		})
	}
}

func TestWebSearchStatusErrors(t *testing.T) {
	for _, v := range vendors {
		for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusUnprocessableEntity,
			http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
			t.Run(fmt.Sprintf("%s/%d", v.name, status), func(t *testing.T) {
				f := newFakeEngine(t, v)
				f.answer = func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(status)
					io.WriteString(w, v.problem(status, v.key))
				}
				got, err := f.backend(t, 0).Search(context.Background(), "everest", 3)
				if err == nil {
					t.Fatalf("Search = %v, want an error", got)
				}
				msg := err.Error()
				if !strings.Contains(msg, strconv.Itoa(status)) || !strings.Contains(msg, v.name) {
					t.Errorf("error %q names neither the status nor the engine", msg)
				}
				if v.key != "" && strings.Contains(msg, v.key) {
					t.Errorf("error quotes the key: %q", msg)
				}
				var se *StatusError
				if !errors.As(err, &se) || se.Status != status {
					t.Fatalf("error %v is not a *StatusError with status %d", err, status)
				}
				if want := status == 429 || status >= 500; se.Retriable() != want {
					t.Errorf("Retriable = %v, want %v", se.Retriable(), want)
				}
			})
		}
	}
}

func TestWebSearchMalformedAnswers(t *testing.T) {
	bodies := map[string]string{
		"an HTML page":     "<!DOCTYPE html><html><body>Login required for " + testKey + "</body></html>",
		"truncated JSON":   `{"results":[{"url":"https://example.org","title":"x"`,
		"a results string": `{"type":"search","results":"none","web":{"results":"none"}}`,
		"another API":      `{"status":"ok","data":[]}`,
		"empty body":       "",
	}
	for _, v := range vendors {
		for name, body := range bodies {
			t.Run(v.name+"/"+name, func(t *testing.T) {
				f := newFakeEngine(t, v)
				f.answer = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }
				got, err := f.backend(t, 0).Search(context.Background(), "everest", 3)
				if err == nil {
					t.Fatalf("Search = %v, want an error", got)
				}
				if !strings.Contains(err.Error(), "malformed") || v.key != "" && strings.Contains(err.Error(), v.key) {
					t.Errorf("error %q, want one saying the answer is malformed, without the key", err)
				}
			})
		}
	}
}

func TestWebSearchRefusesHugeAnswers(t *testing.T) {
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			f := newFakeEngine(t, v)
			f.answer = func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"type":"search","results":[{"url":"https://example.org","content":"`)
				io.WriteString(w, strings.Repeat("x", maxResponse))
				io.WriteString(w, `"}]}`)
			}
			if got, err := f.backend(t, 0).Search(context.Background(), "everest", 3); err == nil || !strings.Contains(err.Error(), "larger than") {
				t.Errorf("Search = %v, %v; want an error about the size", got, err)
			}
		})
	}
}

func TestWebSearchTimeout(t *testing.T) {
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			f := newFakeEngine(t, v)
			f.answer = func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
			start := time.Now()
			_, err := f.backend(t, 100*time.Millisecond).Search(context.Background(), "everest", 3)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "100ms") {
				t.Errorf("Search = %v, want a timeout after 100ms", err)
			}
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("Search returned after %s", elapsed)
			}
		})
	}
}

func TestWebSearchCallerCancels(t *testing.T) {
	for _, v := range vendors {
		t.Run(v.name, func(t *testing.T) {
			f := newFakeEngine(t, v)
			ctx, cancel := context.WithCancel(context.Background())
			f.answer = func(w http.ResponseWriter, r *http.Request) {
				cancel()
				<-r.Context().Done()
			}
			if _, err := f.backend(t, time.Minute).Search(ctx, "everest", 3); !errors.Is(err, context.Canceled) {
				t.Errorf("Search = %v, want context.Canceled", err)
			}
		})
	}
}

// A redirect would carry Brave's key header to whatever host it names.
func TestWebSearchDoesNotFollowRedirectsWithTheKey(t *testing.T) {
	var leaked atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(true)
	}))
	defer elsewhere.Close()
	for _, v := range vendors {
		if v.key == "" {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			f := newFakeEngine(t, v)
			f.answer = func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
			}
			_, err := f.backend(t, 0).Search(context.Background(), "everest", 3)
			var se *StatusError
			if !errors.As(err, &se) || se.Status != http.StatusTemporaryRedirect {
				t.Errorf("Search = %v, want the redirect reported as an error", err)
			}
			if leaked.Load() {
				t.Error("the request, key and all, followed the redirect to another host")
			}
		})
	}
}

func TestParseWebResults(t *testing.T) {
	brave := `{"type":"search","web":{"type":"search","results":[
		{"title":"Everest &amp; <strong>K2</strong>","url":"https://example.org/a","description":"The <strong>highest</strong> peak&#x27;s height &lt;b&gt; in   metres"},
		{"title":"Script","url":"javascript:alert(1)","description":"x"},
		{"title":"","url":"  https://example.org/b  ","description":null},
		{"title":"Again","url":"https://example.org/a","description":"repeat"}]}}`
	got, err := parseBrave([]byte(brave), 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{URL: "https://example.org/a", Title: "Everest & K2", Snippet: "The highest peak's height <b> in metres"},
		{URL: "https://example.org/b", Title: "https://example.org/b", Snippet: ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseBrave =\n%q\nwant\n%q", got, want)
	}

	for name, parse := range map[string]func([]byte, int) ([]Result, error){
		"searxng": parseSearXNG, "tavily": parseTavily,
	} {
		long := strings.Repeat("word ", 200)
		body := `{"results":[{"url":"data:text/html,hi","title":"x","content":"x"},` +
			`{"url":"https://example.org/long","title":"Long\n\ttitle","content":"` + long + `"}]}`
		got, err := parse([]byte(body), 10)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != 1 || got[0].Title != "Long title" || length(got[0].Snippet) > maxSnippet || !strings.HasSuffix(got[0].Snippet, "…") {
			t.Errorf("%s: %q", name, got)
		}
		if got, err := parse([]byte(`{"results":[]}`), 10); err != nil || got == nil || len(got) != 0 {
			t.Errorf("%s: no results = %#v, %v; want an empty slice", name, got, err)
		}
	}
}
