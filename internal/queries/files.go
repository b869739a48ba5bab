package queries

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/events"
)

// Limits on the files of one query (spec section 8).
const (
	// MaxFiles is the most files a query attaches.
	MaxFiles = 5
	// MaxFilesBytes bounds the combined size of a query's files: 20 MB.
	MaxFilesBytes = 20 << 20
)

// FileInfo is what admission knows of an uploaded file: its metadata, never
// its content.
type FileInfo struct {
	ID        string
	AccountID string
	Name      string
	// Kind is image, pdf, document or text (catalog.Kind*).
	Kind      string
	MediaType string
	Bytes     int64
	SHA256    string
	// Pages is the page count of a PDF or document, 0 when unknown.
	Pages int
	// TextChars is the length of the file's extracted text in characters.
	TextChars int
	ExpiresAt time.Time
}

// Errors a FileLookup returns.
var (
	// ErrFileNotFound: no such file, or it belongs to another account.
	ErrFileNotFound = errors.New("file not found")
	// ErrFileExpired: the file is past its lifetime.
	ErrFileExpired = errors.New("file expired")
)

// FileLookup finds the metadata of an uploaded file for an account.
type FileLookup interface {
	// File returns the file fileID of account accountID. A file that does
	// not exist or is another account's is an error that is
	// ErrFileNotFound (or an *apperr.Error of code not_found); an expired
	// file is ErrFileExpired, or is returned as it is (admission checks
	// ExpiresAt against its own clock). Any other error is the lookup's
	// failure.
	File(ctx context.Context, accountID, fileID string) (FileInfo, error)
}

// decodeFiles reads the files field: an array of at most MaxFiles distinct
// file ids. Whether they exist is resolveFiles' to check.
func decodeFiles(raw json.RawMessage, r *Request) error {
	if isNull(raw) {
		return nil
	}
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) || json.Unmarshal(raw, &r.Files) != nil {
		r.Files = nil
		return apperr.New(apperr.InvalidFiles, "files must be an array of file_id strings")
	}
	if len(r.Files) > MaxFiles {
		return apperr.New(apperr.InvalidFiles, "files has %d entries; a query attaches at most %d files", len(r.Files), MaxFiles)
	}
	seen := map[string]bool{}
	for _, id := range r.Files {
		if !strings.HasPrefix(id, "file_") || len(id) == len("file_") || len(id) > 64 {
			return apperr.New(apperr.InvalidFiles, "files entry %q is not a file_id (file_<id>, as POST /v1/files returns it)", truncate(id))
		}
		if seen[id] {
			return apperr.New(apperr.InvalidFiles, "files lists %q twice", id)
		}
		seen[id] = true
	}
	if len(r.Files) == 0 {
		r.Files = nil
	}
	return nil
}

// resolveFiles looks up every file of req for accountID and decides how
// each selected model receives it. It returns file_not_found for a file
// that does not exist or is another account's, file_expired for one past
// its lifetime at now, and invalid_files when together they exceed
// MaxFilesBytes; another failure of the lookup is returned wrapped.
func resolveFiles(ctx context.Context, lookup FileLookup, cat *catalog.Catalog, accountID string, req Request, now time.Time) ([]events.FileRef, error) {
	if len(req.Files) == 0 {
		return nil, nil
	}
	out := make([]events.FileRef, 0, len(req.Files))
	var total int64
	for _, id := range req.Files {
		if lookup == nil {
			return nil, apperr.New(apperr.FileNotFound, "no file %q for this account", id)
		}
		f, err := lookup.File(ctx, accountID, id)
		switch {
		case errors.Is(err, ErrFileNotFound) || apperr.Code(err) == apperr.NotFound || apperr.Code(err) == apperr.FileNotFound:
			return nil, apperr.New(apperr.FileNotFound, "no file %q for this account", id)
		case errors.Is(err, ErrFileExpired) || apperr.Code(err) == apperr.FileExpired:
			return nil, apperr.New(apperr.FileExpired, "file %q has expired (files live 48 hours after upload); upload it again", id)
		case err != nil:
			return nil, fmt.Errorf("look up file %s: %w", id, err)
		case f.AccountID != accountID:
			return nil, apperr.New(apperr.FileNotFound, "no file %q for this account", id)
		case !f.ExpiresAt.IsZero() && !now.Before(f.ExpiresAt):
			return nil, apperr.New(apperr.FileExpired, "file %q expired at %s (files live 48 hours after upload); upload it again", id, f.ExpiresAt.UTC().Format(time.RFC3339))
		}
		total += f.Bytes
		ref := events.FileRef{ID: f.ID, Name: f.Name, Kind: f.Kind, MediaType: f.MediaType, Bytes: f.Bytes,
			SHA256: f.SHA256, Pages: f.Pages, TextChars: f.TextChars}
		if ref.ID == "" {
			ref.ID = id
		}
		for _, m := range req.Selected {
			if m.CustomModel != "" {
				// A BYOM reads natively what its owner declared it reads.
				if r := req.CustomReads[m.CustomModel]; r.Images && f.Kind == events.FileKindImage || r.PDF && f.Kind == events.FileKindPDF {
					ref.NativeFor = append(ref.NativeFor, m.Key())
				}
				continue
			}
			if model, ok := cat.Model(m.Provider, m.ModelID); ok && model.Native(f.Kind) {
				ref.NativeFor = append(ref.NativeFor, m.Key())
			}
		}
		out = append(out, ref)
	}
	if total > MaxFilesBytes {
		return nil, apperr.New(apperr.InvalidFiles, "the files total %d bytes; a query attaches at most 20 MB (%d bytes) combined", total, MaxFilesBytes)
	}
	for _, m := range req.Selected {
		if model, ok := cat.Model(m.Provider, m.ModelID); ok && model.Reads.InlineBytes > 0 {
			withinInline(out, m.Key(), model.Reads.InlineBytes)
		}
	}
	return out, nil
}

// withinInline keeps the files that model (a ModelRef key) reads natively
// within limit bytes, the smallest first: the others reach it as their
// extracted text.
func withinInline(refs []events.FileRef, model string, limit int64) {
	var native []int
	for i, r := range refs {
		if slices.Contains(r.NativeFor, model) {
			native = append(native, i)
		}
	}
	slices.SortStableFunc(native, func(a, b int) int { return cmp.Compare(refs[a].Bytes, refs[b].Bytes) })
	var used int64
	for _, i := range native {
		if used+refs[i].Bytes <= limit {
			used += refs[i].Bytes
			continue
		}
		refs[i].NativeFor = slices.DeleteFunc(refs[i].NativeFor, func(k string) bool { return k == model })
	}
}
