package extract

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ledongthuc/pdf"
)

const (
	// maxPDFPages bounds the pages read from one PDF: a page count is the
	// file's claim, not a fact.
	maxPDFPages = 5000
	// maxPDFDepth bounds the levels of a PDF's page tree and of a page's
	// chain of parents; a well-formed file has a few.
	maxPDFDepth = 64
	// maxPDFStream bounds the decoded content of one page and of one font's
	// character map.
	maxPDFStream = 16 << 20
	// pdfTimeout bounds the reading of one PDF.
	pdfTimeout = 20 * time.Second
)

// PDF reads the text of a PDF, a paragraph per page, and the title of
// its Document information.
//
// The PDF reader trusts its input. It panics on many malformed files, which
// is an error here, and it never finishes some others: the page trees and
// character maps it would loop on are checked and skipped before it reads
// them, and a file that still takes longer than pdfTimeout is given up with
// an error, though the goroutine reading it cannot be stopped. One kind of
// crafted file, an object stream said to lie within itself, overflows the
// reader's stack, which ends the process: call PDF only in a child
// process (Runner), as File and the file service do.
func PDF(data []byte) (Document, error) {
	type result struct {
		doc Document
		err error
	}
	done := make(chan result, 1)
	go func() {
		doc, err := readPDF(data)
		done <- result{doc, err}
	}()
	timer := time.NewTimer(pdfTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.doc, r.err
	case <-timer.C:
		return Document{}, fmt.Errorf("PDF not read within %s", pdfTimeout)
	}
}

// errNoPDFText reports a PDF read without finding text: scanned pages, or
// pages left out (the Document returned with it counts them).
var errNoPDFText = errors.New("no text in PDF")

func readPDF(data []byte) (doc Document, err error) {
	defer func() {
		if r := recover(); r != nil {
			doc, err = Document{}, fmt.Errorf("malformed PDF: %v", r)
		}
	}()
	r, err := pdf.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return Document{}, err
	}
	doc.Title = OneLine(r.Trailer().Key("Info").Key("Title").Text())
	for _, p := range pdfPages(r.Trailer().Key("Root").Key("Pages")) {
		if !pdfStreamSafe(p.V.Key("Contents")) {
			doc.Skipped++
			continue
		}
		text, err := p.GetPlainText(pdfFonts(p))
		if err != nil {
			continue // an unreadable page; the others may still be fine
		}
		if t := OneLine(text); t != "" {
			doc.Paragraphs = append(doc.Paragraphs, t)
		}
	}
	if len(doc.Paragraphs) == 0 {
		// The pages left out are still reported.
		return Document{Skipped: doc.Skipped}, errNoPDFText
	}
	return doc, nil
}

// pdfPages returns the pages of the page tree at root, in order, at most
// maxPDFPages of them. Unlike the reader's own Page, it cannot loop on a
// tree whose kids lead back to an ancestor: it stops at maxPDFDepth levels
// and after visiting a bounded number of nodes.
func pdfPages(root pdf.Value) []pdf.Page {
	type node struct {
		v     pdf.Value
		depth int
	}
	var pages []pdf.Page
	stack := []node{{root, 0}}
	for visits := 0; len(stack) > 0 && len(pages) < maxPDFPages && visits < 4*maxPDFPages; visits++ {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch n.v.Key("Type").Name() {
		case "Page":
			pages = append(pages, pdf.Page{V: n.v})
		case "Pages":
			if n.depth == maxPDFDepth {
				continue
			}
			kids := n.v.Key("Kids")
			for i := min(kids.Len(), 4*maxPDFPages) - 1; i >= 0; i-- {
				stack = append(stack, node{kids.Index(i), n.depth + 1})
			}
		}
	}
	return pages
}

// pdfFonts returns the fonts of page p by resource name, leaving out those
// whose character map the reader would loop on. Passing them to
// GetPlainText also keeps the reader from looking them up itself, along a
// chain of parents that may be a cycle.
func pdfFonts(p pdf.Page) map[string]*pdf.Font {
	var resources pdf.Value
	v := p.V
	for range maxPDFDepth {
		if v.IsNull() {
			break
		}
		if resources = v.Key("Resources"); !resources.IsNull() {
			break
		}
		v = v.Key("Parent")
	}
	fonts := map[string]*pdf.Font{}
	dict := resources.Key("Font")
	for _, name := range dict.Keys() {
		f := dict.Key(name)
		if cmap := f.Key("ToUnicode"); cmap.Kind() == pdf.Stream && !pdfStreamSafe(cmap) {
			continue
		}
		fonts[name] = &pdf.Font{V: f}
	}
	return fonts
}

// pdfStreamSafe reports whether the reader's interpreter can read the
// stream v (or the array of streams v) to its end. The interpreter loops
// forever on a hex string left open at the end of a stream, so v must have
// no '<' after its last '>'; and its decoded content must fit maxPDFStream.
func pdfStreamSafe(v pdf.Value) (safe bool) {
	defer func() {
		if recover() != nil {
			safe = false
		}
	}()
	var parts []pdf.Value
	switch v.Kind() {
	case pdf.Stream:
		parts = []pdf.Value{v}
	case pdf.Array:
		for i := range min(v.Len(), maxPDFPages) {
			parts = append(parts, v.Index(i))
		}
	default:
		return v.IsNull()
	}
	var content []byte
	for _, part := range parts {
		if part.Kind() != pdf.Stream {
			continue
		}
		rd := part.Reader()
		b, err := io.ReadAll(io.LimitReader(rd, int64(maxPDFStream+1-len(content))))
		rd.Close()
		if err != nil {
			return false
		}
		if content = append(content, b...); len(content) > maxPDFStream {
			return false
		}
	}
	return bytes.LastIndexByte(content, '<') <= bytes.LastIndexByte(content, '>')
}
