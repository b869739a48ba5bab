package app

import (
	"strings"
	"testing"
	"time"

	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
)

// A file uploaded through POST /v1/files and attached to a query in each
// mode: the simulated models read its extracted text, so the fact planted in
// the PDF reaches the answer, verify cites the file as a source, the file's
// tokens are in the usage the query is charged on, and the audit passes.
func TestUploadedFileAnswersInEveryMode(t *testing.T) {
	h := newHarness(t)
	key := h.newKey()
	const fact = "The Kestrel reactor runs at 7431 kelvin."
	up := h.upload(key, "manual.pdf", extracttest.MinimalPDF("Manual", fact))
	must(t, up.status == 201, "upload: %d %s", up.status, up.body)
	fileID := up.json(t)["file_id"].(string)

	inputTokens := func(res map[string]any) float64 {
		var n float64
		for _, m := range res["models"].([]any) {
			if u, ok := jsonPath(m, "usage", "input_tokens").(float64); ok {
				n += u
			}
		}
		return n
	}
	for _, mode := range []string{"unify", "justify", "verify"} {
		prompt := "At what temperature does the Kestrel reactor run? (" + mode + ")"
		with := h.submit(key, map[string]any{"mode": mode, "prompt": prompt, "files": []string{fileID}})
		must(t, with.status == 202, "%s submit: %d %s", mode, with.status, with.body)
		res := h.wait(key, with.json(t)["request_id"].(string), 60*time.Second)
		must(t, res["status"] == "completed", "%s: status %v: %v", mode, res["status"], res["error"])
		must(t, strings.Contains(jsonPath(res, "answer", "text").(string), "7431"), "%s: the answer does not carry the file's fact: %v", mode, jsonPath(res, "answer", "text"))

		without := h.submit(key, map[string]any{"mode": mode, "prompt": prompt})
		must(t, without.status == 202, "%s submit without the file: %d", mode, without.status)
		plain := h.wait(key, without.json(t)["request_id"].(string), 60*time.Second)
		must(t, inputTokens(res) > inputTokens(plain), "%s: input tokens with the file %v, without %v: the file is not billed", mode, inputTokens(res), inputTokens(plain))

		if mode == "verify" {
			cited := false
			for _, c := range jsonPath(res, "verify", "claims").([]any) {
				for _, s := range jsonPath(c, "sources").([]any) {
					cited = cited || strings.HasPrefix(jsonPath(s, "url").(string), "file://"+fileID)
				}
			}
			must(t, cited, "verify: no claim cites file://%s: %v", fileID, jsonPath(res, "verify", "claims"))
		}
	}
	h.closeAndAudit()
}
