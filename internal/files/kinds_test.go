package files

import (
	"testing"

	"github.com/crosscheck/crosscheck/internal/events"
	"github.com/crosscheck/crosscheck/internal/extract"
)

// Plain text files are accepted as text, as code is: their extension is
// known, their content sniffs as text and is extracted as it is.
func TestPlainTextKinds(t *testing.T) {
	for _, tt := range []struct {
		name, mediaType, content string
	}{
		{"notes.txt", "text/plain", "The harbour crane lifts forty tonnes.\n"},
		{"README.md", "text/markdown", "# Notes\n\n- The harbour crane lifts *forty* tonnes.\n"},
		{"cranes.csv", "text/csv", "crane,tonnes\nharbour,40\ndock,25\n"},
		{"server.log", "text/plain", "2026-11-03T10:00:00Z INF started addr=127.0.0.1:8080\n"},
		{"feed.xml", "application/xml", "<?xml version=\"1.0\"?>\n<cranes><crane tonnes=\"40\">harbour</crane></cranes>\n"},
		{"Cargo.toml", "application/toml", "[package]\nname = \"crane\"\nversion = \"0.1.0\"\n"},
		{"UPPER.TXT", "text/plain", "Case does not matter.\n"},
	} {
		k, ok := kindOf(tt.name)
		if !ok {
			t.Errorf("%s: extension not accepted", tt.name)
			continue
		}
		if k.kind != events.FileKindText || k.mediaType != tt.mediaType || k.format != extract.FormatText || k.max != MaxTextBytes {
			t.Errorf("%s: kind %q, media type %q, format %q, max %d; want text, %s, %s, %d", tt.name, k.kind, k.mediaType, k.format, k.max, tt.mediaType, extract.FormatText, MaxTextBytes)
		}
		if sniffed, ok := k.agrees([]byte(tt.content)); !ok {
			t.Errorf("%s: content sniffed as %s is refused", tt.name, sniffed)
		}
	}
	// Binary content under a text name is still refused.
	k, _ := kindOf("notes.txt")
	if sniffed, ok := k.agrees([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")); ok {
		t.Errorf("a PNG named notes.txt is accepted (sniffed %s)", sniffed)
	}
}
