package syntax

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	sitter "github.com/tree-sitter/go-tree-sitter"
)

func mustLang(t *testing.T, id string) *Language {
	t.Helper()
	l, err := Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFlattenMatchesBinding guards the C declarations in cparse.go, which
// mirror go-tree-sitter v0.25.0's api.h: the flattened tree must equal what
// the binding's own Node API reports, node for node.
func TestFlattenMatchesBinding(t *testing.T) {
	srcs := map[string]string{
		"go":         "package p\n\nfunc f(a, b int) int { /* c */ return a + b }\n",
		"python":     "def f(x):\n    return [i for i in x if i]\n",
		"javascript": "const f = async (a) => { await g(a, `t${a}`); };\n",
		"c":          "int main(void) { char *p = malloc(3); return p ? 0 : 1 }\n",
	}
	for id, src := range srcs {
		l := mustLang(t, id)
		ft, err := parse(context.Background(), l, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		p := sitter.NewParser()
		if err := p.SetLanguage(l.Grammar); err != nil {
			t.Fatal(err)
		}
		bt := p.Parse([]byte(src), nil)
		var want []string
		var walk func(n *sitter.Node)
		walk = func(n *sitter.Node) {
			want = append(want, fmt.Sprintf("%s %v %d-%d %v-%v named=%v extra=%v missing=%v kids=%d",
				n.Kind(), n.KindId(), n.StartByte(), n.EndByte(), n.StartPosition(), n.EndPosition(), n.IsNamed(), n.IsExtra(), n.IsMissing(), n.ChildCount()))
			for i := uint(0); i < n.ChildCount(); i++ {
				walk(n.Child(i))
			}
		}
		walk(bt.RootNode())
		bt.Close()
		p.Close()
		var got []string
		for i := range ft.nodes {
			n := &ft.nodes[i]
			got = append(got, fmt.Sprintf("%s %v %d-%d %v-%v named=%v extra=%v missing=%v kids=%d",
				l.kindName(n.kind), n.kind, n.start, n.end,
				sitter.Point{Row: uint(n.srow), Column: uint(n.scol)}, sitter.Point{Row: uint(n.erow), Column: uint(n.ecol)},
				n.named(), n.extra(), n.missing(), n.nchild))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s: the direct C path disagrees with go-tree-sitter's Node API; the declarations in cparse.go no longer match the runtime (was go-tree-sitter upgraded from v0.25.0?)\n got:\n%s\nwant:\n%s",
				id, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestLanguageTable(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"a/b/main.go", "go"}, {"x.PY", "python"}, {"x.tsx", "tsx"}, {"x.ts", "typescript"},
		{"x.h", "c"}, {"x.hpp", "cpp"}, {"Gemfile", "ruby"}, {"x.cs", "c_sharp"}, {"x.kt", "kotlin"},
		{"x.yml", "yaml"}, {"x.unknown", ""}, {"README", ""},
	} {
		got := ""
		if l := LanguageForPath(c.path); l != nil {
			got = l.ID
		}
		if got != c.want {
			t.Errorf("LanguageForPath(%q) = %q, want %q", c.path, got, c.want)
		}
	}
	for _, alias := range []string{"golang", "JS", "csharp", "c++", "sh"} {
		if _, err := Lookup(alias); err != nil {
			t.Errorf("Lookup(%q): %v", alias, err)
		}
	}
	if _, err := Lookup("cobol"); err == nil || !strings.Contains(err.Error(), "python") {
		t.Errorf("Lookup(cobol) = %v, want an error listing the languages", err)
	}
	if len(IDs()) < 20 {
		t.Errorf("only %d languages bundled: %v", len(IDs()), IDs())
	}
	// Register: a grammar from elsewhere under a new id works; clashes fail.
	goLang := mustLang(t, "go")
	if err := Register(Language{ID: "go", Grammar: goLang.Grammar}); err == nil {
		t.Error("registering a duplicate id succeeded")
	}
	if err := Register(Language{ID: "nogrammar"}); err == nil {
		t.Error("registering without a grammar succeeded")
	}
	if err := Register(Language{ID: "go-runtime-test", Extensions: []string{".gort"}, Expando: expandoMu, Grammar: goLang.Grammar}); err != nil {
		t.Fatal(err)
	}
	l := LanguageForPath("x.gort")
	if l == nil || l.ID != "go-runtime-test" {
		t.Fatalf("registered language not found by extension: %v", l)
	}
	ms, err := Search(context.Background(), l, "package $P", []byte("package main\n"))
	if err != nil || len(ms) != 1 || ms[0].Captures["P"].Text != "main" {
		t.Fatalf("search with a registered language: %v %+v", err, ms)
	}
}

func TestInvalidPatterns(t *testing.T) {
	for _, c := range []struct{ lang, pattern, want string }{
		{"go", "", "empty"},
		{"go", "   \n ", "empty"},
		{"javascript", "$$$", "standalone $$$"},
		{"python", "$$$ARGS", "standalone $$$"},
		{"javascript", "foo(); bar()", "separate nodes"},
		{"python", "def f(:", "does not parse"},
		{"go", "func (", "does not parse"},
		{"c", "if (", "statement ("},
		{"rust", "fn $F(", "line 1 column"},
	} {
		_, err := Compile(mustLang(t, c.lang), c.pattern)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%s, %q) = %v, want an error containing %q", c.lang, c.pattern, err, c.want)
		}
	}
	if _, err := Compile(nil, "x"); err == nil {
		t.Error("Compile(nil) succeeded")
	}
}

func TestLadder(t *testing.T) {
	for _, c := range []struct{ lang, pattern, ctx, kind string }{
		{"go", "fmt.Errorf($$$)", "statement", "call_expression"},
		{"go", "func $F($$$) error { $$$ }", "declaration", "function_declaration"},
		{"go", "package $P", "declaration", "package_clause"},
		{"java", "void $M() { $$$ }", "bare", "method_declaration"},
		{"c", "malloc($X)", "expression", "call_expression"},
		{"c", "free($P);", "statement", "expression_statement"},
		{"c", "int $F($$$) { $$$ }", "declaration", "function_definition"},
		{"python", "print($A)", "bare", "call"},
		{"javascript", "foo(bar);", "bare", "expression_statement"},
		{"javascript", "foo(bar)", "bare", "call_expression"},
		{"java", "foo($A)", "expression", "method_invocation"},
		{"rust", "$X.unwrap()", "statement", "call_expression"},
		{"cpp", "double area() const override { return $E; }", "member", "function_definition"},
	} {
		l := mustLang(t, c.lang)
		p, err := Compile(l, c.pattern)
		if err != nil {
			t.Errorf("%s %q: %v", c.lang, c.pattern, err)
			continue
		}
		if p.Context() != c.ctx || l.kindName(p.root.kind) != c.kind {
			t.Errorf("%s %q: context %s kind %s, want %s %s", c.lang, c.pattern, p.Context(), l.kindName(p.root.kind), c.ctx, c.kind)
		}
	}
}

func TestPreprocess(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"$A", "µA"}, {"$$$", "µµµ"}, {"$$$ARGS", "µµµARGS"}, {"$$A", "µµA"}, {"$_", "µ_"},
		{"$a", "$a"}, {"$1", "$1"}, {"$", "$"}, {"$$", "$$"}, {"f($X, $$$)", "f(µX, µµµ)"},
	} {
		if got := preprocess('µ', c.in); got != c.want {
			t.Errorf("preprocess(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestParseLimits(t *testing.T) {
	l := mustLang(t, "go")
	big := make([]byte, MaxSourceBytes+1)
	if _, err := Parse(context.Background(), l, big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized source: %v, want ErrTooLarge", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Parse(ctx, l, []byte("package p\n")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}
	// A budget that has already run out stops the parse at its first
	// progress check.
	src := []byte("package p\n" + strings.Repeat("func f() { a := b + c * d; _ = a }\n", 20000))
	if _, err := parseWithin(context.Background(), l, src, time.Nanosecond); !errors.Is(err, ErrParseBudget) {
		t.Errorf("exhausted budget: %v, want ErrParseBudget", err)
	}
	// The parser that was stopped is reset and reused correctly.
	ms, err := Search(context.Background(), l, "a := $B", src[:200])
	if err != nil || len(ms) == 0 {
		t.Errorf("search after a stopped parse: %v, %d matches", err, len(ms))
	}
}

// TestConcurrentSearch runs searches in many goroutines (run with -race):
// parsers come from the pool, one per goroutine at a time.
func TestConcurrentSearch(t *testing.T) {
	langs := map[string][2]string{
		"go":     {"fmt.Println($A)", "package p\nfunc f() { fmt.Println(1); fmt.Println(g(2)) }\n"},
		"python": {"print($A)", "print(1)\nprint(g(2))\n"},
		"rust":   {"println!($$$)", "fn main() { println!(\"a\"); println!(\"b\"); }\n"},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 24 {
		for id, c := range langs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ms, err := Search(context.Background(), mustLangNoT(id), c[0], []byte(c[1]))
				if err != nil {
					errs <- err
					return
				}
				if len(ms) != 2 {
					errs <- fmt.Errorf("%s run %d: %d matches, want 2", id, i, len(ms))
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func mustLangNoT(id string) *Language {
	l, err := Lookup(id)
	if err != nil {
		panic(err)
	}
	return l
}

func TestAllGrammarsParse(t *testing.T) {
	for _, l := range Languages() {
		tr, err := Parse(context.Background(), l, []byte("x"))
		if err != nil || tr.NodeCount() == 0 {
			t.Errorf("%s: %v", l.ID, err)
		}
	}
}

func TestRewriteRules(t *testing.T) {
	src := []byte("foo(a, b)\n")
	l := mustLang(t, "javascript")
	ms, err := Search(context.Background(), l, "foo($A, $B)", src)
	if err != nil || len(ms) != 1 {
		t.Fatal(err, ms)
	}
	for _, c := range []struct{ tmpl, want string }{
		{"bar($B, $A)", "bar(b, a)\n"},
		{"bar($A, $UNKNOWN, $_)", "bar(a, , )\n"},
		{"$$$ $lower $1 $", "$$$ $lower $1 $\n"},
		{"log(\"$A\")", "log(\"a\")\n"},
	} {
		edits, err := Rewrite(src, ms, c.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(Apply(src, edits)); got != c.want {
			t.Errorf("Rewrite(%q) = %q, want %q", c.tmpl, got, c.want)
		}
	}
	if _, err := Rewrite([]byte("other"), ms, "x"); err == nil {
		t.Error("Rewrite with matches from other content succeeded")
	}
}
