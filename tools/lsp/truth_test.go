package lsp_test

import (
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/lsp"
)

// The truth corpus: real code nobody here wrote, copied into a workspace,
// and cross-file questions whose answers a test computes independently of
// any language server. A server's answer is a claim: each one must be
// complete, or carry a note that names what it may have left out
// (verdict.go). An answer that leaves out a file the truth holds and says
// nothing is the failure these tests exist for.

// copyTree copies the regular files under src that keep accepts into dst.
func copyTree(t *testing.T, src, dst string, keep func(rel string) bool) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			if d.Name() == "__pycache__" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !keep(rel) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// question is one cross-file question and its truth: the files that refer
// to name, defined at file:line; AttrFiles (Python) are those of Files
// that refer to it only as an attribute of an object (msg.walk()), which
// only the object's type links to it.
type question struct {
	Name      string   `json:"name"`
	File      string   `json:"file"`
	Line      int      `json:"line"`
	Files     []string `json:"files"`
	AttrFiles []string `json:"attr_files"`
}

// verdictOf is the part of an lsp answer the truth is checked against.
type verdictOf struct {
	Locations []struct {
		File string `json:"file"`
	} `json:"locations"`
	More    int `json:"more"`
	Verdict *struct {
		Uncovered int `json:"uncovered_files"`
		Unchecked int `json:"unchecked_files"`
	} `json:"verdict"`
}

// tally counts answers: complete, incomplete but said so, incomplete with
// nothing said (the defect), and calls that failed saying why (a server
// that did not answer in time). Of the answers said incomplete, saidAttr
// left out only files of the question's AttrFiles, and stub blamed the
// server's bundled stub; noted counts the answers that carry a note.
type tally struct{ complete, said, silent, failed, noted, saidAttr, stub int }

// ask asks action about q through e and judges the answer against q's
// truth, paging through the whole list.
// maxIndexWaits is how many times askTruth asks again a server that said
// it is still indexing (each ask waits for it as the tool does).
const maxIndexWaits = 5

func askTruth(t *testing.T, h *hostRun, action string, q question, tl *tally) {
	t.Helper()
	e := h.env()
	got := map[string]bool{}
	var note, text string
	var v verdictOf
	for start, waits := 0, 0; ; {
		r := e.Call(t, "lsp", map[string]any{"action": action, "file": q.File, "line": q.Line, "symbol": q.Name, "start": start})
		if r.IsError && strings.Contains(r.Text, "still indexing") && strings.Contains(r.Text, "call again later") && waits < maxIndexWaits {
			// What the answer tells an agent to do: on a loaded machine a
			// server's background index takes longer than berth waits.
			waits++
			continue
		}
		if r.IsError {
			t.Logf("%s of %s (%s:%d) failed: %s", action, q.Name, q.File, q.Line, r.Text)
			tl.failed++
			return
		}
		text = r.Text
		v = verdictOf{}
		if err := json.Unmarshal(r.Structured, &v); err != nil {
			t.Fatalf("structuredContent: %v: %s", err, r.Structured)
		}
		for _, l := range v.Locations {
			got[l.File] = true
		}
		if i := strings.Index(r.Text, "note: the answer may be incomplete"); i >= 0 && note == "" {
			note = r.Text[i:]
		}
		if v.More == 0 {
			break
		}
		start += len(v.Locations)
	}
	if note != "" {
		tl.noted++
	}
	var missing []string
	for _, f := range q.Files {
		if !got[f] {
			missing = append(missing, f)
		}
	}
	switch {
	case len(missing) == 0:
		tl.complete++
	case note != "" && v.Verdict != nil && v.Verdict.Uncovered >= len(missing):
		tl.said++
		if !slices.ContainsFunc(missing, func(f string) bool { return !slices.Contains(q.AttrFiles, f) }) {
			tl.saidAttr++
		}
		if strings.Contains(note, "bundled stub") {
			tl.stub++
		}
		t.Logf("%s of %s (%s:%d) left out %v and said so: %s", action, q.Name, q.File, q.Line, missing, note)
	default:
		tl.silent++
		t.Errorf("%s of %s (%s:%d) left out %v, which refer to it, and said nothing of it (got %v); the answer's last page:\n%s", action, q.Name, q.File, q.Line, missing, slices.Sorted(func(yield func(string) bool) {
			for f := range got {
				if !yield(f) {
					return
				}
			}
		}), text)
	}
}

// pyQuestions computes the truth of a Python tree with pytruth.py (Python's
// ast) and picks up to max cross-file questions: names used in the most
// files first.
func pyQuestions(t *testing.T, root string, max int) []question {
	t.Helper()
	out, err := exec.Command("/usr/bin/python3", "testdata/pytruth.py", root).Output()
	if err != nil {
		t.Fatalf("pytruth: %v", err)
	}
	var qs []question
	if err := json.Unmarshal(out, &qs); err != nil {
		t.Fatal(err)
	}
	// Cross-file: some file other than the definition's refers to it; and
	// not a name so common (encode, in 18 of email's files) that jedi's
	// search by name takes minutes on a loaded machine.
	qs = slices.DeleteFunc(qs, func(q question) bool {
		return !slices.ContainsFunc(q.Files, func(f string) bool { return f != q.File }) || len(q.Files) > 12
	})
	slices.SortStableFunc(qs, func(a, b question) int { return len(b.Files) - len(a.Files) })
	return qs[:min(len(qs), max)]
}

// TestTruthPython: the standard library's email package, a workspace of
// its own (so it shadows the standard library's email, as any project
// whose package name matches a standard or installed module does), asked
// who refers to each of its most used top-level functions and classes,
// through pylsp and, where tests/run installed it, pyright. Python's ast
// is the truth. pyright, which would resolve email to its bundled stub,
// is given a typeshed without it (typeshed.go): its answers are complete
// but for uses as an attribute of an object of a type it cannot infer.
func TestTruthPython(t *testing.T) {
	truthPython(t, "/usr/lib/python3.11/email")
}

// TestTruthPythonDistPackages: Debian's parso (a dist-packages package,
// pure Python, several subpackages), a workspace of its own that shadows
// the installed parso, asked the same questions as TestTruthPython with
// the same assertions.
func TestTruthPythonDistPackages(t *testing.T) {
	truthPython(t, "/usr/lib/python3/dist-packages/parso")
}

// truthPython copies the Python package src into a workspace as a
// top-level package of the same name and asks pylsp and pyright (where
// tests/run installed it) who refers to up to 20 of its most used
// top-level functions and classes; Python's ast is the truth.
func truthPython(t *testing.T, src string) {
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no %s", src)
	}
	pkg := filepath.Base(src)
	servers := []string{"pylsp"}
	if os.Getenv("BERTH_LSP_NPM_BIN") != "" {
		servers = append(servers, "pyright-langserver")
	}
	for _, server := range servers {
		t.Run(server, func(t *testing.T) {
			var h *hostRun
			if server == "pylsp" {
				need(t, "pylsp")
				// jedi searches by name: on a loaded machine one question
				// may take minutes, and one cut off leaves it busy.
				h = newHostRun(t, lsp.Options{RequestTimeout: 5 * time.Minute})
			} else {
				h, _ = npmRun(t, server)
			}
			copyTree(t, src, filepath.Join(h.dir, pkg), func(rel string) bool { return strings.HasSuffix(rel, ".py") })
			os.WriteFile(filepath.Join(h.dir, "pyproject.toml"), []byte("[project]\nname = \"corpus-"+pkg+"\"\nversion = \"0\"\n"), 0o644)
			var tl tally
			for _, q := range pyQuestions(t, filepath.Join(h.dir, pkg), 20) {
				q.File = pkg + "/" + q.File
				for i := range q.Files {
					q.Files[i] = pkg + "/" + q.Files[i]
				}
				for i := range q.AttrFiles {
					q.AttrFiles[i] = pkg + "/" + q.AttrFiles[i]
				}
				askTruth(t, h, "references", q, &tl)
			}
			t.Logf("%s references on %s/: %d complete, %d incomplete and said so (%d of them leaving out only uses as an attribute of an object), %d incomplete and silent, %d failed saying why", server, pkg, tl.complete, tl.said, tl.saidAttr, tl.silent, tl.failed)
			if server == "pylsp" {
				return
			}
			// The workspace's package is what its imports resolve to (for
			// email, pyright is given a typeshed without the stdlib stub:
			// typeshed.go), so every answer is complete but for uses as an
			// attribute of an object whose type pyright cannot infer (an
			// unannotated parameter's msg.walk()), and no note blames a
			// stub.
			if tl.said != tl.saidAttr || tl.failed > 0 || tl.stub > 0 || tl.complete+tl.said+tl.silent < 10 {
				t.Errorf("pyright on a workspace %s: %d complete, %d incomplete and said so, of which %d leave out only attribute uses and %d blame the bundled stub; %d failed. Every answer must be complete but for attribute uses, and none blame the stub", pkg, tl.complete, tl.said, tl.saidAttr, tl.stub, tl.failed)
			}
		})
	}
}

// cTokens returns the whole-word occurrences of every identifier in C
// source, comments, string and character literals left out: the truth of
// TestTruthC, independent of berth's own scan (which counts comments too).
func cTokens(src string) map[string]int {
	out := map[string]int{}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '"' || c == '\'':
			i++
			for i < len(src) && src[i] != c && src[i] != '\n' {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z'):
			j := i
			for j < len(src) && (src[j] == '_' || ('a' <= src[j] && src[j] <= 'z') || ('A' <= src[j] && src[j] <= 'Z') || ('0' <= src[j] && src[j] <= '9')) {
				j++
			}
			out[src[i:j]]++
			i = j
		case '0' <= c && c <= '9':
			for i < len(src) && (src[i] == '_' || ('a' <= src[i] && src[i] <= 'z') || ('A' <= src[i] && src[i] <= 'Z') || ('0' <= src[i] && src[i] <= '9') || src[i] == '.') {
				i++
			}
		default:
			i++
		}
	}
	return out
}

// cKeywords are the C keywords a prototype's last word before "(" can be
// only when the line is not a plain prototype.
var cKeywords = map[string]bool{"void": true, "int": true, "char": true, "unsigned": true, "const": true, "struct": true, "return": true, "if": true, "while": true, "for": true, "switch": true, "sizeof": true}

// cQuestions picks up to max functions declared in a header of root (a
// prototype at the start of a line: "Type name(" ending in ";", or in GNU
// style "name(" below a line holding only its type) that code
// in other files refers to, most referred first, with the files whose
// code (not comments) names them.
func cQuestions(t *testing.T, root string, max int) []question {
	t.Helper()
	tokens := map[string]map[string]int{} // file -> identifier -> count
	var headers []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if ext := filepath.Ext(rel); ext != ".c" && ext != ".h" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tokens[rel] = cTokens(string(b))
		if filepath.Ext(rel) == ".h" {
			headers = append(headers, rel)
		}
		return nil
	})
	slices.Sort(headers)
	var qs []question
	seen := map[string]bool{}
	for _, h := range headers {
		b, _ := os.ReadFile(filepath.Join(root, h))
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			if !strings.HasSuffix(strings.TrimSpace(line), ");") || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "static") || strings.HasPrefix(line, "#") {
				continue
			}
			open := strings.Index(line, "(")
			if open < 0 {
				continue
			}
			fields := strings.FieldsFunc(line[:open], func(r rune) bool { return r == ' ' || r == '*' })
			if len(fields) == 1 && i > 0 {
				// GNU style: the type on the line above ("kern_return_t"
				// then "name(args);"), a line of its own at column 0.
				prev := lines[i-1]
				if prev == "" || prev[0] == ' ' || prev[0] == '\t' || prev[0] == '#' || strings.ContainsAny(prev, ";(){}/") || strings.HasPrefix(prev, "*") {
					continue
				}
				fields = append(strings.Fields(prev), fields...)
			}
			if len(fields) < 2 {
				continue
			}
			name := fields[len(fields)-1]
			if seen[name] || strings.Contains(line, "(*") || cKeywords[name] {
				continue // a function pointer, or a parse this scan cannot do
			}
			seen[name] = true
			q := question{Name: name, File: h, Line: i + 1}
			for f, toks := range tokens {
				n := toks[name]
				if f == h {
					n-- // the declaration asked about
				}
				if n > 0 {
					q.Files = append(q.Files, f)
				}
			}
			slices.Sort(q.Files)
			if slices.ContainsFunc(q.Files, func(f string) bool { return f != h }) {
				qs = append(qs, q)
			}
		}
	}
	slices.SortStableFunc(qs, func(a, b question) int { return len(b.Files) - len(a.Files) })
	return qs[:min(len(qs), max)]
}

// TestTruthC: tree-sitter's C runtime (from the Go module cache, as
// go-tree-sitter ships it) with no compile_commands.json, asked who refers
// to 20 of the functions its headers declare, through clangd. A scan of
// the code that leaves out comments and literals is the truth.
func TestTruthC(t *testing.T) {
	h := newCCorpus(t, treeSitterRuntime, false)
	truthC(t, h, treeSitterRuntime, false)
}

// TestTruthCWithCompileCommands: the same corpus with its include/
// directory and a compile_commands.json in out/ (an entry with -I
// include -I src for each source file), where clangd does not look by
// itself. berth finds it and passes --compile-commands-dir, so clangd's
// background index covers every file: every references and
// incoming_calls answer is complete, and none carries a note.
func TestTruthCWithCompileCommands(t *testing.T) {
	h := newCCorpus(t, treeSitterRuntime, true)
	r := h.env().Call(t, "lsp", map[string]any{"action": "status", "file": "src/parser.c"})
	if !strings.Contains(r.Text, "compilation database: out/compile_commands.json (passed as --compile-commands-dir=out)") {
		t.Errorf("status does not name out/compile_commands.json as passed to clangd:\n%s", r.Text)
	}
	truthC(t, h, treeSitterRuntime, true)
	r = h.env().Call(t, "lsp", map[string]any{"action": "status", "file": "src/parser.c"})
	if !strings.Contains(r.Text, "clangd: running") || !strings.Contains(r.Text, "compilation database: out/compile_commands.json (passed as --compile-commands-dir=out)") {
		t.Errorf("status of the running clangd does not name out/compile_commands.json:\n%s", r.Text)
	}
}

// cCorpus is a C project of the Go module cache (module) or, with module
// an absolute path, of the machine: the files of its dir that keep
// accepts are copied to src/ of a workspace, and include (if any) to
// include/; flags are added to each compile_commands.json entry (what
// the project's config.h would say). completeWithDB says clangd links
// every use with the compilation database (every file compiles here, and
// nothing defeats its index), so that every answer must be complete and
// carry no note; min is the fewest incoming_calls and
// definition questions its truth yields (fewer: the parse is broken).
type cCorpus struct {
	label, module, dir, include string
	keep                        func(rel string) bool
	flags                       []string
	completeWithDB              bool
	min                         int
}

// treeSitterRuntime: src/ without lib.c (which includes every other
// source file) and the wasm code.
var treeSitterRuntime = cCorpus{
	label: "tree-sitter's runtime", module: "github.com/tree-sitter/go-tree-sitter@v0.25.0", dir: "src", include: "include",
	keep: func(rel string) bool {
		return (strings.HasSuffix(rel, ".c") || strings.HasSuffix(rel, ".h")) && !strings.HasPrefix(rel, "wasm") && rel != "lib.c"
	},
	completeWithDB: true, min: 10,
}

// delveDarwin: delve's native macOS backend, C in GNU style (the type on
// a line of its own) whose five sources call each other through five
// headers (and are called from Go, through cgo), and include the macOS
// SDK's, absent here: even with the compilation database clangd cannot
// link every call, and must say so.
var delveDarwin = cCorpus{
	label: "delve's darwin backend", module: "github.com/go-delve/delve@v1.27.2", dir: "pkg/proc/native",
	keep: func(rel string) bool {
		return !strings.Contains(rel, "/") && (strings.HasSuffix(rel, ".c") || strings.HasSuffix(rel, ".h"))
	},
	min: 1,
}

// nettleExamples: the examples Debian's nettle-dev installs, a dozen
// programs that share io.c through io.h (GNU style), built against the
// installed nettle headers; not the benchmarks, which include headers of
// nettle's source tree that Debian does not install. io.h declares werror
// with PRINTF_STYLE, which nettle's config.h defines: without it (no
// compilation database) the declaration does not parse.
var nettleExamples = cCorpus{
	label: "nettle's examples", module: "/usr/share/doc/nettle-dev", dir: "examples",
	keep: func(rel string) bool {
		return (strings.HasSuffix(rel, ".c") || strings.HasSuffix(rel, ".h")) && !strings.Contains(rel, "benchmark") && rel != "nettle-openssl.c"
	},
	flags: []string{"-I/usr/include/nettle", "-DHAVE_CONFIG_H=0", "-DWITH_HOGWEED=1", "-DPRINTF_STYLE(f,a)=__attribute__((format(printf,f,a)))"},
	min:   4,
}

// TestTruthCNettle: nettle's examples with no compile_commands.json,
// asked the questions of TestTruthC.
func TestTruthCNettle(t *testing.T) {
	h := newCCorpus(t, nettleExamples, false)
	truthC(t, h, nettleExamples, false)
}

// TestTruthCNettleWithCompileCommands: the same with a
// compile_commands.json in out/ that names the installed nettle headers
// and defines what config.h would. Every file compiles and every
// references answer is complete, but each example is a program with its
// own main, which clangd's index holds as one symbol: incoming_calls
// lists the calls of one main only, and must say what it leaves out.
func TestTruthCNettleWithCompileCommands(t *testing.T) {
	h := newCCorpus(t, nettleExamples, true)
	truthC(t, h, nettleExamples, true)
}

// TestTruthCDelve: delve's darwin backend with no compile_commands.json,
// asked the questions of TestTruthC.
func TestTruthCDelve(t *testing.T) {
	h := newCCorpus(t, delveDarwin, false)
	truthC(t, h, delveDarwin, false)
}

// TestTruthCDelveWithCompileCommands: the same with a compile_commands.json
// in out/. Its includes of the macOS SDK are not found here, so clangd
// links only part of the calls even with the database: the answers it
// leaves incomplete must say so.
func TestTruthCDelveWithCompileCommands(t *testing.T) {
	h := newCCorpus(t, delveDarwin, true)
	truthC(t, h, delveDarwin, true)
}

// newCCorpus copies c into a host run's workspace; with compDB also its
// include/ and out/compile_commands.json (an entry with -I include -I src
// for each source file).
func newCCorpus(t *testing.T, c cCorpus, compDB bool) *hostRun {
	t.Helper()
	need(t, "clangd")
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	src := c.module
	if !filepath.IsAbs(src) {
		src = filepath.Join(strings.TrimSpace(string(out)), c.module)
	}
	if _, err := os.Stat(filepath.Join(src, c.dir)); err != nil {
		t.Skipf("no %s: %v", c.label, err)
	}
	h := newHostRun(t, lsp.Options{})
	copyTree(t, filepath.Join(src, c.dir), filepath.Join(h.dir, "src"), c.keep)
	if !compDB {
		return h
	}
	if c.include != "" {
		copyTree(t, filepath.Join(src, c.include), filepath.Join(h.dir, "include"), func(rel string) bool { return strings.HasSuffix(rel, ".h") })
	}
	files, _ := filepath.Glob(filepath.Join(h.dir, "src", "*.c"))
	type entry struct {
		Directory string   `json:"directory"`
		File      string   `json:"file"`
		Arguments []string `json:"arguments"`
	}
	var db []entry
	for _, f := range files {
		rel, _ := filepath.Rel(h.dir, f)
		db = append(db, entry{Directory: h.dir, File: rel, Arguments: slices.Concat([]string{"cc", "-std=c11", "-Iinclude", "-Isrc"}, c.flags, []string{"-c", rel})})
	}
	b, _ := json.MarshalIndent(db, "", "  ")
	if err := os.MkdirAll(filepath.Join(h.dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "out", "compile_commands.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

// truthC asks clangd the corpus's questions; complete says every
// references and incoming_calls answer must be complete, with no note.
func truthC(t *testing.T, h *hostRun, c cCorpus, compDB bool) {
	label, complete := c.label, compDB && c.completeWithDB
	qs := cQuestions(t, filepath.Join(h.dir, "src"), 20)
	var tl tally
	for _, q := range qs {
		q.File = "src/" + q.File
		for i := range q.Files {
			q.Files[i] = "src/" + q.Files[i]
		}
		askTruth(t, h, "references", q, &tl)
	}
	t.Logf("clangd references on %s: %d complete, %d incomplete and said so, %d incomplete and silent, %d failed saying why", label, tl.complete, tl.said, tl.silent, tl.failed)

	// incoming_calls, asked at the header's declaration: the truth is the
	// source files whose code calls it ("name(" outside comments and
	// literals), other than by its definition's own line.
	var cl tally
	for _, q := range qs {
		cq := question{Name: q.Name, File: "src/" + q.File, Line: q.Line}
		cq.Files = cCallers(t, filepath.Join(h.dir, "src"), q.Name)
		for i := range cq.Files {
			cq.Files[i] = "src/" + cq.Files[i]
		}
		if len(cq.Files) > 0 {
			askTruth(t, h, "incoming_calls", cq, &cl)
		}
	}
	t.Logf("clangd incoming_calls on %s: %d complete, %d incomplete and said so, %d incomplete and silent, %d failed saying why", label, cl.complete, cl.said, cl.silent, cl.failed)
	if cl.complete+cl.said+cl.silent < c.min {
		t.Errorf("only %d incoming_calls questions: the truth's parse is broken", cl.complete+cl.said+cl.silent)
	}
	if complete {
		if tl.complete != len(qs) || tl.noted > 0 {
			t.Errorf("with a compilation database, %d of %d references answers complete, %d with a note; want all complete and none noted", tl.complete, len(qs), tl.noted)
		}
		if n := cl.complete + cl.said + cl.silent + cl.failed; cl.complete != n || cl.noted > 0 {
			t.Errorf("with a compilation database, %d of %d incoming_calls answers complete, %d with a note; want all complete and none noted", cl.complete, n, cl.noted)
		}
	}

	// definition, asked at a call in another source file: the truth is the
	// line of the function's body (a line at column 0 that names it with
	// "(" and does not end in ";").
	var dl tally
	for _, q := range qs {
		def, call := cDefinitionAndCall(t, filepath.Join(h.dir, "src"), q.Name)
		if def == "" || call == nil {
			continue
		}
		r := h.env().Call(t, "lsp", map[string]any{"action": "definition", "file": "src/" + call.File, "line": call.Line, "symbol": q.Name})
		var v verdictOf
		json.Unmarshal(r.Structured, &v)
		var got []string
		for _, l := range v.Locations {
			got = append(got, l.File)
		}
		switch {
		case r.IsError:
			dl.failed++
		case slices.Contains(got, "src/"+def):
			dl.complete++
		case strings.Contains(r.Text, "note: the answer may be a declaration in a header") || strings.Contains(r.Text, "note: the server found no definition"):
			dl.said++
		default:
			dl.silent++
			t.Errorf("definition of %s at src/%s:%d gave %v, not src/%s, and said nothing of it:\n%s", q.Name, call.File, call.Line, got, def, r.Text)
		}
	}
	t.Logf("clangd definition on %s: %d right, %d wrong and said so, %d wrong and silent, %d failed saying why", label, dl.complete, dl.said, dl.silent, dl.failed)
	if dl.complete+dl.said+dl.silent < c.min {
		t.Errorf("only %d definition questions: the truth's parse is broken", dl.complete+dl.said+dl.silent)
	}
}

// cCode is C source with comments and string and character literals
// blanked, line structure kept.
func cCode(src string) string {
	b := []byte(src)
	for i := 0; i < len(b); {
		switch {
		case i+1 < len(b) && b[i] == '/' && b[i+1] == '/':
			for i < len(b) && b[i] != '\n' {
				b[i] = ' '
				i++
			}
		case i+1 < len(b) && b[i] == '/' && b[i+1] == '*':
			for i < len(b) && !(b[i] == '*' && i+1 < len(b) && b[i+1] == '/') {
				if b[i] != '\n' {
					b[i] = ' '
				}
				i++
			}
			if i+1 < len(b) {
				b[i], b[i+1] = ' ', ' '
				i += 2
			}
		case b[i] == '"' || b[i] == '\'':
			q := b[i]
			b[i] = ' '
			i++
			for i < len(b) && b[i] != q && b[i] != '\n' {
				if b[i] == '\\' && i+1 < len(b) {
					b[i] = ' '
					i++
				}
				b[i] = ' '
				i++
			}
			if i < len(b) && b[i] == q {
				b[i] = ' '
				i++
			}
		default:
			i++
		}
	}
	return string(b)
}

// cCallers lists the source files under root whose code calls name:
// "name(" outside comments and literals, not on a definition's own line
// (one at column 0).
func cCallers(t *testing.T, root, name string) []string {
	t.Helper()
	call := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\s*\(`)
	files, _ := filepath.Glob(filepath.Join(root, "*.c"))
	var out []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(cCode(string(b)), "\n") {
			if call.MatchString(line) && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")) {
				rel, _ := filepath.Rel(root, f)
				out = append(out, rel)
				break
			}
		}
	}
	return out
}

// cDefinitionAndCall finds, under root, the source file that defines
// function name (a line at column 0 naming it with "(" and not ending in
// ";") and a call of it in another source file.
func cDefinitionAndCall(t *testing.T, root, name string) (string, *question) {
	t.Helper()
	var def string
	var call *question
	files, _ := filepath.Glob(filepath.Join(root, "*.c"))
	slices.Sort(files)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		rel, _ := filepath.Rel(root, f)
		for i, line := range strings.Split(string(b), "\n") {
			trimmed := strings.TrimSpace(line)
			if !strings.Contains(line, name+"(") || strings.HasPrefix(trimmed, "//") || strings.HasPrefix(trimmed, "*") || strings.HasPrefix(trimmed, "/*") {
				continue
			}
			if line != trimmed || strings.HasSuffix(trimmed, ";") || strings.HasPrefix(line, "#") {
				if call == nil && line != trimmed && cTokens(line)[name] > 0 {
					call = &question{Name: name, File: rel, Line: i + 1}
				}
				continue
			}
			if def == "" && cTokens(line)[name] > 0 {
				def = rel
			}
		}
	}
	if call != nil && call.File == def {
		// A call in the defining file says nothing of linking across files.
		call = nil
		for _, f := range files {
			rel, _ := filepath.Rel(root, f)
			if rel == def {
				continue
			}
			b, _ := os.ReadFile(f)
			for i, line := range strings.Split(string(b), "\n") {
				if trimmed := strings.TrimSpace(line); line != trimmed && strings.Contains(line, name+"(") && cTokens(line)[name] > 0 && !strings.HasPrefix(trimmed, "//") && !strings.HasPrefix(trimmed, "*") {
					return def, &question{Name: name, File: rel, Line: i + 1}
				}
			}
		}
	}
	return def, call
}

// TestRenameRefusesWhatTheEditLeavesOut: a rename whose edit leaves out a
// file where the name occurs (here a use jedi cannot link: a name built
// at run time with getattr, beside a comment) is refused, naming the file,
// and nothing changes; allow_incomplete renames what the server linked.
func TestRenameRefusesWhatTheEditLeavesOut(t *testing.T) {
	need(t, "pylsp")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.PutAll(t, map[string]string{
		"setup.py":  "",
		"shapes.py": "def area_of(w, h):\n    return w * h\n",
		"main.py":   "from shapes import area_of\n\nprint(area_of(2, 3))\n",
		"late.py":   "import shapes\n\n# area_of is looked up by name\nf = getattr(shapes, 'area_' + 'of')\nprint(f(1, 1))  # area_of\n",
	})
	args := map[string]any{"file": "shapes.py", "line": 1, "symbol": "area_of", "new_name": "surface"}
	r := e.Call(t, "lsp_rename", args)
	if !r.IsError || !strings.Contains(r.Text, "late.py (2)") || !strings.Contains(r.Text, "Nothing was changed") || !strings.Contains(r.Text, "allow_incomplete") {
		t.Fatalf("a rename that leaves late.py out: %s", r.Text)
	}
	for name, want := range map[string]string{"shapes.py": "def area_of", "main.py": "import area_of"} {
		if b, _ := os.ReadFile(filepath.Join(h.dir, name)); !strings.Contains(string(b), want) {
			t.Errorf("the refused rename changed %s: %s", name, b)
		}
	}
	args["allow_incomplete"] = true
	r = e.Call(t, "lsp_rename", args)
	if r.IsError || !strings.Contains(r.Text, "renamed") {
		t.Fatalf("rename with allow_incomplete: %s", r.Text)
	}
	if b, _ := os.ReadFile(filepath.Join(h.dir, "main.py")); !strings.Contains(string(b), "surface(2, 3)") {
		t.Errorf("main.py after the rename: %s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(h.dir, "late.py")); !strings.Contains(string(b), "# area_of is looked up") {
		t.Errorf("late.py was changed: %s", b)
	}
}

// jsRequire matches a CommonJS require of a relative path and jsImport an
// ES module's import (or re-export) from one, and the jsExport patterns
// the names a module exports: module.exports = name, module.exports =
// { a, b: c }, exports.name = / module.exports.name =; export function /
// class / const name, export { a, b as c } (without from: its own names).
var (
	jsRequire      = regexp.MustCompile(`require\(['"](\.{1,2}/[^'"]+)['"]\)`)
	jsImport       = regexp.MustCompile(`(?m)^\s*(?:import|export)\b[^'";]*?\bfrom\s*['"](\.{1,2}/[^'"]+)['"]|\bimport\(\s*['"](\.{1,2}/[^'"]+)['"]\s*\)`)
	jsExportOne    = regexp.MustCompile(`(?m)^module\.exports\s*=\s*([A-Za-z_$][\w$]*)\s*;?\s*$`)
	jsExportObject = regexp.MustCompile(`(?s)module\.exports\s*=\s*\{([^}]*)\}`)
	jsExportDot    = regexp.MustCompile(`(?m)^(?:module\.)?exports\.([A-Za-z_$][\w$]*)\s*=`)
	jsExportDecl   = regexp.MustCompile(`(?m)^export\s+(?:async\s+)?(?:function\*?\s+|class\s+|const\s+|let\s+|var\s+)([A-Za-z_$][\w$]*)`)
	jsExportList   = regexp.MustCompile(`(?m)^export\s*\{([^}]*)\}\s*;`)
	jsDeclared     = regexp.MustCompile(`^(?:export\s+)?(?:async\s+)?(?:function\*?\s+|class\s+|const\s+|let\s+)([A-Za-z_$][\w$]*)`)
)

// jsQuestions picks up to max functions, classes and constants that a
// file under dir of root declares at its top level and exports (CommonJS
// or ES module), with the truth: the files that require or import that
// file by a relative path and whose code (not comments or literals) names
// it; most used first.
func jsQuestions(t *testing.T, root, dir string, max int) []question {
	t.Helper()
	src := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".js" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		src[rel] = string(b)
		return nil
	})
	// requirers[f]: the files that require f.
	requirers := map[string][]string{}
	for f, text := range src {
		var paths []string
		for _, m := range jsRequire.FindAllStringSubmatch(text, -1) {
			paths = append(paths, m[1])
		}
		for _, m := range jsImport.FindAllStringSubmatch(text, -1) {
			paths = append(paths, m[1]+m[2])
		}
		for _, p := range paths {
			target := filepath.Join(filepath.Dir(f), p)
			if !strings.HasSuffix(target, ".js") {
				target += ".js"
			}
			if !slices.Contains(requirers[target], f) {
				requirers[target] = append(requirers[target], f)
			}
		}
	}
	var qs []question
	for file, text := range src {
		if dir != "" && !strings.HasPrefix(file, dir+"/") {
			continue
		}
		exported := map[string]bool{}
		for _, m := range jsExportOne.FindAllStringSubmatch(text, -1) {
			exported[m[1]] = true
		}
		for _, m := range jsExportDot.FindAllStringSubmatch(text, -1) {
			exported[m[1]] = true
		}
		for _, m := range jsExportDecl.FindAllStringSubmatch(text, -1) {
			exported[m[1]] = true
		}
		for _, m := range jsExportList.FindAllStringSubmatch(text, -1) {
			for _, part := range strings.Split(m[1], ",") {
				local, _, _ := strings.Cut(strings.TrimSpace(part), " ")
				exported[local] = true
			}
		}
		for _, m := range jsExportObject.FindAllStringSubmatch(text, -1) {
			for _, part := range strings.Split(m[1], ",") {
				name := strings.TrimSpace(part)
				if _, v, ok := strings.Cut(name, ":"); ok {
					name = strings.TrimSpace(v)
				}
				exported[name] = true
			}
		}
		for i, line := range strings.Split(text, "\n") {
			m := jsDeclared.FindStringSubmatch(line)
			if m == nil || !exported[m[1]] || strings.Contains(line, "require(") {
				continue
			}
			q := question{Name: m[1], File: file, Line: i + 1}
			for _, f := range requirers[file] {
				if cTokens(src[f])[m[1]] > 0 && !slices.Contains(q.Files, f) {
					q.Files = append(q.Files, f)
				}
			}
			slices.Sort(q.Files)
			if len(q.Files) > 0 {
				qs = append(qs, q)
			}
		}
	}
	slices.SortStableFunc(qs, func(a, b question) int {
		if len(a.Files) != len(b.Files) {
			return len(b.Files) - len(a.Files)
		}
		return strings.Compare(a.File+a.Name, b.File+b.Name)
	})
	return qs[:min(len(qs), max)]
}

// TestTruthJavaScript: npm's own lib/ (CommonJS, no jsconfig.json), asked
// who refers to 20 of the functions and classes its utils export, through
// typescript-language-server. The truth: the files that require the
// module and name the export in their code (comments and literals left
// out).
func TestTruthJavaScript(t *testing.T) {
	truthJS(t, "/usr/lib/node_modules/npm/lib", "utils", `{"name":"npm-lib-copy","version":"0.0.0"}`, "npm's lib/")
}

// TestTruthJavaScriptESM: the MCP TypeScript SDK's dist/esm (ES modules,
// as tests/run installs it for the MCP tests), asked who refers to 20 of
// the functions, classes and constants its modules export. The truth: the
// files that import the module by a relative path and name the export in
// their code.
func TestTruthJavaScriptESM(t *testing.T) {
	dir := os.Getenv("BERTH_MCP_SDK_DIR")
	if dir == "" {
		t.Skip("BERTH_MCP_SDK_DIR is not set (tests/run installs the MCP SDK)")
	}
	truthJS(t, filepath.Join(dir, "node_modules/@modelcontextprotocol/sdk/dist/esm"), "", `{"name":"mcp-sdk-esm-copy","version":"0.0.0","type":"module"}`, "the MCP SDK's dist/esm")
}

// truthJS copies the .js files of src into lib/ of a workspace with
// packageJSON and asks typescript-language-server who refers to, and who
// calls, up to 20 of the names the modules under lib/dir export.
func truthJS(t *testing.T, src, dir, packageJSON, label string) {
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no %s", src)
	}
	h, _ := npmRun(t, "typescript-language-server")
	copyTree(t, src, filepath.Join(h.dir, "lib"), func(rel string) bool { return strings.HasSuffix(rel, ".js") })
	os.WriteFile(filepath.Join(h.dir, "package.json"), []byte(packageJSON+"\n"), 0o644)
	qs := jsQuestions(t, filepath.Join(h.dir, "lib"), dir, 20)
	var tl tally
	for _, q := range qs {
		q.File = "lib/" + q.File
		q.Files = slices.Clone(q.Files)
		for i := range q.Files {
			q.Files[i] = "lib/" + q.Files[i]
		}
		askTruth(t, h, "references", q, &tl)
	}
	t.Logf("typescript-language-server references on %s: %d complete, %d incomplete and said so, %d incomplete and silent, %d failed saying why", label, tl.complete, tl.said, tl.silent, tl.failed)
	if n := tl.complete + tl.said + tl.silent + tl.failed; n < 20 {
		t.Errorf("only %d references questions on %s: the truth's parse is broken", n, label)
	}

	// incoming_calls: the files among those that call it, "name(" in code.
	var cl tally
	for _, q := range qs {
		call := regexp.MustCompile(`\b` + regexp.QuoteMeta(q.Name) + `\s*\(`)
		cq := question{Name: q.Name, File: "lib/" + q.File, Line: q.Line}
		for _, f := range q.Files {
			b, _ := os.ReadFile(filepath.Join(h.dir, "lib", f))
			if call.MatchString(cCode(string(b))) {
				cq.Files = append(cq.Files, "lib/"+f)
			}
		}
		if len(cq.Files) > 0 {
			askTruth(t, h, "incoming_calls", cq, &cl)
		}
	}
	t.Logf("typescript-language-server incoming_calls on %s: %d complete, %d incomplete and said so, %d incomplete and silent, %d failed saying why", label, cl.complete, cl.said, cl.silent, cl.failed)
}

// TestStatusLeadsWithTheFilesServer: status for a file says first which
// server answers it, and lists that file's servers before the others.
func TestStatusLeadsWithTheFilesServer(t *testing.T) {
	need(t, "pylsp")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.PutAll(t, map[string]string{"setup.py": "", "a.py": "x = 1\n", "b.c": "int main(void) { return 0; }\n"})
	r := e.Call(t, "lsp", map[string]any{"action": "status", "file": "a.py"})
	lines := strings.Split(r.Text, "\n")
	if r.IsError || lines[0] != "a.py is answered by pylsp" || len(lines) < 3 || !strings.HasPrefix(lines[2], "pylsp: ") {
		t.Fatalf("status of a.py: %s", r.Text)
	}
	var sc struct {
		Answering string `json:"answering"`
		Servers   []struct {
			Server string `json:"server"`
		} `json:"servers"`
	}
	json.Unmarshal(r.Structured, &sc)
	if sc.Answering != "pylsp" || sc.Servers[0].Server != "pylsp" {
		t.Errorf("structured status of a.py: %s", r.Structured)
	}
	// The Python servers come before the rest.
	seenOther := false
	for _, row := range sc.Servers {
		python := row.Server == "pylsp" || row.Server == "pyright"
		if python && seenOther {
			t.Errorf("a Python server listed after another language's: %s", r.Structured)
		}
		seenOther = seenOther || !python
	}
}

// goQuestions type-checks the package in dir with go/types and picks up
// to max package-level functions, types and variables used in at least
// one file other than their declaration's, most used first, with the
// files that use them: the truth of TestTruthGo.
func goQuestions(t *testing.T, dir string, max int) []question {
	t.Helper()
	fset := token.NewFileSet()
	ents, _ := os.ReadDir(dir)
	var files []*ast.File
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: importer.ForCompiler(fset, "source", nil)}).Check(filepath.Base(dir), fset, files, info)
	if err != nil {
		t.Fatalf("type-checking %s: %v", dir, err)
	}
	used := map[types.Object]map[string]bool{}
	for id, obj := range info.Uses {
		if obj.Parent() == pkg.Scope() || (obj.Pkg() == pkg && isMethod(obj)) {
			if used[obj] == nil {
				used[obj] = map[string]bool{}
			}
			used[obj][filepath.Base(fset.Position(id.Pos()).Filename)] = true
		}
	}
	var qs []question
	for obj, in := range used {
		pos := fset.Position(obj.Pos())
		q := question{Name: obj.Name(), File: filepath.Base(pos.Filename), Line: pos.Line}
		for f := range in {
			q.Files = append(q.Files, f)
		}
		slices.Sort(q.Files)
		if slices.ContainsFunc(q.Files, func(f string) bool { return f != q.File }) {
			qs = append(qs, q)
		}
	}
	slices.SortFunc(qs, func(a, b question) int {
		if len(a.Files) != len(b.Files) {
			return len(b.Files) - len(a.Files)
		}
		return strings.Compare(a.File+a.Name, b.File+b.Name)
	})
	return qs[:min(len(qs), max)]
}

func isMethod(obj types.Object) bool {
	f, ok := obj.(*types.Func)
	return ok && f.Signature().Recv() != nil
}

// TestTruthGo: Go's own compress/flate, a module of its own, asked who
// uses 20 of its package-level names and methods, through gopls; go/types
// is the truth. gopls type-checks the whole module, so its answers are
// not checked against the text: they must be complete.
func TestTruthGo(t *testing.T) {
	truthGo(t, "compress/flate")
}

// TestTruthGoTemplateParse: the same with text/template/parse, whose
// lexer, nodes and parser are three files that use each other's types,
// constants and methods throughout.
func TestTruthGoTemplateParse(t *testing.T) {
	truthGo(t, "text/template/parse")
}

// truthGo copies the package pkg of Go's source tree (not its tests) into
// a workspace, a module of its own, and asks gopls who uses up to 20 of
// its package-level names and methods; every answer must be complete.
func truthGo(t *testing.T, pkg string) {
	need(t, "gopls")
	src := filepath.Join(runtime.GOROOT(), "src", filepath.FromSlash(pkg))
	if ents, err := os.ReadDir(src); err != nil || len(ents) == 0 {
		t.Skipf("no Go source tree: %v", err)
	}
	h := newHostRun(t, lsp.Options{})
	copyTree(t, src, h.dir, func(rel string) bool {
		return !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")
	})
	os.WriteFile(filepath.Join(h.dir, "go.mod"), []byte("module example.com/"+filepath.Base(pkg)+"\n\ngo 1.22\n"), 0o644)
	var tl tally
	for _, q := range goQuestions(t, h.dir, 20) {
		askTruth(t, h, "references", q, &tl)
	}
	t.Logf("gopls references on %s: %d complete, %d incomplete and said so, %d incomplete and silent, %d failed saying why", pkg, tl.complete, tl.said, tl.silent, tl.failed)
	if tl.said > 0 {
		t.Errorf("gopls's answers are complete by type, yet %d were not", tl.said)
	}
	if n := tl.complete + tl.said + tl.silent + tl.failed; n < 20 {
		t.Errorf("only %d questions on %s: the truth's parse is broken", n, pkg)
	}
}
