package structural_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"berth.dev/berth/syntax"
	"berth.dev/berth/tools/structural"
)

const wrapGo = `package w

func open(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return errors.Wrap(err, "open config")
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %v", name, err)
	}
	return nil
}
`

const wrapGoWant = `package w

func open(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("open config: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	return nil
}
`

// TestEditRulesAndTransforms is the case in two calls: one ast_edit
// with two rules, one of them changing part of a captured string with a
// transform, and one resolve.
func TestEditRulesAndTransforms(t *testing.T) {
	ev := newEnv(t, map[string]string{"w.go": wrapGo}, structural.Options{})
	res := ev.call(t, "ast_edit", map[string]any{"path": "w.go", "rules": []map[string]any{
		{"pattern": "errors.Wrap($E, $MSG)", "rewrite": `fmt.Errorf($M, $E)`,
			"transform": map[string]any{"M": map[string]any{"source": "$MSG", "replace": `"$`, "by": `: %v"`}}},
		{"pattern": "fmt.Errorf($F, $$$ARGS)", "rewrite": "fmt.Errorf($W, $$$ARGS)",
			"transform": map[string]any{"W": map[string]any{"source": "$F", "replace": "%v", "by": "%w"}}},
	}})
	wantOK(t, res, "(proposed) 3 replacements in 1 file", `edit_id "edit_1"`)
	wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "wrote 3 replacements in 1 file")
	if got := ev.read(t, "w.go"); got != wrapGoWant {
		t.Errorf("w.go:\n%s\nwant:\n%s", got, wrapGoWant)
	}
}

func TestEditTransform(t *testing.T) {
	ev := newEnv(t, map[string]string{"w.go": wrapGo}, structural.Options{})
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "fmt.Errorf($MSG, $$$A)", "rewrite": "fmt.Errorf($W, $$$A)", "path": "w.go",
		"transform": map[string]any{"W": map[string]any{"source": "$MSG", "replace": `%v`, "by": "%w"}}})
	wantOK(t, res, "1 replacement", `-		return fmt.Errorf("close %s: %v", name, err)`, `+		return fmt.Errorf("close %s: %w", name, err)`)
	// Groups in by.
	res = ev.call(t, "ast_edit", map[string]any{"pattern": "errors.Wrap($E, $MSG)", "rewrite": "fmt.Errorf($W, $E)", "path": "w.go",
		"transform": map[string]any{"W": map[string]any{"source": "$MSG", "replace": `^"(.*)"$`, "by": `"${1}: %w"`}}})
	wantOK(t, res, `+		return fmt.Errorf("open config: %w", err)`)
	for _, c := range []struct {
		name string
		args map[string]any
		want []string
	}{
		{"bad regexp", map[string]any{"pattern": "fmt.Errorf($MSG, $$$A)", "rewrite": "fmt.Errorf($W, $$$A)", "path": "w.go",
			"transform": map[string]any{"W": map[string]any{"source": "$MSG", "replace": `%v(`, "by": "%w"}}},
			[]string{`transform W: replace "%v(" is not a valid regular expression (Go RE2 syntax)`}},
		{"unbound source", map[string]any{"pattern": "fmt.Errorf($MSG, $$$A)", "rewrite": "fmt.Errorf($W, $$$A)", "path": "w.go",
			"transform": map[string]any{"W": map[string]any{"source": "$TEXT", "replace": `x`}}},
			[]string{"transform W: its source $TEXT is not bound: the pattern binds $MSG, $$$A"}},
		{"unbound rewrite variable", map[string]any{"pattern": "errors.Wrap($E, $$$ARGS)", "rewrite": "errors.Wrap(err, $MSG)", "path": "w.go"},
			[]string{"the rewrite uses $MSG, which the pattern does not bind: the pattern binds $E, $$$ARGS"}},
		{"unbound in a later rule", map[string]any{"path": "w.go", "rules": []map[string]any{
			{"pattern": "errors.Wrap($E, $M)", "rewrite": "wrap($E, $M)"},
			{"pattern": "fmt.Errorf($F, $$$A)", "rewrite": "errorf($F, $$$B)"},
		}}, []string{"rule 2: the rewrite uses $B, which the pattern does not bind: the pattern binds $F, $$$A"}},
		{"bad pattern in a later rule", map[string]any{"path": "w.go", "rules": []map[string]any{
			{"pattern": "errors.Wrap($E, $M)", "rewrite": "wrap($E, $M)"},
			{"pattern": "fmt.Errorf(", "rewrite": "x"},
		}}, []string{"rule 2: the go pattern", "does not parse"}},
		{"both forms", map[string]any{"path": "w.go", "pattern": "f($A)", "rewrite": "g($A)", "rules": []map[string]any{{"pattern": "h($A)", "rewrite": "k($A)"}}},
			[]string{"either pattern and rewrite", "or rules, not both"}},
		{"no rewrite", map[string]any{"path": "w.go", "pattern": "f($A)"}, []string{"rewrite is missing"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, ev.call(t, "ast_edit", c.args), c.want...)
		})
	}
	if got := ev.read(t, "w.go"); got != wrapGo {
		t.Errorf("staging wrote w.go:\n%s", got)
	}
	// An empty rewrite still deletes.
	ev2 := newEnv(t, map[string]string{"a.py": "print(1)\nkeep()\n"}, structural.Options{})
	wantOK(t, ev2.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "", "path": "a.py"}), "-print(1)", "+\n")
}

// TestEditRulesInOrder: each rule applies to what the one before left, in
// every file any rule matches, and the proposal is one edit.
func TestEditRulesInOrder(t *testing.T) {
	ev := newEnv(t, map[string]string{
		"a.py": "print(x)\nfoo(print(y))\n",
		"b.py": "foo(1)\n",
		"c.py": "nothing()\n",
	}, structural.Options{})
	p, err := ev.e.Stage(context.Background(), ev.fs, structural.EditRequest{Language: "python", Rules: []structural.Rule{
		{Pattern: "print($A)", Rewrite: "log($A)"},
		{Pattern: "log($A)", Rewrite: "log.info($A)"},
		{Pattern: "foo($A)", Rewrite: "bar($A)"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range p.Files {
		got[f.Path] = string(f.New)
	}
	want := map[string]string{"a.py": "log.info(x)\nbar(log.info(y))\n", "b.py": "bar(1)\n"}
	if !reflect.DeepEqual(got, want) || p.ID != "edit_1" || p.Replacements != 6 || len(p.Rules) != 3 {
		t.Errorf("staged %s with %d replacements: %v, want %v", p.ID, p.Replacements, got, want)
	}
	// Edits are replacements of the staged content.
	for _, f := range p.Files {
		if string(syntax.Apply(f.Old, f.Edits)) != string(f.New) {
			t.Errorf("%s: Edits do not make New from Old: %+v", f.Path, f.Edits)
		}
	}
	res := ev.call(t, "ast_edit", map[string]any{"language": "python", "rules": []map[string]any{
		{"pattern": "missing($A)", "rewrite": "x($A)"}, {"pattern": "gone($A)", "rewrite": "y($A)"},
	}})
	wantOK(t, res, "nothing matched the patterns of the 2 rules: no edit was staged")
}

// TestEditSyntaxWarnings: ast_edit refuses a rewrite that leaves a syntax
// error, naming the file and line, and stages nothing; errors the file had
// before, away from the edit, are not the rewrite's. Without
// RefuseSyntaxErrors, Stage stages it with a warning naming the line.
func TestEditSyntaxWarnings(t *testing.T) {
	ev := newEnv(t, map[string]string{
		"a.py":      "def f(x):\n    print(x)\n    return x\n",
		"broken.py": "print(1)\n\ndef g(:\n    pass\n",
		"ok.py":     "print(2)\n",
	}, structural.Options{})
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "log($A", "path": "a.py"})
	wantError(t, res, "the rewrite breaks the syntax of 1 file, so no edit was staged: a.py:2: ", "in `log(x`")
	if got := ev.e.Pending(); len(got) != 0 {
		t.Errorf("pending %v after a refusal", got)
	}
	res = ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "log($A)", "language": "python"})
	wantOK(t, res, "(proposed) 3 replacements in 3 files")
	if strings.Contains(res.AllText(), "warning:") {
		t.Errorf("a clean rewrite (broken.py was broken before, elsewhere) warns:\n%s", res.AllText())
	}
	p, err := ev.e.Stage(context.Background(), ev.fs, structural.EditRequest{Pattern: "return $X", Rewrite: "return ($X", Path: "a.py"})
	if err != nil || len(p.Files) != 1 || len(p.Files[0].SyntaxWarnings) != 1 || p.Files[0].SyntaxWarnings[0].Line != 3 {
		t.Fatalf("stage: %v %+v", err, p)
	}
}

// TestResolveCarriesOverOwnAccept: two edits staged on the same file both
// apply when their changes do not overlap: accepting the first does not
// refuse the second, whose replacements are carried over the first's.
func TestResolveCarriesOverOwnAccept(t *testing.T) {
	const src = "def f(x):\n    print(x)\n    return old(x)\n\ndef g():\n    print(2)\n\ndef h():\n    pass\n"
	ev := newEnv(t, map[string]string{"a.py": src, "b.py": "print(3)\n"}, structural.Options{})
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "log($A)", "language": "python"}), `"edit_1"`, "3 replacements in 2 files")
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "old($A)", "rewrite": "new_implementation($A, strict=True)", "path": "a.py"}), `"edit_2"`)
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "pass", "rewrite": "return None", "path": "a.py"}), `"edit_3"`)
	wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "wrote 3 replacements in 2 files")
	res := ev.call(t, "resolve", map[string]any{"edit_id": "edit_2", "action": "accept"})
	wantOK(t, res, "accepted edit_2: wrote 1 replacement in 1 file", "a.py (1, carried over edit_1, accepted since this edit was staged)")
	res = ev.call(t, "resolve", map[string]any{"edit_id": "edit_3", "action": "accept"})
	wantOK(t, res, "a.py (1, carried over edit_1, edit_2")
	want := "def f(x):\n    log(x)\n    return new_implementation(x, strict=True)\n\ndef g():\n    log(2)\n\ndef h():\n    return None\n"
	if got := ev.read(t, "a.py"); got != want {
		t.Errorf("a.py:\n%s\nwant:\n%s", got, want)
	}
	if got := ev.read(t, "b.py"); got != "log(3)\n" {
		t.Errorf("b.py = %q", got)
	}
}

// TestResolveRefusesOverlap: where the second edit's changes overlap what
// the first wrote, it is refused whole, with the diff it would stage over
// the current content and the advice to run ast_edit again; a change by
// another writer after berth's own accept is refused as before.
func TestResolveRefusesOverlap(t *testing.T) {
	const src = "print(a)\nprint(b)\n"
	ev := newEnv(t, map[string]string{"a.py": src, "b.py": "print(1)\n"}, structural.Options{})
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "log($A)", "path": "a.py"}), `"edit_1"`)
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "print(b)", "rewrite": "print(c)", "language": "python"}), `"edit_2"`)
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "print(a)", "rewrite": "print(z)", "path": "a.py"}), `"edit_3"`)
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "$F(b)", "rewrite": "$F(bb)", "path": "a.py"}), `"edit_4"`)
	wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}))
	before := snapshot(t, ev.dir)
	res := ev.call(t, "resolve", map[string]any{"edit_id": "edit_2", "action": "accept"})
	wantError(t, res, "edit_2 was refused and dropped, nothing was written",
		"a.py was changed by edit_1, accepted since this edit was staged, at line 2, where this edit changes line 2",
		"Run ast_edit again with the same input", "(nothing in a.py: the rules no longer match anything there)")
	if after := snapshot(t, ev.dir); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused accept wrote files (b.py is unchanged, but the edit is all or nothing)")
	}
	res = ev.call(t, "resolve", map[string]any{"edit_id": "edit_4", "action": "accept"})
	wantError(t, res, "edit_4 was refused", "it would now stage:\n--- a/a.py\n+++ b/a.py\n", "-log(b)\n+log(bb)\n")
	// Another writer after berth's accept: refused as a change after staging.
	if err := os.WriteFile(filepath.Join(ev.dir, "a.py"), []byte("log(a)\nlog(b)\n# edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_3", "action": "accept"}), "a.py changed after staging", "nothing was written")
}
