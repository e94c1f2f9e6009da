package dap

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
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "testing" {
				t.Errorf("%s: production code imports testing", name)
			}
			if strings.HasPrefix(path, "berth.dev/berth/") && path != "berth.dev/berth/framing" {
				t.Errorf("%s imports %s; dap may only import berth.dev/berth/framing", name, path)
			}
		}
	}
}
