package extracttest

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"html"
	"strings"
	"unicode/utf16"
)

// DOCX returns a Word document (Office Open XML) whose body has one
// paragraph per entry of paragraphs.
func DOCX(paragraphs ...string) []byte {
	var body strings.Builder
	for _, p := range paragraphs {
		fmt.Fprintf(&body, `<w:p><w:r><w:t xml:space="preserve">%s</w:t></w:r></w:p>`, html.EscapeString(p))
	}
	return Zip(map[string]string{
		"[Content_Types].xml": `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>`,
		"word/document.xml": `<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>` +
			body.String() + `</w:body></w:document>`,
	}, "[Content_Types].xml", "word/document.xml")
}

// Zip returns a zip archive of files, written in the order of names.
func Zip(files map[string]string, names ...string) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, n := range names {
		w, err := zw.Create(n)
		if err != nil {
			panic(err)
		}
		w.Write([]byte(files[n]))
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// DOC returns a legacy Word document (Word 97 format): a compound file
// with a WordDocument stream whose file information block points at a
// piece table in the 1Table stream, one 8-bit piece holding paragraphs,
// each ended by a paragraph mark.
func DOC(paragraphs ...string) []byte {
	text := strings.Join(paragraphs, "\r") + "\r"
	const textAt = 0x800
	word := make([]byte, max(4096, textAt+len(text)))
	le := binary.LittleEndian
	le.PutUint16(word[0:], 0xA5EC)    // wIdent
	le.PutUint16(word[2:], 0x00C1)    // nFib
	le.PutUint16(word[0x0A:], 0x0200) // fWhichTblStm: 1Table
	le.PutUint32(word[0x18:], textAt) // fcMin
	le.PutUint32(word[0x1C:], uint32(textAt+len(text)))
	le.PutUint16(word[0x20:], 14)                // csw
	le.PutUint16(word[0x3E:], 22)                // cslw
	le.PutUint32(word[0x4C:], uint32(len(text))) // ccpText
	le.PutUint16(word[0x98:], 0x5D)              // cbRgFcLcb
	le.PutUint32(word[0x1A2:], 0)                // fcClx
	le.PutUint32(word[0x1A6:], 1+4+4*2+8)        // lcbClx
	copy(word[textAt:], text)

	table := make([]byte, 4096)
	table[0] = 0x02
	le.PutUint32(table[1:], 4*2+8)
	le.PutUint32(table[5:], 0)
	le.PutUint32(table[9:], uint32(len(text)))
	le.PutUint32(table[13+2:], 0x40000000|textAt*2) // fc, compressed
	return CompoundFile(map[string][]byte{"WordDocument": word, "1Table": table}, "WordDocument", "1Table")
}

// wordCLSID is the class of a Word 97 document, the root entry's.
var wordCLSID = []byte{0x06, 0x09, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x46}

// CompoundFile returns a compound file (version 3, 512-byte sectors) of the
// streams, in the order of names, each at least 4096 bytes so that none is
// in the mini stream, 60 KB in all at most.
func CompoundFile(streams map[string][]byte, names ...string) []byte {
	const (
		sector     = 512
		endOfChain = 0xFFFFFFFE
		freeSect   = 0xFFFFFFFF
		fatSect    = 0xFFFFFFFD
		noStream   = 0xFFFFFFFF
	)
	le := binary.LittleEndian
	fat := []uint32{fatSect, endOfChain} // sector 0: the FAT; 1: the directory
	starts := make([]uint32, len(names))
	var body []byte
	for i, n := range names {
		data := streams[n]
		count := (len(data) + sector - 1) / sector
		starts[i] = uint32(len(fat))
		for j := range count {
			if j == count-1 {
				fat = append(fat, endOfChain)
			} else {
				fat = append(fat, uint32(len(fat)+1))
			}
		}
		padded := make([]byte, count*sector)
		copy(padded, data)
		body = append(body, padded...)
	}
	if len(fat) > sector/4 || len(names) > 3 {
		panic("extracttest: compound file too large")
	}
	header := make([]byte, sector)
	copy(header, []byte{0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1})
	le.PutUint16(header[0x18:], 0x003E)
	le.PutUint16(header[0x1A:], 3)
	le.PutUint16(header[0x1C:], 0xFFFE)
	le.PutUint16(header[0x1E:], 9)
	le.PutUint16(header[0x20:], 6)
	le.PutUint32(header[0x2C:], 1)          // FAT sectors
	le.PutUint32(header[0x30:], 1)          // first directory sector
	le.PutUint32(header[0x38:], 4096)       // mini stream cutoff
	le.PutUint32(header[0x3C:], endOfChain) // first mini FAT sector
	le.PutUint32(header[0x44:], endOfChain) // first DIFAT sector
	for i := range 109 {
		le.PutUint32(header[0x4C+4*i:], freeSect)
	}
	le.PutUint32(header[0x4C:], 0)

	fatSector := make([]byte, sector)
	for i := range sector / 4 {
		v := uint32(freeSect)
		if i < len(fat) {
			v = fat[i]
		}
		le.PutUint32(fatSector[4*i:], v)
	}
	dir := make([]byte, sector)
	entry := func(i int, name string, typ byte, left, right, child, start uint32, size int, clsid []byte) {
		e := dir[128*i : 128*(i+1)]
		u := utf16.Encode([]rune(name))
		for j, c := range u {
			le.PutUint16(e[2*j:], c)
		}
		le.PutUint16(e[64:], uint16(2*len(u)+2))
		e[66], e[67] = typ, 1
		le.PutUint32(e[68:], left)
		le.PutUint32(e[72:], right)
		le.PutUint32(e[76:], child)
		copy(e[80:], clsid)
		le.PutUint32(e[116:], start)
		le.PutUint32(e[120:], uint32(size))
	}
	entry(0, "Root Entry", 5, noStream, noStream, 1, endOfChain, 0, wordCLSID)
	for i, n := range names {
		right := uint32(noStream)
		if i+1 < len(names) {
			right = uint32(i + 2)
		}
		entry(i+1, n, 2, noStream, right, noStream, starts[i], len(streams[n]), nil)
	}
	for i := len(names) + 1; i < 4; i++ {
		e := dir[128*i : 128*(i+1)]
		le.PutUint32(e[68:], noStream)
		le.PutUint32(e[72:], noStream)
		le.PutUint32(e[76:], noStream)
	}
	out := append(header, fatSector...)
	out = append(out, dir...)
	return append(out, body...)
}

// OverflowPDF returns a PDF of about 200 bytes whose catalog is said, by
// its cross-reference stream, to lie in an object stream that is itself:
// the PDF reader recurses on it until its stack overflows, which no
// recover catches. Read it only in a child process.
func OverflowPDF() []byte {
	var b bytes.Buffer
	b.WriteString("%PDF-1.5\n")
	off := b.Len()
	// Entries (type, field 2, field 3), one byte each: object 0 free,
	// object 1 (this stream) at off, object 2 in object stream 2.
	xref := []byte{0, 0, 0xFF, 1, byte(off), 0, 2, 2, 0}
	fmt.Fprintf(&b, "1 0 obj\n<< /Type /XRef /Size 3 /W [1 1 1] /Root 2 0 R /Length %d >>\nstream\n", len(xref))
	b.Write(xref)
	fmt.Fprintf(&b, "\nendstream\nendobj\nstartxref\n%d\n%%%%EOF\n", off)
	return b.Bytes()
}

// AttributeBombDOCX returns a DOCX of about 100 KB whose document part
// expands to size bytes (under the reader's bound for size up to 64 MiB):
// one paragraph element carrying size/5 empty attributes, which an XML
// decoder holds all at once, some 50 bytes of memory each.
func AttributeBombDOCX(size int) []byte {
	const head = `<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p `
	const tail = `/></w:body></w:document>`
	doc := head + strings.Repeat(` a=""`, (size-len(head)-len(tail))/5) + tail
	return Zip(map[string]string{"word/document.xml": doc}, "word/document.xml")
}

// AttributeStormDOCX returns a DOCX of about 160 KB whose document part
// expands to size bytes of empty run elements, each with 200 empty
// attributes: costly to decode, but little of it held at once.
func AttributeStormDOCX(size int) []byte {
	const head = `<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>`
	const tail = `</w:body></w:document>`
	run := `<w:r` + strings.Repeat(` a=""`, 200) + `/>`
	doc := head + strings.Repeat(run, (size-len(head)-len(tail))/len(run)) + tail
	return Zip(map[string]string{"word/document.xml": doc}, "word/document.xml")
}
