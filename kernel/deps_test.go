package kernel

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the protocol engine free of sandboxes and tools: it
// takes a byte stream and nothing else from this module but framing.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			if path == "testing" {
				t.Errorf("%s: production code imports testing", name)
			}
			if strings.HasPrefix(path, "berth.dev/berth/") {
				t.Errorf("%s imports %s; kernel imports nothing from this module", name, path)
			}
		}
	}
}
