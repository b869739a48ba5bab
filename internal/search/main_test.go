package search

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/crosscheck/crosscheck/internal/extract"
	"github.com/crosscheck/crosscheck/internal/extract/extracttest"
)

// TestMain lets the test binary act as the extraction child that the
// corpus's PDFs are read in, as the crosscheck binary does.
func TestMain(m *testing.M) {
	extract.RunChildIfAsked()
	os.Exit(m.Run())
}

// TestOfflineSurvivesCrashingPDF: a PDF that overflows the reader's stack
// is skipped and the rest of the corpus indexed; read in this process, it
// would end the test binary.
func TestOfflineSurvivesCrashingPDF(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "corpus")
	writeFiles(t, dir, map[string][]byte{
		"crafted.pdf": extracttest.OverflowPDF(),
		"harbour.pdf": extracttest.MinimalPDF("Harbour", "The harbour crane lifts heavy containers."),
	})
	o, err := OpenOffline(dir)
	if err != nil {
		t.Fatalf("OpenOffline: %v", err)
	}
	defer o.Close()
	got, err := o.Search(context.Background(), "harbour crane containers", 3)
	if err != nil || len(got) != 1 {
		t.Fatalf("Search = %v, %v; want the readable PDF only", got, err)
	}
}
