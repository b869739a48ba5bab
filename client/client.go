// Package client is the Go client of crosscheck's /v1 API. It submits
// queries, follows them (polling at the spec's cadence, or over the SSE
// stream, resumed with Last-Event-ID when the connection drops), lists and
// cancels them, estimates their cost, reads the model catalog and uploads
// files. The spec's retry rules are built in: a 429 waits the Retry-After
// seconds; a retriable 5xx is retried after 1 s, then 5 s, then given up;
// a submission carries an Idempotency-Key (generated when the caller gives
// none), so a retry after 503 service_restarting cannot run the query
// twice. Failures the service answers with are *Error values carrying the
// envelope's code. The wire types are those of package apiv1.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/crosscheck/crosscheck/apiv1"
)

// DefaultURL is the address `crosscheck serve` listens on by default.
const DefaultURL = "http://127.0.0.1:8080"

// Limits of what the client reads from the service.
const (
	// maxBodyBytes bounds a JSON answer (a query's result included).
	maxBodyBytes = 16 << 20
	// maxErrorBytes bounds the body read of a failed request.
	maxErrorBytes = 64 << 10
)

// DefaultRetryDelays are the waits before the second and third attempts of
// a request that failed with a retriable 5xx or did not reach the service.
var DefaultRetryDelays = []time.Duration{1 * time.Second, 5 * time.Second}

// DefaultMaxRateLimitWaits is how many 429 answers in a row a request
// waits out before it returns the rate_limited error.
const DefaultMaxRateLimitWaits = 10

// Client calls one crosscheck service with one API key. Its methods are
// safe for concurrent use. Change its fields only before its first use.
type Client struct {
	baseURL string
	key     string

	// HTTP sends the requests; New sets http.Client with no overall
	// timeout (a stream lasts as long as its query), and each call is
	// bounded by its context.
	HTTP *http.Client
	// RetryDelays are the waits before each retry of a retriable 5xx or a
	// request that did not reach the service; after the last the error is
	// returned.
	RetryDelays []time.Duration
	// MaxRateLimitWaits bounds the 429 answers a request waits out.
	MaxRateLimitWaits int
	// ReconnectDelay, when set, is the wait before a dropped stream is
	// reopened; unset, the stream's own retry field (else 1 s) decides.
	ReconnectDelay time.Duration
	// UserAgent is sent with every request.
	UserAgent string
	// Timeout bounds each attempt of a request other than a stream, from
	// its sending to its answer read; 0 is no bound but the context's.
	Timeout time.Duration
	// StreamIdle is how long a stream may stay silent (no event, no
	// heartbeat) before it is taken for dropped and reopened; 0 is never.
	StreamIdle time.Duration
}

// Defaults of the client's time bounds.
const (
	DefaultTimeout = 60 * time.Second
	// DefaultStreamIdle is four times the service's default heartbeat
	// interval (15 s).
	DefaultStreamIdle = 60 * time.Second
)

// New returns a client of the service at baseURL (for example
// http://127.0.0.1:8080) that authenticates with key. It refuses a baseURL
// that is not an absolute http or https URL.
func New(baseURL, key string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the service URL %q is not an http:// or https:// address", baseURL)
	}
	return &Client{
		baseURL:           strings.TrimRight(baseURL, "/"),
		key:               key,
		HTTP:              &http.Client{},
		RetryDelays:       DefaultRetryDelays,
		MaxRateLimitWaits: DefaultMaxRateLimitWaits,
		UserAgent:         "crosscheck-go-client/1",
		Timeout:           DefaultTimeout,
		StreamIdle:        DefaultStreamIdle,
	}, nil
}

// request is one API call, re-sendable: its body is bytes.
type request struct {
	method, path string
	body         []byte
	contentType  string
	header       http.Header
	// timeout bounds each attempt, its answer's body read included; 0 is
	// no bound.
	timeout time.Duration
}

// do sends req under the retry rules and decodes a 2xx JSON answer into
// out (when not nil). It returns the final *Error of a refused request, or
// the transport's error after the last retry.
func (c *Client) do(ctx context.Context, req request, out any) error {
	req.timeout = c.Timeout
	resp, err := c.send(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyBytes))
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", req.method, req.path, err)
	}
	if len(body) > maxBodyBytes {
		return fmt.Errorf("%s %s: the answer is larger than %d bytes", req.method, req.path, maxBodyBytes)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", req.method, req.path, err)
	}
	return nil
}

// send sends req until it gets a 2xx answer, applying the retry rules, and
// returns that answer with its body unread.
func (c *Client) send(ctx context.Context, req request) (*http.Response, error) {
	retries, waits := 0, 0
	for {
		resp, err := c.once(ctx, req)
		var wait time.Duration
		switch {
		case err == nil && resp.StatusCode < 300:
			return resp, nil
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if retries >= len(c.RetryDelays) {
				return nil, err
			}
			wait = c.RetryDelays[retries]
			retries++
		default:
			apiErr := readError(resp)
			switch {
			case resp.StatusCode == http.StatusTooManyRequests && apiErr.RetryAfter > 0:
				if waits >= c.MaxRateLimitWaits {
					return nil, apiErr
				}
				wait = apiErr.RetryAfter
				waits++
			case resp.StatusCode >= 500 && apiErr.Retriable:
				if retries >= len(c.RetryDelays) {
					return nil, apiErr
				}
				wait = max(c.RetryDelays[retries], apiErr.RetryAfter)
				retries++
			default:
				return nil, apiErr
			}
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// once sends req one time.
func (c *Client) once(ctx context.Context, req request) (*http.Response, error) {
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	cancel := context.CancelFunc(func() {})
	if req.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, req.timeout)
	}
	r, err := http.NewRequestWithContext(ctx, req.method, c.baseURL+req.path, body)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, v := range req.header {
		r.Header[k] = v
	}
	if req.contentType != "" {
		r.Header.Set("Content-Type", req.contentType)
	}
	r.Header.Set("Authorization", "Bearer "+c.key)
	r.Header.Set("User-Agent", c.UserAgent)
	resp, err := c.HTTP.Do(r)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s %s: %w", req.method, req.path, scrub(err))
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose ends an attempt's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// scrub drops the URL from a transport error: it is the caller's own and
// makes the message long; the cause stays.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// readError reads and closes a failed answer and returns its *Error. An
// answer without an envelope gets the code CodeHTTP, and is retriable when
// its status is 502, 503 or 504 (a proxy's answer while the service is
// away).
func readError(resp *http.Response) *Error {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	e := &Error{Status: resp.StatusCode}
	var env apiv1.ErrorBody
	if json.Unmarshal(raw, &env) == nil && env.Error.Code != "" {
		e.Code, e.Message, e.Retriable, e.DocsURL = env.Error.Code, env.Error.Message, env.Error.Retriable, env.Error.DocsURL
		if env.Error.RequestID != nil {
			e.RequestID = *env.Error.RequestID
		}
		if env.Error.RetryAfterSeconds != nil && *env.Error.RetryAfterSeconds > 0 {
			e.RetryAfter = time.Duration(*env.Error.RetryAfterSeconds) * time.Second
		}
	} else {
		e.Code = CodeHTTP
		e.Message = http.StatusText(resp.StatusCode)
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			e.Retriable = true
		}
	}
	if s, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// sleep waits d, or returns ctx's error when it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
