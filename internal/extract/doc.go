package extract

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"

	"github.com/richardlehane/mscfb"
	"golang.org/x/text/encoding/charmap"
)

// maxDOCStreams bounds the entries of a compound file's directory that DOC
// looks at.
const maxDOCStreams = 10000

// DOC reads the text of a legacy Word document (Word 97 to 2003, the
// WordDocument stream of a compound file) as paragraphs.
//
// It reads the piece table of the table stream the file information block
// names (0Table or 1Table), the authoritative map of where the main text's
// characters lie, 8-bit (Windows-1252) or UTF-16, and reads the first
// ccpText characters, the main document. A file without a readable piece
// table is read best effort: the 8-bit range between fcMin and fcMac of the
// file information block, as Word 6 and 95 store their text. Paragraph and
// cell marks and page breaks end paragraphs; field instructions are left
// out and field results kept. Formatting, headers, footnotes and embedded
// objects are not read. A compound file without a WordDocument stream is
// ErrNotWord.
func DOC(data []byte) (Document, error) {
	r, err := mscfb.New(bytes.NewReader(data))
	if err != nil {
		return Document{}, fmt.Errorf("DOC compound file: %w", err)
	}
	streams := map[string][]byte{}
	for i := 0; i < maxDOCStreams; i++ {
		f, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Document{}, fmt.Errorf("DOC compound file: %w", err)
		}
		switch f.Name {
		case "WordDocument", "0Table", "1Table":
			if _, seen := streams[f.Name]; seen {
				continue
			}
			b, err := io.ReadAll(io.LimitReader(f, int64(len(data))))
			if err != nil {
				return Document{}, fmt.Errorf("DOC %s stream: %w", f.Name, err)
			}
			streams[f.Name] = b
		}
	}
	word, ok := streams["WordDocument"]
	if !ok {
		return Document{}, ErrNotWord
	}
	text, err := docText(word, streams)
	if err != nil {
		return Document{}, err
	}
	return Document{Paragraphs: docParagraphs(text)}, nil
}

var le = binary.LittleEndian

// docText returns the main text of the WordDocument stream word.
func docText(word []byte, streams map[string][]byte) (string, error) {
	if len(word) < 0x22 || le.Uint16(word) != 0xA5EC && le.Uint16(word) != 0xA5DC {
		return "", errors.New("DOC: no Word file information block")
	}
	flags := le.Uint16(word[0x0A:])
	table := streams["0Table"]
	if flags&0x0200 != 0 {
		table = streams["1Table"]
	}
	if text, err := docPieces(word, table); err == nil {
		return text, nil
	}
	// Best effort: the 8-bit text between fcMin and fcMac.
	if len(word) < 0x20 {
		return "", errors.New("DOC: no text range")
	}
	lo, hi := le.Uint32(word[0x18:]), le.Uint32(word[0x1C:])
	if lo >= hi || uint64(hi) > uint64(len(word)) {
		return "", errors.New("DOC: no readable text")
	}
	return decode1252(word[lo:hi]), nil
}

// docPieces reads the main text through the piece table of the Clx that
// the file information block of word points at in table.
func docPieces(word, table []byte) (string, error) {
	// FibBase is 32 bytes; then csw and fibRgW, cslw and fibRgLw,
	// cbRgFcLcb and fibRgFcLcbBlob, each counted in its own units.
	off := 0x20
	field := func(n int) ([]byte, error) {
		if off+n > len(word) {
			return nil, errors.New("DOC: truncated file information block")
		}
		b := word[off : off+n]
		off += n
		return b, nil
	}
	b, err := field(2)
	if err != nil {
		return "", err
	}
	if _, err = field(2 * int(le.Uint16(b))); err != nil {
		return "", err
	}
	if b, err = field(2); err != nil {
		return "", err
	}
	rgLw, err := field(4 * int(le.Uint16(b)))
	if err != nil || len(rgLw) < 16 {
		return "", errors.New("DOC: no character counts")
	}
	ccpText := le.Uint32(rgLw[12:])
	if b, err = field(2); err != nil {
		return "", err
	}
	rgFcLcb, err := field(8 * int(le.Uint16(b)))
	if err != nil || len(rgFcLcb) < 34*8 {
		return "", errors.New("DOC: no piece table pointer")
	}
	fcClx, lcbClx := le.Uint32(rgFcLcb[33*8:]), le.Uint32(rgFcLcb[33*8+4:])
	if lcbClx == 0 || uint64(fcClx)+uint64(lcbClx) > uint64(len(table)) {
		return "", errors.New("DOC: piece table outside the table stream")
	}
	clx := table[fcClx : fcClx+lcbClx]
	for len(clx) > 0 && clx[0] == 0x01 { // Prc: property modifiers, skipped
		if len(clx) < 3 {
			return "", errors.New("DOC: truncated piece table")
		}
		n := 3 + int(le.Uint16(clx[1:]))
		if n > len(clx) {
			return "", errors.New("DOC: truncated piece table")
		}
		clx = clx[n:]
	}
	if len(clx) < 5 || clx[0] != 0x02 {
		return "", errors.New("DOC: no piece table")
	}
	lcb := le.Uint32(clx[1:])
	plc := clx[5:]
	if uint64(lcb) > uint64(len(plc)) || lcb < 16 || (lcb-4)%12 != 0 {
		return "", errors.New("DOC: malformed piece table")
	}
	n := int(lcb-4) / 12
	cps, pcds := plc[:4*(n+1)], plc[4*(n+1):lcb]
	var sb strings.Builder
	left := int64(ccpText)
	if left == 0 {
		left = int64(len(word)) // no count: read every piece
	}
	for i := 0; i < n && left > 0; i++ {
		start, end := le.Uint32(cps[4*i:]), le.Uint32(cps[4*i+4:])
		if end < start {
			return "", errors.New("DOC: piece table out of order")
		}
		count := min(int64(end-start), left)
		left -= count
		fc := le.Uint32(pcds[8*i+2:])
		if fc&0x40000000 != 0 { // 8-bit characters at fc/2
			at := int64(fc&0x3FFFFFFF) / 2
			if at+count > int64(len(word)) {
				return "", errors.New("DOC: piece outside the document")
			}
			sb.WriteString(decode1252(word[at : at+count]))
			continue
		}
		at := int64(fc)
		if at+2*count > int64(len(word)) {
			return "", errors.New("DOC: piece outside the document")
		}
		units := make([]uint16, count)
		for j := range units {
			units[j] = le.Uint16(word[at+2*int64(j):])
		}
		sb.WriteString(string(utf16.Decode(units)))
	}
	return sb.String(), nil
}

func decode1252(b []byte) string {
	s, err := charmap.Windows1252.NewDecoder().Bytes(b)
	if err != nil {
		return string(bytes.ToValidUTF8(b, nil))
	}
	return string(s)
}

// docParagraphs splits Word's main text at its paragraph and cell marks
// and page breaks, dropping field instructions (between the field begin
// and separator marks) and turning other control characters into spaces.
func docParagraphs(text string) []string {
	var paras []string
	var cur strings.Builder
	fieldDepth, instr := 0, []bool{}
	flush := func() {
		if p := OneLine(cur.String()); p != "" {
			paras = append(paras, p)
		}
		cur.Reset()
	}
	for _, r := range text {
		switch {
		case r == 0x13: // field begin: an instruction follows
			fieldDepth++
			instr = append(instr, true)
		case r == 0x14: // field separator: the result follows
			if fieldDepth > 0 {
				instr[fieldDepth-1] = false
			}
		case r == 0x15: // field end
			if fieldDepth > 0 {
				fieldDepth--
				instr = instr[:fieldDepth]
			}
		case fieldDepth > 0 && instr[fieldDepth-1]:
		case r == '\r' || r == 0x07 || r == 0x0C:
			flush()
		case r < 0x20:
			cur.WriteByte(' ')
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return paras
}
