package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/handlers"
	"github.com/crosscheck/crosscheck/internal/projections"
)

// openAPIFile is the API document, relative to this package's directory.
const openAPIFile = "../../api/openapi.yaml"

// openAPI is the document, loaded and validated once for all tests.
var openAPI struct {
	once sync.Once
	// doc is the document as written, servers included.
	doc *openapi3.T
	// router matches on the method and path only: the test servers listen on
	// random ports, and the document's server URLs cannot match them.
	router routers.Router
	err    error
}

func loadOpenAPI() (*openapi3.T, routers.Router, error) {
	openAPI.once.Do(func() {
		openAPI.doc, openAPI.router, openAPI.err = readOpenAPI()
		// kin-openapi decodes text/plain itself. A stream's body is not
		// validated (only its status and content type), but a decoder keeps
		// kin-openapi from failing on the media type should it look at one.
		if openapi3filter.RegisteredBodyDecoder("text/event-stream") == nil {
			openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
		}
	})
	return openAPI.doc, openAPI.router, openAPI.err
}

func readOpenAPI() (*openapi3.T, routers.Router, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(openAPIFile)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", openAPIFile, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", openAPIFile, err)
	}
	// A second copy without servers for the router, which then matches the
	// path alone (the legacy router ignores path-level servers). It needs a
	// loader of its own: a loader returns the document it loaded before.
	bare, err := openapi3.NewLoader().LoadFromFile(openAPIFile)
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", openAPIFile, err)
	}
	bare.Servers = nil
	for _, item := range bare.Paths.Map() {
		item.Servers = nil
	}
	router, err := legacy.NewRouter(bare)
	if err != nil {
		return nil, nil, fmt.Errorf("router for %s: %w", openAPIFile, err)
	}
	return doc, router, nil
}

// validationOptions: strict on statuses, permissive on credentials (the
// service checks them; the document only declares them).
func validationOptions() *openapi3filter.Options {
	return &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		SkipSettingDefaults:   true,
		MultiError:            true,
	}
}

// checkOpenAPI validates one exchange against api/openapi.yaml: the response
// always, the request when the service accepted it (2xx; tests send invalid
// requests on purpose). req is the request that was sent, reqBody its body (nil
// for none), resp the response and respBody its whole body. A
// text/event-stream response is checked for its status and content type only.
func checkOpenAPI(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	_, router, err := loadOpenAPI()
	if err != nil {
		t.Errorf("openapi: %v", err)
		return
	}
	where := fmt.Sprintf("%s %s → %d", req.Method, req.URL.Path, resp.StatusCode)
	ctx := context.Background()

	// The request as sent, with a fresh body for the validator to read. The
	// service reads a body as JSON whatever its Content-Type; the document says
	// application/json, so a body sent without one is taken as that.
	r := req.Clone(ctx)
	r.Body, r.GetBody, r.ContentLength = http.NoBody, nil, 0
	if len(reqBody) > 0 {
		body := bytes.Clone(reqBody)
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.Body, _ = r.GetBody()
		r.ContentLength = int64(len(body))
		if r.Header.Get("Content-Type") == "" {
			r.Header.Set("Content-Type", "application/json")
		}
	}
	ok2xx := resp.StatusCode >= 200 && resp.StatusCode < 300

	route, pathParams, err := router.FindRoute(r)
	if err != nil {
		checkUndocumented(t, where, ok2xx, resp, respBody, err)
		return
	}
	if noRoute(resp, respBody) {
		// A documented path sent to the other server (the router matches paths
		// of both): that server's catch-all answered.
		checkUndocumented(t, where, ok2xx, resp, respBody, fmt.Errorf("no route on this server"))
		return
	}
	opts := validationOptions()
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: pathParams, Route: route, Options: opts}
	if ok2xx {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			t.Errorf("openapi: %s: the request does not match the document: %v", where, err)
		}
	}

	header := resp.Header.Clone()
	if header == nil {
		header = http.Header{}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: header, Options: opts}
	out.SetBodyBytes(bytes.Clone(respBody))
	if mediaType(header.Get("Content-Type")) == "text/event-stream" {
		o := *opts
		o.ExcludeResponseBody = true
		out.Options = &o
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			t.Errorf("openapi: %s: the response does not match the document: %v", where, err)
			return
		}
		if ref := responseFor(route.Operation, resp.StatusCode); ref == nil || ref.Value == nil || ref.Value.Content.Get(header.Get("Content-Type")) == nil {
			t.Errorf("openapi: %s: the document has no %q response for this status", where, header.Get("Content-Type"))
		}
		return
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("openapi: %s: the response does not match the document: %v\nbody: %s", where, err, truncateBody(respBody))
	}
}

// checkUndocumented judges an exchange the document has no operation for: a
// path of the other server, an unknown path, or a method a path does not
// have. The service answers those with the error envelope, and never with
// success.
func checkUndocumented(t testing.TB, where string, ok2xx bool, resp *http.Response, respBody []byte, routeErr error) {
	t.Helper()
	if ok2xx {
		t.Errorf("openapi: %s: the service answered success to an operation the document does not describe (%v)", where, routeErr)
		return
	}
	doc, _, _ := loadOpenAPI()
	if mt := mediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		t.Errorf("openapi: %s: an operation the document does not describe (%v) was answered %q, not the JSON error envelope\nbody: %s", where, routeErr, mt, truncateBody(respBody))
		return
	}
	var v any
	if err := json.Unmarshal(respBody, &v); err != nil {
		t.Errorf("openapi: %s: the error body is not JSON: %v\nbody: %s", where, err, truncateBody(respBody))
		return
	}
	schema := doc.Components.Schemas["ErrorBody"]
	if err := schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		t.Errorf("openapi: %s: the error body does not match ErrorBody: %v", where, err)
		return
	}
	code := v.(map[string]any)["error"].(map[string]any)["code"].(string)
	if want := handlers.Status(code); want != resp.StatusCode {
		t.Errorf("openapi: %s: error code %s must be answered with %d", where, code, want)
	}
}

// noRoute reports whether resp is a server's answer to a path it does not
// serve: 404 not_found with the message "no route <method> <path>".
func noRoute(resp *http.Response, body []byte) bool {
	if resp.StatusCode != http.StatusNotFound || mediaType(resp.Header.Get("Content-Type")) != "application/json" {
		return false
	}
	var e handlers.ErrorBody
	return json.Unmarshal(body, &e) == nil && e.Error.Code == "not_found" && strings.HasPrefix(e.Error.Message, "no route ")
}

func responseFor(op *openapi3.Operation, status int) *openapi3.ResponseRef {
	if op == nil || op.Responses == nil {
		return nil
	}
	if ref := op.Responses.Status(status); ref != nil {
		return ref
	}
	return op.Responses.Default()
}

func mediaType(contentType string) string {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(contentType))
	}
	return mt
}

func truncateBody(b []byte) string {
	const max = 2000
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// Every route the handlers register, by server. Keep in step with
// internal/handlers/api.go and admin.go; TestOpenAPIDocument also walks the
// real routers to catch a route missing here.
var (
	publicRoutes = []string{
		"GET /healthz",
		"GET /readyz",
		"GET /docs/errors/{code}",
		"POST /v1/queries",
		"GET /v1/queries",
		"GET /v1/queries/{id}",
		"POST /v1/queries/{id}/cancel",
		"GET /v1/queries/{id}/stream",
		"GET /v1/models",
		"POST /v1/estimate-cost",
		"GET /v1/models/{id}",
		"POST /v1/chat/completions",
		"POST /v1/files",
		"GET /v1/files",
		"GET /v1/files/{id}",
		"DELETE /v1/files/{id}",
	}
	adminRoutes = []string{
		"GET /healthz",
		"GET /readyz",
		"GET /metrics",
		"POST /admin/v1/accounts",
		"GET /admin/v1/accounts/{account_id}",
		"POST /admin/v1/accounts/{account_id}/keys",
		"POST /admin/v1/keys/{fingerprint}/{action}",
		"POST /admin/v1/accounts/{account_id}/credits",
		"PUT /admin/v1/accounts/{account_id}/monthly-cap",
		"GET /admin/v1/accounts/{account_id}/ledger",
		"GET /admin/v1/accounts/{account_id}/storage",
		"POST /admin/v1/accounts/{account_id}/models",
		"GET /admin/v1/accounts/{account_id}/models",
		"GET /admin/v1/accounts/{account_id}/models/{model_id}",
		"DELETE /admin/v1/accounts/{account_id}/models/{model_id}",
		"POST /admin/v1/accounts/{account_id}/models/{model_id}/{action}",
		"POST /admin/v1/master-key/rotate",
	}
)

// Default ports of the two servers in the document.
const (
	publicPort = "8080"
	adminPort  = "8081"
)

func TestOpenAPIDocument(t *testing.T) {
	doc, _, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi is %q, want 3.1.0", doc.OpenAPI)
	}

	t.Run("routes match the handlers", func(t *testing.T) {
		walked := func(h http.Handler) []string {
			var out []string
			err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
				out = append(out, method+" "+strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/"))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(out)
			return out
		}
		for _, c := range []struct {
			name   string
			listed []string
			router http.Handler
		}{
			{"public", publicRoutes, (&handlers.Server{}).Handler()},
			{"admin", adminRoutes, (&handlers.Admin{}).Handler()},
		} {
			want := slices.Sorted(slices.Values(c.listed))
			if got := walked(c.router); !slices.Equal(got, want) {
				t.Errorf("the %s router registers %q; the list in this test is %q", c.name, got, want)
			}
		}
	})

	t.Run("every route is documented on its server", func(t *testing.T) {
		for _, c := range []struct {
			routes []string
			port   string
		}{{publicRoutes, publicPort}, {adminRoutes, adminPort}} {
			for _, rt := range c.routes {
				method, path, _ := strings.Cut(rt, " ")
				item := doc.Paths.Value(path)
				if item == nil {
					t.Errorf("%s: path %s is not in the document", rt, path)
					continue
				}
				if item.GetOperation(method) == nil {
					t.Errorf("%s: the document has no %s operation on %s", rt, method, path)
				}
				servers := item.Servers
				if len(servers) == 0 {
					servers = doc.Servers
				}
				if !slices.ContainsFunc(servers, func(s *openapi3.Server) bool { return serverPort(s) == c.port }) {
					t.Errorf("%s: the path's servers do not include the one on port %s", rt, c.port)
				}
			}
		}
	})

	t.Run("the document has no other operations", func(t *testing.T) {
		known := map[string]bool{}
		for _, rt := range append(slices.Clone(publicRoutes), adminRoutes...) {
			known[rt] = true
		}
		for path, item := range doc.Paths.Map() {
			for method := range item.Operations() {
				if !known[method+" "+path] {
					t.Errorf("the document describes %s %s, which no handler serves", method, path)
				}
			}
		}
	})

	t.Run("error responses", func(t *testing.T) {
		errorBody := doc.Components.Schemas["ErrorBody"]
		if errorBody == nil {
			t.Fatal("components.schemas.ErrorBody is missing")
		}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				for status, ref := range op.Responses.Map() {
					code, err := strconv.Atoi(status)
					if err != nil || code < 400 {
						continue
					}
					where := fmt.Sprintf("%s %s %s", method, path, status)
					if path == "/docs/errors/{code}" && code == http.StatusNotFound {
						continue // the one plain-text error: an unknown code's documentation
					}
					media := ref.Value.Content.Get("application/json")
					if media == nil || media.Schema == nil {
						t.Errorf("%s: no application/json schema", where)
						continue
					}
					if !refersTo(media.Schema, "#/components/schemas/ErrorBody") {
						t.Errorf("%s: the schema does not refer to #/components/schemas/ErrorBody", where)
					}
					codes := errorCodes(media.Schema)
					if len(codes) == 0 {
						t.Errorf("%s: the response does not narrow error.code to the codes it carries", where)
					}
					for _, c := range codes {
						if want := handlers.Status(c); want != code {
							t.Errorf("%s: lists error code %s, which the service answers with %d", where, c, want)
						}
					}
					if code == http.StatusTooManyRequests {
						if h := ref.Value.Headers["Retry-After"]; h == nil || !h.Value.Required {
							t.Errorf("%s: a 429 must declare the Retry-After header as required", where)
						}
					}
				}
			}
		}
	})

	t.Run("examples are valid", func(t *testing.T) {
		check := func(where string, media *openapi3.MediaType, as openapi3.SchemaValidationOption) {
			if media == nil || media.Schema == nil {
				return
			}
			values := map[string]any{}
			if media.Example != nil {
				values["example"] = media.Example
			}
			for name, ex := range media.Examples {
				if ex != nil && ex.Value != nil {
					values["examples."+name] = ex.Value.Value
				}
			}
			for name, v := range values {
				if err := media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), as); err != nil {
					t.Errorf("%s %s: does not match the schema: %v", where, name, err)
				}
			}
		}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				if op.RequestBody != nil && op.RequestBody.Value != nil {
					check(method+" "+path+" request", op.RequestBody.Value.Content.Get("application/json"), openapi3.VisitAsRequest())
				}
				for status, ref := range op.Responses.Map() {
					check(method+" "+path+" "+status, ref.Value.Content.Get("application/json"), openapi3.VisitAsResponse())
				}
			}
		}
	})

	t.Run("every error code is documented", func(t *testing.T) {
		codes := doc.Components.Schemas["ErrorCode"].Value.Enum
		h := (&handlers.Server{}).Handler()
		for _, c := range codes {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/docs/errors/"+c.(string), nil))
			if rec.Code != http.StatusOK {
				t.Errorf("error code %v is in the document but GET /docs/errors/%v answers %d", c, c, rec.Code)
			}
		}
	})

	t.Run("Go values match the schemas", func(t *testing.T) {
		checkGoValues(t, doc)
	})

	t.Run("the checker accepts a valid exchange and rejects an invalid one", func(t *testing.T) {
		id := "req_01M7Z5ZWVQ401ZYRSQ5ZF59AJD"
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:43210/v1/queries", nil)
		req.Header.Set("Authorization", "Bearer xchk_triy866s4xGN6Ulavv5vMM1puDr48gIQwmE20UzK")
		body := []byte(`{"mode":"unify","prompt":"hello"}`)
		good := []byte(`{"request_id":"` + id + `","object":"query","status":"queued","idempotent_replayed":false,"poll_url":"/v1/queries/` + id + `","stream_url":"/v1/queries/` + id + `/stream"}`)
		resp := func(status int, h ...string) *http.Response {
			r := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}}
			for i := 0; i+1 < len(h); i += 2 {
				r.Header.Set(h[i], h[i+1])
			}
			return r
		}
		checkOpenAPI(t, req, body, resp(http.StatusAccepted, "Location", "/v1/queries/"+id), good)

		for name, c := range map[string]struct {
			body     []byte
			resp     *http.Response
			respBody []byte
		}{
			"missing Location":     {body, resp(http.StatusAccepted), good},
			"undocumented field":   {body, resp(http.StatusAccepted, "Location", "/x"), []byte(strings.Replace(string(good), `{`, `{"extra":1,`, 1))},
			"undocumented status":  {body, resp(http.StatusTeapot), []byte(`{}`)},
			"invalid request body": {[]byte(`{"mode":"unify"}`), resp(http.StatusAccepted, "Location", "/x"), good},
			"429 without Retry-After": {body, resp(http.StatusTooManyRequests), []byte(`{"error":{"code":"rate_limited","message":"m","request_id":null,` +
				`"retriable":true,"retry_after_seconds":30,"docs_url":"http://127.0.0.1/docs/errors/rate_limited"}}`)},
		} {
			rec := &recordingTB{TB: t}
			checkOpenAPI(rec, req, c.body, c.resp, c.respBody)
			if len(rec.errors) == 0 {
				t.Errorf("%s: the checker accepted an exchange that does not match the document", name)
			}
			for _, e := range rec.errors {
				t.Logf("%s: rejected as expected: %s", name, e)
			}
		}
	})
}

// recordingTB notes Errorf instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Helper() {}

// serverPort is the port of a server's URL with its variables' defaults.
func serverPort(s *openapi3.Server) string {
	u := s.URL
	for name, v := range s.Variables {
		u = strings.ReplaceAll(u, "{"+name+"}", v.Default)
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(u, "http://"), ":")
	port, _, _ = strings.Cut(port, "/")
	return port
}

// refersTo reports whether s is, or is an allOf including, the reference.
func refersTo(s *openapi3.SchemaRef, ref string) bool {
	if s == nil {
		return false
	}
	if s.Ref == ref {
		return true
	}
	return s.Value != nil && slices.ContainsFunc(s.Value.AllOf, func(x *openapi3.SchemaRef) bool { return refersTo(x, ref) })
}

// errorCodes returns the error codes an error response's schema narrows
// error.code to, through its allOf parts.
func errorCodes(s *openapi3.SchemaRef) []string {
	var out []string
	if s == nil || s.Value == nil || s.Ref == "#/components/schemas/ErrorBody" {
		return nil
	}
	if e := s.Value.Properties["error"]; e != nil && e.Value != nil {
		if c := e.Value.Properties["code"]; c != nil && c.Value != nil && c.Ref == "" {
			for _, v := range c.Value.Enum {
				out = append(out, fmt.Sprint(v))
			}
			if c.Value.Const != nil {
				out = append(out, fmt.Sprint(c.Value.Const))
			}
		}
	}
	for _, part := range s.Value.AllOf {
		out = append(out, errorCodes(part)...)
	}
	return out
}

// checkGoValues encodes the values the handlers send, built from the same Go
// types, and validates each against its schema: every state of a query result
// as its events fold in, the stream's event data, the submit answer.
func checkGoValues(t *testing.T, doc *openapi3.T) {
	validate := func(schema string, v any) {
		t.Helper()
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var decoded any
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		ref := doc.Components.Schemas[schema]
		if ref == nil {
			t.Fatalf("components.schemas.%s is missing", schema)
		}
		if err := ref.Value.VisitJSON(decoded, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
			t.Errorf("%s does not match %s: %v", raw, schema, err)
		}
	}

	const id = "req_01M7Z5ZWVQ401ZYRSQ5ZF59AJD"
	a := events.ModelRef{Provider: catalog.ProviderA, ModelID: "sim-alpha-standard", Simulated: true}
	b := events.ModelRef{Provider: catalog.ProviderB, ModelID: "sim-beta-pro", Simulated: true}
	d := events.ModelRef{Provider: catalog.ProviderD, ModelID: "sim-delta-lite"}
	usage := events.Usage{InputTokens: 12, OutputTokens: 34}
	at := time.Date(2026, 1, 2, 3, 4, 5, 678, time.UTC)
	history := func(evs ...events.Event) []events.Record {
		var out []events.Record
		for i, ev := range evs {
			out = append(out, events.Record{Seq: uint64(40 + i), Envelope: events.Envelope{Time: at.Add(time.Duration(i) * time.Second)}, Event: ev})
		}
		return out
	}
	submitted := events.QuerySubmitted{RequestID: id, AccountID: "acct_01m7z5zmxn1ptvrgdq1bg68h5s", KeyFingerprint: "triy866s", Mode: "unify", Prompt: "p", Models: []events.ModelRef{a, b, d}}
	completed := history(
		submitted,
		events.QueryStarted{},
		events.ModelAnswered{Model: a, Answer: "- x: 1", Usage: usage, LatencyMS: 12},
		events.ModelAnswered{Model: b, Answer: "- x: 2", Citations: []events.Citation{{URL: "https://example.com/a", Title: "A", Snippet: "s"}, {URL: "https://example.com/b"}}, Usage: usage, LatencyMS: 15},
		events.ModelFailed{Model: d, Class: "rate_limited", Message: "slow down", UpstreamStatus: 429, LatencyMS: 3},
		events.ProgressReported{Stage: events.StageAggregating, Percent: 85, Message: "synthesizing"},
		events.ProgressReported{Stage: events.StageAggregating, Percent: 86},
		events.Synthesized{Model: a, Answer: events.Answer{Text: "x", Conflicts: []events.Conflict{{Topic: "x", Positions: []events.Position{{Model: "provider_a", Position: "1"}, {Model: "provider_b", Position: "2"}}, Resolution: "unresolved"}}}, Usage: usage, LatencyMS: 20},
		events.QueryCompleted{},
	)
	failed := history(
		submitted,
		events.QueryStarted{},
		events.ModelFailed{Model: a, Class: "timeout", Message: "the model call timed out"},
		events.ModelFailed{Model: b, Class: "server_error", Message: "boom", UpstreamStatus: 500},
		events.ModelFailed{Model: d, Class: "authentication", Message: "no"},
		events.QueryFailed{Code: "provider_error", Message: "every selected model failed"},
	)
	for _, recs := range [][]events.Record{completed, failed} {
		q := &projections.QueryDoc{}
		for _, rec := range recs {
			q.Apply(rec)
			validate("QueryResult", q.Result)
			switch e := rec.Event.(type) {
			case events.QueryFailed:
				env := handlers.Envelope(&apperr.Error{Code: e.Code, Message: e.Message}, id, "http://127.0.0.1:8080/docs")
				validate("StreamError", handlers.StreamError{ErrorBody: env, RequestID: id, Status: q.Result.Status})
			case events.QueryCompleted:
			default:
				validate("StreamProgress", handlers.Progress{RequestID: id, Stage: q.Result.Stage, ProgressPercent: q.Result.ProgressPercent, Message: projections.Describe(rec)})
			}
		}
	}
	for _, status := range []string{events.StatusQueued, events.StatusRunning, events.StatusCompleted, events.StatusFailed} {
		validate("SubmitResponse", handlers.SubmitResponse{RequestID: id, Object: "query", Status: status, IdempotentReplayed: true, PollURL: "/v1/queries/" + id, StreamURL: "/v1/queries/" + id + "/stream"})
	}
	validate("ErrorBody", handlers.Envelope(&apperr.Error{Code: apperr.RateLimited, Message: "m", RetryAfter: 30}, "", "http://127.0.0.1:8080/docs"))
	for _, p := range catalog.Simulated().Providers {
		validate("ModelGroup", handlers.ModelGroup{Name: p.Key, Backend: p.Backend, Simulated: p.Simulated(), Models: p.Models})
	}
	validate("ModelGroup", handlers.ModelGroup{Name: "custom", Models: []catalog.Model{}})
}
