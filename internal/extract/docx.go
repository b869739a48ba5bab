package extract

import (
	"archive/zip"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Bounds on a DOCX, which is a zip archive: a zip bomb's entries claim
// little and expand to much, so every bound is on what is read, never on
// what the archive says.
const (
	// maxDOCXEntries bounds the entries of the archive.
	maxDOCXEntries = 10000
	// maxDOCXDocument bounds the uncompressed size of word/document.xml.
	maxDOCXDocument = 64 << 20
	// maxDOCXDepth bounds the nesting of the document's XML elements.
	maxDOCXDepth = 256
)

// ErrNotWord reports a file that is not the Word document its name or
// type claims: a zip without word/document.xml, a compound file without a
// WordDocument stream.
var ErrNotWord = errors.New("not a Word document")

// DOCX reads the text of a Word document (Office Open XML): the paragraphs
// of word/document.xml in order, each paragraph's runs of text joined, tabs
// and breaks as spaces. The title is the first paragraph of style Title, if
// any. It refuses an archive of more than maxDOCXEntries entries, one whose
// document part expands beyond maxDOCXDocument bytes or nests deeper than
// maxDOCXDepth, and one without a document part (ErrNotWord).
func DOCX(data []byte) (Document, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return Document{}, fmt.Errorf("DOCX archive: %w", err)
	}
	if len(zr.File) > maxDOCXEntries {
		return Document{}, fmt.Errorf("DOCX archive has %d entries, more than %d", len(zr.File), maxDOCXEntries)
	}
	var part *zip.File
	for _, f := range zr.File {
		if f.Name == "word/document.xml" {
			part = f
			break
		}
	}
	if part == nil {
		return Document{}, ErrNotWord
	}
	rc, err := part.Open()
	if err != nil {
		return Document{}, fmt.Errorf("DOCX document part: %w", err)
	}
	defer rc.Close()
	lr := &io.LimitedReader{R: rc, N: maxDOCXDocument + 1}
	doc, err := docxText(xml.NewDecoder(lr))
	if lr.N <= 0 {
		return Document{}, fmt.Errorf("DOCX document part expands beyond %d bytes", maxDOCXDocument)
	}
	return doc, err
}

// docxText walks the WordprocessingML of a document part.
func docxText(dec *xml.Decoder) (Document, error) {
	var doc Document
	var para strings.Builder
	depth, inText, titleStyle := 0, false, false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Document{}, fmt.Errorf("DOCX document part: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if depth++; depth > maxDOCXDepth {
				return Document{}, fmt.Errorf("DOCX document part nests deeper than %d", maxDOCXDepth)
			}
			switch t.Name.Local {
			case "t":
				inText = true
			case "tab", "br", "cr":
				para.WriteByte(' ')
			case "pStyle":
				for _, a := range t.Attr {
					if a.Name.Local == "val" && a.Value == "Title" {
						titleStyle = true
					}
				}
			}
		case xml.EndElement:
			depth--
			switch t.Name.Local {
			case "t":
				inText = false
			case "p":
				if p := OneLine(para.String()); p != "" {
					if titleStyle && doc.Title == "" {
						doc.Title = p
					}
					doc.Paragraphs = append(doc.Paragraphs, p)
				}
				para.Reset()
				titleStyle = false
			}
		case xml.CharData:
			if inText {
				para.Write(t)
			}
		}
	}
	if p := OneLine(para.String()); p != "" {
		doc.Paragraphs = append(doc.Paragraphs, p)
	}
	return doc, nil
}
