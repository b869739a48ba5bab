package extract

import (
	"bytes"
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// HTML elements whose content is not text a reader sees.
var htmlSkipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Math: true, atom.Iframe: true, atom.Object: true,
}

// HTML elements that end a paragraph.
var htmlBlocks = map[atom.Atom]bool{
	atom.Address: true, atom.Article: true, atom.Aside: true, atom.Blockquote: true,
	atom.Body: true, atom.Br: true, atom.Caption: true, atom.Dd: true, atom.Details: true,
	atom.Div: true, atom.Dl: true, atom.Dt: true, atom.Fieldset: true, atom.Figcaption: true,
	atom.Figure: true, atom.Footer: true, atom.Form: true, atom.H1: true, atom.H2: true,
	atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true, atom.Header: true,
	atom.Hr: true, atom.Li: true, atom.Main: true, atom.Nav: true, atom.Ol: true,
	atom.P: true, atom.Pre: true, atom.Section: true, atom.Summary: true, atom.Table: true,
	atom.Td: true, atom.Th: true, atom.Tr: true, atom.Ul: true,
}

// HTML reads HTML: the text of the body, a paragraph per block
// element, without scripts, styles or other content a reader does not see.
// The title is the <title>'s; the URL is the canonical link's, when that is
// an http or https URL.
func HTML(data []byte) (Document, error) {
	root, err := html.Parse(bytes.NewReader(data))
	if err != nil {
		// The parser refuses pages nested deeper than 512 elements.
		return htmlTokenText(data), nil
	}
	var doc Document
	var text strings.Builder
	flush := func() {
		if p := OneLine(text.String()); p != "" {
			doc.Paragraphs = append(doc.Paragraphs, p)
		}
		text.Reset()
	}
	for n := root; n != nil; {
		descend := true
		switch n.Type {
		case html.TextNode:
			text.WriteString(n.Data)
		case html.ElementNode:
			switch {
			case n.DataAtom == atom.Title && doc.Title == "":
				doc.Title = OneLine(childText(n))
				descend = false
			case n.DataAtom == atom.Link && doc.URL == "":
				doc.URL = canonical(n.Attr)
			case htmlSkipped[n.DataAtom]:
				descend = false
			case htmlBlocks[n.DataAtom]:
				flush()
			}
		}
		if descend && n.FirstChild != nil {
			n = n.FirstChild
			continue
		}
		for n != nil {
			if n.Type == html.ElementNode && htmlBlocks[n.DataAtom] {
				flush()
			}
			if n == root {
				n = nil
				break
			}
			if n.NextSibling != nil {
				n = n.NextSibling
				break
			}
			n = n.Parent
		}
	}
	flush()
	return doc, nil
}

func childText(n *html.Node) string {
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}

// canonical returns the href of a canonical link, when it is an http or
// https URL.
func canonical(attrs []html.Attribute) string {
	var rel, href string
	for _, a := range attrs {
		switch strings.ToLower(a.Key) {
		case "rel":
			rel = a.Val
		case "href":
			href = strings.TrimSpace(a.Val)
		}
	}
	for _, r := range strings.Fields(rel) {
		if strings.EqualFold(r, "canonical") && IsWebURL(href) {
			return href
		}
	}
	return ""
}

// htmlTokenText is HTML on the tokens of a page rather than its tree,
// for the pages the parser refuses. Unclosed elements are not repaired: text
// after an unclosed <svg>, say, is lost.
func htmlTokenText(data []byte) Document {
	var doc Document
	var text, title strings.Builder
	flush := func() {
		if p := OneLine(text.String()); p != "" {
			doc.Paragraphs = append(doc.Paragraphs, p)
		}
		text.Reset()
	}
	skipped, inTitle := 0, false // depth within skipped elements; within the first <title>
	z := html.NewTokenizer(bytes.NewReader(data))
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			flush()
			doc.Title = OneLine(title.String())
			return doc
		case html.TextToken:
			switch {
			case skipped > 0:
			case inTitle:
				title.Write(z.Text())
			default:
				text.Write(z.Text())
			}
		case html.StartTagToken, html.EndTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			a := atom.Lookup(name)
			switch {
			case htmlSkipped[a]:
				if tt == html.StartTagToken {
					skipped++
				} else if tt == html.EndTagToken && skipped > 0 {
					skipped--
				}
			case a == atom.Title:
				inTitle = tt == html.StartTagToken && title.Len() == 0
			case a == atom.Link && tt != html.EndTagToken && doc.URL == "":
				doc.URL = canonical(tagAttrs(z, hasAttr))
			case htmlBlocks[a]:
				flush()
			}
		}
	}
}

func tagAttrs(z *html.Tokenizer, more bool) []html.Attribute {
	var attrs []html.Attribute
	for more {
		var k, v []byte
		k, v, more = z.TagAttr()
		attrs = append(attrs, html.Attribute{Key: string(k), Val: string(v)})
	}
	return attrs
}
