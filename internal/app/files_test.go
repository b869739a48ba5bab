package app

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/catalog"
	"github.com/crosscheck/crosscheck/internal/config"
	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
	"github.com/crosscheck/crosscheck/internal/queries"
)

// memFiles is a FileStore over files the test builds: the uploads'
// metadata, bytes and extracted text, as the files service would give them.
type memFiles struct {
	mu    sync.Mutex
	files map[string]memFile
}

type memFile struct {
	info queries.FileInfo
	data []byte
	text string
}

func (s *memFiles) add(f memFile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files = map[string]memFile{}
	}
	s.files[f.info.ID] = f
}

func (s *memFiles) File(_ context.Context, accountID, id string) (queries.FileInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[id]
	if !ok || f.info.AccountID != accountID {
		return queries.FileInfo{}, queries.ErrFileNotFound
	}
	return f.info, nil
}

func (s *memFiles) Content(_ context.Context, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[id].data, nil
}

func (s *memFiles) Text(_ context.Context, id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[id].text, nil
}

const wireFact = "The Kestrel reactor runs at 7431 kelvin."

// attachSamples stores a PDF stating wireFact, a PNG and a .py file for
// accountID and returns their ids.
func attachSamples(t *testing.T, s *memFiles, accountID string, now time.Time) (pdf, img, py string) {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	pdfData := extracttest.MinimalPDF("Manual", wireFact)
	exp := now.Add(48 * time.Hour)
	pdf, img, py = "file_01KWIRE0000000000000000PDF", "file_01KWIRE0000000000000000PNG", "file_01KWIRE00000000000000000PY"
	s.add(memFile{info: queries.FileInfo{ID: pdf, AccountID: accountID, Name: "manual.pdf", Kind: catalog.KindPDF, MediaType: "application/pdf",
		Bytes: int64(len(pdfData)), SHA256: strings.Repeat("a", 64), Pages: 1, TextChars: len(wireFact), ExpiresAt: exp}, data: pdfData, text: wireFact})
	s.add(memFile{info: queries.FileInfo{ID: img, AccountID: accountID, Name: "photo.png", Kind: catalog.KindImage, MediaType: "image/png",
		Bytes: int64(b.Len()), SHA256: strings.Repeat("b", 64), ExpiresAt: exp}, data: b.Bytes()})
	code := "KELVIN = 7431\n"
	s.add(memFile{info: queries.FileInfo{ID: py, AccountID: accountID, Name: "reactor.py", Kind: catalog.KindText, MediaType: "text/x-python",
		Bytes: int64(len(code)), SHA256: strings.Repeat("c", 64), TextChars: len(code), ExpiresAt: exp}, data: []byte(code), text: code})
	return pdf, img, py
}

// decodedData reports whether raw holds a base64 string (bare or in a data
// URL) whose decoded bytes contain want.
func decodedData(raw, want string) bool {
	for _, part := range strings.Split(raw, `"`) {
		part = part[strings.LastIndex(part, ",")+1:]
		if len(part) < 40 {
			continue
		}
		if data, err := base64.StdEncoding.DecodeString(part); err == nil && bytes.Contains(data, []byte(want)) {
			return true
		}
	}
	return false
}

// A query with a PDF, a PNG and a .py file over the four vendor wire
// formats: each vendor that reads PDFs gets the PDF in its own block
// (OpenAI Responses input_file, an Anthropic base64 document block, Gemini
// inline data), the OpenAI-compatible host without vision gets the PDF's
// text under its name and a note that it cannot see the image; the result
// says which model saw what.
func TestFilesReachEachVendorInItsNativeBlock(t *testing.T) {
	v := newVendors(t)
	for _, k := range []string{"XC_OPENAI", "XC_ANTHROPIC", "XC_GEMINI", "XC_MISTRAL"} {
		t.Setenv(k, "test-"+k)
	}
	path := writeConfig(t, fmt.Sprintf(`
providers:
  provider_a: {backend: openai, base_url: "%[1]s/v1/", api_key_env: XC_OPENAI}
  provider_b: {backend: anthropic, base_url: "%[1]s/", api_key_env: XC_ANTHROPIC}
  provider_c: {backend: gemini, base_url: "%[1]s/", api_key_env: XC_GEMINI}
  provider_d: {backend: openai-compatible, base_url: "%[1]s/v1/", api_key_env: XC_MISTRAL}
`, v.srv.URL))
	store := &memFiles{}
	h := newHarness(t, withConfig(func(c *config.Config) { c.ConfigFile = path }), withFiles(store))
	acct := h.account()
	key := h.key(acct)
	pdf, img, py := attachSamples(t, store, acct, h.clock.Now())

	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "At what temperature does the Kestrel reactor run?",
		"models": map[string]any{"provider_a": "gpt-4.1", "provider_b": "claude-sonnet-4-5", "provider_c": "gemini-2.5-flash", "provider_d": "ministral-8b-latest"},
		"files":  []string{pdf, img, py}})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 30*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])

	v.mu.Lock()
	answers := map[string]string{}
	for format, bodies := range v.bodies {
		answers[format] = bodies[0] // the first call of each format is the answer
	}
	v.mu.Unlock()
	openai, claude, gemini, chat := answers["responses"], answers["messages"], answers["gemini"], answers["chat"]
	must(t, strings.Contains(openai, `"type":"input_file"`) && strings.Contains(openai, `"file_data":"data:application/pdf;base64,`) && decodedData(openai, wireFact),
		"OpenAI Responses: no input_file holding the PDF:\n%.600s", openai)
	must(t, strings.Contains(openai, `"type":"input_image"`) && strings.Contains(openai, `data:image/png;base64,`), "OpenAI Responses: no input_image")
	must(t, strings.Contains(claude, `"type":"document"`) && strings.Contains(claude, `"media_type":"application/pdf"`) && decodedData(claude, wireFact),
		"Anthropic: no base64 PDF document block:\n%.600s", claude)
	must(t, strings.Contains(claude, `"type":"image"`), "Anthropic: no image block")
	must(t, strings.Contains(gemini, `"inlineData"`) && strings.Contains(gemini, `"mimeType":"application/pdf"`) && decodedData(gemini, wireFact),
		"Gemini: no inline_data PDF:\n%.600s", gemini)
	must(t, strings.Contains(chat, "## File: manual.pdf ("+pdf+"), as extracted text\\n"+wireFact), "compat host: the PDF's text is not under its name:\n%s", chat)
	must(t, strings.Contains(chat, "photo.png ("+img+") is not visible to you") && !strings.Contains(chat, "image_url"), "compat host without vision: the image is not named as invisible:\n%s", chat)
	for format, raw := range answers {
		must(t, strings.Contains(raw, "## File: reactor.py ("+py+"), as extracted text\\nKELVIN = 7431"), "%s: the code is not sent as text under its name", format)
	}

	// The result says who saw what; what was left out is in missing.
	seen := map[string]string{}
	for _, m := range res["models"].([]any) {
		for _, f := range jsonPath(m, "files").([]any) {
			seen[jsonPath(m, "provider").(string)+"/"+jsonPath(f, "file_id").(string)] = jsonPath(f, "seen").(string)
		}
	}
	for k, want := range map[string]string{"provider_a/" + pdf: "native", "provider_b/" + img: "native", "provider_c/" + py: "text",
		"provider_d/" + pdf: "text", "provider_d/" + img: "none"} {
		must(t, seen[k] == want, "%s seen %q, want %q", k, seen[k], want)
	}
	missing, _ := res["missing"].([]any)
	must(t, len(missing) == 1 && strings.Contains(missing[0].(string), img), "missing %v", res["missing"])
	must(t, len(res["files"].([]any)) == 3, "files %v", res["files"])
}

// The files' refusals through the HTTP API, and an expired file by the
// service's clock.
func TestQueryFilesRefusals(t *testing.T) {
	store := &memFiles{}
	h := newHarness(t, withFiles(store))
	acct := h.account()
	key := h.key(acct)
	pdf, _, _ := attachSamples(t, store, acct, h.clock.Now())
	theirs, _, _ := attachSamples(t, &memFiles{}, h.account(), h.clock.Now())
	_ = theirs
	store.add(memFile{info: queries.FileInfo{ID: "file_01KOTHER000000000000000000", AccountID: h.account(), Name: "x.txt", Kind: catalog.KindText, ExpiresAt: h.clock.Now().Add(time.Hour)}})
	big := func(i int) string {
		id := fmt.Sprintf("file_01KBIG%020d", i)
		store.add(memFile{info: queries.FileInfo{ID: id, AccountID: acct, Name: "big.pdf", Kind: catalog.KindPDF, Bytes: 7 << 20, ExpiresAt: h.clock.Now().Add(time.Hour)}})
		return id
	}
	six := []string{pdf, big(1), big(2), big(3), big(4), big(5)}
	for _, c := range []struct {
		name   string
		files  []string
		status int
		code   string
	}{
		{"six files", six, 400, "invalid_files"},
		{"21 MB combined", []string{big(1), big(2), big(3)}, 400, "invalid_files"},
		{"another account's file", []string{"file_01KOTHER000000000000000000"}, 400, "file_not_found"},
		{"unknown file", []string{"file_01KNONE0000000000000000000"}, 400, "file_not_found"},
	} {
		r := h.submit(key, map[string]any{"mode": "unify", "prompt": "p", "files": c.files})
		must(t, r.status == c.status && jsonPath(r.json(t), "error", "code") == c.code, "%s: %d %s", c.name, r.status, r.body)
	}
	h.clock.Advance(49 * time.Hour)
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "p", "files": []string{pdf}})
	must(t, r.status == 400 && jsonPath(r.json(t), "error", "code") == "file_expired", "expired: %d %s", r.status, r.body)
}
