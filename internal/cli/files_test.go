package cli_test

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A query with files prints what each model saw of each (native, text or
// none) and says which model could not see which file: provider_d plays a
// host without vision, so the image is none to it.
func TestAskWithFilesSaysWhatEachModelSaw(t *testing.T) {
	dir := t.TempDir()
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewRGBA(image.Rect(0, 0, 8, 8))); err != nil {
		t.Fatal(err)
	}
	notes, chart := filepath.Join(dir, "notes.md"), filepath.Join(dir, "chart.png")
	if err := os.WriteFile(notes, []byte("# Notes\n\nThe meeting is on Tuesday.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chart, img.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, service.URL, service.Key, "ask", "--file", notes, "--file", chart, "When is the meeting?")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "FILES") {
		t.Fatalf("no files column in the models table:\n%s", out)
	}
	for provider, want := range map[string]string{
		"provider_a": `notes\.md: text.*chart\.png: native`,
		"provider_d": `notes\.md: text.*chart\.png: none`,
	} {
		row := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, provider) && strings.Contains(l, "(simulated)") {
				row = l
			}
		}
		if !regexp.MustCompile(want).MatchString(row) {
			t.Errorf("%s's row %q does not match %s:\n%s", provider, row, want, out)
		}
	}
	if !regexp.MustCompile(`(?s)Missing\n\n  - provider_d.*could not see the file chart\.png`).MatchString(out) {
		t.Errorf("no word of what provider_d could not see:\n%s", out)
	}
}
