package projectcheck

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox/host"
)

// debianPython is Debian's python3, which has python3-pyflakes when it is
// installed; the python3 first on PATH may be another build without it.
const debianPython = "/usr/bin/python3"

// onHost is Find's options for a host sandbox.
var onHost = Options{Host: true}

// unavailable skips, or fails when CI=true.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// project writes files into a new directory; content starting with "#!"
// makes an executable.
func project(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(content, "#!") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hostSandbox is the host with PATH set to pathEnv, or berth's own
// environment when pathEnv is "".
func hostSandbox(t *testing.T, pathEnv string) *host.Sandbox {
	t.Helper()
	var env []string
	if pathEnv != "" {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		env = append(env, "PATH="+pathEnv)
	}
	sb := host.New(host.Options{Env: env})
	t.Cleanup(func() { sb.Close() })
	return sb
}

// binDir makes a directory of symbolic links name → target.
func binDir(t *testing.T, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func applicable(t *testing.T, app []Applicable, miss []Missing, lang string) Applicable {
	t.Helper()
	for _, a := range app {
		if a.Language == lang {
			return a
		}
	}
	t.Fatalf("%s does not apply; missing: %+v", lang, miss)
	return Applicable{}
}

func missing(t *testing.T, app []Applicable, miss []Missing, lang string) string {
	t.Helper()
	for _, a := range app {
		if a.Language == lang {
			t.Fatalf("%s applies as %s; want it missing", lang, a.Command)
		}
	}
	for _, m := range miss {
		if m.Language == lang {
			return m.Reason
		}
	}
	t.Fatalf("%s is neither applicable nor missing", lang)
	return ""
}

// has reports whether diags hold a finding in file at line with severity
// whose message contains msg.
func has(diags []Diagnostic, file string, line int, severity, msg string) bool {
	for _, d := range diags {
		if d.File == file && d.Line == line && d.Severity == severity && strings.Contains(d.Message, msg) {
			return true
		}
	}
	return false
}

// TestGoVet runs the real go vet in a host sandbox on a module with a vet
// finding in one package and a type error in another.
func TestGoVet(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		unavailable(t, "no go on PATH: install Go to run this test")
	}
	dir := project(t, map[string]string{
		"go.mod": "module example.com/checked\n\ngo 1.22\n",
		"main.go": `package main

import "fmt"

func main() {
	fmt.Printf("%d\n", "not a number")
}
`,
		"typed/typed.go": `package typed

func F() int {
	var s string = 1
	return s
}
`,
	})
	sb := hostSandbox(t, "")
	ctx := ctxFor(t)
	app, miss, err := Find(ctx, sb, dir, dir, onHost)
	if err != nil {
		t.Fatal(err)
	}
	a := applicable(t, app, miss, "go")
	if a.Checker != "go vet" || a.Marker != "go.mod" || a.Root != dir {
		t.Errorf("applicable %+v", a)
	}
	if real, _ := filepath.EvalSymlinks(goBin); a.Binary != goBin && a.Binary != real {
		t.Logf("go resolved to %s, PATH's first go is %s", a.Binary, goBin)
	}
	res, err := Run(ctx, sb, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %v, %d diagnostics, unparsed %q", res.Command, res.Status, res.Total, res.Unparsed)
	if !has(res.Diagnostics, filepath.Join(dir, "main.go"), 6, SeverityWarning, "fmt.Printf format %d has arg") {
		t.Errorf("no printf warning in main.go:6: %+v", res.Diagnostics)
	}
	if !has(res.Diagnostics, filepath.Join(dir, "typed/typed.go"), 4, SeverityError, "cannot use 1") {
		t.Errorf("no type error in typed/typed.go:4: %+v", res.Diagnostics)
	}
	if res.Status.Success() {
		t.Errorf("status %v; want a failure for the type error", res.Status)
	}
	if res.Diagnostics[0].Severity != SeverityError {
		t.Errorf("first diagnostic %+v; want the error first", res.Diagnostics[0])
	}
}

// TestGoModWithoutGo: a go.mod with no go on the sandbox's PATH is
// "binary missing", and nothing applies.
func TestGoModWithoutGo(t *testing.T) {
	dir := project(t, map[string]string{"go.mod": "module example.com/x\n\ngo 1.22\n", "x.go": "package x\n"})
	sb := hostSandbox(t, t.TempDir())
	app, miss, err := Find(ctxFor(t), sb, dir, dir, onHost)
	if err != nil {
		t.Fatal(err)
	}
	if reason := missing(t, app, miss, "go"); !strings.HasPrefix(reason, "binary missing: go.mod is in "+dir) {
		t.Errorf("reason %q; want binary missing", reason)
	}
	if reason := missing(t, app, miss, "rust"); !strings.HasPrefix(reason, "marker missing: none of Cargo.toml in "+dir) {
		t.Errorf("rust reason %q; want marker missing", reason)
	}
	if len(app) != 0 {
		t.Errorf("applicable %+v; want none", app)
	}
}

// TestWorkspaceProgramsNeverRun: programs inside the workspace are
// neither chosen nor started, even by the probe, when the workspace is on
// the sandbox's PATH.
func TestWorkspaceProgramsNeverRun(t *testing.T) {
	// Shell builtins only: PATH here has no touch, basename or dirname.
	spy := "#!/bin/sh\np=$0; : > \"${p%/*}/../ran-${p##*/}\"\n"
	dir := project(t, map[string]string{
		"go.mod":         "module example.com/x\n\ngo 1.22\n",
		"pyproject.toml": "[project]\nname = \"x\"\n",
		"Cargo.toml":     "[workspace]\n",
		"bin/go":         spy, "bin/python3": spy, "bin/pyflakes3": spy, "bin/find": spy, "bin/cargo": spy, "bin/mypy": spy,
	})
	sb := hostSandbox(t, filepath.Join(dir, "bin")+":"+t.TempDir())
	app, miss, err := Find(ctxFor(t), sb, dir, dir, onHost)
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"go", "python", "rust"} {
		if reason := missing(t, app, miss, lang); !strings.HasPrefix(reason, "binary missing") {
			t.Errorf("%s: reason %q; want binary missing", lang, reason)
		}
	}
	ran, _ := filepath.Glob(filepath.Join(dir, "ran-*"))
	if len(ran) > 0 {
		t.Errorf("workspace programs were started: %q", ran)
	}
}

// TestPython runs Debian's python checkers in a host sandbox: "python3 -m
// pyflakes" (or "-m mypy", which is preferred, when python3-mypy is
// installed too) and pyflakes3, through find, so .venv and node_modules
// are not checked.
func TestPython(t *testing.T) {
	findBin, err := exec.LookPath("find")
	if err != nil {
		t.Skipf("no find on PATH: %v", err)
	}
	files := map[string]string{
		"pyproject.toml":             "[project]\nname = \"demo\"\n",
		"app.py":                     "import os\n\n\ndef main():\n    return undefined_name\n",
		"pkg/__init__.py":            "",
		"pkg/bad.py":                 "def broken(:\n    pass\n",
		".venv/lib/site.py":          "import sys\n",
		"node_modules/x/vendored.py": "import sys\n",
	}
	type finding struct {
		file     string
		line     int
		severity string
		msg      string
	}
	pyflakesFindings := []finding{
		{"pkg/bad.py", 1, SeverityError, "invalid syntax"},
		{"app.py", 1, SeverityWarning, "'os' imported but unused"},
		{"app.py", 5, SeverityWarning, "undefined name 'undefined_name'"},
	}
	// mypy stops at the syntax error.
	mypyFindings := []finding{{"pkg/bad.py", 1, SeverityError, "invalid syntax"}}

	imports := func(module string) bool { return exec.Command(debianPython, "-c", "import "+module).Run() == nil }
	for _, tc := range []struct {
		name    string
		links   map[string]string
		need    string // a file that must exist
		checker string
		command string // prefix of Applicable.Command, "PY" for the python link
		want    []finding
	}{
		{"python3 -m pyflakes", map[string]string{"python3": debianPython, "find": findBin}, debianPython, "pyflakes", "PY -m pyflakes on every .py file", pyflakesFindings},
		{"pyflakes3", map[string]string{"pyflakes3": "/usr/bin/pyflakes3", "find": findBin}, "/usr/bin/pyflakes3", "pyflakes", "PY/pyflakes3 on every .py file", pyflakesFindings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.need); err != nil || !imports("pyflakes") {
				t.Skipf("%s or its pyflakes module is missing: apt-get install python3-pyflakes pyflakes3 to run this test", tc.need)
			}
			bin := binDir(t, tc.links)
			want, checker, command := tc.want, tc.checker, tc.command
			if tc.links["python3"] != "" && imports("mypy") {
				want, checker, command = mypyFindings, "mypy", "PY -m mypy"
			}
			command = strings.ReplaceAll(command, "PY", filepath.Join(bin, "python3"))
			if tc.links["python3"] == "" {
				command = strings.ReplaceAll(tc.command, "PY", bin)
			}
			dir := project(t, files)
			sb := hostSandbox(t, bin)
			ctx := ctxFor(t)
			app, miss, err := Find(ctx, sb, dir, dir, onHost)
			if err != nil {
				t.Fatal(err)
			}
			a := applicable(t, app, miss, "python")
			if a.Checker != checker || !strings.HasPrefix(a.Command, command) {
				t.Fatalf("applicable %s: %s; want %s: %s…", a.Checker, a.Command, checker, command)
			}
			res, err := Run(ctx, sb, a)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %v, %d diagnostics, unparsed %q", res.Command, res.Status, res.Total, res.Unparsed)
			for _, w := range want {
				if !has(res.Diagnostics, filepath.Join(dir, w.file), w.line, w.severity, w.msg) {
					t.Errorf("no %s %q at %s:%d in %+v", w.severity, w.msg, w.file, w.line, res.Diagnostics)
				}
			}
			if res.Total != len(want) {
				t.Errorf("%d diagnostics; want %d (nothing from .venv or node_modules): %+v", res.Total, len(want), res.Diagnostics)
			}
			if res.Unparsed != "" {
				t.Errorf("unparsed %q; want none (a syntax error's source and caret lines are dropped)", res.Unparsed)
			}
		})
	}
}

// TestFindErrors: Find refuses relative paths and roots outside the
// workspace, and says when the root does not exist.
func TestFindErrors(t *testing.T) {
	dir := t.TempDir()
	sb := hostSandbox(t, "")
	for _, tc := range []struct{ ws, root, want string }{
		{"rel", dir, "must be absolute"},
		{dir, filepath.Dir(dir), "outside the workspace"},
		{dir, filepath.Join(dir, "nope"), "is not a directory"},
	} {
		if _, _, err := Find(ctxFor(t), sb, tc.ws, tc.root, onHost); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Find(%s, %s) = %v; want an error containing %q", tc.ws, tc.root, err, tc.want)
		}
	}
	if _, err := Run(ctxFor(t), sb, Applicable{Checker: "go vet"}); err == nil {
		t.Error("Run with a hand-made Applicable succeeded; want an error")
	}
}

// TestCargoMember runs the real cargo check in a member of a cargo
// workspace: its span paths are relative to the cargo workspace root,
// which the probe finds.
func TestCargoMember(t *testing.T) {
	if _, err := exec.LookPath("cargo"); err != nil {
		t.Skipf("no cargo on PATH (%v): install the Rust toolchain to run this test", err)
	}
	dir := project(t, map[string]string{
		"Cargo.toml":     "[workspace]\nmembers = [\"app\"]\nresolver = \"2\"\n",
		"app/Cargo.toml": "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"app/src/main.rs": `fn main() {
    let x: i32 = "hello";
    let unused = 5;
    println!("{}", x);
}
`,
	})
	root := filepath.Join(dir, "app")
	sb := hostSandbox(t, "")
	ctx := ctxFor(t)
	app, miss, err := Find(ctx, sb, dir, root, Options{}) // the container rule: cargo check runs unasked
	if err != nil {
		t.Fatal(err)
	}
	a := applicable(t, app, miss, "rust")
	if a.base != dir {
		t.Errorf("base %q; want the cargo workspace %s", a.base, dir)
	}
	res, err := Run(ctx, sb, a)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %v, %d diagnostics, unparsed %q", res.Command, res.Status, res.Total, res.Unparsed)
	if !has(res.Diagnostics, filepath.Join(root, "src/main.rs"), 2, SeverityError, "mismatched types") {
		t.Errorf("no mismatched types error at app/src/main.rs:2: %+v", res.Diagnostics)
	}
	if res.Status.Success() {
		t.Errorf("status %v; want a failure", res.Status)
	}
}
