package export

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/eventstore"
)

func must(t testing.TB, cond bool, format string, args ...any) {
	t.Helper()
	if !cond {
		t.Fatalf(format, args...)
	}
}

func TestEventsBadArguments(t *testing.T) {
	t.Parallel()
	// No store behind this: arguments are checked before the store is opened.
	open := func(context.Context) (*eventstore.Store, func(), error) {
		t.Error("the store was opened")
		return nil, nil, errors.New("no store")
	}
	for _, args := range [][]string{
		{},
		{"nope"},
		{"export", "extra"},
		{"export", "-nope"},
		{"export", "-stream", "ledger"},
		{"export", "-stream"},
		{"export", "-subject", "query.>"},
		{"export", "-subject", ""},
		{"export", "-subject", "ev"},
		{"export", "-subject", "ev.>.x"},
		{"export", "-subject", "ev.query.a*.completed"},
		{"export", "-subject", "ev.query..completed"},
		{"export", "-subject", "ev.query.x"},
		{"export", "-subject", "ev.query.x.y.z"},
		{"export", "-subject", "ev.ledger.>"},
		{"export", "-stream", "accounts", "-subject", "ev.query.>"},
		{"export", "-since", "yesterday"},
		{"export", "-since", "-1h"},
		{"export", "-since", "1h", "-from-seq", "3"},
		{"export", "-from-seq", "0"},
		{"export", "-from-seq", "-3"},
		{"export", "-until", "24h"},
		{"export", "-since", "2026-11-02T00:00:00Z", "-until", "2026-11-01T00:00:00Z"},
		{"export", "-limit", "-1"},
		{"export", "-limit", "x"},
		{"tail", "-limit", "3"},
		{"tail", "-until", "2026-11-01T00:00:00Z"},
		{"tail", "-stream", "both"},
	} {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), args, open, &out, &errOut)
		must(t, code == 2, "%q: exit %d, want 2; stderr %s", args, code, errOut.String())
		must(t, out.Len() == 0, "%q wrote to stdout: %s", args, out.String())
		first, _, _ := strings.Cut(errOut.String(), "\n")
		must(t, strings.HasPrefix(first, "crosscheck events") && len(first) > len("crosscheck events: "), "%q: no reason on the first line: %q", args, errOut.String())
		must(t, strings.Contains(errOut.String(), "Usage:"), "%q: no usage: %s", args, errOut.String())
	}
	for _, args := range [][]string{{"-h"}, {"help"}, {"export", "-h"}, {"tail", "-help"}} {
		var out, errOut bytes.Buffer
		code := Run(context.Background(), args, open, &out, &errOut)
		must(t, code == 0 && strings.Contains(out.String(), "Usage:") && strings.Contains(out.String(), "-from-seq"), "%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
	}
}
