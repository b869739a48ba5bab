package queries

import (
	"encoding/base64"
	"errors"
	"net/url"
	"testing"

	"github.com/crosscheck/crosscheck/internal/apperr"
)

func TestParseListParams(t *testing.T) {
	id := "req_01M7Z5ZWVQ401ZYRSQ5ZF59AJD"
	for _, c := range []struct {
		query string
		want  ListParams
		ok    bool
	}{
		{"", ListParams{Limit: 20}, true},
		{"limit=1", ListParams{Limit: 1}, true},
		{"limit=100&status=failed&mode=verify", ListParams{Limit: 100, Status: "failed", Mode: "verify"}, true},
		{"after=" + EncodeCursor(id, 0), ListParams{Limit: 20, After: id}, true},
		{"after=" + EncodeCursor(id, 4096), ListParams{Limit: 20, After: id, AfterPos: 4096}, true},
		{"after=" + EncodeCursor(id, maxCursorPos), ListParams{Limit: 20, After: id, AfterPos: maxCursorPos}, true},
		{"after=" + base64.RawURLEncoding.EncodeToString([]byte(id)), ListParams{}, false},
		{"after=" + base64.RawURLEncoding.EncodeToString([]byte(id+".007")), ListParams{}, false},
		{"after=" + base64.RawURLEncoding.EncodeToString([]byte(id+".-1")), ListParams{}, false},
		{"after=" + base64.RawURLEncoding.EncodeToString([]byte(id+".")), ListParams{}, false},
		{"after=" + EncodeCursor(id, maxCursorPos+1), ListParams{}, false},
		{"limit=0", ListParams{}, false},
		{"limit=101", ListParams{}, false},
		{"limit=-1", ListParams{}, false},
		{"limit=1e2", ListParams{}, false},
		{"after=", ListParams{}, false},
		{"after=" + id, ListParams{}, false},
		{"after=" + EncodeCursor("req_01m7z5zwvq401zyrsq5zf59ajd", 0), ListParams{}, false},
		{"status=cancelled", ListParams{}, false},
		{"mode=UNIFY", ListParams{}, false},
		{"status=failed&status=queued", ListParams{}, false},
		{"order=asc", ListParams{}, false},
	} {
		v, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseListParams(v)
		if c.ok != (err == nil) || (c.ok && got != c.want) {
			t.Errorf("%q: got %+v, %v; want %+v, ok %v", c.query, got, err, c.want, c.ok)
		}
		var ae *apperr.Error
		if err != nil && (!errors.As(err, &ae) || ae.Code != apperr.InvalidRequest || ae.Message == "") {
			t.Errorf("%q: error %v, want invalid_request with a message", c.query, err)
		}
	}
}

// FuzzParseListParams feeds raw query strings to the parser: it never
// panics, refuses with invalid_request only, and what it accepts is in range
// and round-trips through the cursor.
func FuzzParseListParams(f *testing.F) {
	for _, s := range []string{"", "limit=5", "after=" + EncodeCursor("req_01M7Z5ZWVQ401ZYRSQ5ZF59AJD", 3), "after=" + EncodeCursor("req_01M7Z5ZWVQ401ZYRSQ5ZF59AJD", 130), "status=running&mode=justify",
		"limit=%FF", "after=%00", "mode=unify&mode=unify", "after=cmVxXw", "limit=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := ParseListParams(v)
		if err != nil {
			if apperr.Code(err) != apperr.InvalidRequest {
				t.Fatalf("%q: %v", raw, err)
			}
			return
		}
		if p.Limit < 1 || p.Limit > MaxListLimit {
			t.Fatalf("%q: limit %d", raw, p.Limit)
		}
		if p.After != "" {
			if !ValidRequestID(p.After) {
				t.Fatalf("%q: after %q", raw, p.After)
			}
			if back, pos, ok := decodeCursor(EncodeCursor(p.After, p.AfterPos)); !ok || back != p.After || pos != p.AfterPos {
				t.Fatalf("%q: cursor does not round-trip", raw)
			}
		}
	})
}
