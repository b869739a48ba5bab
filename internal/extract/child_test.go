package extract

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
)

// TestMain lets the test binary act as the extraction child, as the
// crosscheck binary does.
func TestMain(m *testing.M) {
	RunChildIfAsked()
	actAsParentIfAsked()
	os.Exit(m.Run())
}

func TestRunnerExtractsEachFormat(t *testing.T) {
	var r Runner
	tests := []struct {
		format string
		data   []byte
		want   string
	}{
		{FormatPDF, extracttest.MinimalPDF("Report", "The harbour crane lifts forty tonnes."), "The harbour crane lifts forty tonnes."},
		{FormatDOCX, extracttest.DOCX("Intro", "The lighthouse keeper counts ninety steps."), "The lighthouse keeper counts ninety steps."},
		{FormatDOC, extracttest.DOC("Intro", "The ferry leaves at seven."), "The ferry leaves at seven."},
		{FormatHTML, []byte("<html><body><p>The bridge is green.</p></body></html>"), "The bridge is green."},
		{FormatText, []byte("print('the kettle whistles')\n"), "print('the kettle whistles')"},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			res, err := r.Run(context.Background(), "", tt.format, bytes.NewReader(tt.data), Caps{MaxPages: 10, MaxChars: 10000})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !strings.Contains(res.Text(), tt.want) {
				t.Errorf("text %q lacks %q", res.Text(), tt.want)
			}
			if res.Chars == 0 || res.Truncated {
				t.Errorf("chars %d truncated %v, want some and false", res.Chars, res.Truncated)
			}
		})
	}
}

// TestRunnerSurvivesStackOverflow: the crafted PDF kills the child with a
// stack overflow no recover catches; the parent gets ErrCrashed and goes on.
func TestRunnerSurvivesStackOverflow(t *testing.T) {
	var r Runner
	_, err := r.Run(context.Background(), "", FormatPDF, bytes.NewReader(extracttest.OverflowPDF()), Caps{})
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("Run(overflowing PDF) = %v, want ErrCrashed", err)
	}
	res, err := r.Run(context.Background(), "", FormatPDF, bytes.NewReader(extracttest.MinimalPDF("t", "Still serving.")), Caps{})
	if err != nil || !strings.Contains(res.Text(), "Still serving.") {
		t.Fatalf("after the crash: %q, %v", res.Text(), err)
	}
}

func TestRunnerTimesOut(t *testing.T) {
	r := Runner{Path: "/bin/sh", Args: []string{"-c", "sleep 30"}, Timeout: 200 * time.Millisecond}
	if _, err := r.Run(context.Background(), "", FormatText, strings.NewReader("x"), Caps{}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v, want ErrTimeout", err)
	}
}

func TestRunnerRefusesMalformed(t *testing.T) {
	var r Runner
	for name, tt := range map[string]struct {
		format string
		data   []byte
		want   error
	}{
		"broken PDF":                         {FormatPDF, []byte("%PDF-1.4\nnot really"), ErrUnreadable},
		"zip without a document":             {FormatDOCX, extracttest.Zip(map[string]string{"a.txt": "hello"}, "a.txt"), ErrNotWord},
		"compound file without WordDocument": {FormatDOC, extracttest.CompoundFile(map[string][]byte{"Book": make([]byte, 4096)}, "Book"), ErrNotWord},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := r.Run(context.Background(), "", tt.format, bytes.NewReader(tt.data), Caps{}); !errors.Is(err, tt.want) {
				t.Fatalf("Run = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestExtractCaps(t *testing.T) {
	res, err := Extract(FormatText, []byte("one two three\n\nfour five six\n\nseven"), Caps{MaxChars: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.Chars != 20 || res.Text() != "one two three\n\nfour fi" {
		t.Errorf("got %q chars %d truncated %v; want the first 20 characters, truncated", res.Text(), res.Chars, res.Truncated)
	}
	doc := extracttest.BuildPDF(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R 5 0 R] /Count 2 >>",
		"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 7 0 R >> >> >>",
		extracttest.PDFStream("BT /F1 12 Tf (Page one.) Tj ET\n"),
		"<< /Type /Page /Parent 2 0 R /Contents 6 0 R /Resources << /Font << /F1 7 0 R >> >> >>",
		extracttest.PDFStream("BT /F1 12 Tf (Page two.) Tj ET\n"),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	)
	res, err = Extract(FormatPDF, doc, Caps{MaxPages: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pages != 1 || !res.Truncated || res.Text() != "Page one." {
		t.Errorf("got %q pages %d truncated %v; want page one only, truncated", res.Text(), res.Pages, res.Truncated)
	}
}

func TestDOCXBounds(t *testing.T) {
	bomb := extracttest.Zip(map[string]string{"word/document.xml": "<w:document>" + strings.Repeat(" ", maxDOCXDocument) + "</w:document>"}, "word/document.xml")
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed; want a small one", len(bomb))
	}
	if _, err := DOCX(bomb); err == nil || !strings.Contains(err.Error(), "expands beyond") {
		t.Errorf("DOCX(zip bomb) = %v, want the expansion bound", err)
	}
	files := map[string]string{}
	var names []string
	for i := range maxDOCXEntries + 1 {
		n := "f" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "/" + itoa(i)
		files[n], names = "", append(names, n)
	}
	if _, err := DOCX(extracttest.Zip(files, names...)); err == nil || !strings.Contains(err.Error(), "entries") {
		t.Errorf("DOCX(%d entries) = %v, want the entry bound", len(names), err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestDOCTitleAndFields(t *testing.T) {
	doc, err := DOC(extracttest.DOC("Heading", "Before \x13 PAGE \x141\x15 after"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(doc.Paragraphs, "|"); got != "Heading|Before 1 after" {
		t.Errorf("paragraphs %q, want the field result without its instruction", got)
	}
}

// A page whose content is over the reader's stream bound is left out, and
// the result says text was left out (it read as an empty, complete file),
// also when it is the only page.
func TestExtractReportsAPageLeftOut(t *testing.T) {
	big := "BT /F1 12 Tf " + strings.Repeat("(x) Tj ", maxPDFStream/7+1) + "ET\n"
	only := extracttest.BuildPDF(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		extracttest.PDFStream(big),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	)
	res, err := Extract(FormatPDF, only, Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text() != "" || !res.Truncated {
		t.Errorf("the only page over the bound: got %q truncated %v; want no text, truncated", res.Text(), res.Truncated)
	}
	doc := extracttest.BuildPDF(
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R 5 0 R] /Count 2 >>",
		"<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 7 0 R >> >> >>",
		extracttest.PDFStream("BT /F1 12 Tf (Page one.) Tj ET\n"),
		"<< /Type /Page /Parent 2 0 R /Contents 6 0 R /Resources << /Font << /F1 7 0 R >> >> >>",
		extracttest.PDFStream(big),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	)
	res, err = Extract(FormatPDF, doc, Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text() != "Page one." || !res.Truncated {
		t.Errorf("got %q truncated %v; want page one, truncated", res.Text(), res.Truncated)
	}
}

// storm is a DOCX of 32 MiB of attributes in small elements: a few seconds
// of a child's CPU, little memory.
var storm = sync.OnceValue(func() []byte { return extracttest.AttributeStormDOCX(32 << 20) })

// TestRunnerSaysWhichLimit: a file that takes its child past its CPU or
// memory limit is refused with the limit's own error, not as a crash.
func TestRunnerSaysWhichLimit(t *testing.T) {
	t.Run("CPU", func(t *testing.T) {
		r := Runner{CPUSeconds: 1}
		_, err := r.Run(context.Background(), "", FormatDOCX, bytes.NewReader(storm()), Caps{})
		if !errors.Is(err, ErrCPU) {
			t.Fatalf("Run(attribute storm, 1 s of CPU) = %v, want ErrCPU", err)
		}
	})
	t.Run("memory", func(t *testing.T) {
		if raceEnabled {
			t.Skip("the child's memory is not bounded under the race detector")
		}
		r := Runner{Memory: 160 << 20}
		_, err := r.Run(context.Background(), "", FormatDOCX, bytes.NewReader(extracttest.AttributeBombDOCX(32<<20)), Caps{})
		if !errors.Is(err, ErrMemory) {
			t.Fatalf("Run(attribute bomb, 160 MiB) = %v, want ErrMemory", err)
		}
	})
}
