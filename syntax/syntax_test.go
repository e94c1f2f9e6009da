package syntax

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
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
		"go":         "package p\n\n// é\r\nfunc f(a, b int) int {\n\t/* c */ return a + \"ü\" }\n",
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
				sitterPoint(ft.point(n.start)), sitterPoint(ft.point(n.end)),
				n.named(), n.extra(), n.missing(), n.nchild))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s: the direct C path disagrees with go-tree-sitter's Node API; the declarations in cparse.go no longer match the runtime (was go-tree-sitter upgraded from v0.25.0?)\n got:\n%s\nwant:\n%s",
				id, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func sitterPoint(p Point) sitter.Point {
	return sitter.Point{Row: uint(p.Line), Column: uint(p.Column)}
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
	forgetAtEnd(t, "go-runtime-test")
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

// TestParserReuse parses sources of many sizes with one Parser, each parse
// reusing the last one's memory, and checks every match against a parse into
// fresh memory; a stale tree is refused.
func TestParserReuse(t *testing.T) {
	l := mustLang(t, "go")
	p, err := Compile(l, "fmt.Println($A)")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var srcs [][]byte
	for n := 1; n < 400; n = n*3/2 + 1 {
		var b strings.Builder
		b.WriteString("package p\n\nfunc f() {\n")
		for i := range n {
			fmt.Fprintf(&b, "\tfmt.Println(%d) // é\n\tg(%d)\n", i, i)
		}
		b.WriteString("}\n")
		srcs = append(srcs, []byte(b.String()))
	}
	want := make([]string, len(srcs))
	for i, src := range srcs {
		ms, err := p.Search(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = showMatches(ms)
	}
	var ps Parser
	defer ps.Close()
	var stale *Tree
	for round := range 3 {
		for _, i := range []int{len(srcs) - 1, 0, len(srcs) / 2, 1, len(srcs) - 2} {
			tr, err := ps.Parse(ctx, l, srcs[i])
			if err != nil {
				t.Fatal(err)
			}
			if stale != nil {
				if _, err := p.Match(ctx, stale); err == nil || !strings.Contains(err.Error(), "stale") {
					t.Fatalf("matching a tree its Parser has reused: err = %v, want a stale-tree error", err)
				}
			}
			ms, err := p.Match(ctx, tr)
			if err != nil {
				t.Fatal(err)
			}
			stale = tr
			if got := showMatches(ms); got != want[i] {
				t.Fatalf("round %d source %d: after reuse the matches differ:\n got %.300s\nwant %.300s", round, i, got, want[i])
			}
		}
	}
}

// input is a source to parse in the tests.
type input struct {
	name string
	lang *Language
	src  []byte
}

// TestFlattenFastMatchesCursor holds the flattener that walks the runtime's
// subtrees directly (mirroring its internal layouts) to the one that goes
// through the public cursor API, node for node, on every corpus case and a
// sample of Go's and Python's own sources, whole and cut in half (so ERROR
// and MISSING nodes are covered too). A failure means the layouts in
// cparse.go no longer match the tree-sitter runtime.
func TestFlattenFastMatchesCursor(t *testing.T) {
	var ins []input
	cases, _ := filepath.Glob("testdata/corpus/*.txtar")
	for _, p := range cases {
		c := readCase(t, p)
		l, err := Lookup(c.header["lang"])
		if err != nil {
			continue
		}
		ins = append(ins, input{p, l, []byte(c.sections["src"])})
	}
	sample := func(root, ext string, every int) {
		i := 0
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ext) {
				return nil
			}
			if i++; i%every != 0 {
				return nil
			}
			src, err := os.ReadFile(p)
			if err != nil || len(src) > 1<<20 {
				return nil
			}
			ins = append(ins, input{p, LanguageForPath(p), src})
			return nil
		})
	}
	sample(filepath.Join(runtime.GOROOT(), "src"), ".go", 60)
	if py, _ := filepath.Glob("/usr/lib/python3*"); len(py) > 0 {
		sample(py[0], ".py", 20)
	}
	n := len(ins)
	for _, in := range ins[:n] {
		ins = append(ins, input{in.name + " (first half)", in.lang, in.src[:len(in.src)/2]})
	}
	ctx := context.Background()
	nodes := 0
	for _, in := range ins {
		if in.lang == nil {
			continue
		}
		fast, err := parse(ctx, in.lang, in.src)
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		ref, err := parseReference(ctx, in.lang, in.src)
		if err != nil {
			t.Fatalf("%s: %v", in.name, err)
		}
		if !slices.Equal(fast.nodes, ref.nodes) {
			for i := range min(len(fast.nodes), len(ref.nodes)) {
				if fast.nodes[i] != ref.nodes[i] {
					t.Fatalf("%s (%s): node %d of %d differs: direct walk %+v (%s), cursor %+v (%s); the layouts mirrored in cparse.go no longer match the tree-sitter runtime (was go-tree-sitter upgraded from v0.25.0?)",
						in.name, in.lang.ID, i, len(ref.nodes), fast.nodes[i], in.lang.kindName(fast.nodes[i].kind), ref.nodes[i], in.lang.kindName(ref.nodes[i].kind))
				}
			}
			t.Fatalf("%s: the direct walk gives %d nodes, the cursor %d", in.name, len(fast.nodes), len(ref.nodes))
		}
		nodes += len(ref.nodes)
	}
	t.Logf("%d sources, %d nodes", len(ins), nodes)
}

// TestLiterals checks the texts a search may prefilter files on: named
// leaves, and keywords where the grammar spells them verbatim.
func TestLiterals(t *testing.T) {
	for _, c := range []struct {
		lang, pattern string
		want          []string
	}{
		{"go", "return nil, $E", []string{"return", "nil"}},
		{"go", "fmt.Errorf($F, $$$A)", []string{"Errorf", "fmt"}},
		{"go", "$X.Lock()", []string{"Lock"}},
		{"go", "defer $X.Unlock()", []string{"Unlock", "defer"}},
		{"python", "raise $E($$$)", []string{"raise"}},
		{"python", "def $F(self): $$$", []string{"self", "def"}},
		{"python", "print($$$)", []string{"print"}},
		{"javascript", "await $X", []string{"await"}},
		{"php", "function $F() { $$$ }", nil}, // PHP keywords are case-insensitive
		{"bash", "case $X in $$$ esac", nil},  // bash's "esac" can come from its scanner
	} {
		p, err := Compile(mustLang(t, c.lang), c.pattern)
		if err != nil {
			t.Fatalf("%s %q: %v", c.lang, c.pattern, err)
		}
		if got := p.Literals(); !slices.Equal(got, c.want) {
			t.Errorf("%s %q: Literals() = %q, want %q", c.lang, c.pattern, got, c.want)
		}
	}
}

// TestParseRegions parses with regions too small for the tree (so part or
// all of it falls back to libc's heap mid-parse) and with no region at all
// (every region taken), and checks each tree against a normal parse.
func TestParseRegions(t *testing.T) {
	ctx := context.Background()
	var srcs []input
	for _, p := range []string{"syntax_test.go", "cparse.go", "match.go"} {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, input{p, mustLang(t, "go"), src})
		srcs = append(srcs, input{p + " (first half)", mustLang(t, "go"), src[:len(src)/2]})
	}
	check := func(what string, cp *cparser) {
		t.Helper()
		for _, in := range srcs {
			want, err := parse(ctx, in.lang, in.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseInto(ctx, cp, in.lang, in.src, ParseTimeout, nil, false)
			if err != nil {
				t.Fatalf("%s, %s: %v", what, in.name, err)
			}
			if !slices.Equal(got.nodes, want.nodes) {
				t.Fatalf("%s, %s: the tree differs from a normal parse", what, in.name)
			}
		}
	}

	cp := getParser()
	if cp.region == nil {
		t.Skip("no parse regions (address space reservation refused)")
	}
	for _, n := range []int{0, 64, 4 << 10, 64 << 10, 1 << 20} {
		cp.limitRegion(n)
		check(fmt.Sprintf("region of %d bytes", n), cp)
	}
	cp.limitRegion(1 << 62)
	putParser(cp)

	// Take parsers until the regions run out; the next parses use libc.
	var held []*cparser
	defer func() {
		for _, p := range held {
			putParser(p)
		}
	}()
	for range 2 * regionCount {
		p := getParser()
		held = append(held, p)
		if p.region == nil {
			check("no region", p)
			return
		}
	}
	t.Fatalf("%d parsers all had a region; the pool hands out at most %d", len(held), regionCount)
}

// showMatches prints matches with their captures' contents (not pointers),
// captures in name order.
func showMatches(ms []Match) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%v %q", m.Range, m.Text)
		names := make([]string, 0, len(m.Captures))
		for n := range m.Captures {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&b, " %s=%+v", n, *m.Captures[n])
		}
		b.WriteString("\n")
	}
	return b.String()
}
