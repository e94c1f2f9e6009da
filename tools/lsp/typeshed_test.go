package lsp_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/lsp/lsptest"
)

// typeshedDirs lists berth's private typeshed directories on the host.
func typeshedDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("/tmp/berth-typeshed.*")
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestPyrightWorkspacePackageNamedLikeStdlib: a workspace's own email
// package is what pyright resolves `from email.utils import …` to, not its
// bundled stub: the definition lands in the workspace file, references
// from there find the importer, and neither answer carries a note. Its
// private typeshed lies outside the workspace, leaves out email alone, and
// is gone once the run closes. The workspace's types.py keeps pyright's
// stub (the stubs of builtins import types), and the note of an answer
// about it says so; so does one about a package made after the server
// started, until a reload.
func TestPyrightWorkspacePackageNamedLikeStdlib(t *testing.T) {
	before := typeshedDirs(t)
	h, _ := npmRun(t, "pyright-langserver")
	e := h.env()
	e.PutAll(t, lsptest.StdlibNameProject)

	r := e.Call(t, "lsp", map[string]any{"action": "definition", "file": "main.py", "line": 3, "symbol": "_has_surrogates"})
	var v verdictOf
	json.Unmarshal(r.Structured, &v)
	if r.IsError || len(v.Locations) == 0 || v.Locations[0].File != "email/utils.py" || strings.Contains(r.Text, "note:") {
		t.Fatalf("definition of _has_surrogates at main.py:3, want email/utils.py and no note:\n%s\n%s", r.Text, r.Structured)
	}
	r = e.Call(t, "lsp", map[string]any{"action": "references", "file": "email/utils.py", "line": 1, "symbol": "_has_surrogates"})
	v = verdictOf{}
	json.Unmarshal(r.Structured, &v)
	if r.IsError || !slices.ContainsFunc(v.Locations, func(l struct {
		File string `json:"file"`
	}) bool {
		return l.File == "main.py"
	}) || strings.Contains(r.Text, "note:") {
		t.Fatalf("references of _has_surrogates, want main.py and no note:\n%s", r.Text)
	}

	st := e.Call(t, "lsp", map[string]any{"action": "status", "file": "main.py"})
	if !strings.Contains(st.Text, "the workspace's email resolved to its own code") || !strings.Contains(st.Text, "the workspace's types resolved to the bundled stubs") {
		t.Errorf("status does not say which packages named like standard modules resolve where:\n%s", st.Text)
	}

	// types keeps its stub: helper's definition is not found in the
	// workspace, and the note names types as the stub kept.
	r = e.Call(t, "lsp", map[string]any{"action": "definition", "file": "other.py", "line": 3, "symbol": "helper"})
	if !strings.Contains(r.Text, "note: the server found no definition in the workspace") || !strings.Contains(r.Text, "bundled stub") || !strings.Contains(r.Text, "types (berth keeps") {
		t.Errorf("definition of helper from the workspace's types.py, want a note naming types as a kept stub:\n%s", r.Text)
	}

	var made []string
	for _, d := range typeshedDirs(t) {
		if !slices.Contains(before, d) {
			made = append(made, d)
		}
	}
	if len(made) != 1 {
		t.Fatalf("want one private typeshed made for the server, got %v", made)
	}
	d := made[0]
	if strings.HasPrefix(d, h.dir) {
		t.Errorf("the private typeshed %s is inside the workspace", d)
	}
	for _, gone := range []string{"email", "email.pyi"} {
		if _, err := os.Lstat(filepath.Join(d, "stdlib", gone)); err == nil {
			t.Errorf("the private typeshed keeps stdlib/%s", gone)
		}
	}
	for _, kept := range []string{"types.pyi", "logging", "builtins.pyi", "VERSIONS"} {
		if _, err := os.Stat(filepath.Join(d, "stdlib", kept)); err != nil {
			t.Errorf("the private typeshed lacks stdlib/%s: %v", kept, err)
		}
	}
	if _, err := os.Stat(filepath.Join(d, "stubs")); err != nil {
		t.Errorf("the private typeshed lacks stubs/: %v", err)
	}
	f, err := os.Open(filepath.Join(d, "stdlib", "VERSIONS"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		lines++
		if l := sc.Text(); strings.HasPrefix(l, "email:") || strings.HasPrefix(l, "email.") {
			t.Errorf("the private typeshed's VERSIONS keeps %q", l)
		}
	}
	f.Close()
	if lines < 100 {
		t.Errorf("the private typeshed's VERSIONS has %d lines", lines)
	}

	// Nothing was written into the workspace.
	var files []string
	filepath.WalkDir(h.dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			rel, _ := filepath.Rel(h.dir, p)
			files = append(files, rel)
		}
		return nil
	})
	for _, f := range files {
		if _, ours := lsptest.StdlibNameProject[f]; !ours && !strings.Contains(f, "__pycache__") {
			t.Errorf("%s appeared in the workspace", f)
		}
	}

	// A package named like a standard module made after the server
	// started still resolves to the stub, and the note says so and how to
	// change it; after a reload it resolves to the workspace's.
	e.PutAll(t, map[string]string{
		"logging/__init__.py": "def log_it():\n    return 1\n",
		"uselog.py":           "from logging import log_it\n\nprint(log_it())\n",
	})
	r = e.Call(t, "lsp", map[string]any{"action": "definition", "file": "uselog.py", "line": 3, "symbol": "log_it"})
	if !strings.Contains(r.Text, "logging (added after the server started: call lsp with action reload") || strings.Contains(r.Text, "types (") {
		t.Errorf("definition of log_it from a logging package made after the start, want a note naming it, and not types:\n%s", r.Text)
	}
	if r := e.Call(t, "lsp", map[string]any{"action": "reload", "file": "uselog.py"}); r.IsError {
		t.Fatalf("reload: %s", r.Text)
	}
	r = e.Call(t, "lsp", map[string]any{"action": "definition", "file": "uselog.py", "line": 3, "symbol": "log_it"})
	v = verdictOf{}
	json.Unmarshal(r.Structured, &v)
	if r.IsError || len(v.Locations) == 0 || v.Locations[0].File != "logging/__init__.py" || strings.Contains(r.Text, "note:") {
		t.Errorf("definition of log_it after the reload, want logging/__init__.py and no note:\n%s", r.Text)
	}
	for _, d := range typeshedDirs(t) {
		if !slices.Contains(before, d) && !slices.Contains(made, d) {
			made = append(made, d)
		}
	}

	if err := h.sup.Close(); err != nil {
		t.Fatal(err)
	}
	// The server's supervisor in the sandbox removes it once the server
	// exited, which the close waited for; the removal may follow the
	// exit's report by a moment.
	for _, d := range made {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the private typeshed %s outlived its server by 30s", d)
			}
		}
	}
}

// TestPyrightNoTypeshedWithoutStdlibNames: a workspace with no package
// named like a standard module gets no private typeshed.
func TestPyrightNoTypeshedWithoutStdlibNames(t *testing.T) {
	before := typeshedDirs(t)
	h, _ := npmRun(t, "pyright-langserver")
	e := h.env()
	e.PutAll(t, lsptest.PythonProject)
	if r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.py", "line": 3, "symbol": "hello"}); r.IsError {
		t.Fatalf("hover: %s", r.Text)
	}
	for _, d := range typeshedDirs(t) {
		if !slices.Contains(before, d) {
			t.Errorf("a private typeshed %s was made for a workspace with no package named like a standard module", d)
		}
	}
}
