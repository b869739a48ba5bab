// Package files holds the file aggregate's service: uploads streamed into
// the JetStream Object Store under per-kind limits, their text extracted in
// a child process, reads, listing, deletion and expiry. The events are
// ev.file.<account_id>.<event> on the FILES stream; the bytes and the
// extracted text are objects of the files bucket. A file's content never
// appears in an event, a log or an error.
package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/crosscheck/crosscheck/internal/accounts"
	"github.com/crosscheck/crosscheck/internal/apperr"
	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/eventstore"
	"github.com/crosscheck/crosscheck/internal/extract"
)

// Meta is what the service tells of one file.
type Meta struct {
	ID, AccountID, Name, Kind, MediaType string
	Bytes                                int64
	SHA256                               string
	CreatedAt, ExpiresAt                 time.Time
	Pages, Chars                         int
	Truncated                            bool
}

// Default caps of the text extracted from one file.
const (
	DefaultMaxPages = 1000
	DefaultMaxChars = 1_000_000
)

// PurposeQuery is the one purpose of a file today: to be attached to
// queries. It is the default.
const PurposeQuery = "query"

// maxNameBytes bounds a file's name.
const maxNameBytes = 255

// orphanAge is how old an object without an upload event must be before
// Sweep removes it: longer than any upload in progress takes.
const orphanAge = 15 * time.Minute

// Extractor extracts a file's text in isolation, within the bounds of the
// account it is for; *extract.Runner is one.
type Extractor interface {
	Run(ctx context.Context, account, format string, input io.Reader, caps extract.Caps) (extract.Result, error)
}

var _ Extractor = (*extract.Runner)(nil)

// Service is the file service. Its fields are set before first use.
type Service struct {
	Store   *eventstore.Store
	Extract Extractor
	Now     func() time.Time
	Log     zerolog.Logger
	// Caps bounds the text kept of one file; zero fields take the
	// defaults above.
	Caps extract.Caps
	// MaxParallel bounds the uploads streaming into the store at once
	// (default DefaultMaxParallel); the others wait, unread, for a slot.
	// It bounds the memory uploads take: the object store client's chunks
	// in flight, and JetStream's own buffers in the embedded server.
	MaxParallel int
	// MaxAccountBytes bounds the bytes of an account's live files
	// (uploaded, neither deleted nor expired); zero is no bound.
	MaxAccountBytes int64
	// MaxUploadsPerDay bounds the files an account uploads in any 24
	// hours, deleted ones counted; zero is no bound. With the FILES
	// stream's age limit it bounds what the stream keeps of an account.
	MaxUploadsPerDay int
	// Space, when set, refuses uploads while the store is low on disk
	// space: its error is Upload's.
	Space interface{ CheckSpace() error }

	once  sync.Once
	slots chan struct{}
}

// DefaultMaxParallel is the default of Service.MaxParallel.
const DefaultMaxParallel = 4

// slotWait bounds how long an upload waits for one of the MaxParallel
// slots before it is refused with 503 service_restarting: its client gets
// an answer to retry on instead of a request that hangs while others hold
// them.
const slotWait = 10 * time.Second

// Metadata keys of a file's objects.
const (
	metaAccount = "account"
	metaFile    = "file"
)

func textObject(fileID string) string { return fileID + ".txt" }

// errTooLarge is the limit reader's refusal.
type errTooLarge struct{ max int64 }

func (e errTooLarge) Error() string { return fmt.Sprintf("file larger than %d bytes", e.max) }

var errNotUTF8 = errors.New("text file is not valid UTF-8")

// Upload stores the file read from body, called name, for the caller's
// account, extracts its text and records it. It refuses, before anything
// is recorded and with nothing left stored: a name without an accepted
// extension or content that does not sniff as it says
// (unsupported_file_type), an empty file, a text file that is not UTF-8 or
// a file the extraction cannot read (invalid_file), a file over its kind's
// limit (file_too_large), a body that ends early (invalid_request), and
// any file while the store is low on disk space (Space's error).
// The body is streamed into the store, never held whole.
func (s *Service) Upload(ctx context.Context, caller accounts.Caller, name, purpose string, body io.Reader) (Meta, error) {
	name = path.Base(strings.ReplaceAll(strings.TrimSpace(name), `\`, "/"))
	if name == "" || name == "." || name == "/" || len(name) > maxNameBytes || !utf8.ValidString(name) {
		return Meta{}, apperr.New(apperr.InvalidRequest, "the file needs a name of at most %d bytes of printable UTF-8, with its extension", maxNameBytes)
	}
	if r, bad := events.UnprintableIn(name); bad {
		return Meta{}, apperr.New(apperr.InvalidRequest, "the file's name holds the character %U, which shows as something else or nothing (a control, line break, bidirectional or zero-width character); name the file in printable text", r)
	}
	if purpose == "" {
		purpose = PurposeQuery
	}
	if purpose != PurposeQuery {
		return Meta{}, apperr.New(apperr.InvalidRequest, "purpose must be %q", PurposeQuery)
	}
	if s.Space != nil {
		if err := s.Space.CheckSpace(); err != nil {
			return Meta{}, err
		}
	}
	k, ok := kindOf(name)
	if !ok {
		what := fmt.Sprintf("files named *%s are not accepted", path.Ext(name))
		if path.Ext(name) == "" {
			what = "the file name has no extension, which says the file's type"
		}
		return Meta{}, apperr.New(apperr.UnsupportedFileType, "%s; accepted: PNG, JPG, GIF, WEBP images, PDF, DOC, DOCX, code (py, js, ts, html, css, json, yaml, sql) and plain text (txt, md, csv, log, xml, toml)", what)
	}
	f, err := s.loadForUpload(ctx, caller.AccountID)
	if err != nil {
		return Meta{}, err
	}
	if err := s.withinDay(f); err != nil {
		return Meta{}, err
	}
	head := make([]byte, sniffBytes)
	n, err := io.ReadFull(body, head)
	switch {
	case err == io.EOF:
		return Meta{}, apperr.New(apperr.InvalidFile, "the file is empty")
	case err != nil && err != io.ErrUnexpectedEOF:
		return Meta{}, bodyError(err, k.max)
	}
	head = head[:n]
	sniffed, ok := k.agrees(head)
	if !ok {
		return Meta{}, apperr.New(apperr.UnsupportedFileType, "the content is %s, which does not agree with the extension %s", sniffed, path.Ext(name))
	}

	// An account whose live files hold its bound already is refused before
	// anything is stored; one this file takes past it, once its size is
	// known.
	used := s.usedBytes(f)
	if err := s.fits(used, 0); err != nil {
		return Meta{}, err
	}
	s.once.Do(func() { s.slots = make(chan struct{}, cmpOr(s.MaxParallel, DefaultMaxParallel)) })
	wait := time.NewTimer(slotWait)
	defer wait.Stop()
	select {
	case s.slots <- struct{}{}:
	case <-wait.C:
		return Meta{}, &apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: 5,
			Message: fmt.Sprintf("this server is storing as many uploads as it stores at once (%d) and none ended for %s; retry in a few seconds", cap(s.slots), slotWait)}
	case <-ctx.Done():
		return Meta{}, ctx.Err()
	}
	defer func() { <-s.slots }()
	id := "file_" + ulid.Make().String()
	now := s.Now().UTC()
	hasher := sha256.New()
	// A file is read no further than what is left of the account's bound:
	// one that cannot fit is refused as soon as it passes it.
	limit, room := k.max, s.MaxAccountBytes-used
	if s.MaxAccountBytes > 0 && room < limit {
		limit = room
	}
	src := &checkedReader{r: io.MultiReader(bytesReader(head), body), max: limit, hash: hasher, text: k.text}
	info, err := s.Store.FileObjects.Put(ctx, id, map[string]string{metaAccount: caller.AccountID, metaFile: id}, src)
	var tl errTooLarge
	switch {
	case errors.As(err, &tl) && limit < k.max:
		return Meta{}, s.fits(used, limit+1)
	case err != nil:
		return Meta{}, bodyError(err, k.max)
	}
	if src.text && !src.utf8Done() {
		s.discard(id)
		return Meta{}, apperr.New(apperr.InvalidFile, "the text file is not valid UTF-8")
	}
	if err := s.fits(used, int64(info.Size)); err != nil {
		s.discard(id)
		return Meta{}, err
	}
	m := Meta{
		ID: id, AccountID: caller.AccountID, Name: name, Kind: k.kind, MediaType: k.mediaType,
		Bytes: int64(info.Size), SHA256: hex.EncodeToString(hasher.Sum(nil)), CreatedAt: now, ExpiresAt: now.Add(events.FileTTL),
	}
	var extracted *events.FileExtracted
	if k.format != "" {
		res, err := s.extract(ctx, caller.AccountID, id, k.format)
		if err != nil {
			s.discard(id)
			return Meta{}, err
		}
		m.Pages, m.Chars, m.Truncated = res.Pages, res.Chars, res.Truncated
		extracted = &events.FileExtracted{FileID: id, Pages: res.Pages, Chars: res.Chars, Truncated: res.Truncated}
	}
	uploaded := events.FileUploaded{FileID: id, Name: name, Kind: k.kind, MediaType: k.mediaType, Bytes: m.Bytes, SHA256: m.SHA256,
		Purpose: purpose, KeyFingerprint: caller.Fingerprint}
	if err := s.append(ctx, caller.AccountID, uploaded, now, nil); err != nil {
		s.discard(id)
		return Meta{}, err
	}
	if extracted != nil {
		if err := s.append(ctx, caller.AccountID, *extracted, now, nil); err != nil {
			// The file is recorded; its text object stands without the
			// event, which only the audit trail misses.
			s.Log.Warn().Err(err).Str("file_id", id).Msg("record the extraction")
		}
	}
	s.Log.Info().Str("file_id", id).Str("account_id", caller.AccountID).Str("kind", k.kind).Int64("bytes", m.Bytes).Msg("file uploaded")
	return m, nil
}

// extract runs the extraction of the stored object id for account and
// stores its text; a refusal is an apperr.
func (s *Service) extract(ctx context.Context, account, id, format string) (extract.Result, error) {
	// The object is opened once a child reads it: the extraction may wait
	// for a child of its own longer than an opened object's reader lives.
	rd := &lazyObject{open: func() (io.ReadCloser, error) { return s.Store.FileObjects.Open(ctx, id) }}
	defer rd.Close()
	caps := extract.Caps{MaxPages: cmpOr(s.Caps.MaxPages, DefaultMaxPages), MaxChars: cmpOr(s.Caps.MaxChars, DefaultMaxChars)}
	res, err := s.Extract.Run(ctx, account, format, rd, caps)
	if err != nil {
		return extract.Result{}, s.refusal(err, account, id, format)
	}
	if text := res.Text(); text != "" {
		if err := s.Store.FileObjects.PutBytes(ctx, textObject(id), map[string]string{metaFile: id}, []byte(text)); err != nil {
			return extract.Result{}, err
		}
	}
	return res, nil
}

// refusal turns an extraction's failure into what the upload answers: the
// file's fault (invalid_file, saying which of the file and the
// extraction's limits refused it), the account's (rate_limited), the
// server's being busy, or a failure of the server.
func (s *Service) refusal(err error, account, id, format string) error {
	var refused *extract.Error
	var spent *extract.AccountError
	switch {
	case errors.Is(err, extract.ErrNotWord):
		return apperr.New(apperr.UnsupportedFileType, "the file is not a Word document")
	case errors.As(err, &refused):
		// The reason is logged without the child's words, which may
		// quote the file.
		s.Log.Warn().Str("file_id", id).Str("account_id", account).Str("format", format).Str("reason", refused.Error()).
			Dur("cpu", refused.CPU).Msg("file refused by extraction")
		why := "its reader crashed on it: the file is malformed or crafted"
		switch refused.Reason {
		case extract.ErrUnreadable:
			why = "it is malformed; check that it opens in its application, or save it again"
		case extract.ErrTimeout:
			why = fmt.Sprintf("reading it took longer than the extraction's time limit of %s; send a smaller or simpler file", refused.Limit)
		case extract.ErrCPU:
			why = fmt.Sprintf("reading it reached the extraction's CPU limit of %s; send a smaller or simpler file", refused.Limit)
		case extract.ErrMemory:
			why = fmt.Sprintf("reading it reached the extraction's memory limit of %s; send a smaller or simpler file", refused.Limit)
		}
		return apperr.New(apperr.InvalidFile, "the file could not be read as %s: %s", format, why)
	case errors.As(err, &spent):
		s.Log.Warn().Str("file_id", id).Str("account_id", account).Msg("upload refused: the account used its extraction CPU time")
		return &apperr.Error{Code: apperr.RateLimited, RetryAfter: int(spent.RetryAfter.Round(time.Second).Seconds()),
			Message: fmt.Sprintf("this account's files used the %s of CPU time their extraction may take in an hour on this server; retry in %s", spent.PerHour, spent.RetryAfter.Round(time.Second))}
	case errors.Is(err, extract.ErrBusy):
		return &apperr.Error{Code: apperr.ServiceRestarting, RetryAfter: 5,
			Message: "this server is extracting as many files as it does at once and none ended in time; retry in a few seconds"}
	case errors.Is(err, extract.ErrSandbox):
		return fmt.Errorf("extract %s: %w", id, err)
	}
	// Not the file's fault: its bytes did not arrive from the store.
	return fmt.Errorf("extract %s: %w: %w", id, eventstore.ErrUnavailable, err)
}

// lazyObject reads what open opens, at its first read; Close may come
// while a read is in progress, and ends the reads after it.
type lazyObject struct {
	open func() (io.ReadCloser, error)

	mu  sync.Mutex
	rc  io.ReadCloser
	err error
}

func (l *lazyObject) Read(p []byte) (int, error) {
	l.mu.Lock()
	if l.rc == nil && l.err == nil {
		l.rc, l.err = l.open()
	}
	rc, err := l.rc, l.err
	l.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return rc.Read(p)
}

func (l *lazyObject) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	rc := l.rc
	l.rc, l.err = nil, io.ErrClosedPipe
	if rc != nil {
		return rc.Close()
	}
	return nil
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// discard removes what an upload stored, best effort: what stays is never
// visible and goes by Sweep or the bucket's TTL.
func (s *Service) discard(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{id, textObject(id)} {
		if err := s.Store.FileObjects.Delete(ctx, name); err != nil {
			s.Log.Warn().Err(err).Str("file_id", id).Msg("discard a refused upload")
		}
	}
}

// bodyError turns an error of reading the upload into its refusal.
func bodyError(err error, max int64) error {
	var tl errTooLarge
	var ae *apperr.Error
	switch {
	case errors.As(err, &tl):
		return apperr.New(apperr.FileTooLarge, "the file is larger than %d MB, the limit of its kind", max>>20)
	case errors.Is(err, errNotUTF8):
		return apperr.New(apperr.InvalidFile, "the text file is not valid UTF-8")
	case errors.As(err, &ae), errors.Is(err, eventstore.ErrUnavailable), errors.Is(err, context.Canceled):
		return err
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return apperr.New(apperr.FileTooLarge, "the upload is larger than %d MB", MaxUploadBytes>>20)
	}
	return apperr.New(apperr.InvalidRequest, "the upload ended before the whole file arrived")
}

// loadForUpload folds the account's files for the bounds of an upload;
// nil, with nothing read, when no bound is set.
func (s *Service) loadForUpload(ctx context.Context, accountID string) (*events.Files, error) {
	if s.MaxAccountBytes <= 0 && s.MaxUploadsPerDay <= 0 {
		return nil, nil
	}
	return s.load(ctx, accountID)
}

// usedBytes returns the bytes of the live files of f; 0 without a bound to
// check them against.
func (s *Service) usedBytes(f *events.Files) int64 {
	if s.MaxAccountBytes <= 0 || f == nil {
		return 0
	}
	now := s.Now()
	var used int64
	for _, sf := range f.ByID {
		if !sf.Deleted && now.Before(sf.ExpiresAt) {
			used += sf.Bytes
		}
	}
	return used
}

// uploadDay is the window of MaxUploadsPerDay.
const uploadDay = 24 * time.Hour

// withinDay refuses, with rate_limited, an upload of an account whose files
// f count MaxUploadsPerDay uploads in the last 24 hours; its Retry-After is
// the wait until the oldest of them is a day old.
func (s *Service) withinDay(f *events.Files) error {
	if s.MaxUploadsPerDay <= 0 || f == nil {
		return nil
	}
	now := s.Now()
	var recent []time.Time
	for _, sf := range f.ByID {
		if now.Sub(sf.CreatedAt) < uploadDay {
			recent = append(recent, sf.CreatedAt)
		}
	}
	if len(recent) < s.MaxUploadsPerDay {
		return nil
	}
	slices.SortFunc(recent, func(a, b time.Time) int { return a.Compare(b) })
	// The upload that must be a day old for one more to fit.
	wait := recent[len(recent)-s.MaxUploadsPerDay].Add(uploadDay).Sub(now)
	return &apperr.Error{Code: apperr.RateLimited, RetryAfter: max(int((wait+time.Second-1)/time.Second), 1),
		Message: fmt.Sprintf("this account uploaded %d files in the last 24 hours (deleted ones count), its bound; the next upload fits in %s", len(recent), wait.Round(time.Minute))}
}

// fits refuses a file of size when the account's live files, holding used
// bytes, cannot take it. Uploads of one account that run at the same time
// are checked against the same used bytes, so together they may pass the
// bound by what they store.
func (s *Service) fits(used, size int64) error {
	if s.MaxAccountBytes <= 0 || used+size <= s.MaxAccountBytes && (size > 0 || used < s.MaxAccountBytes) {
		return nil
	}
	this := ""
	if size > 0 {
		this = fmt.Sprintf(", which leaves %d bytes, less than this file needs", max(s.MaxAccountBytes-used, 0))
	}
	return apperr.New(apperr.FileTooLarge, "the account's live files hold %d of its %d MiB%s; delete files it no longer needs (DELETE /v1/files/{id}) or wait for them to expire, 48 hours after their upload",
		used>>20, s.MaxAccountBytes>>20, this)
}

// append records ev for the account's files, conditional on expect.
func (s *Service) append(ctx context.Context, accountID string, ev events.Event, now time.Time, expect *eventstore.Expect) error {
	env, err := events.Wrap(events.AggregateFile, accountID, ev, now)
	if err != nil {
		return err
	}
	_, err = s.Store.Append(ctx, env, expect)
	return err
}

// load folds the account's file events.
func (s *Service) load(ctx context.Context, accountID string) (*events.Files, error) {
	recs, err := s.Store.Load(ctx, s.Store.Files, events.Filter(events.AggregateFile, accountID), 1)
	if err != nil {
		return nil, err
	}
	f := &events.Files{}
	for _, r := range recs {
		f.Apply(r)
	}
	return f, nil
}

// update loads the account's files, decides and appends, retrying on a
// concurrent append.
func (s *Service) update(ctx context.Context, accountID string, decide func(*events.Files) (events.Event, error)) (*events.Files, error) {
	for attempt := 0; ; attempt++ {
		f, err := s.load(ctx, accountID)
		if err != nil {
			return nil, err
		}
		ev, err := decide(f)
		if err != nil || ev == nil {
			return f, err
		}
		err = s.append(ctx, accountID, ev, s.Now(), &eventstore.Expect{Filter: events.Filter(events.AggregateFile, accountID), Seq: f.LastSeq})
		if errors.Is(err, eventstore.ErrConflict) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, err
		}
		f.Apply(events.Record{Seq: f.LastSeq, Event: ev})
		return f, nil
	}
}

func notFound(id string) error {
	return apperr.New(apperr.NotFound, "no file %s", id)
}

func expired(id string) error {
	return apperr.New(apperr.FileExpired, "the file %s expired 48 hours after its upload; upload it again", id)
}

// live returns the account's file id as it stands, recording its expiry
// if it is due: not_found for an unknown or deleted file (or another
// account's), file_expired for an expired one.
func (s *Service) live(ctx context.Context, accountID, id string) (*events.StoredFile, error) {
	f, err := s.update(ctx, accountID, func(f *events.Files) (events.Event, error) {
		return events.DecideExpireFile(f, id, s.Now()), nil
	})
	if err != nil {
		return nil, err
	}
	sf := f.ByID[id]
	switch {
	case sf == nil || sf.Deleted:
		return nil, notFound(id)
	case sf.Expired || !s.Now().Before(sf.ExpiresAt):
		return nil, expired(id)
	}
	return sf, nil
}

func meta(accountID string, sf *events.StoredFile) Meta {
	m := Meta{ID: sf.FileID, AccountID: accountID, Name: sf.Name, Kind: sf.Kind, MediaType: sf.MediaType, Bytes: sf.Bytes,
		SHA256: sf.SHA256, CreatedAt: sf.CreatedAt, ExpiresAt: sf.ExpiresAt}
	if e := sf.Extracted; e != nil {
		m.Pages, m.Chars, m.Truncated = e.Pages, e.Chars, e.Truncated
	}
	return m
}

// Get returns the metadata of the account's file: apperr not_found for an
// unknown or deleted file or another account's, file_expired for a file
// past its expiry (whose first such access records file.expired).
func (s *Service) Get(ctx context.Context, accountID, fileID string) (Meta, error) {
	sf, err := s.live(ctx, accountID, fileID)
	if err != nil {
		return Meta{}, err
	}
	return meta(accountID, sf), nil
}

// Page is one page of a listing.
type Page struct {
	Files   []Meta
	HasMore bool
}

// MaxListLimit bounds the files of one page of List.
const MaxListLimit = 100

// List returns the account's live files, newest first, at most limit of
// them after the file id after (none: from the newest).
func (s *Service) List(ctx context.Context, accountID string, limit int, after string) (Page, error) {
	f, err := s.load(ctx, accountID)
	if err != nil {
		return Page{}, err
	}
	now := s.Now()
	ids := slices.Clone(f.Order)
	slices.Reverse(ids)
	if after != "" {
		i := slices.Index(ids, after)
		if i < 0 {
			return Page{}, apperr.New(apperr.InvalidRequest, "after names no file of this account")
		}
		ids = ids[i+1:]
	}
	var p Page
	for _, id := range ids {
		sf := f.ByID[id]
		if sf.Deleted || sf.Expired || !now.Before(sf.ExpiresAt) {
			continue
		}
		if len(p.Files) == limit {
			p.HasMore = true
			break
		}
		p.Files = append(p.Files, meta(accountID, sf))
	}
	return p, nil
}

// Delete deletes the account's file: its event, then its bytes and text.
// It returns not_found or file_expired as Get does.
func (s *Service) Delete(ctx context.Context, accountID, fileID string) error {
	if _, err := s.live(ctx, accountID, fileID); err != nil {
		return err
	}
	_, err := s.update(ctx, accountID, func(f *events.Files) (events.Event, error) {
		ev := events.DecideDeleteFile(f, fileID)
		if ev == nil {
			return nil, notFound(fileID)
		}
		return ev, nil
	})
	if err != nil {
		return err
	}
	for _, name := range []string{fileID, textObject(fileID)} {
		if err := s.Store.FileObjects.Delete(ctx, name); err != nil {
			s.Log.Warn().Err(err).Str("file_id", fileID).Msg("delete a file's objects; the bucket's TTL removes them")
		}
	}
	s.Log.Info().Str("file_id", fileID).Str("account_id", accountID).Msg("file deleted")
	return nil
}

// owner returns the account of a stored file, from its object, or
// not_found.
func (s *Service) owner(ctx context.Context, fileID string) (string, error) {
	info, err := s.Store.FileObjects.Info(ctx, fileID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return "", notFound(fileID)
	}
	if err != nil {
		return "", err
	}
	return info.Metadata[metaAccount], nil
}

// Content returns the bytes of a live file, whoever's: the caller has
// checked the account with Get. not_found and file_expired as Get.
func (s *Service) Content(ctx context.Context, fileID string) ([]byte, error) {
	account, err := s.owner(ctx, fileID)
	if err != nil {
		return nil, err
	}
	if _, err := s.live(ctx, account, fileID); err != nil {
		return nil, err
	}
	b, err := s.Store.FileObjects.Get(ctx, fileID)
	if errors.Is(err, eventstore.ErrNotFound) {
		return nil, expired(fileID) // the TTL came first
	}
	return b, err
}

// Text returns the extracted text of a live file, "" when it has none.
// not_found and file_expired as Get.
func (s *Service) Text(ctx context.Context, fileID string) (string, error) {
	account, err := s.owner(ctx, fileID)
	if err != nil {
		return "", err
	}
	if _, err := s.live(ctx, account, fileID); err != nil {
		return "", err
	}
	b, err := s.Store.FileObjects.Get(ctx, textObject(fileID))
	if errors.Is(err, eventstore.ErrNotFound) {
		return "", nil
	}
	return string(b), err
}

// Sweep removes the objects no recorded file owns, older than orphanAge:
// what an upload that crashed between storing its bytes and recording
// them left behind. It returns how many it removed.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	infos, err := s.Store.FileObjects.List(ctx)
	if err != nil {
		return 0, err
	}
	folds := map[string]*events.Files{}
	owners := map[string]string{}
	for _, i := range infos {
		if i.Metadata[metaAccount] != "" {
			owners[i.Metadata[metaFile]] = i.Metadata[metaAccount]
		}
	}
	removed := 0
	for _, i := range infos {
		if s.Now().Sub(i.ModTime) < orphanAge {
			continue
		}
		fileID := i.Metadata[metaFile]
		account := owners[fileID]
		if account != "" {
			f, ok := folds[account]
			if !ok {
				if f, err = s.load(ctx, account); err != nil {
					return removed, err
				}
				folds[account] = f
			}
			if f.ByID[fileID] != nil {
				continue
			}
		}
		if err := s.Store.FileObjects.Delete(ctx, i.Name); err != nil {
			return removed, err
		}
		removed++
	}
	return removed, nil
}

// checkedReader passes the upload through, hashing it, failing once it
// exceeds max bytes and, for text, checking that it is UTF-8.
type checkedReader struct {
	r    io.Reader
	max  int64
	n    int64
	hash hash.Hash
	text bool
	// pending holds the bytes of a character split across reads.
	pending []byte
	bad     bool
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n += int64(n)
		if c.n > c.max {
			return 0, errTooLarge{c.max}
		}
		c.hash.Write(p[:n])
		if c.text && !c.bad {
			c.checkUTF8(p[:n])
			if c.bad {
				return 0, errNotUTF8
			}
		}
	}
	return n, err
}

// checkUTF8 checks b, the next bytes of the text, carrying an incomplete
// last character over to the next call.
func (c *checkedReader) checkUTF8(b []byte) {
	buf := append(c.pending, b...)
	end := len(buf)
	// Up to 3 trailing bytes may start a character that continues.
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-3; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				end = i
			}
			break
		}
	}
	if !utf8.Valid(buf[:end]) {
		c.bad = true
	}
	c.pending = append(c.pending[:0], buf[end:]...)
}

// utf8Done reports whether the whole text was UTF-8, once read to its end.
func (c *checkedReader) utf8Done() bool { return !c.bad && len(c.pending) == 0 }

type bytesSource struct{ b []byte }

func bytesReader(b []byte) io.Reader { return &bytesSource{b} }

func (s *bytesSource) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// Usage is what the store keeps of an account's files.
type Usage struct {
	// Live and LiveBytes are the account's live files (uploaded, neither
	// deleted nor expired) and their bytes.
	Live      int
	LiveBytes int64
	// Events and EventBytes are the account's events the FILES stream
	// keeps (eventstore.FileEventsMaxAge) and their stored bytes.
	Events     int
	EventBytes int64
}

// Usage returns what the store keeps of the account's files.
func (s *Service) Usage(ctx context.Context, accountID string) (Usage, error) {
	recs, err := s.Store.Load(ctx, s.Store.Files, events.Filter(events.AggregateFile, accountID), 1)
	if err != nil {
		return Usage{}, err
	}
	f := &events.Files{}
	var u Usage
	for _, r := range recs {
		f.Apply(r)
		u.Events++
		u.EventBytes += int64(len(r.Raw))
	}
	now := s.Now()
	for _, sf := range f.ByID {
		if !sf.Deleted && !sf.Expired && now.Before(sf.ExpiresAt) {
			u.Live++
			u.LiveBytes += sf.Bytes
		}
	}
	return u, nil
}
