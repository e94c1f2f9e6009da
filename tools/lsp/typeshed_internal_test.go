package lsp

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTypeshedStdlibNames: the embedded list of typeshed's standard
// modules holds every top-level module of the installed pyright's bundled
// typeshed, found where the server table says it lies beside the real
// program file; the stubs berth keeps are standard modules.
func TestTypeshedStdlibNames(t *testing.T) {
	for m := range typeshedKept {
		if !stdlibModules()[m] && !strings.HasPrefix(m, "_") {
			t.Errorf("typeshedKept names %s, not a module of the list", m)
		}
	}
	bin := os.Getenv("BERTH_LSP_NPM_BIN")
	if bin == "" {
		t.Skip("BERTH_LSP_NPM_BIN is not set (tests/run installs the npm language servers and sets it)")
	}
	var sv Server
	for _, s := range DefaultServers() {
		if s.ID == "pyright" {
			sv = s
		}
	}
	real, err := filepath.EvalSymlinks(filepath.Join(bin, "pyright-langserver"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(filepath.Dir(real), sv.Typeshed, "stdlib", "VERSIONS"))
	if err != nil {
		t.Fatalf("no bundled typeshed where the table says: %v", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, _, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, ".") || name == "__main__" {
			continue
		}
		n++
		if !stdlibModules()[name] {
			t.Errorf("%s, a module of pyright's bundled typeshed, is not in typeshed_stdlib.txt: add it", name)
		}
	}
	if n < 200 {
		t.Errorf("only %d modules read from the bundled VERSIONS", n)
	}
}
