package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const lockGo = `package a

import "sync"

var mu sync.Mutex

func f() {
	mu.Lock()
	defer mu.Unlock()
	s := "mu.Lock()" // mu.Lock() in a string and a comment never match
	_ = s
}
`

const lockPy = `class A:
    def go(self):
        print("x")
`

// structDir makes a temp workspace with a Go file, a Python file and a Go
// file in a subdirectory, and makes it the working directory.
func structDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"a.go":     lockGo,
		"sub/b.go": "package sub\n\nfunc g() { other.Lock() }\n",
		"c.py":     lockPy,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	return dir
}

func TestASTGrep(t *testing.T) {
	structDir(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "x.go"), []byte("package x\n\nfunc h() { m.Lock() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		absent   []string
		stderr   []string
		noStdout bool
	}{
		{name: "directory", args: []string{"ast-grep", "-p", "$X.Lock()", "-l", "go"},
			stdout: []string{"a.go:8:mu.Lock()\n", "sub/b.go:3:other.Lock()\n"}, absent: []string{"Unlock", `"mu.Lock()"`}},
		{name: "one file, language inferred", args: []string{"ast-grep", "--pattern", "$X.Lock()", "sub/b.go"},
			stdout: []string{"sub/b.go:3:other.Lock()\n"}, absent: []string{"a.go"}},
		{name: "explicit dot and subdir", args: []string{"ast-grep", "-p", "$X.Lock()", "-l", "go", "./sub"},
			stdout: []string{"sub/b.go:3:other.Lock()\n"}, absent: []string{"a.go"}},
		{name: "path outside the working directory prints as given", args: []string{"ast-grep", "-p", "$X.Lock()", "-l", "go", outside},
			stdout: []string{filepath.Join(outside, "x.go") + ":3:m.Lock()\n"}},
		{name: "several paths", args: []string{"ast-grep", "-p", "$X.Lock()", "-l", "go", "a.go", outside},
			stdout: []string{"a.go:8:", filepath.Join(outside, "x.go") + ":3:"}, absent: []string{"sub/b.go"}},
		{name: "python", args: []string{"ast-grep", "-p", "def $F(self): $$$", "-l", "python", "."},
			stdout: []string{"c.py:2:def go(self):\n", "c.py:3:        print(\"x\")\n"}},
		{name: "max", args: []string{"ast-grep", "-p", "$X.Lock()", "-l", "go", "--max", "1"},
			stdout: []string{"a.go:8:mu.Lock()\n"}, absent: []string{"sub/b.go"}},
		{name: "no match exits 1", args: []string{"ast-grep", "-p", "$X.Frobnicate()", "-l", "go"},
			code: 1, noStdout: true},
		{name: "invalid pattern exits 2", args: []string{"ast-grep", "-p", "func (", "-l", "go"},
			code: 2, noStdout: true, stderr: []string{"berth ast-grep: "}},
		{name: "unknown language exits 2", args: []string{"ast-grep", "-p", "$X", "-l", "cobol"},
			code: 2, noStdout: true, stderr: []string{"cobol"}},
		{name: "directory without a language exits 2", args: []string{"ast-grep", "-p", "$X.Lock()"},
			code: 2, noStdout: true, stderr: []string{"berth ast-grep: "}},
		{name: "missing path exits 2", args: []string{"ast-grep", "-p", "$X.Lock()", "-l", "go", "nope"},
			code: 2, noStdout: true, stderr: []string{"nope"}},
		{name: "pattern is required", args: []string{"ast-grep", "-l", "go"},
			code: 2, noStdout: true, stderr: []string{"--pattern is required"}},
		{name: "bad flag exits 2", args: []string{"ast-grep", "-p", "$X", "--max", "many"},
			code: 2, noStdout: true, stderr: []string{"berth ast-grep: ", "many"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := run(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(out, s) {
					t.Errorf("stdout lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(out, s) {
					t.Errorf("stdout has %q:\n%s", s, out)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errs, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errs)
				}
			}
			if tt.noStdout && out != "" {
				t.Errorf("stdout should be empty, got %q", out)
			}
		})
	}
}

func TestASTGrepJSONLines(t *testing.T) {
	structDir(t)
	out, errs, code := run(t, "ast-grep", "-p", "$X.Lock()", "-l", "go", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 JSON lines, got %d:\n%s", len(lines), out)
	}
	type match struct {
		File      *string           `json:"file"`
		StartLine *int              `json:"start_line"`
		StartCol  *int              `json:"start_col"`
		EndLine   *int              `json:"end_line"`
		EndCol    *int              `json:"end_col"`
		Text      *string           `json:"text"`
		Enclosing string            `json:"enclosing"`
		Captures  map[string]string `json:"captures"`
	}
	var got []match
	for _, l := range lines {
		var m match
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if m.File == nil || m.StartLine == nil || m.StartCol == nil || m.EndLine == nil || m.EndCol == nil || m.Text == nil {
			t.Fatalf("line %q lacks a field", l)
		}
		got = append(got, m)
	}
	first := got[0]
	if *first.File != "a.go" || *first.StartLine != 8 || *first.StartCol != 1 || *first.EndLine != 8 || *first.EndCol != 10 || *first.Text != "mu.Lock()" {
		t.Errorf("first match = %s", lines[0])
	}
	if first.Enclosing != "f" || got[1].Enclosing != "g" {
		t.Errorf("enclosing %q and %q, want f and g", first.Enclosing, got[1].Enclosing)
	}
	if first.Captures["X"] != "mu" {
		t.Errorf("captures = %v, want X=mu", first.Captures)
	}
	if *got[1].File != "sub/b.go" || *got[1].Text != "other.Lock()" || got[1].Captures["X"] != "other" {
		t.Errorf("second match = %s", lines[1])
	}
}

func TestASTEdit(t *testing.T) {
	dir := structDir(t)
	args := []string{"ast-edit", "-p", "$X.Lock()", "-r", "$X.TryLock()", "-l", "go"}

	out, errs, code := run(t, args...)
	if code != 0 {
		t.Fatalf("diff: exit %d: %s", code, errs)
	}
	for _, want := range []string{"a.go", "-\tmu.Lock()", "+\tmu.TryLock()", "sub/b.go", "+func g() { other.TryLock() }"} {
		if !strings.Contains(out, want) {
			t.Errorf("diff lacks %q:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.go")); string(b) != lockGo {
		t.Fatalf("the diff mode wrote a.go:\n%s", b)
	}

	if _, _, code := run(t, "ast-edit", "-p", "$X.Frobnicate()", "-r", "$X", "-l", "go"); code != 1 {
		t.Errorf("no match: exit %d, want 1", code)
	}
	if _, errs, code := run(t, "ast-edit", "-p", "func (", "-r", "x", "-l", "go"); code != 2 || !strings.Contains(errs, "berth ast-edit: ") {
		t.Errorf("invalid pattern: exit %d, stderr %q", code, errs)
	}
	if _, errs, code := run(t, "ast-edit", "-p", "$X.Lock()", "-l", "go"); code != 2 || !strings.Contains(errs, "--rewrite is required") {
		t.Errorf("missing --rewrite: exit %d, stderr %q", code, errs)
	}

	out, errs, code = run(t, append(args, "--apply")...)
	if code != 0 {
		t.Fatalf("apply: exit %d: %s", code, errs)
	}
	for _, want := range []string{"a.go: 1 replacement", "sub/b.go: 1 replacement", "applied 2 replacement(s) in 2 file(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "a.go"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(lockGo, "\tmu.Lock()", "\tmu.TryLock()", 1)
	if string(b) != want {
		t.Errorf("a.go after apply:\n%s\nwant:\n%s", b, want)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "b.go")); !strings.Contains(string(b), "other.TryLock()") {
		t.Errorf("sub/b.go after apply:\n%s", b)
	}
	if _, _, code := run(t, args...); code != 1 {
		t.Errorf("after apply nothing matches: exit %d, want 1", code)
	}
}

// TestASTEditChecks: the command shares the engine's checks: a rewrite
// variable the pattern does not bind is an error, and a rewrite that leaves
// a syntax error prints the diff with a warning on stderr.
func TestASTEditChecks(t *testing.T) {
	structDir(t)
	_, errs, code := run(t, "ast-edit", "-p", "$X.Lock()", "-r", "$Y.TryLock()", "-l", "go")
	if code != 2 || !strings.Contains(errs, "berth ast-edit: the rewrite uses $Y, which the pattern does not bind: the pattern binds $X") {
		t.Errorf("unbound variable: exit %d, stderr %q", code, errs)
	}
	out, errs, code := run(t, "ast-edit", "-p", "$X.Lock()", "-r", "$X.TryLock(", "-l", "go", "a.go")
	if code != 0 || !strings.Contains(out, "+\tmu.TryLock(\n") || !strings.Contains(errs, "berth ast-edit: warning: a.go:8: the rewritten code has a syntax error here") {
		t.Errorf("syntax warning: exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}
