package evaltest

import (
	"strings"
	"testing"
)

// cellArgs runs a cell with extra arguments (reload, reset) and wants
// every want in its text.
func (e Env) cellArgs(t *testing.T, lang, code string, extra map[string]any, wants ...string) Result {
	t.Helper()
	args := map[string]any{"code": code, "description": "run a cell for the stale module check", "language": lang}
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

// noStale fails when r names stale modules.
func noStale(t *testing.T, r Result) {
	t.Helper()
	if strings.Contains(r.Text, "changed on disk") || strings.Contains(string(r.Structured), "stale_modules") {
		t.Fatalf("a result names stale modules where none changed:\n%s\n%s", r.Text, r.Structured)
	}
}

func (e Env) tool(t *testing.T, name string, args map[string]any) {
	t.Helper()
	if r := e.Call(t, name, args); r.IsError {
		t.Fatalf("%s: %s", name, r.Text)
	}
}

// CheckStalePython: a standard-library module copied into the workspace
// (colorsys as wscolors) is imported, then changed with the edit tool; two
// modules (wsa takes f from wsb) are changed behind the tools' back. The
// next cell runs the old code, as Python does, and its result names each
// changed module with its reload call; reload: true reloads them (wsb
// before wsa, which holds wsb's f) and says so, and names what a
// from-import still holds. A new kernel has nothing to report.
func CheckStalePython(t *testing.T, e Env) {
	t.Helper()
	e.Cell(t, "python", "import colorsys, shutil\nshutil.copy(colorsys.__file__, 'wscolors.py')", "wscolors.py")
	noStale(t, e.Cell(t, "python", "import wscolors\nwscolors.rgb_to_hsv(1.0, 0.0, 0.0)", "(0.0, 1.0, 1.0)"))
	e.tool(t, "edit", map[string]any{"path": "wscolors.py", "old_string": "def rgb_to_hsv(r, g, b):",
		"new_string": "def berth_marker():\n    return 'edited'\n\n\ndef rgb_to_hsv(r, g, b):"})
	r := e.cellArgs(t, "python", "hasattr(wscolors, 'berth_marker')", nil,
		"False", "wscolors (", "wscolors.py)", "importlib.reload(wscolors)", `"reload": true`)
	if !structuredHas(r, "importlib.reload(wscolors)") {
		t.Fatalf("structured content lacks the stale module: %s", r.Structured)
	}
	// Still stale until reloaded: said again.
	e.cellArgs(t, "python", "1 + 1", nil, "2", "importlib.reload(wscolors)")
	r = e.cellArgs(t, "python", "from wscolors import berth_marker\nwscolors.berth_marker()", map[string]any{"reload": true},
		"'edited'", "reloaded wscolors")
	if strings.Contains(r.Text, "importlib.reload(") {
		t.Fatalf("a reloaded module is still called stale:\n%s", r.Text)
	}
	noStale(t, e.Cell(t, "python", "berth_marker()", "'edited'"))
	e.tool(t, "write", map[string]any{"path": "wscolors.py", "content": "def berth_marker():\n    return 'rewritten'\n"})
	e.cellArgs(t, "python", "(wscolors.berth_marker(), berth_marker())", map[string]any{"reload": true},
		"('rewritten', 'edited')", "reloaded wscolors", "the cell namespace still holds the old berth_marker of wscolors")

	// A reload that fails is said, and the module is still stale after it.
	e.tool(t, "write", map[string]any{"path": "wscolors.py", "content": "def berth_marker(:\n"})
	e.cellArgs(t, "python", "wscolors.berth_marker()", map[string]any{"reload": true}, "'rewritten'", "reloading wscolors failed (SyntaxError")
	e.cellArgs(t, "python", "wscolors.berth_marker()", nil, "'rewritten'", "importlib.reload(wscolors)")
	e.tool(t, "write", map[string]any{"path": "wscolors.py", "content": "def berth_marker():\n    return 'fixed'\n"})
	e.cellArgs(t, "python", "wscolors.berth_marker()", map[string]any{"reload": true}, "'fixed'", "reloaded wscolors")

	// Behind the tools' back, two modules, one holding the other's f.
	e.Put(t, "wsb.py", "def f():\n    return 1\n")
	e.Put(t, "wsa.py", "from wsb import f\n\n\ndef g():\n    return f()\n")
	noStale(t, e.Cell(t, "python", "import wsa\nwsa.g()", "1"))
	e.Put(t, "wsb.py", "def f():\n    return 22\n")
	e.Put(t, "wsa.py", "from wsb import f\n\n\ndef g():\n    return f()  # changed\n")
	e.cellArgs(t, "python", "wsa.g()", nil, "1", "2 workspace modules changed", "importlib.reload(wsa)", `importlib.reload(sys.modules['wsb'])`)
	e.cellArgs(t, "python", "wsa.g()", map[string]any{"reload": true}, "22", "reloaded wsb, wsa")
	// A cell that reloads the changed module itself is not told that it
	// ran the old code.
	e.Put(t, "wsb.py", "def f():\n    return 4\n")
	noStale(t, e.Cell(t, "python", "import importlib, wsb\nimportlib.reload(wsb)\nwsb.f()", "4"))

	// A module deleted after import is said once more with reload, then
	// no longer.
	e.Cell(t, "python", "import importlib\nopen('wsgone.py', 'w').write('V = 1\\n')\nimportlib.invalidate_caches()\nimport wsgone\nwsgone.V", "1")
	// Asked after the cell: the cell that deleted it hears of it.
	e.cellArgs(t, "python", "import os\nos.remove('wsgone.py')", nil, "wsgone.py, since deleted")
	e.cellArgs(t, "python", "wsgone.V", nil, "1", "wsgone (", "wsgone.py, since deleted")
	r = e.cellArgs(t, "python", "wsgone.V", map[string]any{"reload": true}, "1", "was deleted after the kernel loaded it: not reloaded")
	if strings.Contains(r.Text, `pass "reload": true`) {
		t.Fatalf("a reload cell is told to pass reload:\n%s", r.Text)
	}
	noStale(t, e.Cell(t, "python", "wsgone.V", "1"))

	// A new kernel has nothing to report.
	e.Put(t, "wsb.py", "def f():\n    return 333\n")
	noStale(t, e.cellArgs(t, "python", "import wsa\nwsa.g()", map[string]any{"reset": true}, "333"))
}

// CheckStaleJavaScript: a required workspace module changed with the write
// tool is named with its require.cache call; reload: true requires it anew.
func CheckStaleJavaScript(t *testing.T, e Env) {
	t.Helper()
	e.Put(t, "lib/shade.js", "exports.shade = () => 'old';\n")
	noStale(t, e.Cell(t, "javascript", "const m = require('./lib/shade.js'); m.shade()", "old"))
	e.tool(t, "write", map[string]any{"path": "lib/shade.js", "content": "exports.shade = () => 'brand new';\n"})
	e.cellArgs(t, "javascript", "m.shade()", nil, "old", "lib/shade.js (", "delete require.cache[", `"reload": true`)
	e.cellArgs(t, "javascript", "require('./lib/shade.js').shade()", map[string]any{"reload": true}, "brand new", "reloaded lib/shade.js")
	e.tool(t, "write", map[string]any{"path": "lib/shade.js", "content": "exports.shade = () => ;\n"})
	e.cellArgs(t, "javascript", "require('./lib/shade.js').shade()", map[string]any{"reload": true}, "brand new", "reloading lib/shade.js failed (SyntaxError")
	e.cellArgs(t, "javascript", "1 + 1", nil, "2", "lib/shade.js (")
	e.tool(t, "write", map[string]any{"path": "lib/shade.js", "content": "exports.shade = () => 'fixed';\n"})
	e.cellArgs(t, "javascript", "require('./lib/shade.js').shade()", map[string]any{"reload": true}, "fixed", "reloaded lib/shade.js")
	noStale(t, e.Cell(t, "javascript", "1 + 1", "2"))
}
