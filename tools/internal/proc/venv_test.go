package proc

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestVenvStartup plants every kind of startup code a venv's python runs
// and checks each is named, and that a venv without pyvenv.cfg (python is
// then the plain interpreter it links to) names none.
func TestVenvStartup(t *testing.T) {
	ws := t.TempDir()
	put := func(rel, content string) {
		t.Helper()
		p := filepath.Join(ws, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	py := filepath.Join(ws, ".venv/bin/python")
	if err := os.MkdirAll(filepath.Dir(py), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/python3", py); err != nil {
		t.Fatal(err)
	}
	site := ".venv/lib/python3.11/site-packages/"
	put(site+"evil.pth", "# comment\nimport os; open('/tmp/x','w')\n")
	put(site+"paths.pth", "../../../../extra\n")
	put(site+"plain.pth", "somedir\n")
	put(site+"sitecustomize.py", "")
	put("extra/usercustomize/__init__.py", "")
	if err := syscall.Mkfifo(filepath.Join(ws, site+"fifo.pth"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := VenvStartup(ws, py); len(got) != 0 {
		t.Errorf("without pyvenv.cfg: %q; want nothing", got)
	}
	put(".venv/pyvenv.cfg", "home = "+filepath.Join(ws, "fake/bin")+"\ninclude-system-site-packages = false\n")
	got := strings.Join(VenvStartup(ws, py), "\n")
	t.Log(got)
	for _, want := range []string{
		".venv/pyvenv.cfg (its home " + filepath.Join(ws, "fake/bin") + " is inside the workspace",
		site + "evil.pth (import line)",
		site + "fifo.pth (unreadable)",
		site + "sitecustomize.py (imported at start)",
		"extra/usercustomize (imported at start)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("VenvStartup does not name %q", want)
		}
	}
	for _, not := range []string{"paths.pth", "plain.pth"} {
		if strings.Contains(got, not) {
			t.Errorf("VenvStartup names %s, which only adds a directory", not)
		}
	}
	why := VenvStartupWhy(ws, py, []string{"a", "b"})
	if why != "the workspace venv .venv runs at start: a, b" {
		t.Errorf("VenvStartupWhy = %q", why)
	}
}
