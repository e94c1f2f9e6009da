package dirfs

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"berth.dev/berth/sandbox"
)

// TestWalkInfoMatchesLstat checks the infos Walk builds from fstatat against
// os.Lstat for every kind of entry.
func TestWalkInfoMatchesLstat(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "file"), []byte("hello"), 0o640))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "sub", "exe"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(dir, "sub", "exe"), 0o755|fs.ModeSetuid))
	must(os.Symlink("file", filepath.Join(dir, "link")))
	must(os.Symlink("/nonexistent", filepath.Join(dir, "dangling")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	must(os.Mkdir(filepath.Join(dir, "sticky"), 0o777))
	must(os.Chmod(filepath.Join(dir, "sticky"), 0o777|fs.ModeSticky))

	fsys, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = fsys.Walk(context.Background(), ".", sandbox.WalkOptions{}, func(name string, got fs.FileInfo) error {
		want, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		seen++
		if name != "." && got.Name() != want.Name() {
			t.Errorf("%s: Name %q, want %q", name, got.Name(), want.Name())
		}
		if got.Mode() != want.Mode() || got.IsDir() != want.IsDir() {
			t.Errorf("%s: Mode %v, want %v", name, got.Mode(), want.Mode())
		}
		if got.Size() != want.Size() || !got.ModTime().Equal(want.ModTime()) {
			t.Errorf("%s: size/mtime %d %v, want %d %v", name, got.Size(), got.ModTime(), want.Size(), want.ModTime())
		}
		gs, ok1 := got.Sys().(*syscall.Stat_t)
		ws, ok2 := want.Sys().(*syscall.Stat_t)
		if !ok1 || !ok2 || gs.Ino != ws.Ino || gs.Nlink != ws.Nlink || gs.Uid != ws.Uid {
			t.Errorf("%s: Sys %+v, want %+v", name, got.Sys(), want.Sys())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 8 {
		t.Errorf("walk saw %d entries, want 8", seen)
	}
}
