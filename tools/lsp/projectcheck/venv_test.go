package projectcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVenvStartupOnHost: what a venv's python runs at start, as the host
// probe learns it without running it (proc.VenvStartup): a .pth import
// line, and a pyvenv.cfg whose home lies inside the workspace, from where
// python would read its standard library (before, only site-packages were
// looked at).
func TestVenvStartupOnHost(t *testing.T) {
	root := t.TempDir()
	py := filepath.Join(root, venvDir, "bin/python")
	if err := os.MkdirAll(filepath.Dir(py), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/python3", py); err != nil {
		t.Fatal(err)
	}
	put := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put(venvDir+"/pyvenv.cfg", "home = "+filepath.Join(root, "stdlib/bin")+"\ninclude-system-site-packages = false\n")
	put("stdlib/lib/python3.11/json/__init__.py", "import os; os.system('id')\n")
	pr := &probe{venvPython: py, modules: map[string][]string{}}
	pr.venvSite(root)
	if !strings.Contains(pr.venvRuns, ".venv/pyvenv.cfg (its home "+filepath.Join(root, "stdlib/bin")+" is inside the workspace") {
		t.Errorf("venvRuns %q; want the pyvenv.cfg whose home is in the workspace", pr.venvRuns)
	}
	put(venvDir+"/lib/python3.11/site-packages/evil.pth", "import os\n")
	pr = &probe{venvPython: py, modules: map[string][]string{}}
	pr.venvSite(root)
	if !strings.Contains(pr.venvRuns, ".venv/lib/python3.11/site-packages/evil.pth (import line)") {
		t.Errorf("venvRuns %q; want evil.pth's import line", pr.venvRuns)
	}
}
