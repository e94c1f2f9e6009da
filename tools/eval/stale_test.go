package eval_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/tools/eval"
	"berth.dev/berth/tools/eval/evaltest"
)

// cellWith runs a cell with extra arguments (reload) and wants every want
// in its text.
func cellWith(t *testing.T, e evaltest.Env, lang, code string, extra map[string]any, wants ...string) evaltest.Result {
	t.Helper()
	args := map[string]any{"code": code, "description": "run a cell for the stale module test", "language": lang}
	for k, v := range extra {
		args[k] = v
	}
	r := e.Call(t, "eval", args)
	t.Logf("eval (%s) %q %v:\n%s", lang, code, extra, r.Text)
	if r.IsError {
		t.Fatalf("eval %q: error:\n%s", code, r.Text)
	}
	for _, w := range wants {
		if !strings.Contains(r.Text, w) {
			t.Fatalf("eval %q: result lacks %q:\n%s", code, w, r.Text)
		}
	}
	return r
}

func noStaleNote(t *testing.T, r evaltest.Result) {
	t.Helper()
	if strings.Contains(r.Text, "changed on disk") || strings.Contains(string(r.Structured), "stale_modules") {
		t.Fatalf("a result names stale modules where none changed:\n%s\n%s", r.Text, r.Structured)
	}
}

// checkStalePython: a standard-library module copied into the workspace
// (colorsys as wscolors), imported, then changed with edit, and once behind
// the tools' back. The next cell runs the old code, as Python does, and
// says which module changed with the reload call; reload: true brings the
// new code and says so, naming the names a from-import still holds.
func checkStalePython(t *testing.T, h *hostRun) {
	out, err := exec.Command("/usr/bin/python3", "-c", "import colorsys; print(colorsys.__file__)").Output()
	if err != nil {
		t.Fatalf("find colorsys: %v", err)
	}
	src, err := os.ReadFile(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	e := h.env()
	e.Put(t, "wscolors.py", string(src))
	noStaleNote(t, e.Cell(t, "python", "import wscolors\nwscolors.rgb_to_hsv(1.0, 0.0, 0.0)", "(0.0, 1.0, 1.0)"))
	r := e.Call(t, "edit", map[string]any{"path": "wscolors.py", "old_string": "def rgb_to_hsv(r, g, b):",
		"new_string": "def berth_marker():\n    return 'edited'\n\n\ndef rgb_to_hsv(r, g, b):"})
	if r.IsError {
		t.Fatalf("edit: %s", r.Text)
	}
	file := filepath.Join(h.dir, "wscolors.py")
	// The cell runs the module as imported; the result says it changed.
	r = cellWith(t, e, "python", "hasattr(wscolors, 'berth_marker')", nil,
		"False", "wscolors ("+file+")", "importlib.reload(wscolors)", `"reload": true`)
	if !strings.Contains(string(r.Structured), "stale_modules") {
		t.Fatalf("structured content lacks stale_modules: %s", r.Structured)
	}
	// Still stale until reloaded: said again.
	cellWith(t, e, "python", "1 + 1", nil, "2", "importlib.reload(wscolors)")
	r = cellWith(t, e, "python", "from wscolors import berth_marker\nwscolors.berth_marker()", map[string]any{"reload": true},
		"'edited'", "reloaded wscolors")
	if strings.Contains(r.Text, "importlib.reload(") {
		t.Fatalf("a reloaded module is still called stale:\n%s", r.Text)
	}
	noStaleNote(t, cellWith(t, e, "python", "berth_marker()", nil, "'edited'"))

	// Behind the tools' back.
	b, _ := os.ReadFile(file)
	if err := os.WriteFile(file, []byte(strings.Replace(string(b), "return 'edited'", "return 'edited behind the back'", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cellWith(t, e, "python", "wscolors.berth_marker()", nil, "'edited'", "importlib.reload(wscolors)")
	cellWith(t, e, "python", "(wscolors.berth_marker(), berth_marker())", map[string]any{"reload": true},
		"('edited behind the back', 'edited')", "reloaded wscolors", "the cell namespace still holds the old berth_marker of wscolors")

	// A new kernel has nothing to report.
	os.WriteFile(file, append(b, []byte("\n# touched\n")...), 0o644)
	r = e.Call(t, "eval", map[string]any{"code": "import wscolors\nwscolors.berth_marker()", "description": "run a cell for the stale module test", "reset": true})
	if r.IsError || !strings.Contains(r.Text, "'edited'") {
		t.Fatalf("after reset: %s", r.Text)
	}
	noStaleNote(t, r)
}

func TestStaleModuleIPykernel(t *testing.T) {
	debianPython(t, "ipykernel")
	checkStalePython(t, newHostRun(t, "/usr/bin:/bin", eval.Options{}))
}

func TestStaleModuleBundledPython(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	need(t, "/usr/bin/python3", err == nil)
	h := newHostRun(t, noIPykernelPython(t), eval.Options{})
	h.env().Cell(t, "python", "", "berth's Python kernel")
	checkStalePython(t, h)
}

// TestStaleModuleJavaScript: a required workspace module changed with
// write is named with its require.cache call; reload: true re-requires it.
func TestStaleModuleJavaScript(t *testing.T) {
	_, err := exec.LookPath("node")
	need(t, "node", err == nil)
	h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
	e := h.env()
	e.Put(t, "lib/shade.js", "exports.shade = () => 'old';\n")
	noStaleNote(t, e.Cell(t, "javascript", "const m = require('./lib/shade.js'); m.shade()", "old"))
	r := e.Call(t, "write", map[string]any{"path": "lib/shade.js", "content": "exports.shade = () => 'new';\n"})
	if r.IsError {
		t.Fatalf("write: %s", r.Text)
	}
	file := filepath.Join(h.dir, "lib", "shade.js")
	cellWith(t, e, "javascript", "m.shade()", nil, "old", "lib/shade.js", "delete require.cache[\""+file+"\"]")
	cellWith(t, e, "javascript", "require('./lib/shade.js').shade()", map[string]any{"reload": true}, "new", "reloaded lib/shade.js")
	noStaleNote(t, cellWith(t, e, "javascript", "1 + 1", nil, "2"))
}
