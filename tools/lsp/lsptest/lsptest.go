// Package lsptest holds the checks of the lsp tools that every placement
// must pass — the same projects, questions and known answers on the host
// (tools/lsp's tests) and in containers (tests/e2e) — against real language
// servers (gopls, pylsp).
package lsptest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Result is a tool result as the checks see it.
type Result struct {
	Text       string
	IsError    bool
	Structured json.RawMessage
}

// Env is how the checks drive one run.
type Env struct {
	// Call calls a tool of the run (lsp, lsp_rename, write, edit, …).
	Call func(t *testing.T, tool string, args map[string]any) Result
	// Put writes a workspace file behind the tools' back.
	Put func(t *testing.T, name, content string)
	// Sh runs a shell script in the sandbox and returns its output.
	Sh func(t *testing.T, script string) string
}

func (e Env) ok(t *testing.T, tool string, args map[string]any, wants ...string) Result {
	t.Helper()
	r := e.Call(t, tool, args)
	if r.IsError {
		t.Fatalf("%s %v: tool error:\n%s", tool, args, r.Text)
	}
	for _, w := range wants {
		if !strings.Contains(r.Text, w) {
			t.Fatalf("%s %v: result lacks %q:\n%s", tool, args, w, r.Text)
		}
	}
	t.Logf("%s %v:\n%s", tool, args, r.Text)
	return r
}

func (e Env) fails(t *testing.T, tool string, args map[string]any, wants ...string) Result {
	t.Helper()
	r := e.Call(t, tool, args)
	if !r.IsError {
		t.Fatalf("%s %v: want a tool error, got:\n%s", tool, args, r.Text)
	}
	for _, w := range wants {
		if !strings.Contains(r.Text, w) {
			t.Fatalf("%s %v: error lacks %q:\n%s", tool, args, w, r.Text)
		}
	}
	t.Logf("%s %v (error, as wanted):\n%s", tool, args, r.Text)
	return r
}

// Loc is a location of structuredContent.
type Loc struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	EndLine   int    `json:"end_line"`
	EndColumn int    `json:"end_column"`
}

func (l Loc) String() string { return fmt.Sprintf("%s:%d:%d", l.File, l.Line, l.Column) }

// locations calls an lsp navigation action and returns its locations as
// "file:line:col" strings.
func (e Env) locations(t *testing.T, args map[string]any) []string {
	t.Helper()
	r := e.ok(t, "lsp", args)
	var sc struct {
		Locations []Loc `json:"locations"`
	}
	if err := json.Unmarshal(r.Structured, &sc); err != nil {
		t.Fatalf("lsp %v: structuredContent: %v: %s", args, err, r.Structured)
	}
	var out []string
	for _, l := range sc.Locations {
		out = append(out, l.String())
	}
	return out
}

func wantLocs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// Put writes every file of a project.
func (e Env) PutAll(t *testing.T, files map[string]string) {
	t.Helper()
	for name, content := range files {
		e.Put(t, name, content)
	}
}

// GoProject is a small module of two packages. Known positions:
// greet/greet.go: Greeter 4:6, Greet (interface method) 5:2, English 9:6,
// English.Greet 12:18, Hello 15:6; main.go: Hello calls 11:15 and 13:20.
var GoProject = map[string]string{
	"go.mod": "module example.com/proj\n\ngo 1.22\n",
	"greet/greet.go": `package greet

// Greeter says hello.
type Greeter interface {
	Greet(name string) string
}

// English greets in English.
type English struct{}

// Greet returns a greeting.
func (English) Greet(name string) string { return "Hello, " + name }

// Hello greets name with g.
func Hello(g Greeter, name string) string {
	return g.Greet(name)
}
`,
	"main.go": `package main

import (
	"fmt"

	"example.com/proj/greet"
)

func main() {
	var e greet.English
	msg := greet.Hello(e, "world")
	fmt.Println(msg)
	fmt.Println(greet.Hello(e, "again"))
}
`,
}

// CheckGo asks every action about GoProject (already in the workspace) and
// checks the answers against known lines.
func CheckGo(t *testing.T, e Env) {
	t.Helper()
	wantLocs(t, "definition of Hello", e.locations(t, map[string]any{"action": "definition", "file": "main.go", "line": 11, "symbol": "Hello"}), "greet/greet.go:15:6")
	wantLocs(t, "type_definition of e", e.locations(t, map[string]any{"action": "type_definition", "file": "main.go", "line": 10, "symbol": "e greet"}), "greet/greet.go:9:6")
	wantLocs(t, "implementation of Greeter", e.locations(t, map[string]any{"action": "implementation", "file": "greet/greet.go", "line": 4, "symbol": "Greeter"}), "greet/greet.go:9:6")
	wantLocs(t, "references of Hello", e.locations(t, map[string]any{"action": "references", "file": "greet/greet.go", "line": 15, "symbol": "Hello"}),
		"greet/greet.go:15:6", "main.go:11:15", "main.go:13:20")
	// A symbol occurring twice on a line: the first is used, and the
	// result says how to pick the second.
	wantLocs(t, "definition of the first name on line 12", e.locations(t, map[string]any{"action": "definition", "file": "greet/greet.go", "line": 12, "symbol": "name"}), "greet/greet.go:12:22")
	e.ok(t, "lsp", map[string]any{"action": "definition", "file": "greet/greet.go", "line": 12, "symbol": "name"}, `"name#2"`)
	wantLocs(t, "definition of Greeter via occurrence", e.locations(t, map[string]any{"action": "definition", "file": "greet/greet.go", "line": 15, "symbol": "Greeter"}), "greet/greet.go:4:6")
	wantLocs(t, "definition of the second Greet on line 16", e.locations(t, map[string]any{"action": "definition", "file": "greet/greet.go", "line": 16, "symbol": "Greet"}), "greet/greet.go:5:2")
	// Every use says where it is; so do the calls, both ways.
	e.ok(t, "lsp", map[string]any{"action": "references", "file": "greet/greet.go", "line": 15, "symbol": "Hello"}, "  11:15 in main  msg := greet.Hello", "  13:20 in main  fmt.Println")
	wantLocs(t, "incoming calls of Hello", e.locations(t, map[string]any{"action": "incoming_calls", "file": "greet/greet.go", "line": 15, "symbol": "Hello"}), "main.go:11:15", "main.go:13:20")
	e.ok(t, "lsp", map[string]any{"action": "incoming_calls", "file": "main.go", "line": 11, "symbol": "Hello"}, "2 calls in 1 file", "11:15 in main", "13:20 in main")
	e.ok(t, "lsp", map[string]any{"action": "outgoing_calls", "file": "greet/greet.go", "line": 15, "symbol": "Hello"}, "1 call in 1 file", "16:11 calls Greeter.Greet greet/greet.go:5  return g.Greet(name)")
	e.ok(t, "lsp", map[string]any{"action": "implementation", "file": "greet/greet.go", "line": 5, "symbol": "Greet"}, "12:16  func (English) Greet")
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"}, "func greet.Hello(g greet.Greeter, name string) string", "Hello greets name with g.")
	// A library function's hover: its signature and first paragraph.
	e.Put(t, "tmp/hover.go", "package tmp\n\nimport \"encoding/json\"\n\nvar _, _ = json.Marshal(1)\n")
	if r := e.ok(t, "lsp", map[string]any{"action": "hover", "file": "tmp/hover.go", "line": 5, "symbol": "Marshal"}, "func json.Marshal(v any) ([]byte, error)", "Marshal returns the JSON encoding of v.", "more characters of the docs of a symbol from outside the workspace"); len(r.Text) > 1000 {
		t.Fatalf("the hover of json.Marshal is %d characters:\n%s", len(r.Text), r.Text)
	}
	e.ok(t, "lsp", map[string]any{"action": "symbols", "query": "Hello"}, "Hello", "greet/greet.go:15:6")
	e.ok(t, "lsp", map[string]any{"action": "symbols", "file": "greet/greet.go"}, "4-6: interface Greeter", "  5: method Greet", "9: struct English", "15-17: function Hello")
	e.ok(t, "lsp", map[string]any{"action": "symbols", "file": "greet/greet.go", "kind": "method"}, "symbols of greet/greet.go of kind method: 2 (left out: 3 of other kinds)", "  5: method Greet", "12: method (English).Greet")
	e.ok(t, "lsp", map[string]any{"action": "symbols", "file": "greet/greet.go", "depth": 1}, "symbols of greet/greet.go: 4 (left out: 1 deeper symbol (depth 2 lists more))")
	// An exact name from the workspace comes before fuzzy matches.
	r := e.ok(t, "lsp", map[string]any{"action": "symbols", "query": "Greet"})
	if first := strings.SplitN(r.Text, "\n", 3)[1]; !strings.Contains(first, "Greet") || !strings.Contains(first, "greet/greet.go:") {
		t.Fatalf("the workspace's Greet is not listed first:\n%s", r.Text)
	}
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "main.go"}, "none")
	// Navigation without a symbol, a symbol not on the line, a line past
	// the end: errors that show what to do.
	e.fails(t, "lsp", map[string]any{"action": "definition", "file": "main.go", "line": 11}, "symbol is required", "greet.Hello(e, \"world\")")
	e.fails(t, "lsp", map[string]any{"action": "definition", "file": "main.go", "line": 12, "symbol": "Hello"}, "not on line 12", "line 11, 13")
	e.fails(t, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 99, "symbol": "x"}, "past the end")
	e.fails(t, "lsp", map[string]any{"action": "hover", "file": "../etc/passwd", "line": 1, "symbol": "root"})
	e.fails(t, "lsp", map[string]any{"action": "frobnicate"}, "unknown action")
	// Code actions where gopls offers a fix: an unused import.
	e.Put(t, "tmp/fix.go", "package tmp\n\nimport \"strings\"\n\nfunc F() {}\n")
	e.ok(t, "lsp", map[string]any{"action": "code_actions", "file": "tmp/fix.go", "line": 3, "symbol": "strings"}, "Organize Imports", "edits tmp/fix.go")
	e.Sh(t, "rm -rf tmp")
}

// CheckGoWriteScenario is the diagnostics-on-write scenario of LSP-3/4 on
// GoProject: a signature change reports the caller's errors, repeating it
// or moving code reports nothing, a genuine second instance is new.
func CheckGoWriteScenario(t *testing.T, e Env) {
	t.Helper()
	// Start the server and take its baseline.
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "main.go"})
	r := e.ok(t, "edit", map[string]any{"path": "greet/greet.go", "old_string": "func Hello(g Greeter, name string) string {", "new_string": "func Hello(g Greeter, name, punct string) string {"},
		"main.go:11:", "main.go:13:", "not enough arguments in call to greet.Hello")
	if n := strings.Count(r.Text, "not enough arguments"); n != 2 {
		t.Fatalf("want the 2 broken calls reported, got %d:\n%s", n, r.Text)
	}
	var sc struct {
		Diagnostics []struct {
			File     string `json:"file"`
			Line     int    `json:"line"`
			Severity string `json:"severity"`
		} `json:"diagnostics"`
	}
	if err := json.Unmarshal(r.Structured, &sc); err != nil || len(sc.Diagnostics) != 2 || sc.Diagnostics[0].File != "main.go" || sc.Diagnostics[0].Severity != "error" {
		t.Fatalf("structured diagnostics: %v %s", err, r.Structured)
	}
	// The same content written again: nothing new.
	cur := readBack(t, e, "greet/greet.go")
	e.ok(t, "write", map[string]any{"path": "greet/greet.go", "content": cur}, "no new problems")
	// The broken calls moved down four lines: nothing new.
	e.ok(t, "edit", map[string]any{"path": "main.go", "old_string": "func main() {", "new_string": "// one\n// two\n// three\n// four\nfunc main() {"}, "no new problems")
	// A genuine second... third instance of the same error elsewhere: new.
	r = e.ok(t, "write", map[string]any{"path": "other.go", "content": "package main\n\nimport \"example.com/proj/greet\"\n\nvar _ = greet.Hello(greet.English{}, \"x\")\n"},
		"1 new problem", "other.go:5:", "not enough arguments in call to greet.Hello")
	if strings.Contains(r.Text, "main.go:") {
		t.Fatalf("the old errors in main.go were reported again:\n%s", r.Text)
	}
	// Fixing it all: nothing new, the three errors counted as fixed, and
	// the file check says so.
	e.ok(t, "edit", map[string]any{"path": "greet/greet.go", "old_string": "name, punct string", "new_string": "name string"}, "no new problems; fixed 3 problems")
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "other.go"}, "none")
	// A change behind the server's back (a shell command) is seen by the
	// next query.
	e.Sh(t, `cat > other.go <<'EOF'
package main

import "example.com/proj/greet"

var _ = greet.Hello(greet.English{})
EOF`)
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "other.go"}, "not enough arguments")
	// The project check (go vet) sees it too, as an error with its line.
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "*"}, "go vet", "other.go:5:", "not enough arguments")
	e.Sh(t, "rm -f other.go")
	e.PutAll(t, GoProject)
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "*"}, "go vet", "no problems")
}

func readBack(t *testing.T, e Env, name string) string {
	t.Helper()
	return e.Sh(t, "cat "+name)
}

// CheckGoRename renames Hello across both packages.
func CheckGoRename(t *testing.T, e Env) {
	t.Helper()
	// Renaming a standard library function would edit files outside the
	// workspace: refused, nothing changed.
	e.fails(t, "lsp_rename", map[string]any{"file": "main.go", "line": 12, "symbol": "Println", "new_name": "PrintlnX"}, "outside the workspace", "nothing was changed")
	e.fails(t, "lsp_rename", map[string]any{"file": "main.go", "line": 11, "symbol": "Hello", "new_name": " "}, "new_name is required")
	e.ok(t, "lsp_rename", map[string]any{"file": "main.go", "line": 11, "symbol": "Hello", "new_name": "SayHello"}, "4 occurrences in 2 files: greet/greet.go (2), main.go (2)", "no new problems")
	if got := readBack(t, e, "main.go"); strings.Count(got, "greet.SayHello(") != 2 || strings.Contains(got, "greet.Hello(") {
		t.Fatalf("main.go after rename:\n%s", got)
	}
	if got := readBack(t, e, "greet/greet.go"); !strings.Contains(got, "func SayHello(g Greeter") {
		t.Fatalf("greet.go after rename:\n%s", got)
	}
	// The server knows: a definition query on the new name answers.
	wantLocs(t, "definition after rename", e.locations(t, map[string]any{"action": "definition", "file": "main.go", "line": 11, "symbol": "SayHello"}), "greet/greet.go:15:6")
	e.ok(t, "lsp_rename", map[string]any{"file": "main.go", "line": 11, "symbol": "SayHello", "new_name": "Hello"}, "4 occurrences in 2 files")
}

var pidRe = regexp.MustCompile(`pid (\d+)`)

// statusPid returns the pid of a running server in lsp status's text.
func statusPid(t *testing.T, text, server string) int {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, server+": running") {
			if m := pidRe.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				return n
			}
		}
	}
	t.Fatalf("no running %s in status:\n%s", server, text)
	return 0
}

// CheckLifecycle checks status, reload and a killed server on GoProject:
// server is the server id ("gopls"), file a file it answers for.
func CheckLifecycle(t *testing.T, e Env, server, file string, line int, symbol string) {
	t.Helper()
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": file, "line": line, "symbol": symbol})
	st := e.ok(t, "lsp", map[string]any{"action": "status"}, server+": running")
	pid := statusPid(t, st.Text, server)
	r := e.ok(t, "lsp", map[string]any{"action": "reload", "file": file}, "restarted")
	st = e.ok(t, "lsp", map[string]any{"action": "status"}, server+": running")
	pid2 := statusPid(t, st.Text, server)
	if pid2 == pid {
		t.Fatalf("reload kept pid %d:\n%s", pid, r.Text)
	}
	// Killing the server mid-session: the next call restarts it.
	e.Sh(t, fmt.Sprintf("kill -9 %d", pid2))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !strings.Contains(e.Sh(t, "ps -eo pid= || true"), strconv.Itoa(pid2)) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": file, "line": line, "symbol": symbol})
	st = e.ok(t, "lsp", map[string]any{"action": "status"}, server+": running", "restarts 2")
	if statusPid(t, st.Text, server) == pid2 {
		t.Fatal("the killed server is still reported")
	}
}

// CheckStatusMissing checks that status names the missing half:
// binaryless is a server of the table whose binary is absent from the
// sandbox.
func CheckStatusMissing(t *testing.T, e Env, binaryless string) {
	t.Helper()
	e.Put(t, "loose/x.go", "package loose\n")
	e.Put(t, "loose/go.mod.txt", "not a marker\n")
	st := e.ok(t, "lsp", map[string]any{"action": "status"}, "gopls:")
	if !strings.Contains(st.Text, "binary missing: no "+binaryless) {
		t.Fatalf("status does not say %s's binary is missing:\n%s", binaryless, st.Text)
	}
	e.Sh(t, "rm -rf loose")
}

// StdlibNameProject is a project whose own package is named like a
// standard module (email), which pyright resolves to the workspace's
// code, not its bundled stub, and whose own types.py is named like one
// whose stub pyright keeps. Known positions: email/utils.py:
// _has_surrogates 1:5; main.py: _has_surrogates 3:7; other.py: helper
// 3:7.
var StdlibNameProject = map[string]string{
	"pyproject.toml":    "[project]\nname = \"mail\"\nversion = \"0\"\n",
	"email/__init__.py": "",
	"email/utils.py":    "def _has_surrogates(s):\n    return False\n",
	"main.py":           "from email.utils import _has_surrogates\n\nprint(_has_surrogates(\"x\"))\n",
	"types.py":          "def helper():\n    return 1\n",
	"other.py":          "from types import helper\n\nprint(helper())\n",
}

// PythonProject is a small package for pylsp. Known positions:
// pkg/greet.py: hello 1:5, English 5:7, English.greet 6:9; main.py:
// hello 3:7, English 4:7.
var PythonProject = map[string]string{
	"setup.py":        "from setuptools import setup\n\nsetup(name=\"proj\", packages=[\"pkg\"])\n",
	"pkg/__init__.py": "",
	"pkg/greet.py": `def hello(name):
    """Greet name."""
    return "Hello, " + name

class English:
    def greet(self, name):
        return hello(name)
`,
	"main.py": `from pkg.greet import hello, English

print(hello("world"))
print(English().greet("x"))
`,
}

// CheckPython asks pylsp about PythonProject (already in the workspace).
func CheckPython(t *testing.T, e Env) {
	t.Helper()
	wantLocs(t, "definition of hello", e.locations(t, map[string]any{"action": "definition", "file": "main.py", "line": 3, "symbol": "hello"}), "pkg/greet.py:1:5")
	wantLocs(t, "definition of greet", e.locations(t, map[string]any{"action": "definition", "file": "main.py", "line": 4, "symbol": "greet"}), "pkg/greet.py:6:9")
	wantLocs(t, "references of hello", e.locations(t, map[string]any{"action": "references", "file": "pkg/greet.py", "line": 1, "symbol": "hello"}),
		"main.py:1:23", "main.py:3:7", "pkg/greet.py:1:5", "pkg/greet.py:7:16")
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": "main.py", "line": 3, "symbol": "hello"}, "hello(name)", "Greet name.")
	e.ok(t, "lsp", map[string]any{"action": "symbols", "file": "pkg/greet.py"}, "1-3: function hello", "5-7: class English", "  6-7: method greet")
	// Locals are left out unless a depth is given.
	e.Put(t, "pkg/locals.py", "def f(a):\n    b = a + 1\n    return b\n\n\nclass C:\n    x = 1\n\n    def m(self):\n        y = 2\n        return y\n")
	r := e.ok(t, "lsp", map[string]any{"action": "symbols", "file": "pkg/locals.py"}, "symbols of pkg/locals.py: 4 (left out: 2 local or deeper symbols (depth 3 lists more))", "1-3: function f", "6-11: class C", "  7: field x", "  9-11: method m")
	if strings.Contains(r.Text, " b\n") || strings.Contains(r.Text, "variable y") {
		t.Fatalf("locals listed by default:\n%s", r.Text)
	}
	e.ok(t, "lsp", map[string]any{"action": "symbols", "file": "pkg/locals.py", "depth": 3}, "symbols of pkg/locals.py: 6\n", "  2: variable b", "    10: variable y")
	e.Sh(t, "rm -f pkg/locals.py")
	// pylsp has no workspace search, and says so.
	e.fails(t, "lsp", map[string]any{"action": "symbols", "query": "hello", "file": "main.py"}, "pylsp offers no workspace symbol search (workspace/symbol)")
	e.fails(t, "lsp", map[string]any{"action": "implementation", "file": "main.py", "line": 4, "symbol": "English"}, "pylsp does not offer implementation")
	// A use says which function or method it is in; pylsp has no call
	// hierarchy, and says so.
	e.ok(t, "lsp", map[string]any{"action": "references", "file": "pkg/greet.py", "line": 1, "symbol": "hello"}, "  7:16 in English.greet  return hello(name)", "  3:7  print(hello", "  1:23  from pkg.greet import")
	e.fails(t, "lsp", map[string]any{"action": "incoming_calls", "file": "pkg/greet.py", "line": 1, "symbol": "hello"}, "pylsp does not offer incoming_calls")
	e.fails(t, "lsp", map[string]any{"action": "outgoing_calls", "file": "pkg/greet.py", "line": 6, "symbol": "greet"}, "pylsp does not offer outgoing_calls")
	// Diagnostics on write: pyflakes's undefined name, once.
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "main.py"}, "none")
	e.ok(t, "edit", map[string]any{"path": "main.py", "old_string": `print(hello("world"))`, "new_string": `print(hello(wrld))`},
		"1 new problem", "main.py:3:13: error: undefined name 'wrld'")
	e.ok(t, "edit", map[string]any{"path": "main.py", "old_string": `print(hello(wrld))`, "new_string": "\n\nprint(hello(wrld))"}, "no new problems")
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "main.py"}, "main.py:5:13: error: undefined name 'wrld'")
	// Fixing it says so.
	e.ok(t, "edit", map[string]any{"path": "main.py", "old_string": `print(hello(wrld))`, "new_string": `print(hello("world"))`}, "no new problems; fixed 1 problem")
	e.PutAll(t, PythonProject)
}

// CheckPythonNoMarker checks pylsp on a Python file with no root marker
// anywhere (no setup.py, pyproject.toml, …; the workspace must have none):
// pylsp serves it from the workspace root, status says so, and writes are
// diagnosed.
func CheckPythonNoMarker(t *testing.T, e Env) {
	t.Helper()
	e.Put(t, "loose.py", "def f(x):\n    return x\n")
	e.ok(t, "lsp", map[string]any{"action": "diagnostics", "file": "loose.py"}, "diagnostics of loose.py (pylsp): none")
	e.ok(t, "lsp", map[string]any{"action": "status", "file": "loose.py"}, "pylsp: running; root the workspace root (no marker found; pylsp works without one)")
	e.ok(t, "edit", map[string]any{"path": "loose.py", "old_string": "return x", "new_string": "return y"}, "diagnostics (pylsp): 1 new problem", "loose.py:2:12: error: undefined name 'y'")
	e.ok(t, "edit", map[string]any{"path": "loose.py", "old_string": "return y", "new_string": "return x"}, "fixed 1 problem")
	e.Sh(t, "rm -f loose.py")
}

// CheckNoServerSaysSo checks that a write no language server can diagnose
// says so, once per run for each reason: file (content) is of a language
// whose server is missing, and why is the reason the result gives.
func CheckNoServerSaysSo(t *testing.T, e Env, file, content, why string) {
	t.Helper()
	e.ok(t, "write", map[string]any{"path": file, "content": content}, "diagnostics: none available ("+why)
	if r := e.ok(t, "write", map[string]any{"path": file, "content": content + "\n"}); strings.Contains(r.Text, "diagnostics") {
		t.Fatalf("the reason was given twice in a run:\n%s", r.Text)
	}
	e.ok(t, "write", map[string]any{"path": "notes/berth-check.md", "content": "# notes\n"}, "diagnostics: none available (no language server handles .md files)")
	e.Sh(t, "rm -rf notes "+file)
}

// GoResolveProject is a package added to GoProject for whole-identifier
// resolution (LSP-2): a line where "page" is only part of identifiers, and
// a method named like a part of the variable it is called on. Known
// positions: pager/pager.go: page_count 3:6, the line 6 `pages :=
// page_count(n, per_page)`; pager/codec.go: encode 5:18, line 10 `return
// _default_encoder.encode(obj)` with encode at 10:26-32.
var GoResolveProject = map[string]string{
	"pager/pager.go": `package pager

func page_count(n, per_page int) int { return (n + per_page - 1) / per_page }

func Pages(n, per_page int) int {
	pages := page_count(n, per_page)
	return pages
}
`,
	"pager/codec.go": `package pager

type encoder struct{}

func (encoder) encode(v any) string { return "" }

var _default_encoder encoder

func Dumps(obj any) string {
	return _default_encoder.encode(obj)
}
`,
}

// GoResolve is the whole-identifier check on GoResolveProject, for
// CheckResolve.
var GoResolve = ResolveCase{
	EncodeFile: "pager/codec.go", EncodeLine: 10, EncodeAt: "(resolved at pager/codec.go:10:26-32)", EncodeDef: "pager/codec.go:5:16",
	PageFile: "pager/pager.go", PageLine: 6, PagesAt: "pager/pager.go:6:2-7", Call: "page_count(n",
	Renamed: "2 occurrences in 1 file: pager/pager.go (2)",
}

// PythonResolveProject is GoResolveProject in Python, for pylsp:
// pager.py line 6 `pages = page_count(len(items), per_page)`; codec.py
// line 10 `return _default_encoder.encode(obj)` (encode at 10:29-35),
// Encoder.encode at 2:9; main.py calls page_count once.
var PythonResolveProject = map[string]string{
	"pager.py": `def page_count(total, per_page):
    return (total + per_page - 1) // per_page


def paginate(items, per_page):
    pages = page_count(len(items), per_page)
    return [items[i * per_page:(i + 1) * per_page] for i in range(pages)]
`,
	"codec.py": `class Encoder:
    def encode(self, obj):
        return str(obj)


_default_encoder = Encoder()


def dumps(obj):
    return _default_encoder.encode(obj)
`,
	"usepager.py": `from pager import page_count

print(page_count(10, 3))
`,
}

// PythonResolve is the whole-identifier check on PythonResolveProject,
// for CheckResolve with pylsp.
var PythonResolve = ResolveCase{
	EncodeFile: "codec.py", EncodeLine: 10, EncodeAt: "(resolved at codec.py:10:29-35)", EncodeDef: "codec.py:2:9",
	PageFile: "pager.py", PageLine: 6, PagesAt: "pager.py:6:5-10", Call: "page_count(len",
	Renamed: "4 occurrences in 2 files: pager.py (2), usepager.py (2)",
}

// ResolveCase is one language's fixture for CheckResolve: a line where
// the method "encode" is called on "_default_encoder" (EncodeFile,
// EncodeLine; EncodeAt is the echo of the resolved method, EncodeDef its
// definition), and a line `pages = page_count(…, per_page)` where "page"
// is only part of identifiers (PageFile, PageLine; PagesAt is where
// "pages" resolves, Call the call of page_count with its "(", Renamed what
// renaming page_count says).
type ResolveCase struct {
	EncodeFile, EncodeAt, EncodeDef string
	EncodeLine                      int
	PageFile, PagesAt, Call         string
	PageLine                        int
	Renamed                         string
}

// CheckResolve checks whole-identifier resolution with c's project in the
// workspace: the identifier is found whole, a part of one is said to be a
// part, and lsp_rename refuses a part and renames the whole identifier
// only, counting its occurrences.
func CheckResolve(t *testing.T, e Env, c ResolveCase) {
	t.Helper()
	// "encode" is part of "_default_encoder" too; the method is meant.
	def := map[string]any{"action": "definition", "file": c.EncodeFile, "line": c.EncodeLine, "symbol": "encode"}
	wantLocs(t, "definition of encode", e.locations(t, def), c.EncodeDef)
	r := e.ok(t, "lsp", def, c.EncodeAt)
	var sc struct {
		Resolved struct {
			Symbol    string `json:"symbol"`
			Column    int    `json:"column"`
			EndColumn int    `json:"end_column"`
		} `json:"resolved"`
	}
	if err := json.Unmarshal(r.Structured, &sc); err != nil || sc.Resolved.Symbol != "encode" || sc.Resolved.EndColumn-sc.Resolved.Column != len("encode") {
		t.Fatalf("structured resolved: %v %s", err, r.Structured)
	}
	// "page" is only part of pages, page_count and per_page: navigation
	// resolves the first and says so; rename refuses and changes nothing.
	before := readBack(t, e, c.PageFile)
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": c.PageFile, "line": c.PageLine, "symbol": "page"},
		`"page" is no whole identifier`, `resolved "pages"`, `"page_count"`, `"per_page"`, "(resolved at "+c.PagesAt+")")
	// A local's hover is short, whatever the docs of its type (pylsp shows
	// all of int's).
	if r := e.ok(t, "lsp", map[string]any{"action": "hover", "file": c.PageFile, "line": c.PageLine, "symbol": "pages"}, "int"); len(r.Text) > 1000 {
		t.Fatalf("the hover of a local is %d characters:\n%s", len(r.Text), r.Text)
	}
	e.fails(t, "lsp_rename", map[string]any{"file": c.PageFile, "line": c.PageLine, "symbol": "page", "new_name": "page_no"},
		`"page" is only part of an identifier`, `"pages"`, `"page_count"`, `"per_page"`, "nothing was changed")
	e.fails(t, "lsp_rename", map[string]any{"file": c.PageFile, "line": c.PageLine, "symbol": c.Call, "new_name": "page_no"}, "not one identifier", `resolved to "page_count"`, "nothing was changed")
	if got := readBack(t, e, c.PageFile); got != before {
		t.Fatalf("a refused rename changed %s:\n%s", c.PageFile, got)
	}
	// The whole identifier is renamed, and nothing that only contains it.
	e.ok(t, "lsp_rename", map[string]any{"file": c.PageFile, "line": c.PageLine, "symbol": "page_count", "new_name": "count_pages"}, c.Renamed)
	got := readBack(t, e, c.PageFile)
	if strings.Contains(got, "page_count") || !strings.Contains(got, "count_pages(") || !strings.Contains(got, "pages") || !strings.Contains(got, "per_page") {
		t.Fatalf("%s after renaming page_count:\n%s", c.PageFile, got)
	}
	e.ok(t, "lsp_rename", map[string]any{"file": c.PageFile, "line": c.PageLine, "symbol": "count_pages", "new_name": "page_count"}, c.Renamed)
}

// GoCapsProject returns a fixture with more items than the lsp tool's
// caps: caps/refs.go calls Target refs times, caps/syms.go declares syms
// functions Sym000…, and capsb/ is a module of its own (a second gopls)
// declaring syms functions SymB000….
func GoCapsProject(refs, syms int) map[string]string {
	var r, s, sb strings.Builder
	r.WriteString("package caps\n\nfunc Target() {}\n")
	for i := range refs {
		fmt.Fprintf(&r, "\nfunc use%03d() { Target() }\n", i)
	}
	s.WriteString("package caps\n")
	sb.WriteString("package capsb\n")
	for i := range syms {
		fmt.Fprintf(&s, "\nfunc Sym%03d() {}\n", i)
		fmt.Fprintf(&sb, "\nfunc SymB%03d() {}\n", i)
	}
	return map[string]string{"caps/refs.go": r.String(), "caps/syms.go": s.String(),
		"capsb/go.mod": "module example.com/capsb\n\ngo 1.22\n", "capsb/syms.go": sb.String()}
}

// list is the counts of a list's structuredContent.
type list struct {
	Locations []json.RawMessage `json:"locations"`
	Symbols   []json.RawMessage `json:"symbols"`
	Total     int               `json:"total"`
	Start     int               `json:"start"`
	More      int               `json:"more"`
}

func (e Env) list(t *testing.T, args map[string]any, wants ...string) list {
	t.Helper()
	r := e.ok(t, "lsp", args, wants...)
	var l list
	if err := json.Unmarshal(r.Structured, &l); err != nil {
		t.Fatalf("lsp %v: structuredContent: %v", args, err)
	}
	return l
}

// CheckGoCaps checks the caps of references (limit, 50), document symbols
// (docLimit, 200) and workspace symbols (wsLimit, 100) on a
// GoCapsProject(refs, syms) in the workspace (over GoProject, whose gopls
// runs): the text and structuredContent show the first page, count the
// rest the same way, and start pages on.
func CheckGoCaps(t *testing.T, e Env, refs, syms, limit, docLimit, wsLimit int) {
	t.Helper()
	at := map[string]any{"action": "references", "file": "caps/refs.go", "line": 3, "symbol": "Target"}
	l := e.list(t, at, fmt.Sprintf(": %d locations, the first %d shown in 1 file", refs+1, limit), fmt.Sprintf("… and %d more not shown: call again with start %d", refs+1-limit, limit))
	if len(l.Locations) != limit || l.Total != refs+1 || l.More != refs+1-limit {
		t.Fatalf("references structuredContent: %d locations, total %d, more %d", len(l.Locations), l.Total, l.More)
	}
	at["start"] = limit
	l = e.list(t, at, fmt.Sprintf(": %d locations, %d-%d shown", refs+1, limit+1, refs+1))
	if len(l.Locations) != refs+1-limit || l.Start != limit || l.More != 0 {
		t.Fatalf("references from start %d: %d locations, start %d, more %d", limit, len(l.Locations), l.Start, l.More)
	}

	doc := map[string]any{"action": "symbols", "file": "caps/syms.go"}
	l = e.list(t, doc, fmt.Sprintf("symbols of caps/syms.go: %d, the first %d shown", syms, docLimit))
	if len(l.Symbols) != docLimit || l.Total != syms || l.More != syms-docLimit {
		t.Fatalf("document symbols structuredContent: %d symbols, total %d, more %d", len(l.Symbols), l.Total, l.More)
	}
	doc["start"] = docLimit
	if l = e.list(t, doc, fmt.Sprintf("Sym%03d", syms-1)); len(l.Symbols) != syms-docLimit {
		t.Fatalf("document symbols from start %d: %d", docLimit, len(l.Symbols))
	}

	// Each gopls answers at most 100 symbols; two answer here.
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": "capsb/syms.go", "line": 3, "symbol": "SymB000"})
	l = e.list(t, map[string]any{"action": "symbols", "query": "Sym"}, fmt.Sprintf(", the first %d shown", wsLimit))
	if len(l.Symbols) != wsLimit || l.Total <= wsLimit || l.More != l.Total-wsLimit {
		t.Fatalf("workspace symbols structuredContent: %d symbols, total %d, more %d", len(l.Symbols), l.Total, l.More)
	}
	e.Sh(t, "rm -rf caps capsb")
}

// CheckWatched: files changed behind the tools' back (shell commands in
// the sandbox) are seen by the next query through the workspace watch —
// a new file calling Hello, then the file removed — with no note that the
// workspace was walked; after more changes than the watch reports at once
// (a watch-queue overflow: thousands of files, then one more caller) the
// next query still sees the caller, walking, and says so; and the query
// after that is watched again.
func CheckWatched(t *testing.T, e Env) {
	t.Helper()
	refs := map[string]any{"action": "references", "file": "greet/greet.go", "line": 15, "symbol": "Hello"}
	e.ok(t, "lsp", refs, "11:15 in main")
	// The symbol a reference is in is named from the file as it is now:
	// a caller's function renamed behind the tools' back (same size, so
	// only the modification time tells) is named anew, and a file the
	// server has open likewise after it changes.
	e.Sh(t, `cat > caller.go <<'EOF'
package main

import "example.com/proj/greet"

func first() string { return greet.Hello(greet.English{}, "c") }
EOF`)
	e.ok(t, "lsp", refs, "5:36 in first")
	e.Sh(t, `sed -i 's/func first/func secnd/' caller.go`)
	if r := e.ok(t, "lsp", refs, "5:36 in secnd"); strings.Contains(r.Text, "in first") {
		t.Fatalf("a reference is named from the caller's old text:\n%s", r.Text)
	}
	e.ok(t, "lsp", map[string]any{"action": "hover", "file": "caller.go", "line": 5, "symbol": "Hello"}, "Hello")
	e.Sh(t, `sed -i 's/func secnd/func third/' caller.go`)
	e.ok(t, "lsp", refs, "5:36 in third")
	e.Sh(t, "rm -f caller.go")
	e.Sh(t, `cat > watched.go <<'EOF'
package main

import "example.com/proj/greet"

var watched = greet.Hello(greet.English{}, "watched")
EOF`)
	r := e.ok(t, "lsp", refs, "watched.go")
	if strings.Contains(r.Text, "walked the workspace") {
		t.Fatalf("a change was found by walking, not by the watch:\n%s", r.Text)
	}
	e.Sh(t, "rm -f watched.go")
	if r := e.ok(t, "lsp", refs, "11:15 in main"); strings.Contains(r.Text, "watched.go") {
		t.Fatalf("the removed caller is still reported:\n%s", r.Text)
	}
	// A flood of changes: more paths than the watch holds unsent.
	e.Sh(t, `mkdir -p flood && cd flood && i=0; while [ $i -lt 12000 ]; do : > f$i.txt; i=$((i + 1)); done; cd .. && cat > flooded.go <<'EOF'
package main

import "example.com/proj/greet"

var flooded = greet.Hello(greet.English{}, "after the flood")
EOF`)
	r = e.ok(t, "lsp", refs, "flooded.go")
	if !strings.Contains(r.Text, "walked the workspace") {
		t.Errorf("after a watch overflow the result does not say the workspace was walked:\n%s", r.Text)
	}
	e.Sh(t, "rm -rf flood flooded.go")
	r = e.ok(t, "lsp", refs, "11:15 in main")
	if strings.Contains(r.Text, "flooded.go") || strings.Contains(r.Text, "walked the workspace") {
		t.Fatalf("after the flood the watch does not serve again:\n%s", r.Text)
	}
}
