package structural_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/structural"
)

// walkCounting is a watchable FS that counts its walks.
type walkCounting struct {
	sandbox.FS
	walks atomic.Int32
}

func (w *walkCounting) Walk(ctx context.Context, dir string, opts sandbox.WalkOptions, fn sandbox.WalkFunc) error {
	w.walks.Add(1)
	return w.FS.Walk(ctx, dir, opts, fn)
}

func (w *walkCounting) Watch(ctx context.Context, dir string, opts sandbox.WatchOptions) (sandbox.Watch, error) {
	return w.FS.(sandbox.Watcher).Watch(ctx, dir, opts)
}

// TestWarmSearchFollowsWatch: with the workspace watched, a warm search
// does not walk the tree; a listed file changed or removed behind the
// tools' back is seen without a walk, a file of another language changes
// nothing, and a new file of the language is found by walking again, as
// is a change of an ignore file, .git/info/exclude included.
func TestWarmSearchFollowsWatch(t *testing.T) {
	dir := t.TempDir()
	put := func(name, text string) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	put("a.go", "package a\n\nfunc f() { g(1) }\n")
	put("sub/b.go", "package sub\n\nfunc h() { g(2) }\n")
	sb := host.New(host.Options{})
	t.Cleanup(func() { sb.Close() })
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ws.(sandbox.Watcher); !ok {
		t.Fatal("the host workspace cannot be watched")
	}
	fsys := &walkCounting{FS: ws}
	e := structural.NewEngine(structural.Options{})
	r := tools.NewRegistry()
	structural.Register(r, fsys, e)
	e.Follow(fsys)
	t.Cleanup(func() { e.Close() })
	search := func(wantWalks int32, want ...string) {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"pattern": "g($A)", "language": "go"})
		res, err := r.Call(t.Context(), tools.SurfaceDefault, "ast_grep", raw)
		if err != nil || res.IsError {
			t.Fatalf("ast_grep: %v %s", err, res.AllText())
		}
		for _, w := range want {
			if !strings.Contains(res.AllText(), w) {
				t.Fatalf("the search lacks %q:\n%s", w, res.AllText())
			}
		}
		if n := fsys.walks.Load(); n != wantWalks {
			t.Fatalf("%d walks so far, want %d:\n%s", n, wantWalks, res.AllText())
		}
	}
	search(1, "2 matches in 2 files")
	search(1, "2 matches in 2 files") // warm: no walk
	put("a.go", "package a\n\nfunc f() { g(1); g(3) }\n")
	search(1, "3 matches in 2 files")
	put("notes.txt", "g(4)\n")
	search(1, "3 matches in 2 files")
	os.Remove(filepath.Join(dir, "sub/b.go"))
	search(1, "2 matches in 1 file")
	put("sub/c.go", "package sub\n\nfunc k() { g(5) }\n")
	search(2, "3 matches in 2 files", "sub/c.go")
	search(2, "3 matches in 2 files")
	// An ignore rule changes what is searched: walked again.
	put(".gitignore", "sub/\n")
	search(3, "2 matches in 1 file")
	// .git/info/exclude is not watched (.git is skipped), yet a rule
	// added there is honoured by the next search, which walks again, and
	// the one after it is warm.
	put(".git/info/exclude", "a.go\n")
	search(4, "0 matches in 0 files")
	search(4, "0 matches in 0 files")
	os.Remove(filepath.Join(dir, ".git/info/exclude"))
	search(5, "2 matches in 1 file")
}
