package e2e

import (
	"strings"
	"testing"

	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

// lspEnv drives the lsp checks through the HTTP API against a run in ctr.
func lspEnv(a *api, run string, ctr *container) lsptest.Env {
	return lsptest.Env{
		Call: func(t *testing.T, tool string, args map[string]any) lsptest.Result {
			t.Helper()
			r := a.callTool(t, run, tool, args)
			return lsptest.Result{Text: r.texts(), IsError: r.IsError, Structured: r.StructuredContent}
		},
		Put: func(t *testing.T, name, content string) { ctr.put(t, name, content) },
		Sh:  func(t *testing.T, script string) string { return ctr.sh(t, "cd "+workspace+" && "+script) },
	}
}

// TestLSPGoInContainer runs gopls inside berth-test-go through exec
// streams: every action against known lines, diagnostics on write, rename,
// status, reload, a killed server, and nothing left after the run closes.
func TestLSPGoInContainer(t *testing.T) {
	const image = "berth-test-go"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := lspEnv(a, run, ctr)
	e.PutAll(t, lsptest.GoProject)
	e.PutAll(t, lsptest.GoResolveProject)

	t.Run("actions", func(t *testing.T) { lsptest.CheckGo(t, e) })
	t.Run("resolve", func(t *testing.T) { lsptest.CheckResolve(t, e, lsptest.GoResolve) })
	t.Run("write", func(t *testing.T) { lsptest.CheckGoWriteScenario(t, e) })
	t.Run("watched", func(t *testing.T) { lsptest.CheckWatched(t, e) })
	t.Run("rename", func(t *testing.T) { lsptest.CheckGoRename(t, e) })
	t.Run("lifecycle", func(t *testing.T) { lsptest.CheckLifecycle(t, e, "gopls", "main.go", 11, "Hello") })
	t.Run("caps", func(t *testing.T) {
		e.PutAll(t, lsptest.GoCapsProject(60, 210))
		lsptest.CheckGoCaps(t, e, 60, 210, lsp.MaxReferences, lsp.MaxDocumentSymbols, lsp.MaxWorkspaceSymbols)
	})
	t.Run("missing", func(t *testing.T) {
		// The image has gopls and no pylsp; a Python project's status says
		// the binary is missing, and so does a markerless Python file,
		// which pylsp would serve from the workspace root; a write to it
		// says that no diagnostics are available, and why.
		e.Put(t, "py/setup.py", "")
		e.Put(t, "py/a.py", "x = 1\n")
		e.Put(t, "loose.py", "y = 2\n")
		r := e.Call(t, "lsp", map[string]any{"action": "status", "file": "py/a.py"})
		if r.IsError || !strings.Contains(r.Text, "pylsp: unavailable; root py/ (setup.py)") || !strings.Contains(r.Text, "binary missing: no pylsp") {
			t.Fatalf("status in a Python project without pylsp:\n%s", r.Text)
		}
		r = e.Call(t, "lsp", map[string]any{"action": "hover", "file": "loose.py", "line": 1, "symbol": "y"})
		if !r.IsError || !strings.Contains(r.Text, "pylsp: binary missing: no pylsp") || strings.Contains(r.Text, "marker missing") {
			t.Fatalf("hover on a markerless Python file:\n%s", r.Text)
		}
		lsptest.CheckNoServerSaysSo(t, e, "loose2.py", "z = 3\n", "pyright: binary missing: no pyright-langserver")
		e.Sh(t, "rm -rf py loose.py")
	})

	if left := leftovers(t, ctr, "gopls"); len(left) == 0 {
		t.Fatal("no gopls runs in the container before the run closes")
	}
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
	noLeftovers(t, ctr, "gopls")
}

// TestLSPPythonInContainer runs pylsp inside berth-test-python.
func TestLSPPythonInContainer(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := lspEnv(a, run, ctr)
	// First without a root marker: pylsp serves from the workspace root.
	t.Run("no marker", func(t *testing.T) { lsptest.CheckPythonNoMarker(t, e) })
	e.PutAll(t, lsptest.PythonProject)
	e.PutAll(t, lsptest.PythonResolveProject)
	t.Run("actions", func(t *testing.T) { lsptest.CheckPython(t, e) })
	t.Run("resolve", func(t *testing.T) { lsptest.CheckResolve(t, e, lsptest.PythonResolve) })
	t.Run("lifecycle", func(t *testing.T) { lsptest.CheckLifecycle(t, e, "pylsp", "main.py", 3, "hello") })
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
	noLeftovers(t, ctr, "pylsp")
}
