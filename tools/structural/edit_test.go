package structural_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/structural"
)

const editA = `import logging

def f(x):
    print(x)
    if x:
        print("yes")
    return print(print(x))
`

const editB = `def g():
    # print(ignored)
    s = "print(ignored)"
    print(s, end="")
`

func editFiles() map[string]string {
	return map[string]string{
		"a.py":     editA,
		"pkg/b.py": editB,
		"pkg/c.py": "nothing()\n",
		"d.go":     "package d\n\nfunc d() { print(1) }\n",
	}
}

const editGolden = `(proposed) 4 replacements in 2 files; nothing is written yet: call resolve with edit_id "edit_1" and action "accept" to write them, or "discard"

--- a/a.py
+++ b/a.py
@@ -1,7 +1,7 @@
 import logging
 
 def f(x):
-    print(x)
+    logging.info(x)
     if x:
-        print("yes")
-    return print(print(x))
+        logging.info("yes")
+    return logging.info(print(x))
--- a/pkg/b.py
+++ b/pkg/b.py
@@ -1,4 +1,4 @@
 def g():
     # print(ignored)
     s = "print(ignored)"
-    print(s, end="")
+    logging.info(s, end="")`

const wantA = `import logging

def f(x):
    logging.info(x)
    if x:
        logging.info("yes")
    return logging.info(print(x))
`

func TestEditAccept(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	before := snapshot(t, ev.dir)
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "print($$$A)", "rewrite": "logging.info($$$A)", "language": "python"})
	wantOK(t, res)
	if got := res.AllText(); got != editGolden {
		t.Errorf("ast_edit result:\n%s\nwant:\n%s", got, editGolden)
	}
	if after := snapshot(t, ev.dir); !reflect.DeepEqual(before, after) {
		t.Fatal("ast_edit wrote files")
	}
	if p := ev.e.Pending(); !reflect.DeepEqual(p, []string{"edit_1"}) {
		t.Fatalf("pending %v", p)
	}
	res = ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"})
	wantOK(t, res, "accepted edit_1: wrote 4 replacements in 2 files", "a.py (3)", "pkg/b.py (1)")
	if !reflect.DeepEqual(res.Touched, []string{"a.py", "pkg/b.py"}) {
		t.Errorf("Touched %v", res.Touched)
	}
	want := before
	want["a.py"] = wantA
	want["pkg/b.py"] = strings.Replace(editB, `print(s, end="")`, `logging.info(s, end="")`, 1)
	if after := snapshot(t, ev.dir); !reflect.DeepEqual(after, want) {
		t.Errorf("after accept:\n%v\nwant\n%v", after, want)
	}
	// Resolving again is an error naming the state.
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), `"edit_1" was already accepted`, "no edit is pending")
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "discard"}), "already accepted")

	// Ids count up; a file path infers the language; the staged content
	// is exactly what accept writes.
	res = ev.call(t, "ast_edit", map[string]any{"pattern": "logging.info($X)", "rewrite": "print($X)", "path": "a.py"})
	wantOK(t, res, `(proposed) 3 replacements in 1 file;`, `edit_id "edit_2"`)
	res = ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "println($A)", "path": "d.go"})
	wantOK(t, res, `edit_id "edit_3"`)
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_7", "action": "accept"}), `unknown edit_id "edit_7"`, "pending edits: edit_2, edit_3")
	ctx := context.Background()
	p, err := ev.e.Stage(ctx, ev.fs, structural.EditRequest{Pattern: "nothing()", Rewrite: "something()", Path: "pkg"})
	if err == nil {
		t.Fatalf("directory without language staged %v", p)
	}
	p, err = ev.e.Stage(ctx, ev.fs, structural.EditRequest{Pattern: "nothing()", Rewrite: "something()", Path: "pkg", Language: "python"})
	if err != nil || p.ID != "edit_4" || len(p.Files) != 1 || string(p.Files[0].New) != "something()\n" {
		t.Fatalf("stage: %v %+v", err, p)
	}
	a, err := ev.e.Resolve(ctx, ev.fs, "edit_4", structural.ActionAccept)
	if err != nil || !reflect.DeepEqual(a.Paths(), []string{"pkg/c.py"}) {
		t.Fatalf("resolve: %v %+v", err, a)
	}
	if got := ev.read(t, "pkg/c.py"); got != "something()\n" {
		t.Errorf("c.py = %q", got)
	}
	// edit_2 was staged against the a.py that is still there: accept works.
	wantOK(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_2", "action": "accept"}), "wrote 3 replacements in 1 file")
	if got := ev.read(t, "a.py"); got != editA {
		t.Errorf("a.py after edit_2:\n%s", got)
	}
}

func TestEditNothingMatched(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "missing($A)", "rewrite": "x($A)", "language": "python"})
	wantOK(t, res, `nothing matched "missing($A)": no edit was staged`)
	if p := ev.e.Pending(); len(p) != 0 {
		t.Errorf("pending %v", p)
	}
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "no edit is pending")
	// A rewrite to the same text changes nothing: nothing staged either.
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "print($A)", "path": "a.py"}), "no edit was staged")
}

func TestDiscard(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	before := snapshot(t, ev.dir)
	wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "print($$$A)", "rewrite": "x($$$A)", "language": "python"}), "edit_1")
	res := ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "discard"})
	wantOK(t, res, "discarded edit_1: nothing was written")
	if len(res.Touched) != 0 {
		t.Errorf("discard touched %v", res.Touched)
	}
	if after := snapshot(t, ev.dir); !reflect.DeepEqual(before, after) {
		t.Error("discard changed files")
	}
	wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "already discarded")
}

func TestResolveRefusesChangedFile(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, dir string)
		say    string
	}{
		{"content", func(t *testing.T, dir string) { write(t, dir, "pkg/b.py", editB+"# more\n") }, "pkg/b.py changed after staging"},
		{"same size", func(t *testing.T, dir string) {
			write(t, dir, "pkg/b.py", strings.Replace(editB, "g()", "h()", 1))
		}, "pkg/b.py changed after staging"},
		{"removed", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "pkg/b.py")) }, "pkg/b.py was removed"},
		{"replaced by a link", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "pkg/b.py")
			os.Remove(p)
			if err := os.Symlink("../a.py", p); err != nil {
				t.Fatal(err)
			}
		}, "pkg/b.py is no longer a regular file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ev := newEnv(t, editFiles(), structural.Options{})
			wantOK(t, ev.call(t, "ast_edit", map[string]any{"pattern": "print($$$A)", "rewrite": "log($$$A)", "language": "python"}), "in 2 files")
			tt.change(t, ev.dir)
			before := snapshot(t, ev.dir)
			res := ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"})
			wantError(t, res, tt.say, "nothing was written")
			if strings.Contains(res.AllText(), "a.py changed") {
				t.Errorf("names an unchanged file: %s", res.AllText())
			}
			if len(res.Touched) != 0 {
				t.Errorf("touched %v", res.Touched)
			}
			if after := snapshot(t, ev.dir); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused resolve changed files:\n%v\n%v", before, after)
			}
			wantError(t, ev.call(t, "resolve", map[string]any{"edit_id": "edit_1", "action": "accept"}), "already refused")
		})
	}
}

// failFS fails WriteFile for one name.
type failFS struct {
	sandbox.FS
	fail string
}

func (f *failFS) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	if name == f.fail {
		return &fs.PathError{Op: "write", Path: name, Err: fs.ErrPermission}
	}
	return f.FS.WriteFile(ctx, name, data, perm)
}

func TestResolveRollback(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	before := snapshot(t, ev.dir)
	ctx := context.Background()
	ffs := &failFS{FS: ev.fs, fail: "pkg/b.py"}
	if _, err := ev.e.Stage(ctx, ffs, structural.EditRequest{Pattern: "print($$$A)", Rewrite: "log($$$A)", Language: "python"}); err != nil {
		t.Fatal(err)
	}
	_, err := ev.e.Resolve(ctx, ffs, "edit_1", structural.ActionAccept)
	var se *tools.Error
	if !errors.As(err, &se) || !strings.Contains(se.Msg, "writing pkg/b.py failed") || !strings.Contains(se.Msg, "restored") {
		t.Fatalf("err %v", err)
	}
	if after := snapshot(t, ev.dir); !reflect.DeepEqual(before, after) {
		t.Errorf("after rollback a.py = %q", after["a.py"])
	}
}

// TestResolveConcurrent: of two accepts of one id at once, exactly one
// writes.
func TestResolveConcurrent(t *testing.T) {
	ev := newEnv(t, editFiles(), structural.Options{})
	ctx := context.Background()
	if _, err := ev.e.Stage(ctx, ev.fs, structural.EditRequest{Pattern: "print($$$A)", Rewrite: "log($$$A)", Language: "python"}); err != nil {
		t.Fatal(err)
	}
	var ok, failed atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := ev.e.Resolve(ctx, ev.fs, "edit_1", structural.ActionAccept); err == nil {
				ok.Add(1)
			} else {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 1 || failed.Load() != 7 {
		t.Errorf("%d accepted, %d failed; want 1 and 7", ok.Load(), failed.Load())
	}
}

// TestResolveRace modifies a file while resolve runs, many times. What
// resolve guarantees, and what is checked:
//
//   - a modification finished before resolve starts is always detected:
//     the edit is refused and no file holds staged content;
//   - a refused edit is never partly applied: the other files are
//     byte-for-byte as they were, and the modified file holds the other
//     writer's content;
//   - an accepted edit wrote every other file, and the modified file holds
//     either the other writer's content (it wrote after resolve: never
//     overwritten) or the staged content. The latter means the other write
//     landed between resolve's last check of that file and its rename: no
//     check-then-rename over a path can see that without a lock the other
//     writer honours, so it is counted and logged, not failed.
func TestResolveRace(t *testing.T) {
	const rounds = 100
	const mod = "MODIFIED BY ANOTHER WRITER\n"
	var refused, accepted, keptOther, lostWindow int
	for i := range rounds {
		ev := newEnv(t, map[string]string{
			"a.py": "print(1)\n",
			"b.py": "print(2)\n",
			"c.py": "print(3)\n",
		}, structural.Options{})
		ctx := context.Background()
		p, err := ev.e.Stage(ctx, ev.fs, structural.EditRequest{Pattern: "print($A)", Rewrite: "log($A)", Language: "python"})
		if err != nil || len(p.Files) != 3 {
			t.Fatalf("stage: %v %+v", err, p)
		}
		staged := map[string]string{}
		for _, f := range p.Files {
			staged[f.Path] = string(f.New)
		}
		modBefore := i%4 == 0 // every fourth round the change is complete before resolve
		done := make(chan struct{})
		start := make(chan struct{})
		go func() {
			defer close(done)
			<-start
			if !modBefore {
				// Jitter, so the write lands before, during and after
				// resolve's checks and writes in different rounds.
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			}
			if err := os.WriteFile(filepath.Join(ev.dir, "b.py"), []byte(mod), 0o644); err != nil {
				t.Error(err)
			}
		}()
		if modBefore {
			close(start)
			<-done
		}
		var a *structural.Applied
		var rerr error
		if modBefore {
			a, rerr = ev.e.Resolve(ctx, ev.fs, p.ID, structural.ActionAccept)
		} else {
			resolved := make(chan struct{})
			go func() {
				defer close(resolved)
				a, rerr = ev.e.Resolve(ctx, ev.fs, p.ID, structural.ActionAccept)
			}()
			close(start)
			<-resolved
			<-done
		}
		got := snapshot(t, ev.dir)
		if modBefore && rerr == nil {
			t.Fatalf("round %d: a change made before resolve was not detected: %+v", i, a)
		}
		if got["b.py"] != mod && got["b.py"] != staged["b.py"] {
			t.Fatalf("round %d: b.py = %q: neither the other writer's nor the staged content", i, got["b.py"])
		}
		if rerr != nil {
			refused++
			var se *tools.Error
			if !errors.As(rerr, &se) || !strings.Contains(se.Msg, "b.py") {
				t.Fatalf("round %d: refusal does not name b.py: %v", i, rerr)
			}
			want := map[string]string{"a.py": "print(1)\n", "b.py": mod, "c.py": "print(3)\n"}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: refused but the files are %v, want %v", i, got, want)
			}
			continue
		}
		accepted++
		if got["a.py"] != staged["a.py"] || got["c.py"] != staged["c.py"] {
			t.Fatalf("round %d: accepted but a.py/c.py = %q %q", i, got["a.py"], got["c.py"])
		}
		if got["b.py"] == mod {
			keptOther++
		} else {
			lostWindow++
		}
	}
	t.Logf("%d rounds: %d refused, %d accepted (%d kept the other writer's later change, %d had it land in the check-to-rename window)",
		rounds, refused, accepted, keptOther, lostWindow)
}

func TestEditPreviewBounded(t *testing.T) {
	var b strings.Builder
	for i := range 300 {
		fmt.Fprintf(&b, "print(%d)\n", i)
	}
	fmt.Fprintf(&b, "print(%q)\n", strings.Repeat("x", 500))
	ev := newEnv(t, map[string]string{"many.py": b.String()}, structural.Options{})
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "log($A)", "path": "many.py"})
	wantOK(t, res, "(proposed) 301 replacements in 1 file", "diff lines not shown")
	lines := strings.Split(res.AllText(), "\n")
	if len(lines) > structural.MaxDiffLines+4 {
		t.Errorf("preview has %d lines", len(lines))
	}
	p, err := ev.e.Stage(context.Background(), ev.fs, structural.EditRequest{Pattern: "print($A)", Rewrite: "log($A)", Path: "many.py"})
	if err != nil || strings.Count(p.Diff, "\n+log(") != 301 {
		t.Fatalf("the full diff is in the proposal: %v", err)
	}
	if !strings.Contains(structural.FormatProposal(&structural.Proposal{ID: "edit_9", Files: p.Files, Replacements: 1, Diff: "+" + strings.Repeat("y", 1000) + "\n"}), "more bytes)") {
		t.Error("a long diff line is not cut")
	}
}

// TestSearchSkipsHardLinks: a file with another name, which may lie
// outside the workspace, is not printed by ast_grep, as read refuses it;
// the skip is counted, as a directory search and as the file itself.
func TestSearchSkipsHardLinks(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "outside.py")
	if err := os.WriteFile(secret, []byte("print('s3cret')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := newEnv(t, map[string]string{"a.py": "print(1)\n"}, structural.Options{})
	if err := os.Link(secret, filepath.Join(ev.dir, "linked.py")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{".", "linked.py"} {
		res := ev.call(t, "ast_grep", map[string]any{"pattern": "print($A)", "language": "python", "path": path})
		if strings.Contains(res.AllText(), "s3cret") || !strings.Contains(res.AllText(), "1 hard_links") {
			t.Errorf("ast_grep %s over a hard-linked file: %s", path, res.AllText())
		}
	}
}

func TestEditSkipsHardLinks(t *testing.T) {
	ev := newEnv(t, map[string]string{"a.py": "print(1)\n", "b.py": "print(2)\n"}, structural.Options{})
	if err := os.Link(filepath.Join(ev.dir, "b.py"), filepath.Join(ev.dir, "b-link.txt")); err != nil {
		t.Fatal(err)
	}
	res := ev.call(t, "ast_edit", map[string]any{"pattern": "print($A)", "rewrite": "log($A)", "language": "python"})
	wantOK(t, res, "1 replacement in 1 file (skipped: 1 hard_links)", "a.py")
	if strings.Contains(res.AllText(), "b.py") {
		t.Errorf("a hard-linked file was staged: %s", res.AllText())
	}
}
