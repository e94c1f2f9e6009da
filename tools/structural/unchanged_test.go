package structural_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"berth.dev/berth/tools/structural"
)

// errorfTruth counts, with go/parser, the outermost fmt.Errorf calls of
// src and those whose arguments hold "%v", which a rewrite of %v to %w
// changes.
func errorfTruth(t *testing.T, src []byte) (calls, changed int) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	end := token.NoPos
	ast.Inspect(f, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok || c.Pos() < end {
			return true
		}
		sel, ok := c.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Errorf" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fmt" {
			return true
		}
		end = c.End()
		calls++
		args := src[fset.Position(c.Lparen).Offset+1 : fset.Position(c.Rparen).Offset]
		if strings.Contains(string(args), "%v") {
			changed++
		}
		return true
	})
	return calls, changed
}

// TestEditCountsOnlyChanges: on files of Go's own source tree, a rewrite
// of %v to %w in fmt.Errorf's arguments counts as replacements only the
// calls whose text it changes (go/parser says which), names the others as
// left unchanged, and stages no file where it changes nothing. The old
// code counted every match ("2 replacements" for 1 changed line).
func TestEditCountsOnlyChanges(t *testing.T) {
	goroot := runtime.GOROOT()
	files := map[string]string{ // workspace name → file of GOROOT/src
		"pe/file.go":     "debug/pe/file.go",
		"build/build.go": "go/build/build.go",
		"xml/marshal.go": "encoding/xml/marshal.go", // no %v at all
	}
	ws := map[string]string{}
	calls, changed := 0, 0
	changedFiles := map[string]int{}
	for name, src := range files {
		b, err := os.ReadFile(filepath.Join(goroot, "src", filepath.FromSlash(src)))
		if err != nil {
			t.Skipf("Go's source tree is not here: %v", err)
		}
		ws[name] = string(b)
		c, ch := errorfTruth(t, b)
		if c == 0 {
			t.Fatalf("%s has no fmt.Errorf call", src)
		}
		calls += c
		changed += ch
		if ch > 0 {
			changedFiles[name] = ch
		}
	}
	if changed == 0 || changed == calls || len(changedFiles) == len(files) {
		t.Fatalf("the corpus does not test anything: %d calls, %d to change, in %d files", calls, changed, len(changedFiles))
	}
	t.Logf("go/parser: %d fmt.Errorf calls, %d with %%v, in %d of %d files", calls, changed, len(changedFiles), len(files))
	ev := newEnv(t, ws, structural.Options{})
	req := structural.EditRequest{Pattern: "fmt.Errorf($$$A)", Rewrite: "fmt.Errorf($$$W)", Language: "go",
		Transform: map[string]structural.Transform{"W": {Source: "$$$A", Replace: "%v", By: "%w"}}}
	p, err := ev.e.Stage(context.Background(), ev.fs, req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Replacements != changed || p.Unchanged != calls-changed {
		t.Errorf("%d replacements and %d unchanged, want %d and %d (go/parser: %d calls)", p.Replacements, p.Unchanged, changed, calls-changed, calls)
	}
	if len(p.Files) != len(changedFiles) {
		t.Errorf("%d files staged, want %d: %v", len(p.Files), len(changedFiles), changedFiles)
	}
	for _, f := range p.Files {
		if f.Replacements != changedFiles[f.Path] || len(f.Edits) != f.Replacements {
			t.Errorf("%s: %d replacements, %d edits, want %d", f.Path, f.Replacements, len(f.Edits), changedFiles[f.Path])
		}
	}
	for _, f := range p.Files {
		for _, e := range f.Edits {
			if e.Text == string(f.Old[e.StartByte:e.EndByte]) {
				t.Errorf("%s: an edit at byte %d changes nothing: %q", f.Path, e.StartByte, e.Text)
			}
		}
	}

	// Through the tool: the count and the unchanged matches in the text.
	args := map[string]any{"pattern": "fmt.Errorf($$$A)", "rewrite": "fmt.Errorf($$$W)", "language": "go",
		"transform": map[string]any{"W": map[string]string{"source": "$$$A", "replace": "%v", "by": "%w"}}}
	wantOK(t, ev.call(t, "ast_edit", args),
		fmt.Sprintf("(proposed) %d replacements in %d files (%d matches left as they were: the rewrite gives the text they have already)", changed, len(changedFiles), calls-changed))

	// Where nothing changes, nothing is staged, and the result says why.
	args["path"] = "xml/marshal.go"
	c, _ := errorfTruth(t, []byte(ws["xml/marshal.go"]))
	res := ev.call(t, "ast_edit", args)
	wantOK(t, res, fmt.Sprintf("nothing to change: %d matches left as they were: the rewrite gives the text they have already; no edit was staged", c))
	if strings.Contains(res.AllText(), "edit_") {
		t.Errorf("an edit that changes nothing was staged:\n%s", res.AllText())
	}
}

// TestEditEmptyMultiSeparator: a $$$A that captured nothing takes its comma
// with it, so f($W, $$$A, err) stages g("x", err), not g("x", , err); a
// rewrite that breaks the syntax all the same is refused, naming the file,
// the line and the rewritten text, and nothing is staged.
func TestEditEmptyMultiSeparator(t *testing.T) {
	const src = "package p\n\nfunc h() {\n\tf(\"x\", err)\n\tf(\"y\", a, err)\n}\n"
	ev := newEnv(t, map[string]string{"a.go": src}, structural.Options{})
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "f($W, $$$A, err)", "rewrite": "g($W, $$$A, err)", "path": "a.go"})
	wantOK(t, res, "(proposed) 2 replacements in 1 file", "+\tg(\"x\", err)\n", "+\tg(\"y\", a, err)")
	if strings.Contains(res.AllText(), "warning") {
		t.Errorf("warnings:\n%s", res.AllText())
	}
	res = ev.call(t, "ast_edit", map[string]any{"pattern": "f($W, $$$A, err)", "rewrite": "g($W $$$A, err)", "path": "a.go"})
	wantError(t, res, "the rewrite breaks the syntax of 1 file, so no edit was staged: a.go:4: ", "in `g(\"x\" err)`", "Fix the rewrite and run ast_edit again")
	if got := ev.e.Pending(); len(got) != 1 {
		t.Errorf("pending %v, want only the first edit", got)
	}
}
