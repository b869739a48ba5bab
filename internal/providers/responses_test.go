package providers

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLimitResponses: a body past the bound fails its read, with or without
// a Content-Length, counted as decoded when it comes gzip-compressed; a body
// in an encoding the transport does not decode is refused unread; a body at
// the bound is read whole. Every refusal is a final host_error.
func TestLimitResponses(t *testing.T) {
	const bound = 1024
	big := strings.Repeat("x", bound)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, big+big)
	zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.(http.Flusher).Flush()
			io.WriteString(w, big+big)
		case "/sized":
			w.Header().Set("Content-Length", fmt.Sprint(2*len(big)))
			io.WriteString(w, big+big)
		case "/at-bound":
			io.WriteString(w, big)
		case "/gzip":
			if r.Header.Get("Accept-Encoding") != "gzip" {
				t.Errorf("Accept-Encoding %q reached the host; want the transport's gzip alone", r.Header.Get("Accept-Encoding"))
			}
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(zipped.Bytes())
		case "/br":
			w.Header().Set("Content-Encoding", "br")
			io.WriteString(w, "not really brotli")
		case "/identity":
			w.Header().Set("Content-Encoding", "identity")
			io.WriteString(w, "plain")
		}
	}))
	defer srv.Close()
	c := LimitResponses(srv.Client(), bound)
	get := func(path string) ([]byte, error) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Accept-Encoding", "gzip, br, zstd") // as a client that decodes itself would send
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	invalid := func(err error) bool {
		var pe *Error
		return errors.As(err, &pe) && pe.Class == ClassHostError && !pe.Retriable()
	}
	for _, path := range []string{"/chunked", "/sized", "/gzip", "/br"} {
		if b, err := get(path); !invalid(err) {
			t.Errorf("%s: %d bytes, %v; want a final host_error refusal", path, len(b), err)
		}
	}
	for path, want := range map[string]int{"/at-bound": bound, "/identity": len("plain")} {
		if b, err := get(path); err != nil || len(b) != want {
			t.Errorf("%s: %d bytes, %v; want %d", path, len(b), err, want)
		}
	}
}
