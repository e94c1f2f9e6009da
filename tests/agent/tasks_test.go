package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTaskPythonBugHunt: a paginate helper raises for the last page of a
// list. The agent reproduces it (eval), finds where the error is raised
// (ast_grep, with its enclosing function), goes to the helper it calls
// (lsp definition), stops there in the debugger to see the arithmetic
// (debug: the stop shows the locals), fixes it (edit, with diagnostics)
// and checks the fix (eval). Before issue #17 the same task took 26 calls
// and 4,908 characters.
func TestTaskPythonBugHunt(t *testing.T) {
	need(t, "/usr/bin/python3", "-c", "import debugpy, pylsp, ipykernel")
	ws := t.TempDir()
	writeTree(t, ws, map[string]string{
		"shop/__init__.py": "",
		"shop/cart.py": `def page_count(n_items, per_page):
    return n_items // per_page


def paginate(items, page, per_page=10):
    pages = page_count(len(items), per_page)
    if page < 1 or page > pages:
        raise ValueError(f"page {page} out of range 1..{pages}")
    start = (page - 1) * per_page
    return items[start:start + per_page]
`,
		"main.py": `from shop.cart import paginate

print(paginate(list(range(25)), 3))
`,
	})
	tr := newTranscript(t, ws)

	tr.fails("eval", map[string]any{"description": "run the failing last page call", "code": "from shop.cart import paginate\npaginate(list(range(25)), 3)"},
		"ValueError", "page 3 out of range 1..2")
	tr.ok("ast_grep", map[string]any{"pattern": "raise ValueError($$$)", "language": "python"},
		"shop/cart.py:8 in paginate")
	tr.ok("lsp", map[string]any{"action": "definition", "file": "shop/cart.py", "line": 6, "symbol": "page_count"},
		"shop/cart.py\n", "1:5  def page_count(n_items, per_page):")
	tr.ok("debug", map[string]any{"op": "breakpoints", "file": "shop/cart.py", "lines": []any{2}})
	tr.ok("debug", map[string]any{"op": "launch", "program": "main.py"},
		"stopped at shop/cart.py:2 in page_count", "n_items: int = 25", "per_page: int = 10")
	tr.ok("debug", map[string]any{"op": "terminate"})
	tr.ok("edit", map[string]any{"path": "shop/cart.py", "old_string": "return n_items // per_page", "new_string": "return -(-n_items // per_page)"})
	tr.ok("eval", map[string]any{"description": "check the last page after the fix", "code": "import importlib, shop.cart\nimportlib.reload(shop.cart)\nshop.cart.paginate(list(range(25)), 3)"},
		"[20, 21, 22, 23, 24]")
	// Issue #17's goal, a third of the characters, plus the note issue #32
	// requires once per run of a write checked only by a linter (what
	// pyflakes does not see, and which call would): about 350 characters.
	tr.within(13, 4908/3+350)
}

// TestTaskGoRenameAndWrap: in a Go package the agent renames a parameter
// whose name is also a part of other identifiers on the same line
// (lsp_rename must change only it), and rewrites every fmt.Errorf that
// formats an error with %v to wrap it with %w (ast_edit with a transform,
// then resolve: 2 calls). Before issue #17 the same task took 26 calls and
// 10,077 characters, and the rename changed the wrong identifier.
func TestTaskGoRenameAndWrap(t *testing.T) {
	need(t, "gopls", "version")
	ws := t.TempDir()
	writeTree(t, ws, map[string]string{
		"go.mod": "module example.com/pager\n\ngo 1.22\n",
		"pager.go": `package pager

import (
	"errors"
	"fmt"
)

var errRange = errors.New("out of range")

func pageCount(total, perPage int) int {
	return (total + perPage - 1) / perPage
}

// Pages returns page page of items.
func Pages(items []string, page, perPage int) ([]string, error) {
	if pages := pageCount(len(items), perPage); page < 1 || page > pages {
		return nil, fmt.Errorf("page %d of %d: %v", page, pages, errRange)
	}
	start := (page - 1) * perPage
	end := min(start+perPage, len(items))
	return items[start:end], nil
}

func Last(items []string, perPage int) ([]string, error) {
	p, err := Pages(items, pageCount(len(items), perPage), perPage)
	if err != nil {
		return nil, fmt.Errorf("last page: %v", err)
	}
	return p, nil
}
`,
	})
	tr := newTranscript(t, ws)

	// On line 16 "page" is first a part of pages, pageCount and perPage,
	// then a whole identifier: the parameter.
	tr.ok("lsp_rename", map[string]any{"file": "pager.go", "line": 16, "symbol": "page", "new_name": "pageNo"}, "pageNo")
	tr.ok("ast_edit", map[string]any{"pattern": "fmt.Errorf($F, $$$A)", "rewrite": "fmt.Errorf($W, $$$A)", "language": "go",
		"transform": map[string]any{"W": map[string]any{"source": "$F", "replace": "%v", "by": "%w"}}},
		"2 replacements")
	tr.ok("resolve", map[string]any{"edit_id": "edit_1", "action": "accept"})

	b, err := os.ReadFile(filepath.Join(ws, "pager.go"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for _, want := range []string{
		"func Pages(items []string, pageNo, perPage int) ([]string, error) {",
		"if pages := pageCount(len(items), perPage); pageNo < 1 || pageNo > pages {",
		`fmt.Errorf("page %d of %d: %w", pageNo, pages, errRange)`,
		"start := (pageNo - 1) * perPage",
		`fmt.Errorf("last page: %w", err)`,
	} {
		if !strings.Contains(src, want) {
			t.Errorf("pager.go lacks %q:\n%s", want, src)
		}
	}
	if out, err := exec.Command("go", "-C", ws, "vet", "./...").CombinedOutput(); err != nil {
		t.Errorf("go vet after the task: %v\n%s", err, out)
	}
	tr.within(13, 10077/3)
}

// TestTaskExploreStdlib: in copies of Python's json and http packages the
// agent asks which functions raise ValueError (one structural search whose
// matches name their enclosing functions) and what calls iterencode (the
// language server's callers, each with its enclosing function). Before
// issue #17 the same questions took 14 calls, 77,816 characters of text
// and 559,504 of structured content, most of it listing every function
// definition to find the enclosing ones.
func TestTaskExploreStdlib(t *testing.T) {
	need(t, "/usr/bin/python3", "-c", "import pylsp")
	lib := "/usr/lib/python3.11"
	if _, err := os.Stat(filepath.Join(lib, "json", "encoder.py")); err != nil {
		t.Skipf("no Python 3.11 standard library at %s: %v", lib, err)
	}
	ws := t.TempDir()
	for _, pkg := range []string{"json", "http"} {
		if out, err := exec.Command("cp", "-r", filepath.Join(lib, pkg), ws).CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v %s", pkg, err, out)
		}
		os.RemoveAll(filepath.Join(ws, pkg, "__pycache__"))
	}
	tr := newTranscript(t, ws)

	raises := tr.ok("ast_grep", map[string]any{"pattern": "raise ValueError($$$)", "language": "python"},
		"json/encoder.py", "http/client.py")
	for _, fn := range []string{"in JSONEncoder.iterencode.floatstr", "in _make_iterencode._iterencode_list", "in _make_iterencode._iterencode_dict", "in HTTPConnection.putheader"} {
		if !strings.Contains(raises, fn) {
			t.Errorf("the matches do not name %q:\n%s", fn, raises)
		}
	}
	line := lineOf(t, filepath.Join(ws, "json", "encoder.py"), "    def iterencode(self, o, _one_shot=False):")
	// pylsp has no call hierarchy (incoming_calls says so): the references,
	// each with the function it is in, answer "what calls iterencode".
	tr.ok("lsp", map[string]any{"action": "references", "file": "json/encoder.py", "line": line, "symbol": "iterencode"},
		"json/encoder.py", "in JSONEncoder.encode", "json/__init__.py", "in dump")
	tr.within(7, 77816/3)
	if tr.structured > 559504/3 {
		t.Errorf("structured content took %d characters, the goal is at most %d", tr.structured, 559504/3)
	}
}

// lineOf returns the 1-based line of file that is exactly want.
func lineOf(t *testing.T, file, want string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if l == want {
			return i + 1
		}
	}
	t.Fatalf("%s has no line %q", file, want)
	return 0
}

// TestTaskIsThisHelperUsed: the question that made an agent call a used
// helper unused ("1 location") — who uses email.encoders.encode_base64 in
// a copy of the standard library's email package. The truth comes from
// Python's ast. The references answer must cover every file of the truth
// or name it in its note; following up with ast_grep on the attribute,
// the agent finds the use in each of them.
func TestTaskIsThisHelperUsed(t *testing.T) {
	need(t, "/usr/bin/python3", "-c", "import pylsp")
	const src = "/usr/lib/python3.11/email"
	if _, err := os.Stat(filepath.Join(src, "encoders.py")); err != nil {
		t.Skipf("no email package at %s: %v", src, err)
	}
	ws := t.TempDir()
	if out, err := exec.Command("cp", "-r", src, ws).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	os.RemoveAll(filepath.Join(ws, "email", "__pycache__"))
	os.RemoveAll(filepath.Join(ws, "email", "mime", "__pycache__"))
	const name = "encode_base64"
	// Files whose code names it, other than by its definition.
	script := `import ast, os, sys
name = sys.argv[1]
out = set()
for d, _, fs in os.walk("email"):
    for f in fs:
        if not f.endswith(".py"):
            continue
        p = os.path.join(d, f)
        for n in ast.walk(ast.parse(open(p, "rb").read())):
            if (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name) or (isinstance(n, ast.alias) and n.name == name):
                out.add(p)
print("\n".join(sorted(out)))`
	cmd := exec.Command("/usr/bin/python3", "-c", script, name)
	cmd.Dir = ws
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("truth: %v", err)
	}
	uses := strings.Fields(string(out))
	if len(uses) < 2 {
		t.Fatalf("the truth is too small to ask about: %v", uses)
	}
	tr := newTranscript(t, ws)
	line := lineOf(t, filepath.Join(ws, "email", "encoders.py"), "def encode_base64(msg):")
	refs := tr.ok("lsp", map[string]any{"action": "references", "file": "email/encoders.py", "line": line, "symbol": name})
	for _, f := range uses {
		if !strings.Contains(refs, f) {
			t.Errorf("references leave out %s, which uses %s, and the note does not name it:\n%s", f, name, refs)
		}
	}
	found := tr.ok("ast_grep", map[string]any{"pattern": "encoders." + name, "language": "python"})
	for _, f := range uses {
		if !strings.Contains(found, f) {
			t.Errorf("ast_grep does not find the use in %s:\n%s", f, found)
		}
	}
}
