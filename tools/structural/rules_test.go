package structural_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

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
		if string(applyEdits(f)) != string(f.New) {
			t.Errorf("%s: Edits do not make New from Old: %+v", f.Path, f.Edits)
		}
	}
	res := ev.call(t, "ast_edit", map[string]any{"language": "python", "rules": []map[string]any{
		{"pattern": "missing($A)", "rewrite": "x($A)"}, {"pattern": "gone($A)", "rewrite": "y($A)"},
	}})
	wantOK(t, res, "nothing matched the patterns of the 2 rules: no edit was staged")
}

func applyEdits(f structural.FileEdit) []byte {
	out := append([]byte(nil), f.Old...)
	for i := len(f.Edits) - 1; i >= 0; i-- {
		e := f.Edits[i]
		out = append(out[:e.StartByte], append([]byte(e.Text), out[e.EndByte:]...)...)
	}
	return out
}

// TestEditSyntaxWarnings: a rewrite that leaves a syntax error is staged
// with a warning naming the file and line; errors the file had before, away
// from the edit, are not the rewrite's.
func TestEditSyntaxWarnings(t *testing.T) {
	ev := newEnv(t, map[string]string{
		"a.py":      "def f(x):\n    print(x)\n    return x\n",
		"broken.py": "print(1)\n\ndef g(:\n    pass\n",
		"ok.py":     "print(2)\n",
	}, structural.Options{})
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "log($A", "path": "a.py"})
	wantOK(t, res, "(proposed) 1 replacement in 1 file", "warning: a.py:2: the rewritten code has a syntax error here: ")
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
