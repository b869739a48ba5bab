package events

import "time"

// AggregateFile is the aggregate of an account's files: its events are
// ev.file.<account_id>.<event>, each naming the file it concerns.
const AggregateFile = "file"

// FileTTL is how long a file lives after its upload.
const FileTTL = 48 * time.Hour

// File kinds.
const (
	FileKindImage    = "image"
	FileKindPDF      = "pdf"
	FileKindDocument = "document"
	FileKindText     = "text"
)

// FileUploaded records a file whose bytes are stored whole: the upload's
// commit point. The file expires FileTTL after the event's time. Its
// content is never in an event.
type FileUploaded struct {
	FileID    string `json:"file_id"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	MediaType string `json:"media_type"`
	Bytes     int64  `json:"bytes"`
	SHA256    string `json:"sha256"`
	Purpose   string `json:"purpose"`
	// KeyFingerprint is the API key that uploaded the file.
	KeyFingerprint string `json:"key_fingerprint"`
}

// FileExtracted records what text extraction produced for a file.
type FileExtracted struct {
	FileID    string `json:"file_id"`
	Pages     int    `json:"pages"`
	Chars     int    `json:"chars"`
	Truncated bool   `json:"truncated"`
}

// FileDeleted records a file deleted by its account.
type FileDeleted struct {
	FileID string `json:"file_id"`
}

// FileExpired records a file found past its expiry.
type FileExpired struct {
	FileID string `json:"file_id"`
}

func (FileUploaded) EventName() string  { return "uploaded" }
func (FileExtracted) EventName() string { return "extracted" }
func (FileDeleted) EventName() string   { return "deleted" }
func (FileExpired) EventName() string   { return "expired" }

func init() {
	register(AggregateFile,
		func() Event { return &FileUploaded{} },
		func() Event { return &FileExtracted{} },
		func() Event { return &FileDeleted{} },
		func() Event { return &FileExpired{} },
	)
}

// StoredFile is one file of an account as its events tell it.
type StoredFile struct {
	FileUploaded
	CreatedAt time.Time
	ExpiresAt time.Time
	Extracted *FileExtracted
	Deleted   bool
	Expired   bool
}

// Files is the fold of an account's file events.
type Files struct {
	LastSeq uint64
	ByID    map[string]*StoredFile
	// Order lists the file ids in upload order.
	Order []string
}

// Apply folds one event into the files.
func (f *Files) Apply(r Record) {
	f.LastSeq = r.Seq
	if f.ByID == nil {
		f.ByID = map[string]*StoredFile{}
	}
	switch e := r.Event.(type) {
	case FileUploaded:
		if f.ByID[e.FileID] == nil {
			f.ByID[e.FileID] = &StoredFile{FileUploaded: e, CreatedAt: r.Envelope.Time, ExpiresAt: r.Envelope.Time.Add(FileTTL)}
			f.Order = append(f.Order, e.FileID)
		}
	case FileExtracted:
		if s := f.ByID[e.FileID]; s != nil {
			s.Extracted = &e
		}
	case FileDeleted:
		if s := f.ByID[e.FileID]; s != nil {
			s.Deleted = true
		}
	case FileExpired:
		if s := f.ByID[e.FileID]; s != nil {
			s.Expired = true
		}
	}
}

// DecideDeleteFile returns the event that deletes file id, or nil when it
// is unknown or already deleted or expired.
func DecideDeleteFile(f *Files, id string) Event {
	s := f.ByID[id]
	if s == nil || s.Deleted || s.Expired {
		return nil
	}
	return FileDeleted{FileID: id}
}

// DecideExpireFile returns the event that records file id as expired at
// now, or nil when it is unknown, deleted, already expired or not yet due.
func DecideExpireFile(f *Files, id string, now time.Time) Event {
	s := f.ByID[id]
	if s == nil || s.Deleted || s.Expired || now.Before(s.ExpiresAt) {
		return nil
	}
	return FileExpired{FileID: id}
}
