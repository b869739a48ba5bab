package app

import (
	"strings"
	"testing"

	"github.com/crosscheck/crosscheck/internal/config"

	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
)

// TestUploadRefusalSaysWhichLimit: a file its extraction refuses is
// invalid_file with a message naming what refused it (the file malformed,
// or the extraction's memory or CPU limit), not one message for all.
func TestUploadRefusalSaysWhichLimit(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) { c.Extract.CPUSeconds = 4 }))
	key := h.newKey()
	// Without the race detector the bomb reaches the child's memory limit
	// (256 MiB) in about a second of CPU; with it (the child's memory is
	// then unbounded) its CPU limit.
	limit, other := "memory limit", "CPU limit"
	if raceEnabled {
		limit, other = other, limit
	}
	tests := []struct {
		name, filename string
		content        []byte
		says, not      []string
	}{
		{"a broken PDF", "cut.pdf", []byte("%PDF-1.4\nthis file was cut short"), []string{"malformed"}, []string{"limit"}},
		{"a DOCX of 63 MiB of empty attributes", "bomb.docx", extracttest.AttributeBombDOCX(63 << 20), []string{limit}, []string{"malformed", other}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.upload(key, tt.filename, tt.content)
			if r.status != 400 || r.errCode(t) != "invalid_file" {
				t.Fatalf("upload = %d %s, want 400 invalid_file", r.status, r.body)
			}
			msg, _ := r.json(t)["error"].(map[string]any)["message"].(string)
			t.Logf("%s: %s", tt.name, msg)
			for _, s := range tt.says {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not say %q", msg, s)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(msg, s) {
					t.Errorf("message %q says %q", msg, s)
				}
			}
		})
	}
}

// TestUploadsOfAnAccountAreBoundedInCPU: an account whose uploads used the
// extraction CPU time it has in an hour is refused with rate_limited and
// when to retry, and another account's upload is not.
func TestUploadsOfAnAccountAreBoundedInCPU(t *testing.T) {
	h := newHarness(t, withConfig(func(c *config.Config) {
		c.Extract.CPUSeconds, c.Extract.AccountCPUSeconds = 1, 1
	}))
	key, other := h.newKey(), h.newKey()
	storm := extracttest.AttributeStormDOCX(32 << 20)
	r := h.upload(key, "storm.docx", storm)
	if r.status != 400 || r.errCode(t) != "invalid_file" || !strings.Contains(string(r.body), "CPU limit") {
		t.Fatalf("the storm: %d %s, want 400 invalid_file at the CPU limit", r.status, r.body)
	}
	r = h.upload(key, "storm.docx", storm)
	if r.status == 400 {
		// The first used less than the account's second; the second
		// passes it.
		r = h.upload(key, "ok.pdf", extracttest.MinimalPDF("t", "Fine."))
	}
	if r.status != 429 || r.errCode(t) != "rate_limited" || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "CPU time") {
		t.Fatalf("past the account's CPU time: %d %s (Retry-After %q), want 429 rate_limited with a Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	if n := h.objectCount(); n != 0 {
		t.Errorf("%d objects stored after the refusals", n)
	}
	if r := h.upload(other, "ok.pdf", extracttest.MinimalPDF("t", "Fine.")); r.status != 201 {
		t.Fatalf("another account's upload: %d %s", r.status, r.body)
	}
}
