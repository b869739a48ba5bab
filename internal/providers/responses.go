package providers

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MaxResponseBytes bounds the body of one response a model backend reads,
// counted as decoded (after gzip): a call's output is bounded to 16,384
// tokens (modes.MaxOutputTokens), a few hundred KB of text even escaped in
// JSON, so 4 MiB leaves room for the vendors' envelopes (search results,
// citations, reasoning summaries) and still bounds what a host that sends
// more, or a small compressed body that inflates, can make the service hold.
const MaxResponseBytes = 4 << 20

// LimitResponses returns a copy of hc (nil: http.DefaultClient) whose
// responses are read to at most max bytes each, counted as decoded:
//
//   - the request's Accept-Encoding is left to the transport, which asks for
//     gzip and decodes it as it reads, so the bound counts decoded bytes;
//   - a response still encoded (a Content-Encoding the transport does not
//     decode: br, zstd, deflate, or gzip the host sent unasked) is refused,
//     never read;
//   - a response whose Content-Length is over max is refused before its body
//     is read, and a read past max fails.
//
// Every refusal is a final *Error of class host_error (not retried): the SDK
// reading the body never sees more than max bytes, so its decoding never
// holds more than a few times that.
func LimitResponses(hc *http.Client, max int64) *http.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	c := *hc
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = &limited{next: next, max: max}
	return &c
}

// limited bounds the response bodies of next.
type limited struct {
	next http.RoundTripper
	max  int64
}

func (l *limited) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Accept-Encoding") != "" {
		r = r.Clone(r.Context())
		r.Header.Del("Accept-Encoding")
	}
	resp, err := l.next.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if enc := strings.TrimSpace(resp.Header.Get("Content-Encoding")); enc != "" && !strings.EqualFold(enc, "identity") {
		resp.Body.Close()
		return nil, &Error{Class: ClassHostError, Final: true,
			Message: fmt.Sprintf("the host answered with Content-Encoding %q, which the service does not read", clip(enc))}
	}
	if resp.ContentLength > l.max {
		resp.Body.Close()
		return nil, tooLarge(l.max)
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: l.max, max: l.max}
	return resp, nil
}

func tooLarge(max int64) *Error {
	return &Error{Class: ClassHostError, Final: true,
		Message: fmt.Sprintf("the host's response is larger than the %d bytes the service reads of one model response", max)}
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// limitedBody fails a read past its bound.
type limitedBody struct {
	io.ReadCloser
	left, max int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells a body that ends exactly at the bound from
		// one that goes on.
		var one [1]byte
		if n, _ := l.ReadCloser.Read(one[:]); n > 0 {
			return 0, tooLarge(l.max)
		}
		return l.ReadCloser.Read(p)
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.ReadCloser.Read(p)
	l.left -= int64(n)
	return n, err
}
