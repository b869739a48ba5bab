// Package extracttest builds documents for the tests of the extractors and
// of their users: well-formed PDFs whose objects a test chooses.
package extracttest

import (
	"bytes"
	"fmt"
	"strings"
)

var pdfEscape = strings.NewReplacer(`\`, `\\`, `(`, `\(`, `)`, `\)`)

// MinimalPDF returns a one-page PDF whose page shows lines in Helvetica and
// whose document information names title.
func MinimalPDF(title string, lines ...string) []byte {
	return onePage(title, lines)
}

// onePage builds the one-page PDF of MinimalPDF, with extra objects after
// the document information.
func onePage(title string, lines []string, extra ...string) []byte {
	var content bytes.Buffer
	content.WriteString("BT\n/F1 12 Tf\n72 720 Td\n14 TL\n")
	for _, l := range lines {
		fmt.Fprintf(&content, "(%s) Tj T*\n", pdfEscape.Replace(l))
	}
	content.WriteString("ET\n")
	return BuildPDF(append([]string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		PDFStream(content.String()),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
		fmt.Sprintf("<< /Title (%s) >>", pdfEscape.Replace(title)),
	}, extra...)...)
}

// PDFStream returns a PDF stream object of content.
func PDFStream(content string) string {
	return fmt.Sprintf("<< /Length %d >>\nstream\n%sendstream", len(content), content)
}

// BuildPDF returns a PDF of objects, numbered from 1: the first is the
// catalog and the sixth, if any, the document information. The
// cross-reference table's offsets are computed, so the file is well formed
// whatever the objects say.
func BuildPDF(objects ...string) []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objects))
	for i, o := range objects {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objects)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	info := ""
	if len(objects) >= 6 {
		info = " /Info 6 0 R"
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n", len(objects)+1, info, xref)
	return b.Bytes()
}

// PaddedPDF returns MinimalPDF's one page grown to at least size bytes by
// an object no page refers to: a large file that reads quickly.
func PaddedPDF(size int, lines ...string) []byte {
	return onePage("Padded", lines, PDFStream(strings.Repeat("0", size)))
}
