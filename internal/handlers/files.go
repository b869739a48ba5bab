package handlers

import (
	"cmp"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/crosscheck/crosscheck/apiv1"
	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/files"
)

// Files stores and reads uploaded files.
type Files interface {
	Upload(ctx context.Context, caller accounts.Caller, name, purpose string, body io.Reader) (files.Meta, error)
	Get(ctx context.Context, accountID, fileID string) (files.Meta, error)
	List(ctx context.Context, accountID string, limit int, after string) (files.Page, error)
	Delete(ctx context.Context, accountID, fileID string) error
}

// Bounds of an upload.
const (
	// uploadTimeout bounds the reading of an upload's body and the answer
	// to it, in place of the server's shorter read and write timeouts.
	uploadTimeout = 10 * time.Minute
	// DefaultUploadIdle is how long an upload's body may take to send
	// MinUploadBytes before the upload ends: a stalled or trickling client
	// holds no upload slot for long.
	DefaultUploadIdle = 30 * time.Second
	// MinUploadBytes is what an upload must send within each
	// DefaultUploadIdle of waiting (about 17 KB/s; the end of the body ends
	// it sooner). At 64 KiB (2 KB/s) two keys' four uploads held every slot
	// for the upload's 10 minutes with 10 KB/s in all; now that costs them
	// 70 KB/s. A client that can send the largest file (32 MiB) within the
	// upload's 10 minutes sends 55 KB/s, well above it.
	MinUploadBytes = 512 << 10
	// MaxUploadsPerKey bounds the uploads one API key has in progress, so
	// that one key holds at most half of a process's upload slots
	// (files.DefaultMaxParallel).
	MaxUploadsPerKey = 2
	// MaxUploadsPerAccount bounds the uploads the keys of one account have
	// in progress together: half of a process's upload slots, whatever the
	// number of its keys.
	MaxUploadsPerAccount = files.DefaultMaxParallel / 2
	// maxPreambleBytes bounds what an upload sends before its file's
	// content: the fields and every part's headers (Go's multipart reader
	// would buffer up to 10 MB of one part's headers).
	maxPreambleBytes = 64 << 10
)

// maxFieldBytes bounds the name and purpose fields of an upload.
const maxFieldBytes = 1024

// FileObject is a file as the API shows it.
type FileObject = apiv1.File

// FileExtraction is what text extraction produced for a file.
type FileExtraction = apiv1.FileExtraction

// FileList is the body of GET /v1/files.
type FileList struct {
	Object  string       `json:"object"`
	Data    []FileObject `json:"data"`
	HasMore bool         `json:"has_more"`
}

func fileObject(m files.Meta) FileObject {
	return FileObject{
		FileID: m.ID, Object: "file", Name: m.Name, Kind: m.Kind, MediaType: m.MediaType, Bytes: m.Bytes, SHA256: m.SHA256,
		CreatedAt: m.CreatedAt.UTC(), ExpiresAt: m.ExpiresAt.UTC(),
		Extraction: FileExtraction{Pages: m.Pages, Chars: m.Chars, Truncated: m.Truncated},
	}
}

// upload reads a multipart/form-data body: the optional fields name and
// purpose, then the part file, streamed to the file service; parts after
// the file are not read.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	if s.stopping() {
		closeUnread(w, r)
		s.writeError(w, r, errStopping, "")
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		closeUnread(w, r)
		s.writeError(w, r, apperr.New(apperr.InvalidRequest, "upload a file as multipart/form-data with the part file"), "")
		return
	}
	c := caller(r)
	if e := s.uploads.acquire(c, slotBounds{perKey: MaxUploadsPerKey, perAccount: MaxUploadsPerAccount}); e != nil {
		closeUnread(w, r)
		s.writeError(w, r, e, "")
		return
	}
	defer s.uploads.release(c)
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(uploadTimeout))
	body := &uploadBody{r: http.MaxBytesReader(w, r.Body, files.MaxUploadBytes), rc: rc,
		idle: cmp.Or(s.UploadIdle, DefaultUploadIdle), end: time.Now().Add(uploadTimeout), budget: maxPreambleBytes}
	r.Body = body
	mr, err := r.MultipartReader()
	if err != nil {
		closeUnread(w, r)
		s.writeError(w, r, apperr.New(apperr.InvalidRequest, "the multipart body is malformed: %v", err), "")
		return
	}
	var name, purpose string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			closeUnread(w, r)
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "the upload has no part named file"), "")
			return
		}
		if err != nil {
			closeUnread(w, r)
			s.writeError(w, r, partError(err), "")
			return
		}
		switch part.FormName() {
		case "file":
			if name == "" {
				name = part.FileName()
			}
			body.budget = -1 // the file's content: bounded by its kind's limit
			m, err := s.Files.Upload(r.Context(), caller(r), name, purpose, part)
			if err != nil {
				closeUnread(w, r)
				s.writeError(w, r, err, "")
				return
			}
			w.Header().Set("Location", "/v1/files/"+m.ID)
			writeJSON(w, http.StatusCreated, fileObject(m))
			return
		case "name", "purpose":
			b, err := io.ReadAll(io.LimitReader(part, maxFieldBytes+1))
			if err != nil {
				closeUnread(w, r)
				s.writeError(w, r, partError(err), "")
				return
			}
			if len(b) > maxFieldBytes {
				closeUnread(w, r)
				s.writeError(w, r, apperr.New(apperr.InvalidRequest, "the field %s exceeds %d bytes", part.FormName(), maxFieldBytes), "")
				return
			}
			if part.FormName() == "name" {
				name = strings.TrimSpace(string(b))
			} else {
				purpose = strings.TrimSpace(string(b))
			}
		default:
			closeUnread(w, r)
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "unknown part %q: send name, purpose, then file", part.FormName()), "")
			return
		}
	}
}

func partError(err error) error {
	var ae *apperr.Error
	if errors.As(err, &ae) {
		return ae
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return apperr.New(apperr.FileTooLarge, "the upload is larger than %d bytes", files.MaxUploadBytes)
	}
	if errors.Is(err, errPreamble) {
		return apperr.New(apperr.InvalidRequest, "the upload sends more than %d bytes of fields and part headers before its file", maxPreambleBytes)
	}
	return apperr.New(apperr.InvalidRequest, "the multipart body is malformed or ended early")
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	m, err := s.Files.Get(r.Context(), caller(r).AccountID, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, fileObject(m))
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) {
	for name, vals := range r.URL.Query() {
		switch {
		case len(vals) != 1:
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "the query parameter %q is given %d times; give it at most once", clip(name, maxEchoedID), len(vals)), "")
			return
		case name != "limit" && name != "after":
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "unknown query parameter %q; GET /v1/files takes limit and after", clip(name, maxEchoedID)), "")
			return
		}
	}
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > files.MaxListLimit {
			s.writeError(w, r, apperr.New(apperr.InvalidRequest, "limit must be an integer from 1 to %d", files.MaxListLimit), "")
			return
		}
		limit = n
	}
	p, err := s.Files.List(r.Context(), caller(r).AccountID, limit, r.URL.Query().Get("after"))
	if err != nil {
		s.writeError(w, r, err, "")
		return
	}
	out := FileList{Object: "list", Data: []FileObject{}, HasMore: p.HasMore}
	for _, m := range p.Files {
		out.Data = append(out.Data, fileObject(m))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if err := s.Files.Delete(r.Context(), caller(r).AccountID, id); err != nil {
		s.writeError(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"file_id": id, "object": "file", "deleted": true})
}

// errPreamble is what an upload body's reads fail with once its preamble
// (everything before the file's content) passes maxPreambleBytes.
var errPreamble = errors.New("upload preamble too long")

// uploadBody is an upload's request body: each read must bring data within
// idle (the read deadline moves on with every read, up to end), and until
// the file's content starts (budget < 0) at most budget bytes are read.
type uploadBody struct {
	r      io.ReadCloser
	rc     *http.ResponseController
	idle   time.Duration
	end    time.Time
	budget int
	// waited is the time spent in Read since the last MinUploadBytes
	// arrived, and got the bytes that arrived since.
	waited time.Duration
	got    int
}

// Read reads the body; each MinUploadBytes must arrive within idle of
// waiting in Read (time spent between reads, storing what arrived, does not
// count), so a client that trickles a byte now and then is cut off like one
// that stalls.
func (b *uploadBody) Read(p []byte) (int, error) {
	if b.budget == 0 {
		return 0, errPreamble
	}
	if b.budget > 0 && len(p) > b.budget {
		p = p[:b.budget]
	}
	start := time.Now()
	deadline := start.Add(b.idle - b.waited)
	if deadline.After(b.end) {
		deadline = b.end
	}
	_ = b.rc.SetReadDeadline(deadline)
	n, err := b.r.Read(p)
	if b.budget > 0 {
		b.budget -= n
	}
	b.waited += time.Since(start)
	if b.got += n; b.got >= MinUploadBytes {
		b.waited, b.got = 0, 0
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() && time.Now().Before(b.end) {
		return n, apperr.New(apperr.InvalidRequest, "the upload arrived too slowly: each %d KiB of it must arrive within %s; nothing was stored", MinUploadBytes>>10, b.idle)
	}
	return n, err
}

func (b *uploadBody) Close() error { return b.r.Close() }
