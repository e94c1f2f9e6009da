package lsp_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
// to name, defined at file:line.
type question struct {
	Name  string   `json:"name"`
	File  string   `json:"file"`
	Line  int      `json:"line"`
	Files []string `json:"files"`
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
// that did not answer in time).
type tally struct{ complete, said, silent, failed int }

// ask asks action about q through e and judges the answer against q's
// truth, paging through the whole list.
func askTruth(t *testing.T, h *hostRun, action string, q question, tl *tally) {
	t.Helper()
	e := h.env()
	got := map[string]bool{}
	var note string
	var v verdictOf
	for start := 0; ; {
		r := e.Call(t, "lsp", map[string]any{"action": action, "file": q.File, "line": q.Line, "symbol": q.Name, "start": start})
		if r.IsError {
			t.Logf("%s of %s (%s:%d) failed: %s", action, q.Name, q.File, q.Line, r.Text)
			tl.failed++
			return
		}
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
	default:
		tl.silent++
		t.Errorf("%s of %s (%s:%d) left out %v, which refer to it, and said nothing of it (got %v)", action, q.Name, q.File, q.Line, missing, slices.Sorted(func(yield func(string) bool) {
			for f := range got {
				if !yield(f) {
					return
				}
			}
		}))
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
	// Cross-file: some file other than the definition's refers to it.
	qs = slices.DeleteFunc(qs, func(q question) bool {
		return !slices.ContainsFunc(q.Files, func(f string) bool { return f != q.File })
	})
	slices.SortStableFunc(qs, func(a, b question) int { return len(b.Files) - len(a.Files) })
	return qs[:min(len(qs), max)]
}

// TestTruthPython: the standard library's email package, a workspace of
// its own (so it shadows the standard library's email, as any project
// whose package name matches a standard or installed module does), asked
// who refers to each of its most used top-level functions and classes,
// through pylsp and, where tests/run installed it, pyright. Python's ast
// is the truth.
func TestTruthPython(t *testing.T) {
	const src = "/usr/lib/python3.11/email"
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no %s", src)
	}
	servers := []string{"pylsp"}
	if os.Getenv("BERTH_LSP_NPM_BIN") != "" {
		servers = append(servers, "pyright-langserver")
	}
	for _, server := range servers {
		t.Run(server, func(t *testing.T) {
			var h *hostRun
			if server == "pylsp" {
				need(t, "pylsp")
				h = newHostRun(t, lsp.Options{})
			} else {
				h, _ = npmRun(t, server)
			}
			copyTree(t, src, filepath.Join(h.dir, "email"), func(rel string) bool { return strings.HasSuffix(rel, ".py") })
			os.WriteFile(filepath.Join(h.dir, "pyproject.toml"), []byte("[project]\nname = \"mail\"\nversion = \"0\"\n"), 0o644)
			var tl tally
			for _, q := range pyQuestions(t, filepath.Join(h.dir, "email"), 20) {
				q.File = "email/" + q.File
				for i := range q.Files {
					q.Files[i] = "email/" + q.Files[i]
				}
				askTruth(t, h, "references", q, &tl)
			}
			t.Logf("%s references on email/: %d complete, %d incomplete and said so, %d incomplete and silent, %d failed saying why", server, tl.complete, tl.said, tl.silent, tl.failed)
		})
	}
}
