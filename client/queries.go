package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
)

// Query statuses.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
)

// Terminal reports whether a query status is final: completed or failed.
func Terminal(status string) bool { return status == StatusCompleted || status == StatusFailed }

// SubmitOption changes one submission.
type SubmitOption func(*submitOptions)

type submitOptions struct{ idempotencyKey string }

// WithIdempotencyKey sends key (at most 200 characters) as the
// submission's Idempotency-Key instead of a generated one: a caller that
// resubmits after a crash of its own passes the key it used before.
func WithIdempotencyKey(key string) SubmitOption {
	return func(o *submitOptions) { o.idempotencyKey = key }
}

// NewIdempotencyKey returns a fresh random Idempotency-Key.
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "idem_" + hex.EncodeToString(b[:])
}

// Submit submits a query and returns the service's acceptance. Every
// attempt of one Submit carries the same Idempotency-Key, so a retry after
// 503 service_restarting or a lost answer makes the query at most once.
func (c *Client) Submit(ctx context.Context, q apiv1.QueryRequest, opts ...SubmitOption) (*apiv1.Accepted, error) {
	o := submitOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.idempotencyKey == "" {
		o.idempotencyKey = NewIdempotencyKey()
	}
	body, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	var out apiv1.Accepted
	req := request{method: http.MethodPost, path: "/v1/queries", body: body, contentType: "application/json",
		header: http.Header{"Idempotency-Key": {o.idempotencyKey}}}
	if err := c.do(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Get returns the query as it is now.
func (c *Client) Get(ctx context.Context, id string) (*apiv1.Query, error) {
	var out apiv1.Query
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/queries/" + url.PathEscape(id)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PollInterval is the wait before the next poll of a query that was
// submitted elapsed ago, as the spec recommends: 5 s during the first
// minute, then 10 s. It is never below one second.
func PollInterval(elapsed time.Duration) time.Duration {
	if elapsed < time.Minute {
		return 5 * time.Second
	}
	return 10 * time.Second
}

// Wait polls the query at the spec's cadence (PollInterval, counted from
// the first poll) until it ends, and returns it. A query that ended failed
// is returned with an *Error carrying its error code; a query that ended
// completed with a nil error. ctx bounds the wait.
func (c *Client) Wait(ctx context.Context, id string) (*apiv1.Query, error) {
	start := time.Now()
	for {
		q, err := c.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if Terminal(q.Status) {
			return q, queryError(q)
		}
		if err := sleep(ctx, max(PollInterval(time.Since(start)), time.Second)); err != nil {
			return q, err
		}
	}
}

// queryError is the *Error of a failed query, or nil.
func queryError(q *apiv1.Query) error {
	if q.Status != StatusFailed {
		return nil
	}
	e := &Error{Code: CodeHTTP, RequestID: q.RequestID, Message: "the query failed"}
	if q.Error != nil {
		e.Code, e.Message = q.Error.Code, q.Error.Message
	}
	return e
}

// ListOptions select a page of List. Zero values leave a filter out.
type ListOptions struct {
	// Limit is the page's size, 1 to 100; 0 is the service's default (20).
	Limit int
	// After is the previous page's NextAfter.
	After string
	// Status and Mode keep only the queries with that status or mode.
	Status, Mode string
}

// List returns one page of the account's queries, newest first.
func (c *Client) List(ctx context.Context, opts ListOptions) (*apiv1.QueryList, error) {
	v := url.Values{}
	if opts.Limit != 0 {
		v.Set("limit", strconv.Itoa(opts.Limit))
	}
	for k, s := range map[string]string{"after": opts.After, "status": opts.Status, "mode": opts.Mode} {
		if s != "" {
			v.Set(k, s)
		}
	}
	path := "/v1/queries"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out apiv1.QueryList
	if err := c.do(ctx, request{method: http.MethodGet, path: path}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// All yields every query that opts select, newest first, fetching the
// pages as it goes; opts.After is where it starts. It stops at the first
// error, which it yields.
func (c *Client) All(ctx context.Context, opts ListOptions) iter.Seq2[apiv1.QuerySummary, error] {
	return func(yield func(apiv1.QuerySummary, error) bool) {
		for {
			page, err := c.List(ctx, opts)
			if err != nil {
				yield(apiv1.QuerySummary{}, err)
				return
			}
			for _, q := range page.Data {
				if !yield(q, nil) {
					return
				}
			}
			if !page.HasMore || page.NextAfter == nil || *page.NextAfter == "" {
				return
			}
			opts.After = *page.NextAfter
		}
	}
}

// Cancel asks the service to stop a query and returns the query as it was
// then; the query ends failed with the code CodeCancelled shortly after. A
// query that had already ended gives an *Error with CodeQueryEnded, an
// unknown one CodeNotFound.
func (c *Client) Cancel(ctx context.Context, id string) (*apiv1.Query, error) {
	var out apiv1.Query
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/queries/" + url.PathEscape(id) + "/cancel"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Estimate returns what the query would cost, without submitting it.
func (c *Client) Estimate(ctx context.Context, q apiv1.QueryRequest) (*apiv1.Estimate, error) {
	body, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	var out apiv1.Estimate
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/estimate-cost", body: body, contentType: "application/json"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Models returns the catalog of the models a query may select.
func (c *Client) Models(ctx context.Context) (*apiv1.Catalog, error) {
	var out apiv1.Catalog
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/models"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MaxUploadBytes is the largest file Upload sends: the service's own
// limit for its largest kind (PDF, 32 MB) plus room for the form.
const MaxUploadBytes = 32<<20 + 64<<10

// Upload uploads a file read from r under name and returns it; its FileID
// goes into QueryRequest.Files. The content is read into memory first (at
// most MaxUploadBytes), so that a retry can send it again.
func (c *Client) Upload(ctx context.Context, name string, r io.Reader) (*apiv1.File, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	part, err := mw.CreateFormFile("file", name)
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(part, io.LimitReader(r, MaxUploadBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if n > MaxUploadBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes, the most the service accepts", name, MaxUploadBytes)
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	var out apiv1.File
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/files", body: buf.Bytes(), contentType: mw.FormDataContentType()}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
