package workspace_test

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/workspace"
)

// failFS fails WriteFile for one name; before, when set, runs first.
type failFS struct {
	sandbox.FS
	fail   string
	before func()
}

func (f *failFS) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	if name == f.fail {
		if f.before != nil {
			f.before()
		}
		return &fs.PathError{Op: "write", Path: name, Err: errors.New("no space left on device")}
	}
	return f.FS.WriteFile(ctx, name, data, perm)
}

func newFS(t *testing.T, files map[string]string) (string, sandbox.FS) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys, err := dirfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, fsys
}

func content(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			got[rel+"/"] = ""
			return nil
		}
		data, err := os.ReadFile(p)
		got[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCommitAllOrNothing: a failed write restores every file already
// written (created, moved, deleted, replaced) and says so.
func TestCommitAllOrNothing(t *testing.T) {
	dir, fsys := newFS(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n", "z.txt": "z\n"})
	before := content(t, dir)
	changes := []workspace.Change{
		{Path: "new/sub/added.txt", New: []byte("added\n")},
		{Path: "a.txt", Old: []byte("a\n"), New: []byte("A\n")},
		{Path: "b.txt", Old: []byte("b\n")},
		{Path: "c.txt", Old: []byte("c\n"), New: []byte("C\n"), MoveTo: "moved/c.txt"},
		{Path: "z.txt", Old: []byte("z\n"), New: []byte("Z\n")},
	}
	err := workspace.Commit(context.Background(), &failFS{FS: fsys, fail: "z.txt"}, changes)
	var ce *workspace.CommitError
	if !errors.As(err, &ce) || ce.Path != "z.txt" || len(ce.Undo) != 0 {
		t.Fatalf("err = %v, want a *CommitError for z.txt with nothing left undone", err)
	}
	for _, want := range []string{"writing z.txt failed", "no space left", "restored"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if after := content(t, dir); !maps.Equal(before, after) {
		t.Errorf("after the rollback\n%v\nwant\n%v", after, before)
	}

	if err := workspace.Commit(context.Background(), fsys, changes); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"new/": "", "new/sub/": "", "new/sub/added.txt": "added\n", "a.txt": "A\n", "moved/": "", "moved/c.txt": "C\n", "z.txt": "Z\n"}
	if after := content(t, dir); !maps.Equal(want, after) {
		t.Errorf("after the commit\n%v\nwant\n%v", after, want)
	}
}

// TestCommitRefusesStale: a file that no longer holds Old stops the commit
// before anything is written.
func TestCommitRefusesStale(t *testing.T) {
	dir, fsys := newFS(t, map[string]string{"a.txt": "a\n", "b.txt": "changed\n"})
	before := content(t, dir)
	err := workspace.Commit(context.Background(), fsys, []workspace.Change{
		{Path: "a.txt", Old: []byte("a\n"), New: []byte("A\n")},
		{Path: "b.txt", Old: []byte("b\n"), New: []byte("B\n")},
	})
	var we *tools.Error
	if !errors.As(err, &we) || !strings.Contains(we.Msg, "b.txt changed on disk") || !strings.Contains(we.Msg, "No file was changed") {
		t.Fatalf("err = %v", err)
	}
	if after := content(t, dir); !maps.Equal(before, after) {
		t.Errorf("a refused commit changed files: %v", after)
	}
}

// TestWriteKeepOthers: with KeepOthers, a written file another writer
// changed before the rollback is left as that writer left it.
func TestWriteKeepOthers(t *testing.T) {
	dir, fsys := newFS(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	other := func() {
		if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("other\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
	err := workspace.Write(context.Background(), &failFS{FS: fsys, fail: "b.txt", before: other}, []workspace.Change{
		{Path: "a.txt", Old: []byte("a\n"), New: []byte("A\n"), Perm: 0o644},
		{Path: "b.txt", Old: []byte("b\n"), New: []byte("B\n"), Perm: 0o644},
	}, workspace.WriteOptions{KeepOthers: true})
	var ce *workspace.CommitError
	if !errors.As(err, &ce) || len(ce.Undo) != 1 || ce.Undo[0].Path != "a.txt" || !errors.Is(ce.Undo[0].Err, workspace.ErrChangedSince) {
		t.Fatalf("err = %v, want a.txt left to the other writer", err)
	}
	if got := content(t, dir); got["a.txt"] != "other\n" || got["b.txt"] != "b\n" {
		t.Errorf("files = %v", got)
	}
}
