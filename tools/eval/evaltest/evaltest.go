// Package evaltest holds the checks of the eval tool that every placement
// must pass — on the host (tools/eval's tests) and in containers
// (tests/e2e) — against real kernels (ipykernel, berth's own Python and
// JavaScript kernels).
package evaltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"strings"
	"testing"
)

// Result is a tool result as the checks see it.
type Result struct {
	Text       string
	IsError    bool
	Images     [][]byte // image/png data
	Structured json.RawMessage
}

// Env is how the checks drive one run.
type Env struct {
	// Call calls a tool of the run.
	Call func(t *testing.T, tool string, args map[string]any) Result
	// Put writes a workspace file behind the tools' back.
	Put func(t *testing.T, name, content string)
}

// Cell runs code and fails the test on a tool error or a missing want.
func (e Env) Cell(t *testing.T, lang, code string, wants ...string) Result {
	t.Helper()
	r := e.eval(t, lang, code, false)
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

// Fails runs code and wants an error result containing every want.
func (e Env) Fails(t *testing.T, lang, code string, wants ...string) Result {
	t.Helper()
	r := e.eval(t, lang, code, false)
	if !r.IsError {
		t.Fatalf("eval %q: want an error, got:\n%s", code, r.Text)
	}
	for _, w := range wants {
		if !strings.Contains(r.Text, w) {
			t.Fatalf("eval %q: error lacks %q:\n%s", code, w, r.Text)
		}
	}
	return r
}

func (e Env) eval(t *testing.T, lang, code string, reset bool) Result {
	t.Helper()
	args := map[string]any{"code": code, "description": "run a cell for the eval tool test", "language": lang}
	if reset {
		args["reset"] = true
	}
	r := e.Call(t, "eval", args)
	t.Logf("eval (%s) %q:\n%s", lang, code, r.Text)
	return r
}

// CheckPython runs the Python checks; rich says whether pandas and
// matplotlib are expected in the kernel's python, pip whether pip is.
func CheckPython(t *testing.T, e Env, rich, pip bool) {
	t.Helper()
	e.Cell(t, "python", "x = 41\nprint('set')", "set")
	e.Cell(t, "python", "x + 1", "42")
	e.Cell(t, "python", "import sys\nfor i in range(3):\n    print('line', i)\nsys.stderr.write('warn\\n')", "line 0", "line 2", "warn")
	r := e.Fails(t, "python", "def f():\n    return 1/0\nf()", "ZeroDivisionError", "division by zero")
	if strings.Contains(r.Text, "\x1b[") {
		t.Errorf("traceback keeps ANSI codes: %q", r.Text)
	}
	e.Cell(t, "python", "x", "41") // state survived the error
	// Long output keeps its head and tail and says what was cut.
	r = e.Cell(t, "python", "print('HEAD' + 'x' * 60000 + 'TAIL')", "HEAD", "TAIL", "bytes of output dropped (kept the first 10,000 and last 10,000)")
	if len(r.Text) > 25_000 {
		t.Errorf("output of %d characters was not bounded", len(r.Text))
	}
	// display() of an object with an HTML repr.
	r = e.Cell(t, "python", "class T:\n    def _repr_html_(self): return '<b>bold</b>'\n    def __repr__(self): return 'T()'\ndisplay(T())", "T()")
	if !structuredHas(r, "<b>bold</b>") {
		t.Errorf("the HTML of display() is not in structuredContent: %s", r.Structured)
	}
	// The idioms.
	e.Put(t, "sub/marker.txt", "here\n")
	e.Cell(t, "python", "%cd sub", "/sub")
	e.Cell(t, "python", "!cat marker.txt", "here")
	e.Cell(t, "python", "files = !ls\nfiles", "marker.txt")
	e.Cell(t, "python", "%cd ..")
	e.Cell(t, "python", "%%bash\nfor i in 1 2; do echo \"bash $i\"; done", "bash 1", "bash 2")
	e.Cell(t, "python", "%timeit sum(range(100))", "per loop (mean ± std. dev. of 7 runs")
	e.Cell(t, "python", "%%timeit -n 5 -r 2 import math\nmath.sqrt(2)", "2 runs, 5 loops each")
	e.Cell(t, "python", "s = '''\n!not a command\n'''\ns.strip()", "!not a command")
	// tool(): a read comes back, a refused or failing tool raises.
	e.Put(t, "notes.txt", "alpha\nbeta\n")
	e.Cell(t, "python", "content = tool('read', {'path': 'notes.txt'})\nprint('beta' in content)", "True")
	e.Cell(t, "python", "try:\n    tool('nope', {})\nexcept ToolError as err:\n    print('raised:', err)", "raised:", "nope")
	e.Cell(t, "python", "try:\n    tool('read', {'path': '../../etc/passwd'})\nexcept ToolError as err:\n    print('raised:', err)", "raised:", "outside")
	e.Cell(t, "python", "try:\n    tool('eval', {'code': '1'})\nexcept ToolError as err:\n    print('raised:', err)", "raised:", "cannot be called from inside a cell")
	if rich {
		r = e.Cell(t, "python", "import pandas as pd\ndf = pd.DataFrame({'city': ['Oslo', 'Bergen'], 'n': [3, 5]})\ndf", "city", "Bergen", "5")
		if !structuredHas(r, "<table") {
			t.Errorf("the DataFrame's HTML is not in structuredContent: %s", r.Structured)
		}
		r = e.Cell(t, "python", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')")
		if len(r.Images) != 1 {
			t.Fatalf("want 1 image from the figure, got %d:\n%s", len(r.Images), r.Text)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(r.Images[0]))
		if err != nil || cfg.Width < 100 {
			t.Fatalf("the figure is not a valid PNG: %v %+v", err, cfg)
		}
	}
	if pip {
		checkPip(t, e)
	}
	// reset clears state.
	r = e.eval(t, "python", "'x' in dir()", true)
	if r.IsError || !strings.Contains(r.Text, "False") || !strings.Contains(r.Text, "reset") {
		t.Fatalf("after reset: %s", r.Text)
	}
}

// checkPip installs a local package offline, imports it, reinstalls a
// changed version and sees the change in the same kernel.
//
// Each version has a source tree of its own: setuptools builds in tree and
// copies a module into build/ only when its mtime is newer in whole
// seconds, so a version written within the second of the last build would
// be packed with the old module.
func checkPip(t *testing.T, e Env) {
	t.Helper()
	put := func(version int) {
		dir := fmt.Sprintf("mypkg%d/", version)
		e.Put(t, dir+"pyproject.toml", "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[project]\nname = \"berthdemo\"\nversion = \""+fmt.Sprint(version)+".0\"\n")
		e.Put(t, dir+"berthdemo/__init__.py", fmt.Sprintf("VERSION = %d\n", version))
	}
	put(1)
	e.Cell(t, "python", "%pip install --no-index --no-build-isolation --no-deps ./mypkg1", "Successfully installed berthdemo-1.0")
	e.Cell(t, "python", "import berthdemo\nberthdemo.VERSION", "1")
	put(2)
	e.Cell(t, "python", "%pip install --no-index --no-build-isolation --no-deps ./mypkg2", "berthdemo-2.0", "dropped berthdemo from sys.modules")
	e.Cell(t, "python", "import berthdemo\nberthdemo.VERSION", "2")
}

// CheckBudget: a cell silent past the budget is interrupted and the kernel
// still answers; a bridge call longer than the budget is not interrupted
// (slowTool must take longer than the budget).
func CheckBudget(t *testing.T, e Env, lang, slowTool string) {
	t.Helper()
	sleep, one := "import time\ntime.sleep(60)", "1+1"
	call := "r = tool('" + slowTool + "', {})\nprint('bridge done', r)"
	if lang == "javascript" {
		sleep = "await new Promise(r => setTimeout(r, 60000))"
		call = "const r = await tool('" + slowTool + "', {});\nconsole.log('bridge done', r)"
	}
	e.Fails(t, lang, sleep, "interrupted", "survived")
	e.Cell(t, lang, one, "2")
	e.Cell(t, lang, call, "bridge done")
}

// CheckJavaScript runs the JavaScript checks.
func CheckJavaScript(t *testing.T, e Env) {
	t.Helper()
	e.Cell(t, "javascript", "let a = 5\nconst b = 2", "")
	e.Cell(t, "javascript", "a * b", "10")
	e.Cell(t, "javascript", "console.log('hello from node')", "hello from node")
	e.Fails(t, "javascript", "null.x", "TypeError")
	e.Cell(t, "javascript", "a", "5")
	e.Cell(t, "javascript", "!echo from the shell", "from the shell")
	e.Put(t, "js.txt", "gamma\n")
	e.Cell(t, "javascript", "const c = await tool('read', {path: 'js.txt'});\nc.includes('gamma')", "true")
}

// structuredHas reports whether a string value somewhere in r's
// structuredContent contains sub (after JSON unescaping).
func structuredHas(r Result, sub string) bool {
	var v any
	if json.Unmarshal(r.Structured, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			return strings.Contains(x, sub)
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case map[string]any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}
