package syntax

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestTemplateVars(t *testing.T) {
	for _, c := range []struct {
		tmpl string
		want []string
	}{
		{"bar($B, $A)", []string{"B", "A"}},
		{"f($$$ARGS, $$X, $A, $A)", []string{"ARGS", "X", "A"}},
		{"$$$ $lower $1 $ $_", []string{"_"}},
		{`log("enter $F")`, []string{"F"}},
		{"no vars", nil},
	} {
		if got := TemplateVars(c.tmpl); !reflect.DeepEqual(got, c.want) {
			t.Errorf("TemplateVars(%q) = %q, want %q", c.tmpl, got, c.want)
		}
	}
}

func TestPatternVars(t *testing.T) {
	for _, c := range []struct {
		lang, pattern string
		vars          []string
		inert         []InertVar
	}{
		{"go", "errors.Wrap($E, $$$ARGS)", []string{"E", "ARGS"}, nil},
		{"go", "$A == $A && $_ != $_B", []string{"A"}, nil},
		{"go", `fmt.Errorf("$MSG: %v", $E)`, []string{"E"}, []InertVar{{Var: "$MSG", Leaf: "$MSG: %v", InString: true}}},
		{"python", `print(f"$X and $Y", $Z)`, []string{"Z"}, []InertVar{{Var: "$X", Leaf: "$X and $Y", InString: true}, {Var: "$Y", Leaf: "$X and $Y", InString: true}}},
		{"javascript", "obj.on$EVENT($H)", []string{"H"}, []InertVar{{Var: "$EVENT", Leaf: "on$EVENT"}}},
		{"javascript", `log("$A")`, []string{"A"}, nil}, // the whole string's content is the variable
	} {
		p, err := Compile(mustLang(t, c.lang), c.pattern)
		if err != nil {
			t.Fatalf("%s %q: %v", c.lang, c.pattern, err)
		}
		if got := p.Vars(); !reflect.DeepEqual(got, c.vars) && !(len(got) == 0 && len(c.vars) == 0) {
			t.Errorf("%q: Vars() = %q, want %q", c.pattern, got, c.vars)
		}
		if got := p.Inert(); !reflect.DeepEqual(got, c.inert) {
			t.Errorf("%q: Inert() = %+v, want %+v", c.pattern, got, c.inert)
		}
	}
}

// TestNewTemplate: a rewrite that uses a variable nobody binds, or a
// transform that cannot work, is refused before anything is rewritten,
// with a message naming what the pattern binds.
func TestNewTemplate(t *testing.T) {
	goLang := mustLang(t, "go")
	p, err := Compile(goLang, "errors.Wrap($E, $$$ARGS)")
	if err != nil {
		t.Fatal(err)
	}
	none, err := Compile(goLang, "panic(nil)")
	if err != nil {
		t.Fatal(err)
	}
	inString, err := Compile(goLang, `fmt.Errorf("$MSG: %v", $E)`)
	if err != nil {
		t.Fatal(err)
	}
	rx := func(src, re, by string) Replace { return Replace{Source: src, Replace: re, By: by} }
	for _, c := range []struct {
		name       string
		p          *Pattern
		tmpl       string
		transforms map[string]Replace
		want       string // "" means accepted
	}{
		{"bound", p, "fmt.Errorf($$$ARGS, $E)", nil, ""},
		{"unbound", p, "errors.Wrap(err, $MSG)", nil, "the rewrite uses $MSG, which the pattern does not bind: the pattern binds $E, $$$ARGS"},
		{"two unbound", p, "f($A, $B)", nil, "uses $A and $B, which"},
		{"non-binding wildcard", p, "f($_)", nil, "uses $_, which the pattern does not bind"},
		{"nothing bound", none, "panic($X)", nil, "the pattern binds no variable"},
		{"bound only inside a string", inString, `fmt.Errorf("$MSG: %w", $E)`, nil, `($MSG is written inside a string literal in the pattern, "$MSG: %v", where a metavariable binds nothing`},
		{"transform defines it", p, "f($NEW)", map[string]Replace{"NEW": rx("$E", "x", "y")}, ""},
		{"transform key with $", p, "f($NEW)", map[string]Replace{"$NEW": rx("$$$ARGS", "x", "y")}, ""},
		{"unbound names the transforms", p, "f($OTHER)", map[string]Replace{"NEW": rx("$E", "x", "y")}, "the pattern binds $E, $$$ARGS; the transforms define $NEW"},
		{"source unbound", p, "f($NEW)", map[string]Replace{"NEW": rx("$MSG", "x", "y")}, "transform NEW: its source $MSG is not bound"},
		{"source not a variable", p, "f($NEW)", map[string]Replace{"NEW": rx("msg", "x", "y")}, `source "msg" is not a variable`},
		{"bad regexp", p, "f($NEW)", map[string]Replace{"NEW": rx("$E", "(", "y")}, `replace "(" is not a valid regular expression (Go RE2 syntax): missing closing )`},
		{"empty regexp", p, "f($NEW)", map[string]Replace{"NEW": rx("$E", "", "y")}, "replace is empty"},
		{"clash", p, "f($E)", map[string]Replace{"E": rx("$E", "x", "y")}, "the pattern binds $E already"},
		{"bad name", p, "f($E)", map[string]Replace{"new": rx("$E", "x", "y")}, `transform "new"`},
		{"chain", p, "f($B)", map[string]Replace{"A": rx("$E", "x", "y"), "B": rx("$A", "y", "z")}, ""},
		{"cycle", p, "f($B)", map[string]Replace{"A": rx("$B", "x", "y"), "B": rx("$A", "y", "z")}, "in a cycle"},
	} {
		_, err := NewTemplate(c.p, c.tmpl, c.transforms)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestTemplateTransforms: a transform changes part of a captured string,
// with regexp groups, chained, over a multi capture too.
func TestTemplateTransforms(t *testing.T) {
	src := []byte(`package p

func f() error {
	return fmt.Errorf("open %s: %v", name, err)
}
`)
	l := mustLang(t, "go")
	p, err := Compile(l, "fmt.Errorf($MSG, $$$ARGS)")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := p.Search(context.Background(), src)
	if err != nil || len(ms) != 1 {
		t.Fatal(err, ms)
	}
	for _, c := range []struct {
		tmpl       string
		transforms map[string]Replace
		want       string
	}{
		{"fmt.Errorf($W, $$$ARGS)", map[string]Replace{"W": {Source: "$MSG", Replace: "%v", By: "%w"}}, `fmt.Errorf("open %s: %w", name, err)`},
		{"fmt.Errorf($W, $$$ARGS)", map[string]Replace{"W": {Source: "$MSG", Replace: `open (%\w)`, By: "read ${1}x"}}, `fmt.Errorf("read %sx: %v", name, err)`},
		{"fmt.Errorf($B, $$$ARGS)", map[string]Replace{
			"A": {Source: "$MSG", Replace: "%v", By: "%w"},
			"B": {Source: "$A", Replace: "^\"open ", By: `"opening `},
		}, `fmt.Errorf("opening %s: %w", name, err)`},
		{"wrap($R)", map[string]Replace{"R": {Source: "$$$ARGS", Replace: `\s*,\s*`, By: " | "}}, "wrap(name | err)"},
		{"f($D)", map[string]Replace{"D": {Source: "$MSG", Replace: "[%:]", By: ""}}, `f("open s v")`},
	} {
		tm, err := NewTemplate(p, c.tmpl, c.transforms)
		if err != nil {
			t.Fatal(err)
		}
		edits, err := tm.Rewrite(src, ms)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(Apply(src, edits)); !strings.Contains(got, "\treturn "+c.want+"\n") {
			t.Errorf("%s with %v:\n%s\nwant %s", c.tmpl, c.transforms, got, c.want)
		}
	}
	// Without transforms a Template rewrites as Rewrite does.
	tm, err := NewTemplate(p, "errors.New($MSG)", nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tm.Rewrite(src, ms)
	b, _ := Rewrite(src, ms, "errors.New($MSG)")
	if !reflect.DeepEqual(a, b) {
		t.Errorf("Template.Rewrite %v, Rewrite %v", a, b)
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct {
		lang, src string
		want      []string // "line:col missing" per error
	}{
		{"python", "print(1)\n", nil},
		{"python", "x = (1,\n", []string{"1:0 "}},
		{"go", "package p\nfunc f() { g(1 }\n", []string{"2:14 )"}},
		{"javascript", "f(a b);\n", []string{"1:4 "}},
	} {
		tr, err := Parse(context.Background(), mustLang(t, c.lang), []byte(c.src))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range tr.SyntaxErrors() {
			got = append(got, fmt.Sprintf("%d:%d %s", e.Start.Line+1, e.Start.Column, e.Missing))
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %q: errors %q, want %q", c.lang, c.src, got, c.want)
		}
		if tr.HasError() != (len(c.want) > 0) {
			t.Errorf("%s %q: HasError %v", c.lang, c.src, tr.HasError())
		}
	}
}
