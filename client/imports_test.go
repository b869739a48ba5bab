package client_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The client is public: what it imports of this module is the public wire
// types, never an internal package.
func TestImportsNothingInternal(t *testing.T) {
	paths, _ := filepath.Glob("*.go")
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/crosscheck/crosscheck/") && path != "github.com/crosscheck/crosscheck/apiv1" {
				t.Errorf("%s imports %s; the client imports only apiv1 of this module", p, path)
			}
		}
	}
}
