package queries

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
)

// fakeFiles is a FileLookup over files built in the test.
type fakeFiles map[string]FileInfo

func (f fakeFiles) File(_ context.Context, accountID, id string) (FileInfo, error) {
	fi, ok := f[id]
	if !ok || fi.AccountID != accountID {
		return FileInfo{}, ErrFileNotFound
	}
	return fi, nil
}

const (
	owner = "acct_01k0000000000000000000000a"
	other = "acct_01k0000000000000000000000b"
)

var filesNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func fileID(i int) string { return fmt.Sprintf("file_01K%023d", i) }

func someFiles() fakeFiles {
	f := fakeFiles{}
	for i := range 7 {
		f[fileID(i)] = FileInfo{ID: fileID(i), AccountID: owner, Name: fmt.Sprintf("f%d.txt", i), Kind: catalog.KindText,
			MediaType: "text/plain", Bytes: 1000, TextChars: 1000, ExpiresAt: filesNow.Add(48 * time.Hour)}
	}
	f[fileID(10)] = FileInfo{ID: fileID(10), AccountID: owner, Name: "big-1.pdf", Kind: catalog.KindPDF, MediaType: "application/pdf", Bytes: 11 << 20, ExpiresAt: filesNow.Add(time.Hour)}
	f[fileID(11)] = FileInfo{ID: fileID(11), AccountID: owner, Name: "big-2.pdf", Kind: catalog.KindPDF, MediaType: "application/pdf", Bytes: 10 << 20, ExpiresAt: filesNow.Add(time.Hour)}
	f[fileID(12)] = FileInfo{ID: fileID(12), AccountID: other, Name: "theirs.txt", Kind: catalog.KindText, MediaType: "text/plain", Bytes: 10, ExpiresAt: filesNow.Add(time.Hour)}
	f[fileID(13)] = FileInfo{ID: fileID(13), AccountID: owner, Name: "old.png", Kind: catalog.KindImage, MediaType: "image/png", Bytes: 10, ExpiresAt: filesNow.Add(-time.Second)}
	f[fileID(14)] = FileInfo{ID: fileID(14), AccountID: owner, Name: "photo.png", Kind: catalog.KindImage, MediaType: "image/png", Bytes: 10, ExpiresAt: filesNow.Add(time.Hour)}
	return f
}

func filesBody(ids ...string) []byte {
	return []byte(`{"mode":"unify","prompt":"What do the files say?","files":["` + strings.Join(ids, `","`) + `"]}`)
}

// Refusals of the files field happen before anything is written: a Service
// with no store refuses them through Submit and Estimate.
func TestSubmitRefusesFiles(t *testing.T) {
	svc := &Service{Catalog: catalog.Simulated(), Modes: unifyOnly, Files: someFiles(), Now: func() time.Time { return filesNow }}
	caller := accounts.Caller{AccountID: owner, Fingerprint: "abcdefgh"}
	six := []string{fileID(0), fileID(1), fileID(2), fileID(3), fileID(4), fileID(5)}
	tests := []struct {
		name string
		body []byte
		code string
	}{
		{"six files", filesBody(six...), apperr.InvalidFiles},
		{"21 MB combined", filesBody(fileID(10), fileID(11)), apperr.InvalidFiles},
		{"another account's file", filesBody(fileID(12)), apperr.FileNotFound},
		{"an unknown file", filesBody(fileID(99)), apperr.FileNotFound},
		{"an expired file", filesBody(fileID(13)), apperr.FileExpired},
		{"a repeated file", filesBody(fileID(0), fileID(0)), apperr.InvalidFiles},
		{"not a file id", filesBody("report.pdf"), apperr.InvalidFiles},
		{"not an array", []byte(`{"mode":"unify","prompt":"p","files":"` + fileID(0) + `"}`), apperr.InvalidFiles},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.Submit(context.Background(), caller, tt.body, "", false)
			if apperr.Code(err) != tt.code {
				t.Fatalf("Submit: %v; want %s", err, tt.code)
			}
			if _, err := svc.Estimate(context.Background(), caller, tt.body); apperr.Code(err) != tt.code {
				t.Fatalf("Estimate: %v; want %s", err, tt.code)
			}
		})
	}
	// Without a file store, every file is unknown.
	bare := &Service{Catalog: catalog.Simulated(), Modes: unifyOnly, Now: func() time.Time { return filesNow }}
	if _, err := bare.Submit(context.Background(), caller, filesBody(fileID(0)), "", false); apperr.Code(err) != apperr.FileNotFound {
		t.Fatalf("no file store: %v; want file_not_found", err)
	}
}

// Five files at 20 MB combined are accepted, and each model's routing is
// decided by what its catalog row reads natively.
func TestResolveFilesRoutesByModel(t *testing.T) {
	files := someFiles()
	files[fileID(10)] = FileInfo{ID: fileID(10), AccountID: owner, Name: "doc.pdf", Kind: catalog.KindPDF, MediaType: "application/pdf", Bytes: 20<<20 - 5000 - 10, ExpiresAt: filesNow.Add(time.Hour)}
	cat := catalog.Simulated()
	req, err := Decode(filesBody(fileID(0), fileID(1), fileID(2), fileID(10), fileID(14)), cat, unifyOnly)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := resolveFiles(context.Background(), files, cat, owner, req, filesNow)
	if err != nil {
		t.Fatalf("5 files, 20 MB: %v", err)
	}
	want := map[string]map[string]string{
		fileID(0):  {"provider_a": events.FileSeenText, "provider_d": events.FileSeenText},
		fileID(10): {"provider_a": events.FileSeenNative, "provider_d": events.FileSeenNone},
		fileID(14): {"provider_a": events.FileSeenNative, "provider_b": events.FileSeenNative, "provider_d": events.FileSeenNone},
	}
	for _, r := range refs {
		for model, seen := range want[r.ID] {
			if got := r.SeenBy(model); got != seen {
				t.Errorf("%s seen by %s: %s, want %s", r.Name, model, got, seen)
			}
		}
	}
}

// The files are part of the body an Idempotency-Key binds: the same
// request with other files, or the files in another order, is another body.
func TestHashComparesFiles(t *testing.T) {
	cat := catalog.Simulated()
	hash := func(body string) string {
		r, err := Decode([]byte(body), cat, unifyOnly)
		if err != nil {
			t.Fatal(err)
		}
		return r.Hash()
	}
	none := hash(`{"mode":"unify","prompt":"p"}`)
	if none != hash(`{"mode":"unify","prompt":"p","files":[]}`) || none != hash(`{"prompt":"p","files":null,"mode":"unify"}`) {
		t.Fatal("no files, an empty list and null hash differently")
	}
	one := hash(`{"mode":"unify","prompt":"p","files":["` + fileID(1) + `"]}`)
	two := hash(`{"mode":"unify","prompt":"p","files":["` + fileID(1) + `","` + fileID(2) + `"]}`)
	swapped := hash(`{"mode":"unify","prompt":"p","files":["` + fileID(2) + `","` + fileID(1) + `"]}`)
	if one == none || one == two || two == swapped {
		t.Fatal("requests that attach different files hash the same")
	}
}

// Files do not count toward the prompt limit: a prompt at its limit with
// files attached is valid.
func TestFilesDoNotCountTowardThePromptLimit(t *testing.T) {
	body := `{"mode":"unify","prompt":"` + strings.Repeat("x", MaxPromptBytes) + `","files":["` + fileID(1) + `"]}`
	if _, err := Decode([]byte(body), catalog.Simulated(), unifyOnly); err != nil {
		t.Fatalf("a prompt at its limit with a file: %v", err)
	}
}

// A model whose requests carry native files inline within a size bound
// (Gemini's inline data: 20 MB a request, base64 included) gets as many
// files natively as fit its bound, the smallest first, and the others as
// their extracted text; models without such a bound read them all natively.
func TestResolveFilesKeepsInlineFilesWithinTheModelsBound(t *testing.T) {
	files := fakeFiles{
		fileID(20): {ID: fileID(20), AccountID: owner, Name: "big.pdf", Kind: catalog.KindPDF, MediaType: "application/pdf", Bytes: 10 << 20, TextChars: 5000, ExpiresAt: filesNow.Add(time.Hour)},
		fileID(21): {ID: fileID(21), AccountID: owner, Name: "mid.pdf", Kind: catalog.KindPDF, MediaType: "application/pdf", Bytes: 8 << 20, TextChars: 4000, ExpiresAt: filesNow.Add(time.Hour)},
		fileID(22): {ID: fileID(22), AccountID: owner, Name: "small.png", Kind: catalog.KindImage, MediaType: "image/png", Bytes: 1 << 20, ExpiresAt: filesNow.Add(time.Hour)},
	}
	cat := catalog.Vendor()
	body := `{"mode":"unify","prompt":"What do the files say?","models":{"provider_a":"gpt-4.1","provider_c":"gemini-2.5-flash"},"files":["` +
		fileID(20) + `","` + fileID(21) + `","` + fileID(22) + `"]}`
	req, err := Decode([]byte(body), cat, unifyOnly)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := resolveFiles(context.Background(), files, cat, owner, req, filesNow)
	if err != nil {
		t.Fatal(err)
	}
	gemini, _ := cat.Model(catalog.ProviderC, "gemini-2.5-flash")
	var inline int64
	seen := map[string]string{}
	for _, r := range refs {
		seen["provider_a/"+r.Name] = r.SeenBy("provider_a")
		seen["provider_c/"+r.Name] = r.SeenBy("provider_c")
		if r.SeenBy("provider_c") == events.FileSeenNative {
			inline += r.Bytes
		}
	}
	if gemini.Reads.InlineBytes == 0 || inline > gemini.Reads.InlineBytes {
		t.Fatalf("gemini carries %d bytes of files inline, its bound is %d", inline, gemini.Reads.InlineBytes)
	}
	want := map[string]string{
		"provider_a/big.pdf": events.FileSeenNative, "provider_a/mid.pdf": events.FileSeenNative, "provider_a/small.png": events.FileSeenNative,
		"provider_c/big.pdf": events.FileSeenText, "provider_c/mid.pdf": events.FileSeenNative, "provider_c/small.png": events.FileSeenNative,
	}
	for k, w := range want {
		if seen[k] != w {
			t.Errorf("%s seen %q, want %q", k, seen[k], w)
		}
	}
}
