package files

import (
	"path"
	"strings"

	"github.com/gabriel-vasile/mimetype"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/extract"
)

// Size limits by kind, in bytes.
const (
	MaxImageBytes    = 20 << 20
	MaxPDFBytes      = 32 << 20
	MaxDocumentBytes = 32 << 20
	MaxTextBytes     = 10 << 20
	// MaxUploadBytes bounds a whole upload request: the largest file and
	// room for the multipart framing and fields.
	MaxUploadBytes = MaxPDFBytes + 64<<10
)

// sniffBytes is how much of the start of a file is sniffed: mimetype's
// default read limit.
const sniffBytes = 3072

// kind is what the service accepts under one extension.
type kind struct {
	kind string
	// mediaType is the file's media type as reported.
	mediaType string
	max       int64
	// sniffed lists the media types the content may sniff as; text kinds
	// accept any text (text/plain or a type under it).
	sniffed []string
	text    bool
	// format is the extraction format; "" for images.
	format string
}

var kinds = map[string]kind{
	".png":  {kind: events.FileKindImage, mediaType: "image/png", max: MaxImageBytes, sniffed: []string{"image/png"}},
	".jpg":  {kind: events.FileKindImage, mediaType: "image/jpeg", max: MaxImageBytes, sniffed: []string{"image/jpeg"}},
	".jpeg": {kind: events.FileKindImage, mediaType: "image/jpeg", max: MaxImageBytes, sniffed: []string{"image/jpeg"}},
	".gif":  {kind: events.FileKindImage, mediaType: "image/gif", max: MaxImageBytes, sniffed: []string{"image/gif"}},
	".webp": {kind: events.FileKindImage, mediaType: "image/webp", max: MaxImageBytes, sniffed: []string{"image/webp"}},
	".pdf":  {kind: events.FileKindPDF, mediaType: "application/pdf", max: MaxPDFBytes, sniffed: []string{"application/pdf"}, format: extract.FormatPDF},
	".docx": {kind: events.FileKindDocument, mediaType: "application/vnd.openxmlformats-officedocument.wordprocessingml.document", max: MaxDocumentBytes,
		sniffed: []string{"application/vnd.openxmlformats-officedocument.wordprocessingml.document"}, format: extract.FormatDOCX},
	// A compound file's directory may lie beyond the sniffed bytes, so a
	// .doc may sniff as a generic compound file; the extraction then
	// requires its WordDocument stream.
	".doc":  {kind: events.FileKindDocument, mediaType: "application/msword", max: MaxDocumentBytes, sniffed: []string{"application/msword", "application/x-ole-storage"}, format: extract.FormatDOC},
	".py":   textKind("text/x-python", extract.FormatText),
	".js":   textKind("text/javascript", extract.FormatText),
	".ts":   textKind("text/x-typescript", extract.FormatText),
	".html": textKind("text/html", extract.FormatHTML),
	".htm":  textKind("text/html", extract.FormatHTML),
	".css":  textKind("text/css", extract.FormatText),
	".json": textKind("application/json", extract.FormatText),
	".yaml": textKind("application/yaml", extract.FormatText),
	".yml":  textKind("application/yaml", extract.FormatText),
	".sql":  textKind("application/sql", extract.FormatText),
	// Plain text, read as it is (XML's markup too: a model reads it).
	".txt":  textKind("text/plain", extract.FormatText),
	".md":   textKind("text/markdown", extract.FormatText),
	".csv":  textKind("text/csv", extract.FormatText),
	".log":  textKind("text/plain", extract.FormatText),
	".xml":  textKind("application/xml", extract.FormatText),
	".toml": textKind("application/toml", extract.FormatText),
}

func textKind(mediaType, format string) kind {
	return kind{kind: events.FileKindText, mediaType: mediaType, max: MaxTextBytes, text: true, format: format}
}

// kindOf returns what name's extension accepts, or false.
func kindOf(name string) (kind, bool) {
	k, ok := kinds[strings.ToLower(path.Ext(name))]
	return k, ok
}

// agrees reports whether the content whose first bytes are head sniffs as
// what k accepts, and returns the sniffed media type.
func (k kind) agrees(head []byte) (string, bool) {
	m := mimetype.Detect(head)
	if k.text {
		for t := m; t != nil; t = t.Parent() {
			if t.Is("text/plain") {
				return m.String(), true
			}
		}
		return m.String(), false
	}
	for _, want := range k.sniffed {
		if m.Is(want) {
			return m.String(), true
		}
	}
	return m.String(), false
}
