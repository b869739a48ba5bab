package extract

import (
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
)

func TestExtractPDFGivesUpOnLoops(t *testing.T) {
	page := func(parent, contents, resources string) string {
		return "<< /Type /Page /Parent " + parent + " /Contents " + contents + resources + " >>"
	}
	font := " /Resources << /Font << /F1 5 0 R >> >>"
	good := extracttest.PDFStream("BT /F1 12 Tf (Readable page text.) Tj ET\n")
	tests := map[string][]string{
		"a hex string left open": {
			"<< /Type /Catalog /Pages 2 0 R >>",
			"<< /Type /Pages /Kids [3 0 R 6 0 R] /Count 2 >>",
			page("2 0 R", "4 0 R", font),
			extracttest.PDFStream("BT /F1 12 Tf (Lost text.) Tj <48656C6C6F"),
			"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
			page("2 0 R", "7 0 R", font),
			good,
		},
		"a page tree that contains itself": {
			"<< /Type /Catalog /Pages 2 0 R >>",
			"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 9 >>",
			page("2 0 R", "4 0 R", font),
			good,
			"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
		},
		"a page whose parent is itself": {
			"<< /Type /Catalog /Pages 2 0 R >>",
			"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
			page("3 0 R", "4 0 R", ""),
			good,
		},
		"a character map with a hex string left open": {
			"<< /Type /Catalog /Pages 2 0 R >>",
			"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
			page("2 0 R", "4 0 R", font),
			good,
			"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
			extracttest.PDFStream("begincmap 1 begincodespacerange <00> <FF> endcodespacerange <0"),
		},
	}
	for name, objects := range tests {
		t.Run(name, func(t *testing.T) {
			done := make(chan struct{})
			var doc Document
			var err error
			go func() {
				defer close(done)
				doc, err = readPDF(extracttest.BuildPDF(objects...))
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the reader did not come back")
			}
			if name == "a page whose parent is itself" {
				return // no font to read the text with; coming back is the point
			}
			if err != nil || !strings.Contains(strings.Join(doc.Paragraphs, " "), "Readable page text.") {
				t.Errorf("readPDF = %q, %v; want the readable page", doc.Paragraphs, err)
			}
		})
	}
}

func TestExtractPDF(t *testing.T) {
	doc, err := PDF(extracttest.MinimalPDF("Annual report", "The harbour crane lifts forty tonnes.", "It was repainted blue."))
	if err != nil {
		t.Fatalf("PDF: %v", err)
	}
	if doc.Title != "Annual report" {
		t.Errorf("title %q, want Annual report", doc.Title)
	}
	text := strings.Join(doc.Paragraphs, " ")
	for _, want := range []string{"The harbour crane lifts forty tonnes.", "It was repainted blue."} {
		if !strings.Contains(text, want) {
			t.Errorf("text %q lacks %q", text, want)
		}
	}
	for _, bad := range [][]byte{nil, []byte("%PDF-1.4\nnot really"), extracttest.MinimalPDF("x", "y")[:200]} {
		if _, err := PDF(bad); err == nil {
			t.Errorf("PDF(%.20q) read a broken file without an error", bad)
		}
	}
}
