package app

import (
	"strings"
	"testing"
	"time"
)

// Plain text files upload as text and a query reads them: each model
// receives their text under their names, and the simulated answer quotes
// them. Before, .txt and .md were refused (415 unsupported_file_type).
func TestPlainTextFilesUploadAndUse(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	key := h.newKey()
	files := map[string]struct{ content, mediaType, fact string }{
		"notes.md":  {"# Notes\n\nThe harbour crane lifts forty tonnes.\n", "text/markdown", "The harbour crane lifts forty tonnes."},
		"ferry.txt": {"The harbour ferry leaves at seven.\n", "text/plain", "The harbour ferry leaves at seven."},
	}
	var ids []string
	for name, f := range files {
		r := h.upload(key, name, []byte(f.content))
		must(t, r.status == 201, "upload %s: %d %s", name, r.status, r.body)
		v := r.json(t)
		must(t, v["kind"] == "text" && v["media_type"] == f.mediaType, "upload %s: %s", name, r.body)
		ids = append(ids, v["file_id"].(string))
	}
	r := h.submit(key, map[string]any{"mode": "unify", "prompt": "What does the harbour crane lift, and when does the harbour ferry leave?", "files": ids})
	must(t, r.status == 202, "submit: %d %s", r.status, r.body)
	res := h.wait(key, r.json(t)["request_id"].(string), 60*time.Second)
	must(t, res["status"] == "completed", "status %v: %v", res["status"], res["error"])
	answer := jsonPath(res, "answer", "text").(string)
	for name, f := range files {
		must(t, strings.Contains(answer, "from "+name+": "+f.fact), "the answer does not quote %s:\n%s", name, answer)
	}
	for _, m := range res["models"].([]any) {
		for _, f := range jsonPath(m, "files").([]any) {
			must(t, jsonPath(f, "seen") == "text", "%v saw %v", jsonPath(m, "provider"), f)
		}
	}
}
