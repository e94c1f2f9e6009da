package structural_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
	"berth.dev/berth/syntax"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/structural"
)

// env is a temporary workspace with the structural tools registered.
type env struct {
	dir string
	fs  sandbox.FS
	e   *structural.Engine
	r   *tools.Registry
}

func newEnv(t *testing.T, files map[string]string, opts structural.Options) *env {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		write(t, dir, name, content)
	}
	fsys, err := dirfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := structural.NewEngine(opts)
	r := tools.NewRegistry()
	structural.Register(r, fsys, e)
	return &env{dir: dir, fs: fsys, e: e, r: r}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *env) call(t *testing.T, tool string, args any) *tools.Result {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.r.Call(context.Background(), tools.SurfaceDefault, tool, b)
	if err != nil {
		t.Fatalf("%s %s: call error %v", tool, b, err)
	}
	return res
}

func (e *env) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// snapshot returns every file's content under dir.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func wantError(t *testing.T, res *tools.Result, substrs ...string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got %q", res.AllText())
	}
	for _, s := range substrs {
		if !strings.Contains(res.AllText(), s) {
			t.Errorf("error %q does not mention %q", res.AllText(), s)
		}
	}
}

func wantOK(t *testing.T, res *tools.Result, substrs ...string) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", res.AllText())
	}
	for _, s := range substrs {
		if !strings.Contains(res.AllText(), s) {
			t.Errorf("result %q does not contain %q", res.AllText(), s)
		}
	}
}

// pos is a match as "file:line:col-line:col text".
func pos(m structural.FileMatch) string {
	return fmt.Sprintf("%s:%d:%d-%d:%d %s", m.File, m.StartLine, m.StartCol, m.EndLine, m.EndCol, m.Text)
}

const goMain = `package main

import "fmt"

func main() {
	err := fmt.Errorf("bad %d", 1)
	fmt.Println("fmt.Errorf(x)") // fmt.Errorf(y)
	_ = fmt.Errorf(
		"wrapped: %w",
		err,
	)
}
`

const pyA = `def f(x):
    if x is not None:
        x.close()
    print(x)
    print("print(x)")  # print(x)
    return x == x and x == y
`

const jsApp = `function go(a) {
  console.log(a);
  // console.log(b);
  const s = "console.log(c)";
  console.log(
    a, s);
}
`

const rsLib = `fn main() {
    let v = vec![1, 2];
    println!("{}", v.len());
    let x = v.iter().map(|x| x * 2).collect::<Vec<_>>();
}
`

func workspace() map[string]string {
	return map[string]string{
		"go/main.go":            goMain,
		"go/other.go":           "package main\n\nfunc other() { println(\"none\") }\n",
		"py/a.py":               pyA,
		"web/app.js":            jsApp,
		"rs/lib.rs":             rsLib,
		"notes.txt":             "fmt.Errorf(\"text file\")\n",
		".gitignore":            "build/\n*.gen.go\n!keep.gen.go\n",
		"build/out.go":          "package b\n\nvar e = fmt.Errorf(\"build\")\n",
		"z.gen.go":              "package z\n\nvar e = fmt.Errorf(\"gen\")\n",
		"keep.gen.go":           "package z\n\nvar e = fmt.Errorf(\"keep\")\n",
		"sub/.gitignore":        "local.go\n",
		"sub/local.go":          "package sub\n\nvar e = fmt.Errorf(\"local\")\n",
		"sub/shared.go":         "package sub\n\nvar e = fmt.Errorf(\"shared\")\n",
		".git/x.go":             "package git\n\nvar e = fmt.Errorf(\"git\")\n",
		"node_modules/dep/m.js": "console.log(1)\n",
	}
}

func TestSearchLanguages(t *testing.T) {
	ev := newEnv(t, workspace(), structural.Options{})
	ctx := context.Background()
	tests := []struct {
		name, pattern, lang, path string
		want                      []string
		captures                  []map[string]string
	}{
		{"go multi-arg call, strings and comments never match", "fmt.Errorf($$$)", "go", "", []string{
			`go/main.go:6:8-6:31 fmt.Errorf("bad %d", 1)`,
			"go/main.go:8:5-11:2 fmt.Errorf(\n\t\t\"wrapped: %w\",\n\t\terr,\n\t)",
			`keep.gen.go:3:8-3:26 fmt.Errorf("keep")`,
			`sub/shared.go:3:8-3:28 fmt.Errorf("shared")`,
		}, nil},
		{"go in a subdirectory", "fmt.Errorf($A, $B)", "go", "go", []string{
			`go/main.go:6:8-6:31 fmt.Errorf("bad %d", 1)`,
			"go/main.go:8:5-11:2 fmt.Errorf(\n\t\t\"wrapped: %w\",\n\t\terr,\n\t)",
		}, []map[string]string{{"A": `"bad %d"`, "B": "1"}, {"A": `"wrapped: %w"`, "B": "err"}}},
		{"python call, a string argument is code, a comment is not", "print($A)", "python", "", []string{
			"py/a.py:4:4-4:12 print(x)",
			`py/a.py:5:4-5:21 print("print(x)")`,
		}, []map[string]string{{"A": "x"}, {"A": `"print(x)"`}}},
		{"python repeated metavariable", "$A == $A", "py", "py/a.py", []string{
			"py/a.py:6:11-6:17 x == x",
		}, nil},
		{"javascript, language inferred from the file", "console.log($$$ARGS)", "", "web/app.js", []string{
			"web/app.js:2:2-2:16 console.log(a)",
			"web/app.js:5:2-6:9 console.log(\n    a, s)",
		}, []map[string]string{{"ARGS": "a"}, {"ARGS": "a, s"}}},
		{"rust macro-free call chain", "$V.iter()", "rust", "", []string{
			"rs/lib.rs:4:12-4:20 v.iter()",
		}, nil},
		{"node_modules is searched (only .git and .gitignore'd paths are skipped)", "console.log($X)", "javascript", "", []string{
			"node_modules/dep/m.js:1:0-1:14 console.log(1)",
			"web/app.js:2:2-2:16 console.log(a)",
		}, nil},
		{"absolute path under the workspace", "print($A)", "", ev.dir + "/py/a.py", []string{
			"py/a.py:4:4-4:12 print(x)",
			`py/a.py:5:4-5:21 print("print(x)")`,
		}, nil},
		{"an explicit ignored file is searched", "fmt.Errorf($$$)", "", "z.gen.go", []string{
			`z.gen.go:3:8-3:25 fmt.Errorf("gen")`,
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := ev.e.Search(ctx, ev.fs, structural.SearchRequest{Pattern: tt.pattern, Language: tt.lang, Path: tt.path})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range res.Matches {
				got = append(got, pos(m))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("matches\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if res.Total != len(tt.want) || res.Truncated {
				t.Errorf("total %d truncated %v, want %d false", res.Total, res.Truncated, len(tt.want))
			}
			for i, c := range tt.captures {
				if i < len(res.Matches) && !reflect.DeepEqual(res.Matches[i].Captures, c) {
					t.Errorf("match %d captures %v, want %v", i, res.Matches[i].Captures, c)
				}
			}
		})
	}
}

func TestSearchIgnoredCounted(t *testing.T) {
	ev := newEnv(t, workspace(), structural.Options{})
	res, err := ev.e.Search(context.Background(), ev.fs, structural.SearchRequest{Pattern: "fmt.Errorf($$$)", Language: "go"})
	if err != nil {
		t.Fatal(err)
	}
	// build/ (a directory), z.gen.go and sub/local.go; .git is skipped, not counted.
	if res.Skipped[structural.SkipIgnored] != 3 {
		t.Errorf("ignored %d, want 3 (%v)", res.Skipped[structural.SkipIgnored], res.Skipped)
	}
	// go/main.go, go/other.go, keep.gen.go, sub/shared.go
	if res.FilesSearched != 4 || res.Files != 3 {
		t.Errorf("searched %d files, %d with matches; want 4 and 3", res.FilesSearched, res.Files)
	}
}

func TestMaxResults(t *testing.T) {
	files := map[string]string{}
	for i := range 5 {
		var b strings.Builder
		b.WriteString("package p\n\nfunc f() {\n")
		for j := range 4 {
			fmt.Fprintf(&b, "\tg(%d, %d)\n", i, j)
		}
		b.WriteString("}\n")
		files[fmt.Sprintf("d%d/f.go", i)] = b.String()
	}
	ev := newEnv(t, files, structural.Options{Workers: 3})
	for _, tt := range []struct {
		max, shown int
		truncated  bool
	}{{0, 20, false}, {7, 7, true}, {1, 1, true}, {20, 20, false}, {-1, 20, false}, {4, 4, true}} {
		res, err := ev.e.Search(context.Background(), ev.fs, structural.SearchRequest{Pattern: "g($A, $B)", Language: "go", MaxResults: tt.max})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Matches) != tt.shown || res.Total != 20 || res.Truncated != tt.truncated || res.Files != 5 {
			t.Errorf("max %d: %d shown, total %d, truncated %v, files %d; want %d, 20, %v, 5", tt.max, len(res.Matches), res.Total, res.Truncated, res.Files, tt.shown, tt.truncated)
		}
		// The first matches in file and position order.
		for i, m := range res.Matches {
			want := fmt.Sprintf("g(%d, %d)", i/4, i%4)
			if m.Text != want || m.File != fmt.Sprintf("d%d/f.go", i/4) || m.StartLine != 4+i%4 {
				t.Errorf("max %d: match %d is %s, want %s", tt.max, i, pos(m), want)
			}
		}
	}
	res := ev.call(t, "ast_grep", map[string]any{"pattern": "g($A, $B)", "language": "go", "max_results": 3})
	wantOK(t, res, "20 matches in 5 files (5 files searched)", "d0/f.go:4 in f\n  g(0, 0)\n  $A = 0\n  $B = 0", "showing 3 of 20 matches")
	var sc struct {
		Matches []struct {
			File      string            `json:"file"`
			StartLine int               `json:"start_line"`
			StartCol  int               `json:"start_col"`
			EndLine   int               `json:"end_line"`
			EndCol    int               `json:"end_col"`
			Text      string            `json:"text"`
			Captures  map[string]string `json:"captures"`
		} `json:"matches"`
		Total     int  `json:"total"`
		Truncated bool `json:"truncated"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatal(err)
	}
	if len(sc.Matches) != 3 || sc.Total != 20 || !sc.Truncated || sc.Matches[1].File != "d0/f.go" ||
		sc.Matches[1].StartLine != 5 || sc.Matches[1].StartCol != 1 || sc.Matches[1].EndCol != 8 || sc.Matches[1].Captures["B"] != "1" {
		t.Errorf("structuredContent %s", b)
	}
	wantError(t, ev.call(t, "ast_grep", map[string]any{"pattern": "g($A)", "language": "go", "max_results": 5000}), "max_results")
}

// SearchEach hands over every file's matches, the same as Search finds,
// from its workers, and runs what it returned in walk order, one file at
// a time: the order of Search's matches; with no cache and with one. The
// names a-b.go, a.go and a/x.go are walked a/x.go first, which a plain
// string sort would put last.
func TestSearchEach(t *testing.T) {
	files := map[string]string{"skip.txt": "g(1, 2)\n", "big.go": "package p\n\nvar _ = 1 // g(9, 9) is a comment\n"}
	for i := range 12 {
		files[fmt.Sprintf("d%02d/f.go", i)] = fmt.Sprintf("package p\n\nfunc f() {\n\tg(%d, 0)\n\tg(%d, 1)\n}\n", i, i)
	}
	for _, name := range []string{"a-b.go", "a.go", "a/x.go"} {
		files[name] = "package p\n\nfunc f() {\n\tg(1, 0)\n\tg(1, 1)\n}\n"
	}
	for _, opts := range []structural.Options{{CacheBytes: -1, Workers: 3}, {Workers: 2}} {
		ev := newEnv(t, files, opts)
		req := structural.SearchRequest{Pattern: "g($A, $B)", Language: "go", MaxResults: -1}
		want, err := ev.e.Search(context.Background(), ev.fs, req)
		if err != nil {
			t.Fatal(err)
		}
		var got []structural.FileMatch
		var running atomic.Int32
		seen := map[string]bool{}
		res, err := ev.e.SearchEach(context.Background(), ev.fs, req, func(file string, sms []syntax.Match, enc []string) func() {
			if enc != nil {
				t.Errorf("%s: enclosing symbols %q not asked for", file, enc)
			}
			ms := make([]structural.FileMatch, len(sms))
			for i, m := range sms {
				structural.FillMatch(&ms[i], file, m, "")
			}
			for i, m := range ms {
				if m.File != file || (i > 0 && m.StartLine <= ms[i-1].StartLine) {
					t.Errorf("%s: match %d is %s, out of order or of another file", file, i, pos(m))
				}
			}
			return func() {
				if running.Add(1) != 1 {
					t.Errorf("%s: emitted while another file's emit ran", file)
				}
				defer running.Add(-1)
				if seen[file] || len(ms) == 0 {
					t.Errorf("SearchEach gave %s twice or with no matches (%d)", file, len(ms))
				}
				seen[file] = true
				got = append(got, ms...)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want.Matches) || len(got) != 30 || got[0].File != "a/x.go" || got[2].File != "a-b.go" {
			t.Errorf("cache %d: SearchEach found %d matches, Search %d:\n%v\n%v", opts.CacheBytes, len(got), len(want.Matches), got, want.Matches)
		}
		if res.Total != 30 || res.Files != 15 || res.FilesSearched != want.FilesSearched || len(res.Matches) != 0 {
			t.Errorf("cache %d: SearchEach result %+v, Search's %+v", opts.CacheBytes, res, want)
		}
	}
}

func TestSkips(t *testing.T) {
	files := map[string]string{
		"ok.py":     "print(1)\n",
		"bin.py":    "print(2)\n\x00\x01binary",
		"big.py":    "print(3)\n" + strings.Repeat("# padding\n", 500),
		"patho.py":  "print(4)\nx = " + strings.Repeat("(", 600_000),
		"other.txt": "print(5)\n",
	}
	ev := newEnv(t, files, structural.Options{MaxFileSize: 4096, ParseBudget: 100 * time.Millisecond})
	// big.py is over 4096 bytes; patho.py too, so search it with a larger cap.
	res, err := ev.e.Search(context.Background(), ev.fs, structural.SearchRequest{Pattern: "print($A)", Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 1 || res.Matches[0].File != "ok.py" {
		t.Errorf("matches %v", res.Matches)
	}
	want := map[string]int{structural.SkipBinary: 1, structural.SkipTooLarge: 2}
	if !reflect.DeepEqual(res.Skipped, want) || res.FilesSkipped != 3 || res.FilesSearched != 1 {
		t.Errorf("skipped %v (%d), searched %d; want %v", res.Skipped, res.FilesSkipped, res.FilesSearched, want)
	}

	ev2 := newEnv(t, files, structural.Options{ParseBudget: 100 * time.Millisecond})
	res2 := ev2.call(t, "ast_grep", map[string]any{"pattern": "print($A)", "language": "python"})
	wantOK(t, res2, "2 matches in 2 files (2 files searched; skipped: 1 binary, 1 parse_budget)", "big.py:1", "ok.py:1")
	// The pathological file alone: a counted skip, not an error.
	res2 = ev2.call(t, "ast_grep", map[string]any{"pattern": "print($A)", "path": "patho.py"})
	wantOK(t, res2, "0 matches in 0 files (0 files searched; skipped: 1 parse_budget)")
}

func TestBadInput(t *testing.T) {
	ev := newEnv(t, workspace(), structural.Options{})
	tests := []struct {
		name    string
		tool    string
		args    map[string]any
		mention []string
	}{
		{"pattern no context accepts", "ast_grep", map[string]any{"pattern": "fmt.Errorf(", "language": "go"}, []string{"does not parse", "go"}},
		{"empty pattern", "ast_grep", map[string]any{"pattern": " ", "language": "go"}, []string{"empty"}},
		{"unknown language", "ast_grep", map[string]any{"pattern": "f($A)", "language": "cobol"}, []string{"cobol", "python", "go"}},
		// This test process loads no dynamic grammars: Swift is installable, not installed.
		{"installable language", "ast_grep", map[string]any{"pattern": "print($A)", "language": "swift"}, []string{"berth grammars install swift", "python"}},
		{"directory without language", "ast_grep", map[string]any{"pattern": "f($A)", "path": "go"}, []string{"directory", "language", "python"}},
		{"workspace without language", "ast_grep", map[string]any{"pattern": "f($A)"}, []string{"workspace root", "language"}},
		{"file of unknown type", "ast_grep", map[string]any{"pattern": "f($A)", "path": "notes.txt"}, []string{"notes.txt", "language"}},
		{"missing path", "ast_grep", map[string]any{"pattern": "f($A)", "path": "nope.go"}, []string{"nope.go", "does not exist"}},
		{"dotdot escape", "ast_grep", map[string]any{"pattern": "f($A)", "language": "go", "path": "../etc"}, []string{"outside the workspace"}},
		{"absolute escape", "ast_grep", map[string]any{"pattern": "f($A)", "language": "go", "path": "/etc"}, []string{"outside the workspace"}},
		{"home escape", "ast_grep", map[string]any{"pattern": "f($A)", "language": "go", "path": "~/x"}, []string{"outside the workspace"}},
		{"edit: bad pattern", "ast_edit", map[string]any{"pattern": "print(", "rewrite": "x", "language": "python"}, []string{"does not parse"}},
		{"edit: directory without language", "ast_edit", map[string]any{"pattern": "f($A)", "rewrite": "g($A)"}, []string{"language"}},
		{"edit: escape", "ast_edit", map[string]any{"pattern": "f($A)", "rewrite": "g($A)", "language": "go", "path": "../x"}, []string{"outside"}},
		{"resolve: unknown id", "resolve", map[string]any{"edit_id": "edit_9", "action": "accept"}, []string{"edit_9", "no edit is pending"}},
		{"resolve: bad action", "resolve", map[string]any{"edit_id": "edit_1", "action": "apply"}, []string{"accept", "discard"}},
	}
	before := snapshot(t, ev.dir)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := ev.call(t, tt.tool, tt.args)
			wantError(t, res, tt.mention...)
			t.Logf("%s", res.AllText())
		})
	}
	if after := snapshot(t, ev.dir); !reflect.DeepEqual(before, after) {
		t.Error("bad input changed files")
	}
	// A symbolic link out of the workspace is refused.
	if err := os.Symlink("/etc", filepath.Join(ev.dir, "etc-link")); err != nil {
		t.Fatal(err)
	}
	wantError(t, ev.call(t, "ast_grep", map[string]any{"pattern": "f($A)", "language": "go", "path": "etc-link"}), "outside the workspace")
}

func TestCacheAndPrefilter(t *testing.T) {
	files := map[string]string{}
	for i := range 6 {
		files[fmt.Sprintf("p%d.go", i)] = fmt.Sprintf("package p\n\nfunc f%d() { gizmo(%d) }\n", i, i)
	}
	files["q.go"] = "package p\n\nfunc q() { h(1) }\n"
	ev := newEnv(t, files, structural.Options{})
	ctx := context.Background()
	search := func(pattern string) *structural.SearchResult {
		t.Helper()
		res, err := ev.e.Search(ctx, ev.fs, structural.SearchRequest{Pattern: pattern, Language: "go"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// The literal "gizmo" is missing from q.go: it is not parsed.
	r1 := search("gizmo($A)")
	s1 := ev.e.Stats()
	if r1.Total != 6 || s1.Parses != 6 || s1.Prefiltered != 1 || s1.CacheHits != 0 {
		t.Fatalf("first search: total %d, stats %+v; want 6 matches, 6 parses, 1 prefiltered", r1.Total, s1)
	}
	// Second search over the unchanged tree parses nothing.
	r2 := search("gizmo($A)")
	s2 := ev.e.Stats()
	if r2.Total != 6 || s2.Parses != 6 || s2.CacheHits != 6 {
		t.Fatalf("second search: total %d, stats %+v; want no new parse", r2.Total, s2)
	}
	// A pattern without a literal parses q.go, once.
	search("$F($A)")
	search("$F($A)")
	s3 := ev.e.Stats()
	if s3.Parses != 7 || s3.CachedTrees != 7 {
		t.Fatalf("stats %+v, want 7 parses and 7 cached trees", s3)
	}
	// Same size, new content (mtime may not even change): parsed again.
	write(t, ev.dir, "p0.go", "package p\n\nfunc f0() { gizmo(9) }\n")
	r4 := search("gizmo($A)")
	if s := ev.e.Stats(); s.Parses != 8 || r4.Matches[0].Captures["A"] != "9" {
		t.Fatalf("after a change: stats %+v, first match %v; want exactly one new parse", s, r4.Matches[0])
	}
	// A cache too small for the whole tree keeps what fits across searches
	// instead of evicting every tree before the next search reaches it.
	per := s3.CachedBytes / int64(s3.CachedTrees)
	part := newEnv(t, files, structural.Options{CacheBytes: per*3 + per/2, Workers: 1})
	for range 3 {
		if _, err := part.e.Search(ctx, part.fs, structural.SearchRequest{Pattern: "$F($A)", Language: "go"}); err != nil {
			t.Fatal(err)
		}
	}
	if s := part.e.Stats(); s.CachedTrees != 3 || s.CacheHits != 6 || s.Parses != 15 {
		t.Errorf("partial cache: %+v, want 3 trees kept, 3 hits per warm search", s)
	}
	// A tiny cache keeps evicting: every search parses.
	small := newEnv(t, files, structural.Options{CacheBytes: 1})
	for range 2 {
		if _, err := small.e.Search(ctx, small.fs, structural.SearchRequest{Pattern: "$F($A)", Language: "go"}); err != nil {
			t.Fatal(err)
		}
	}
	if s := small.e.Stats(); s.Parses != 14 || s.CachedTrees != 0 {
		t.Errorf("tiny cache: %+v, want 14 parses and nothing cached", s)
	}
}

func TestSurfaces(t *testing.T) {
	ev := newEnv(t, workspace(), structural.Options{})
	for _, s := range []tools.Surface{tools.SurfacePlan, tools.SurfaceReadonly} {
		var names []string
		for _, info := range ev.r.List(s) {
			names = append(names, info.Name)
		}
		if !reflect.DeepEqual(names, []string{"ast_grep"}) {
			t.Errorf("%s lists %v, want only ast_grep", s, names)
		}
		res, err := ev.r.Call(context.Background(), s, "ast_grep", json.RawMessage(`{"pattern":"print($A)","path":"py/a.py"}`))
		if err != nil || res.IsError {
			t.Errorf("ast_grep on %s: %v %v", s, err, res)
		}
		for _, tc := range []struct{ tool, args string }{
			{"ast_edit", `{"pattern":"print($A)","rewrite":"log($A)","path":"py/a.py"}`},
			{"resolve", `{"edit_id":"edit_1","action":"accept"}`},
		} {
			if _, err := ev.r.Call(context.Background(), s, tc.tool, json.RawMessage(tc.args)); !errors.Is(err, tools.ErrDenied) {
				t.Errorf("%s on %s: %v, want ErrDenied", tc.tool, s, err)
			}
		}
	}
	if p := ev.e.Pending(); len(p) != 0 {
		t.Errorf("a denied ast_edit staged %v", p)
	}
	for _, info := range ev.r.List(tools.SurfaceDefault) {
		want := map[string]tools.Level{"ast_grep": tools.LevelRead, "ast_edit": tools.LevelWrite, "resolve": tools.LevelWrite}[info.Name]
		if info.Level != want {
			t.Errorf("%s is %s, want %s", info.Name, info.Level, want)
		}
	}
}

// TestCanceled: a cancelled context is a call error, not a tool error.
func TestCanceled(t *testing.T) {
	ev := newEnv(t, workspace(), structural.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ev.r.Call(ctx, tools.SurfaceDefault, "ast_grep", json.RawMessage(`{"pattern":"f($A)","language":"go"}`))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v, want context.Canceled", err)
	}
}

func sortedKeys(m map[string]string) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// TestCacheTrustsOldFiles: a file whose size and modification time match
// its cache entry, modified well before it was read, is not read again
// (git's racily-clean rule); a recently modified one is read every time.
func TestCacheTrustsOldFiles(t *testing.T) {
	ev := newEnv(t, map[string]string{
		"old1.py": "print(1)\n",
		"old2.py": "print(2)\n",
		"new.py":  "print(3)\n",
		"skip.py": "nothing()\n",
	}, structural.Options{})
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{"old1.py", "old2.py", "skip.py"} {
		if err := os.Chtimes(filepath.Join(ev.dir, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	search := func() *structural.SearchResult {
		t.Helper()
		res, err := ev.e.Search(ctx, ev.fs, structural.SearchRequest{Pattern: "print($A)", Language: "python"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	search()
	s1 := ev.e.Stats()
	if s1.Reads != 4 || s1.Parses != 3 || s1.Prefiltered != 1 {
		t.Fatalf("first search %+v", s1)
	}
	r2 := search()
	s2 := ev.e.Stats()
	if s2.Reads != 5 || s2.Parses != 3 || r2.Total != 3 {
		t.Fatalf("second search %+v: want only new.py read again, nothing parsed", s2)
	}
	// A change with a new mtime is seen.
	write(t, ev.dir, "old1.py", "print(10)\n")
	if err := os.Chtimes(filepath.Join(ev.dir, "old1.py"), old.Add(time.Minute), old.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	r3 := search()
	if s3 := ev.e.Stats(); s3.Reads != 7 || s3.Parses != 4 || r3.Matches[1].Text != "print(10)" {
		t.Fatalf("after a change %+v %v", s3, r3.Matches)
	}
	// A change that keeps size and mtime hides from the search (as from
	// git), but not from ast_edit, which reads every file it stages.
	write(t, ev.dir, "old2.py", "print(7)\n")
	if err := os.Chtimes(filepath.Join(ev.dir, "old2.py"), old, old); err != nil {
		t.Fatal(err)
	}
	if r := search(); r.Matches[2].Text != "print(2)" {
		t.Errorf("search read old2.py again: %v", r.Matches)
	}
	p, err := ev.e.Stage(ctx, ev.fs, structural.EditRequest{Pattern: "print($A)", Rewrite: "log($A)", Path: "old2.py"})
	if err != nil || p.ID == "" || string(p.Files[0].Old) != "print(7)\n" {
		t.Fatalf("stage %v %+v", err, p)
	}
	if _, err := ev.e.Resolve(ctx, ev.fs, p.ID, structural.ActionAccept); err != nil {
		t.Fatal(err)
	}
	if got := ev.read(t, "old2.py"); got != "log(7)\n" {
		t.Errorf("old2.py = %q", got)
	}
}
