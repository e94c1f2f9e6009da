package lsp_test

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/lsp"
)

// sigChange is a signature change of a function of real code and its
// truth: the lines (1-based) of the calls it breaks, all in its own file.
type sigChange struct {
	File  string `json:"file"`
	Name  string `json:"name"`
	Calls []int  `json:"calls"`
	Old   string `json:"old"`
	New   string `json:"new"`
}

// writeDiags is the part of a write's structuredContent diagnostics on
// write fill.
type writeDiags struct {
	Diagnostics []lsp.Diag `json:"diagnostics"`
	More        int        `json:"diagnostics_more"`
	Fixed       int        `json:"diagnostics_fixed"`
	Edit        int        `json:"diagnostics_edit"`
	Late        []struct {
		Edit        int        `json:"edit"`
		Diagnostics []lsp.Diag `json:"diagnostics"`
		Fixed       int        `json:"fixed"`
	} `json:"late_diagnostics"`
}

// journalRun is a host run with the npm language servers on PATH and a
// generous wait for a write's diagnostics: a server checking a whole
// workspace on a loaded machine may take long to answer for the written
// file, and the test waits for that, not a fixed time.
func journalRun(t *testing.T, server string) *hostRun {
	t.Helper()
	h, _ := npmRunWith(t, server, lsp.Options{DiagnosticsWait: 2 * time.Minute, QueryWait: 2 * time.Minute})
	return h
}

// checkCredits makes the signature change sc through the edit tool, then
// reverts it, then writes an unrelated file, and checks what diagnostics
// on write credit to each: the change exactly the broken calls (each
// message containing msg), nothing from another file; the revert no new
// problem and exactly those fixed; the last write nothing, and no write
// late diagnostics of another.
func checkCredits(t *testing.T, h *hostRun, sc sigChange, msg, probe string) {
	t.Helper()
	e := h.env()
	call := func(tool string, args map[string]any) (string, writeDiags) {
		t.Helper()
		r := e.Call(t, tool, args)
		if r.IsError {
			t.Fatalf("%s: %s", tool, r.Text)
		}
		var w writeDiags
		if err := json.Unmarshal(r.Structured, &w); err != nil {
			t.Fatalf("structuredContent: %v: %s", err, r.Structured)
		}
		t.Logf("%s:\n%s", tool, r.Text)
		if len(w.Late) > 0 || strings.Contains(r.Text, "late diagnostics") {
			t.Errorf("%s: late diagnostics credited to an earlier write: %s", tool, r.Text)
		}
		return r.Text, w
	}

	text, w := call("edit", map[string]any{"path": sc.File, "old_string": sc.Old, "new_string": sc.New})
	var lines []int
	for _, d := range w.Diagnostics {
		if d.File != sc.File || !strings.Contains(d.Message, msg) {
			t.Errorf("the signature change is credited with %s:%d: %s; want only the broken calls of %s in %s", d.File, d.Line, d.Message, sc.Name, sc.File)
		}
		lines = append(lines, d.Line)
	}
	slices.Sort(lines)
	if !slices.Equal(lines, sc.Calls) || w.More != 0 || w.Fixed != 0 {
		t.Fatalf("the signature change of %s reported problems at lines %v (%d more, %d fixed); the truth is %d broken calls at %v:\n%s", sc.Name, lines, w.More, w.Fixed, len(sc.Calls), sc.Calls, text)
	}
	first := w.Edit

	text, w = call("edit", map[string]any{"path": sc.File, "old_string": sc.New, "new_string": sc.Old})
	if len(w.Diagnostics) != 0 || w.Fixed != len(sc.Calls) || w.Edit != first+1 {
		t.Fatalf("the revert (edit #%d after #%d) reported %d new problems and %d fixed; want none new and %d fixed:\n%s", w.Edit, first, len(w.Diagnostics), w.Fixed, len(sc.Calls), text)
	}

	text, w = call("write", map[string]any{"path": probe, "content": "\n"})
	if len(w.Diagnostics) != 0 || w.Fixed != 0 {
		t.Fatalf("an unrelated write reported %d new problems and %d fixed; want none:\n%s", len(w.Diagnostics), w.Fixed, text)
	}
}

// lookFirst asks for file's diagnostics, as an agent does before it edits
// it, until the server has checked it. The file has problems of its own
// (both servers report some in the files these tests change); pyright
// publishes an empty placeholder for a file it opened and has parsed but
// not yet checked, and nothing tells the two apart, so an answer of none
// is asked again, for as long as a loaded machine may need.
func lookFirst(t *testing.T, h *hostRun, file string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		r := h.env().Call(t, "lsp", map[string]any{"action": "diagnostics", "file": file})
		if r.IsError {
			t.Fatalf("diagnostics: %s", r.Text)
		}
		first := strings.SplitN(r.Text, "\n", 2)[0]
		if !strings.HasSuffix(first, ": none") {
			t.Logf("before the change: %s", first)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server reported no problem in %s for 3 minutes: %s", file, first)
		}
		time.Sleep(time.Second)
	}
}

// TestWriteCreditsPyright is the scenario of issue #32's point 5 on code
// nobody here wrote, each tree a workspace of its own: the standard
// library's email package (which shadows the standard library's email, so
// pyright reports many problems in it that no write of the test made) and
// Debian's parso. pyright publishes them as its workspace analysis reaches
// each file. A function's signature change must report exactly the calls
// it breaks (Python's ast is the truth), its revert them fixed, and
// nothing either way from the files pyright publishes in the meantime.
func TestWriteCreditsPyright(t *testing.T) {
	for _, src := range []string{"/usr/lib/python3.11/email", "/usr/lib/python3/dist-packages/parso"} {
		t.Run(filepath.Base(src), func(t *testing.T) {
			if _, err := os.Stat(src); err != nil {
				t.Skipf("no %s", src)
			}
			pkg := filepath.Base(src)
			h := journalRun(t, "pyright-langserver")
			copyTree(t, src, filepath.Join(h.dir, pkg), func(rel string) bool { return strings.HasSuffix(rel, ".py") })
			os.WriteFile(filepath.Join(h.dir, "pyproject.toml"), []byte("[project]\nname = \"ws\"\nversion = \"0\"\n"), 0o644)
			out, err := exec.Command("/usr/bin/python3", "testdata/pysig.py", filepath.Join(h.dir, pkg)).Output()
			if err != nil {
				t.Fatalf("pysig: %v", err)
			}
			var scs []sigChange
			if err := json.Unmarshal(out, &scs); err != nil {
				t.Fatal(err)
			}
			// The most calls that one result lists in full.
			scs = slices.DeleteFunc(scs, func(sc sigChange) bool { return len(sc.Calls) > lsp.MaxWriteDiagnostics })
			if len(scs) == 0 {
				t.Fatal("pysig found no function to change")
			}
			sc := slices.MaxFunc(scs, func(a, b sigChange) int { return len(a.Calls) - len(b.Calls) })
			sc.File = pkg + "/" + sc.File
			t.Logf("changing %s in %s: %d calls at %v", sc.Name, sc.File, len(sc.Calls), sc.Calls)
			// An agent looks at the file before it edits it; pyright has
			// just started and goes on publishing the rest of the
			// workspace.
			lookFirst(t, h, sc.File)
			checkCredits(t, h, sc, `"berth_extra"`, pkg+"/berth_probe.py")
		})
	}
}

// jsMask returns src with the text of comments, strings and template
// literals replaced by spaces (their quotes kept), so that a scan for
// names and brackets sees only code. Regular expression literals are not
// recognised: jsSigChanges skips a file whose masked text does not
// balance.
func jsMask(src string) string {
	b := []byte(src)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '/':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case b[i] == '/' && i+1 < len(b) && b[i+1] == '*':
			for ; i < len(b) && !(b[i] == '*' && i+1 < len(b) && b[i+1] == '/'); i++ {
				if b[i] != '\n' {
					b[i] = ' '
				}
			}
			if i+1 < len(b) {
				b[i], b[i+1] = ' ', ' '
				i++
			}
		case b[i] == '\'' || b[i] == '"' || b[i] == '`':
			q := b[i]
			for i++; i < len(b) && b[i] != q; i++ {
				if b[i] == '\\' && i+1 < len(b) {
					b[i] = ' '
					i++
				}
				if b[i] != '\n' {
					b[i] = ' '
				}
			}
		}
	}
	return string(b)
}

// jsArgs counts the arguments of the call whose "(" is at open in masked
// code, and reports whether one is spread; ok is false when the brackets
// do not close.
func jsArgs(code string, open int) (n int, spread, ok bool) {
	depth, empty := 0, true
	for i := open; i < len(code); i++ {
		switch c := code[i]; c {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				if empty {
					return 0, spread, true
				}
				return n + 1, spread, true
			}
		case ',':
			if depth == 1 {
				n++
			}
		case ' ', '\n', '\t', '\r':
		default:
			if depth == 1 && c == '.' && strings.HasPrefix(code[i:], "...") {
				spread = true
			}
			if depth >= 1 {
				empty = false
			}
		}
	}
	return 0, false, false
}

// jsSigChanges finds, in the JavaScript files under root, functions
// declared once as "function name(p1, …, pk) {" or "const name = (p1, …,
// pk) => {" (async too), named in no other file,
// whose every other occurrence in their file is a plain call (not a
// method call) with exactly k arguments, none spread, three or more of
// them. The change drops the last parameter (declaring it as a local
// instead, so the body still reads): under checkJs each call then passes
// one argument too many. The file must not use "arguments" nor declare
// the dropped name with let, const, class or function.
func jsSigChanges(t *testing.T, root string) []sigChange {
	t.Helper()
	srcs := map[string]string{}
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".js") {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			srcs[rel] = string(b)
		}
		return nil
	})
	decl := regexp.MustCompile(`(?:\bfunction\s+([A-Za-z_$][\w$]*)\s*|\bconst\s+([A-Za-z_$][\w$]*)\s*=\s*(?:async\s*)?)\(([^()]*)\)\s*(?:=>\s*)?\{`)
	var out []sigChange
	for _, rel := range slices.Sorted(maps.Keys(srcs)) {
		src := srcs[rel]
		code := jsMask(src)
		if strings.Count(code, "(") != strings.Count(code, ")") || strings.Count(code, "{") != strings.Count(code, "}") || regexp.MustCompile(`\barguments\b`).MatchString(code) {
			continue
		}
	fns:
		for _, m := range decl.FindAllStringSubmatchIndex(code, -1) {
			n0, n1, arrow := m[2], m[3], false
			if n0 < 0 {
				n0, n1, arrow = m[4], m[5], true
			}
			name, params := code[n0:n1], strings.TrimSpace(code[m[6]:m[7]])
			if arrow != strings.Contains(code[m[6]:m[1]], "=>") {
				continue
			}
			if params == "" || strings.ContainsAny(params, "={}[].") {
				continue
			}
			ps := strings.Split(params, ",")
			for i := range ps {
				ps[i] = strings.TrimSpace(ps[i])
			}
			last := ps[len(ps)-1]
			word := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`)
			for r, other := range srcs {
				if r != rel && word.MatchString(other) {
					continue fns
				}
			}
			if regexp.MustCompile(`\b(let|const|class|function)\s+` + regexp.QuoteMeta(last) + `\b`).MatchString(code) {
				continue
			}
			var calls []int
			for _, w := range word.FindAllStringIndex(code, -1) {
				if w[0] == n0 {
					continue // the declaration
				}
				before := strings.TrimRight(code[:w[0]], " \t")
				rest := strings.TrimLeft(code[w[1]:], " \t")
				if strings.HasSuffix(before, ".") || strings.HasSuffix(before, "function") || !strings.HasPrefix(rest, "(") {
					continue fns
				}
				n, spread, ok := jsArgs(code, len(code)-len(rest))
				if !ok || spread || n != len(ps) {
					continue fns
				}
				calls = append(calls, strings.Count(code[:w[0]], "\n")+1)
			}
			if len(calls) < 3 {
				continue
			}
			old := src[m[0]:m[1]]
			if strings.Count(src, old) != 1 {
				continue
			}
			head := src[m[0]:m[6]] // "function name(" or "const name = ("
			nw := head + strings.Join(ps[:len(ps)-1], ", ") + src[m[7]:m[1]] + " var " + last + ";"
			out = append(out, sigChange{File: rel, Name: name, Calls: calls, Old: old, New: nw})
		}
	}
	return out
}

// TestWriteCreditsTypeScript is the same scenario with
// typescript-language-server on npm's own lib/ (CommonJS, checked as
// JavaScript: a jsconfig.json with checkJs, under which tsserver reports
// many problems of its own in files no write touches, published as it
// checks the files it opened).
func TestWriteCreditsTypeScript(t *testing.T) {
	const src = "/usr/lib/node_modules/npm/lib"
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no %s", src)
	}
	h := journalRun(t, "typescript-language-server")
	copyTree(t, src, filepath.Join(h.dir, "lib"), func(rel string) bool { return strings.HasSuffix(rel, ".js") })
	os.WriteFile(filepath.Join(h.dir, "jsconfig.json"), []byte(`{"compilerOptions": {"checkJs": true, "allowJs": true, "noEmit": true, "module": "commonjs", "target": "es2022"}, "include": ["lib"]}`+"\n"), 0o644)
	scs := jsSigChanges(t, filepath.Join(h.dir, "lib"))
	scs = slices.DeleteFunc(scs, func(sc sigChange) bool { return len(sc.Calls) > lsp.MaxWriteDiagnostics })
	if len(scs) == 0 {
		t.Fatal("no function of npm's lib/ to change")
	}
	sc := slices.MaxFunc(scs, func(a, b sigChange) int { return len(a.Calls) - len(b.Calls) })
	sc.File = "lib/" + sc.File
	t.Logf("changing %s in %s: %d calls at %v (of %d candidates)", sc.Name, sc.File, len(sc.Calls), sc.Calls, len(scs))
	lookFirst(t, h, sc.File)
	checkCredits(t, h, sc, "Expected", "lib/berth-probe.js")
}

// pylspOnly is the server table with pylsp alone for Python (and the rest),
// so that pyright on PATH is there for the project check only.
func pylspOnly() []lsp.Server {
	return slices.DeleteFunc(lsp.DefaultServers(), func(s lsp.Server) bool { return s.ID == "pyright" })
}

// TestLinterOnlySaysWhatItMisses is issue #32's point 6: pylsp (pyflakes)
// sees none of the calls a signature change breaks, so its "no new
// problems" must come, once per run, with what pyflakes does not check and
// the call that would: the project check running pyright where the
// workspace has one, or that it has none.
func TestLinterOnlySaysWhatItMisses(t *testing.T) {
	const src = "/usr/lib/python3.11/email"
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no %s", src)
	}
	need(t, "pylsp")
	for _, withPyright := range []bool{false, true} {
		t.Run(map[bool]string{false: "no type checker", true: "pyright on PATH"}[withPyright], func(t *testing.T) {
			env := []string{"PATH=" + os.Getenv("PATH")}
			want := "No type checker for python was found"
			if withPyright {
				bin := os.Getenv("BERTH_LSP_NPM_BIN")
				if bin == "" {
					t.Skip("BERTH_LSP_NPM_BIN is not set (tests/run installs pyright and sets it)")
				}
				need(t, "node")
				env = []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
				want = `lsp diagnostics with file "*" runs the project's type checker (pyright)`
			} else if p, err := exec.LookPath("pyright"); err == nil {
				t.Skipf("pyright is on PATH (%s): the project has a type checker", p)
			}
			h := newHostRunIn(t, t.TempDir(), env, lsp.Options{Servers: pylspOnly()})
			copyTree(t, src, filepath.Join(h.dir, "email"), func(rel string) bool { return strings.HasSuffix(rel, ".py") })
			os.WriteFile(filepath.Join(h.dir, "pyproject.toml"), []byte("[project]\nname = \"mail\"\nversion = \"0\"\n"), 0o644)
			out, err := exec.Command("/usr/bin/python3", "testdata/pysig.py", filepath.Join(h.dir, "email")).Output()
			if err != nil {
				t.Fatalf("pysig: %v", err)
			}
			var scs []sigChange
			if err := json.Unmarshal(out, &scs); err != nil || len(scs) == 0 {
				t.Fatalf("pysig: %v, %d changes", err, len(scs))
			}
			sc := slices.MaxFunc(scs, func(a, b sigChange) int { return len(a.Calls) - len(b.Calls) })
			sc.File = "email/" + sc.File
			e := h.env()
			// pylsp publishes only the files it was given: look first, as
			// an agent would, so that the file's old warnings are known.
			if r := e.Call(t, "lsp", map[string]any{"action": "diagnostics", "file": sc.File}); r.IsError {
				t.Fatalf("diagnostics: %s", r.Text)
			}
			r := e.Call(t, "edit", map[string]any{"path": sc.File, "old_string": sc.Old, "new_string": sc.New})
			t.Logf("edit breaking %d calls of %s:\n%s", len(sc.Calls), sc.Name, r.Text)
			if r.IsError || !strings.Contains(r.Text, "diagnostics (pylsp): no new problems") {
				t.Fatalf("want pylsp to see none of the %d broken calls: %s", len(sc.Calls), r.Text)
			}
			for _, w := range []string{"pyflakes", "wrong argument counts", want} {
				if !strings.Contains(r.Text, w) {
					t.Errorf("the result does not say %q", w)
				}
			}
			r = e.Call(t, "edit", map[string]any{"path": sc.File, "old_string": sc.New, "new_string": sc.Old})
			if r.IsError || strings.Contains(r.Text, "pyflakes") {
				t.Errorf("the second write says it again (once per run): %s", r.Text)
			}
		})
	}
}
