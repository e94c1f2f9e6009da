package lsp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/tools/lsp"
)

// TestUnpinnedManagerFileIsAStep: with asdf on PATH (which berth cannot
// pin), a .tool-versions at or above a server's root chooses what the
// server's shims run, so on the host the start is an exec step: a call
// with no permission gate to ask is refused, naming the file, and neither
// the server nor asdf runs. Without the file the same server starts.
func TestUnpinnedManagerFileIsAStep(t *testing.T) {
	bin, marks := t.TempDir(), t.TempDir()
	writeTree(t, bin, map[string]string{"spy-ls": spy(marks), "asdf": spy(marks)})
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	spyServer := lsp.Server{ID: "spy", Languages: map[string]string{".spy": "spy"}, Markers: []string{"spy.toml"}, Binaries: []string{"spy-ls"}}

	h := newHostRun(t, lsp.Options{Servers: []lsp.Server{spyServer}})
	e := h.env()
	e.Put(t, "app/spy.toml", "\n")
	e.Put(t, "app/a.spy", "x\n")
	e.Put(t, ".tool-versions", "nodejs path:/proc/self/cwd/tc\n")
	r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "app/a.spy", "line": 1, "symbol": "x"})
	if !r.IsError || !strings.Contains(r.Text, ".tool-versions") || !strings.Contains(r.Text, "step refused") {
		t.Errorf("with a .tool-versions above the root: want the start refused as a step naming it, got %s", r.Text)
	}
	if ran, _ := filepath.Glob(filepath.Join(marks, "ran-*")); len(ran) > 0 {
		t.Fatalf("ran on the host: %q", ran)
	}

	if err := os.Remove(filepath.Join(h.dir, ".tool-versions")); err != nil {
		t.Fatal(err)
	}
	r = e.Call(t, "lsp", map[string]any{"action": "hover", "file": "app/a.spy", "line": 1, "symbol": "x"})
	if ran, _ := filepath.Glob(filepath.Join(marks, "ran-*-spy-ls")); len(ran) == 0 {
		t.Errorf("without the file the server should have started: %s", r.Text)
	}
	if ran, _ := filepath.Glob(filepath.Join(marks, "ran-*-asdf")); len(ran) > 0 {
		t.Error("berth ran asdf")
	}
}
