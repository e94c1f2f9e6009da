package dirfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
)

// setup makes a workspace dir "ws" and a sibling "outside" file with known
// content, and returns the FS over ws, ws's path and the outside file's path.
func setup(t *testing.T) (sandbox.FS, string, string) {
	t.Helper()
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	must(t, os.MkdirAll(filepath.Join(ws, "dir", "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("hello\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "dir", "b.txt"), []byte("bee\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(ws, "dir", "sub", "c.txt"), []byte("sea\n"), 0o644))
	outside := filepath.Join(base, "outside")
	must(t, os.WriteFile(outside, []byte("secret\n"), 0o644))
	must(t, os.Symlink(outside, filepath.Join(ws, "out-link")))
	must(t, os.Symlink("../outside", filepath.Join(ws, "out-rel")))
	must(t, os.Symlink(base, filepath.Join(ws, "out-dir")))
	must(t, os.Symlink("a.txt", filepath.Join(ws, "in-link")))
	must(t, os.Symlink("dir", filepath.Join(ws, "in-dir")))
	must(t, os.Symlink("nowhere", filepath.Join(ws, "dangling")))
	fsys, err := dirfs.New(ws)
	must(t, err)
	t.Cleanup(func() { fsys.(io.Closer).Close() })
	return fsys, ws, outside
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func assertOutside(t *testing.T, outside string) {
	t.Helper()
	got, err := os.ReadFile(outside)
	if err != nil || string(got) != "secret\n" {
		t.Fatalf("outside file changed: %q, %v", got, err)
	}
	fi, err := os.Lstat(outside)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("outside file replaced: %v, %v", fi, err)
	}
}

func TestRoot(t *testing.T) {
	fsys, ws, _ := setup(t)
	if fsys.Root() != ws {
		t.Errorf("Root() = %q, want %q", fsys.Root(), ws)
	}
	at, err := dirfs.NewAt(ws, "/workspace")
	must(t, err)
	defer at.(io.Closer).Close()
	if at.Root() != "/workspace" {
		t.Errorf("NewAt Root() = %q", at.Root())
	}
	if data, err := at.ReadFile(context.Background(), "a.txt"); err != nil || string(data) != "hello\n" {
		t.Errorf("NewAt ReadFile = %q, %v", data, err)
	}
	// As the docker backend does: open through /proc/self/fd, then close the
	// fd; the FS keeps working, entry infos included.
	dir, err := os.Open(ws)
	must(t, err)
	viaFd, err := dirfs.NewAt(fmt.Sprintf("/proc/self/fd/%d", dir.Fd()), "/workspace")
	dir.Close()
	must(t, err)
	defer viaFd.(io.Closer).Close()
	ents, err := viaFd.ReadDir(context.Background(), "dir")
	must(t, err)
	for _, e := range ents {
		if fi, err := e.Info(); err != nil || fi.Name() != e.Name() {
			t.Errorf("Info of %s via a closed fd path: %v, %v", e.Name(), fi, err)
		}
	}
	if _, err := dirfs.NewAt(ws, "workspace"); err == nil {
		t.Error("NewAt with a relative root succeeded")
	}
	if _, err := dirfs.New(filepath.Join(ws, "a.txt")); err == nil {
		t.Error("New over a file succeeded")
	}
}

func TestReadFile(t *testing.T) {
	fsys, ws, outside := setup(t)
	must(t, syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	ctx := context.Background()
	tests := []struct {
		name    string
		want    string
		wantErr error // nil: success
	}{
		{"a.txt", "hello\n", nil},
		{"dir/sub/c.txt", "sea\n", nil},
		{"in-link", "hello\n", nil},
		{"in-dir/b.txt", "bee\n", nil},
		{"missing", "", fs.ErrNotExist},
		{"dangling", "", fs.ErrNotExist},
		{"dir", "", fs.ErrInvalid},
		{"fifo", "", fs.ErrInvalid},
		{"../outside", "", sandbox.ErrEscape},
		{"dir/../../outside", "", sandbox.ErrEscape},
		{"a/../../x", "", sandbox.ErrEscape},
		{"/etc/passwd", "", sandbox.ErrEscape},
		{outside, "", sandbox.ErrEscape},
		{"out-link", "", sandbox.ErrEscape},
		{"out-rel", "", sandbox.ErrEscape},
		{"out-dir/outside", "", sandbox.ErrEscape},
		{"a.txt\x00", "", sandbox.ErrEscape},
		{"", "", sandbox.ErrEscape},
		{"./a.txt", "", sandbox.ErrEscape},
		{"dir/", "", sandbox.ErrEscape},
		{"dir//b.txt", "", sandbox.ErrEscape},
	}
	// Both read paths: the kernel's confined lookup (openat2) and os.Root.
	for _, openat2 := range []bool{true, false} {
		restore := dirfs.UseOpenat2(openat2)
		for _, tt := range tests {
			t.Run(fmt.Sprintf("openat2=%v/%s", openat2, tt.name), func(t *testing.T) {
				got, err := fsys.ReadFile(ctx, tt.name)
				if tt.wantErr == nil {
					if err != nil || string(got) != tt.want {
						t.Fatalf("ReadFile = %q, %v; want %q", got, err, tt.want)
					}
					return
				}
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("ReadFile err = %v, want %v", err, tt.wantErr)
				}
				var pe *fs.PathError
				if !errors.As(err, &pe) {
					t.Fatalf("err %T is not a *fs.PathError", err)
				}
			})
		}
		if openat2 && !dirfs.Openat2Available() {
			t.Log("this kernel refuses openat2: only the os.Root path was tested")
		}
		restore()
	}
	assertOutside(t, outside)
}

func TestReadFileTooLarge(t *testing.T) {
	fsys, ws, _ := setup(t)
	f, err := os.Create(filepath.Join(ws, "big"))
	must(t, err)
	must(t, f.Truncate(sandbox.MaxFileSize+1))
	f.Close()
	if _, err := fsys.ReadFile(context.Background(), "big"); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestContextCanceled(t *testing.T) {
	fsys, _, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"ReadFile": func() error { _, err := fsys.ReadFile(ctx, "a.txt"); return err },
		"Stat":     func() error { _, err := fsys.Stat(ctx, "a.txt"); return err },
		"Lstat":    func() error { _, err := fsys.Lstat(ctx, "a.txt"); return err },
		"ReadDir":  func() error { _, err := fsys.ReadDir(ctx, "."); return err },
		"Walk": func() error {
			return fsys.Walk(ctx, ".", sandbox.WalkOptions{}, func(string, fs.FileInfo) error { return nil })
		},
		"WriteFile": func() error { return fsys.WriteFile(ctx, "new", nil, 0o644) },
		"MkdirAll":  func() error { return fsys.MkdirAll(ctx, "d", 0o755) },
		"Remove":    func() error { return fsys.Remove(ctx, "a.txt") },
		"Rename":    func() error { return fsys.Rename(ctx, "a.txt", "z.txt") },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s err = %v, want context.Canceled", name, err)
		}
	}
	if _, err := fsys.Stat(context.Background(), "a.txt"); err != nil {
		t.Errorf("a.txt changed by a canceled call: %v", err)
	}
}

func TestStatLstat(t *testing.T) {
	fsys, _, _ := setup(t)
	ctx := context.Background()
	tests := []struct {
		name      string
		stat      fs.FileMode // type bits; ^0 means an error is expected
		statErr   error
		lstat     fs.FileMode
		lstatErr  error
		statSize  int64
		checkSize bool
	}{
		{name: "a.txt", stat: 0, lstat: 0, statSize: 6, checkSize: true},
		{name: "dir", stat: fs.ModeDir, lstat: fs.ModeDir},
		{name: "in-link", stat: 0, lstat: fs.ModeSymlink, statSize: 6, checkSize: true},
		{name: "in-dir", stat: fs.ModeDir, lstat: fs.ModeSymlink},
		{name: "out-link", statErr: sandbox.ErrEscape, lstat: fs.ModeSymlink},
		{name: "dangling", statErr: fs.ErrNotExist, lstat: fs.ModeSymlink},
		{name: "missing", statErr: fs.ErrNotExist, lstatErr: fs.ErrNotExist},
		{name: "../x", statErr: sandbox.ErrEscape, lstatErr: sandbox.ErrEscape},
		{name: "out-dir/outside", statErr: sandbox.ErrEscape, lstatErr: sandbox.ErrEscape},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi, err := fsys.Stat(ctx, tt.name)
			if tt.statErr != nil {
				if !errors.Is(err, tt.statErr) {
					t.Errorf("Stat err = %v, want %v", err, tt.statErr)
				}
			} else if err != nil || fi.Mode().Type() != tt.stat || (tt.checkSize && fi.Size() != tt.statSize) {
				t.Errorf("Stat = %v, %v", fi, err)
			}
			fi, err = fsys.Lstat(ctx, tt.name)
			if tt.lstatErr != nil {
				if !errors.Is(err, tt.lstatErr) {
					t.Errorf("Lstat err = %v, want %v", err, tt.lstatErr)
				}
			} else if err != nil || fi.Mode().Type() != tt.lstat {
				t.Errorf("Lstat = %v, %v", fi, err)
			}
		})
	}
}

func TestReadDir(t *testing.T) {
	fsys, _, _ := setup(t)
	ctx := context.Background()
	ents, err := fsys.ReadDir(ctx, ".")
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{"a.txt", "dangling", "dir", "in-dir", "in-link", "out-dir", "out-link", "out-rel"}
	if !slices.Equal(names, want) {
		t.Errorf("ReadDir(.) = %v, want %v", names, want)
	}
	if ents, err := fsys.ReadDir(ctx, "in-dir"); err != nil || len(ents) != 2 {
		t.Errorf("ReadDir(in-dir) = %v, %v", ents, err)
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || fi.Name() != e.Name() || fi.Mode().Type() != e.Type() {
			t.Errorf("Info of %s = %v, %v; type %v", e.Name(), fi, err, e.Type())
		}
	}
	for name, wantErr := range map[string]error{
		"out-dir": sandbox.ErrEscape, "..": sandbox.ErrEscape, "missing": fs.ErrNotExist,
	} {
		if _, err := fsys.ReadDir(ctx, name); !errors.Is(err, wantErr) {
			t.Errorf("ReadDir(%s) err = %v, want %v", name, err, wantErr)
		}
	}
}

func TestWalk(t *testing.T) {
	fsys, ws, _ := setup(t)
	must(t, os.MkdirAll(filepath.Join(ws, "node_modules", "x"), 0o755))
	must(t, os.WriteFile(filepath.Join(ws, "node_modules", "x", "i.js"), nil, 0o644))
	ctx := context.Background()
	tests := []struct {
		name string
		dir  string
		opts sandbox.WalkOptions
		fn   func(name string, fi fs.FileInfo) error
		want []string
	}{
		{
			name: "all", dir: ".",
			want: []string{".", "a.txt", "dangling", "dir", "dir/b.txt", "dir/sub", "dir/sub/c.txt", "in-dir", "in-link",
				"node_modules", "node_modules/x", "node_modules/x/i.js", "out-dir", "out-link", "out-rel"},
		},
		{
			name: "skipdirs", dir: ".", opts: sandbox.WalkOptions{SkipDirs: []string{"node_modules", "sub"}},
			want: []string{".", "a.txt", "dangling", "dir", "dir/b.txt", "dir/sub", "in-dir", "in-link",
				"node_modules", "out-dir", "out-link", "out-rel"},
		},
		{
			name: "subdir", dir: "dir",
			want: []string{"dir", "dir/b.txt", "dir/sub", "dir/sub/c.txt"},
		},
		{
			name: "skipdirs does not apply to the start", dir: "node_modules", opts: sandbox.WalkOptions{SkipDirs: []string{"node_modules"}},
			want: []string{"node_modules", "node_modules/x", "node_modules/x/i.js"},
		},
		{
			name: "SkipDir on a directory", dir: ".",
			fn: func(name string, fi fs.FileInfo) error {
				if name == "dir" || name == "node_modules" {
					return fs.SkipDir
				}
				return nil
			},
			want: []string{".", "a.txt", "dangling", "dir", "in-dir", "in-link", "node_modules", "out-dir", "out-link", "out-rel"},
		},
		{
			name: "SkipDir on a file", dir: "dir",
			fn: func(name string, fi fs.FileInfo) error {
				if name == "dir/b.txt" {
					return fs.SkipDir
				}
				return nil
			},
			want: []string{"dir", "dir/b.txt"},
		},
		{
			name: "SkipAll", dir: ".",
			fn: func(name string, fi fs.FileInfo) error {
				if name == "dir/b.txt" {
					return fs.SkipAll
				}
				return nil
			},
			want: []string{".", "a.txt", "dangling", "dir", "dir/b.txt"},
		},
		{
			name: "file", dir: "a.txt",
			want: []string{"a.txt"},
		},
		{
			name: "link start not followed", dir: "in-dir",
			want: []string{"in-dir"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := fsys.Walk(ctx, tt.dir, tt.opts, func(name string, fi fs.FileInfo) error {
				got = append(got, name)
				if name == "out-link" && fi.Mode().Type() != fs.ModeSymlink {
					t.Errorf("out-link reported as %v", fi.Mode())
				}
				if tt.fn != nil {
					return tt.fn(name, fi)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Walk = %v\nwant %v", got, tt.want)
			}
		})
	}

	stop := errors.New("stop")
	if err := fsys.Walk(ctx, ".", sandbox.WalkOptions{}, func(string, fs.FileInfo) error { return stop }); err != stop {
		t.Errorf("Walk err = %v, want fn's error", err)
	}
	for name, wantErr := range map[string]error{"..": sandbox.ErrEscape, "missing": fs.ErrNotExist, "out-dir/x": sandbox.ErrEscape} {
		if err := fsys.Walk(ctx, name, sandbox.WalkOptions{}, func(string, fs.FileInfo) error { return nil }); !errors.Is(err, wantErr) {
			t.Errorf("Walk(%s) err = %v, want %v", name, err, wantErr)
		}
	}

	cctx, cancel := context.WithCancel(ctx)
	n := 0
	err := fsys.Walk(cctx, ".", sandbox.WalkOptions{}, func(string, fs.FileInfo) error {
		n++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("Walk after cancel: err = %v after %d calls", err, n)
	}
}

func TestWriteFile(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		file     string
		perm     fs.FileMode
		wantErr  error
		wantMode fs.FileMode // checked when non-zero
		// check inspects the workspace afterwards
		check func(t *testing.T, ws string)
	}{
		{name: "new file gets perm", file: "new.txt", perm: 0o640, wantMode: 0o640},
		{name: "existing keeps mode", file: "dir/b.txt", perm: 0o644, wantMode: 0o600},
		{name: "new in subdir", file: "dir/sub/n.txt", perm: 0o644, wantMode: 0o644},
		{
			name: "final symlink to outside is replaced", file: "out-link", perm: 0o644, wantMode: 0o644,
			check: func(t *testing.T, ws string) {
				fi, err := os.Lstat(filepath.Join(ws, "out-link"))
				if err != nil || !fi.Mode().IsRegular() {
					t.Errorf("out-link is %v, %v; want a regular file", fi, err)
				}
			},
		},
		{
			name: "final symlink inside is replaced", file: "in-link", perm: 0o644, wantMode: 0o644,
			check: func(t *testing.T, ws string) {
				if data, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(data) != "hello\n" {
					t.Errorf("a.txt written through in-link: %q", data)
				}
			},
		},
		{name: "dangling symlink is replaced", file: "dangling", perm: 0o644, wantMode: 0o644,
			check: func(t *testing.T, ws string) {
				if _, err := os.Lstat(filepath.Join(ws, "nowhere")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("dangling link's target was created: %v", err)
				}
			}},
		{name: "through a directory link inside", file: "in-dir/b.txt", perm: 0o644, wantMode: 0o600},
		{name: "through a directory link outside", file: "out-dir/outside", perm: 0o644, wantErr: sandbox.ErrEscape},
		{name: "dotdot", file: "../outside", perm: 0o644, wantErr: sandbox.ErrEscape},
		{name: "inner dotdot", file: "a/../../x", perm: 0o644, wantErr: sandbox.ErrEscape},
		{name: "absolute", file: "/etc/passwd", perm: 0o644, wantErr: sandbox.ErrEscape},
		{name: "NUL", file: "x\x00y", perm: 0o644, wantErr: sandbox.ErrEscape},
		{name: "longest name", file: strings.Repeat("n", 255), perm: 0o644, wantMode: 0o644},
		{name: "missing parent", file: "nodir/x", perm: 0o644, wantErr: fs.ErrNotExist},
		{name: "directory", file: "dir", perm: 0o644, wantErr: fs.ErrInvalid},
		{name: "root", file: ".", perm: 0o644, wantErr: fs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys, ws, outside := setup(t)
			data := []byte("written " + tt.name + "\n")
			err := fsys.WriteFile(ctx, tt.file, data, tt.perm)
			assertOutside(t, outside)
			assertNoTemp(t, ws)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("WriteFile err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			must(t, err)
			got, err := fsys.ReadFile(ctx, tt.file)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %q, %v", got, err)
			}
			fi, err := fsys.Lstat(ctx, tt.file)
			must(t, err)
			if tt.wantMode != 0 && !strings.Contains(tt.file, "in-dir") && fi.Mode() != tt.wantMode {
				t.Errorf("mode = %v, want %v", fi.Mode(), tt.wantMode)
			}
			if tt.check != nil {
				tt.check(t, ws)
			}
		})
	}
}

// TestWriteFileHardlink checks that a write to a hard link of a file leaves
// the other link's content alone (the rename replaces the name, not the
// inode).
func TestWriteFileHardlink(t *testing.T) {
	fsys, ws, outside := setup(t)
	if err := os.Link(outside, filepath.Join(ws, "hard")); err != nil {
		t.Skipf("cannot hard link: %v", err)
	}
	must(t, fsys.WriteFile(context.Background(), "hard", []byte("new"), 0o644))
	assertOutside(t, outside)
}

func TestWriteFileReadOnlyDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	fsys, ws, _ := setup(t)
	must(t, os.Chmod(filepath.Join(ws, "dir"), 0o555))
	t.Cleanup(func() { os.Chmod(filepath.Join(ws, "dir"), 0o755) })
	err := fsys.WriteFile(context.Background(), "dir/b.txt", []byte("x"), 0o644)
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("err = %v, want ErrPermission", err)
	}
	if data, _ := os.ReadFile(filepath.Join(ws, "dir", "b.txt")); string(data) != "bee\n" {
		t.Errorf("b.txt = %q", data)
	}
	assertNoTemp(t, ws)
}

// TestWriteFileKeepsOwner checks that as root a rewritten file keeps its
// owner and group.
func TestWriteFileKeepsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can give files away")
	}
	fsys, ws, _ := setup(t)
	p := filepath.Join(ws, "a.txt")
	must(t, os.Chown(p, 12345, 23456))
	must(t, fsys.WriteFile(context.Background(), "a.txt", []byte("x"), 0o644))
	fi, err := os.Stat(p)
	must(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 12345 || st.Gid != 23456 {
		t.Errorf("owner = %d:%d, want 12345:23456", st.Uid, st.Gid)
	}
}

func assertNoTemp(t *testing.T, ws string) {
	t.Helper()
	filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".berth-tmp-") {
			t.Errorf("temporary file left behind: %s", p)
		}
		return nil
	})
}

func TestMkdirRemoveRename(t *testing.T) {
	fsys, ws, outside := setup(t)
	ctx := context.Background()
	steps := []struct {
		name    string
		do      func() error
		wantErr error
	}{
		{"mkdirall", func() error { return fsys.MkdirAll(ctx, "x/y/z", 0o755) }, nil},
		{"mkdirall existing", func() error { return fsys.MkdirAll(ctx, "x/y", 0o755) }, nil},
		{"mkdirall escape", func() error { return fsys.MkdirAll(ctx, "../esc", 0o755) }, sandbox.ErrEscape},
		{"mkdirall through link out", func() error { return fsys.MkdirAll(ctx, "out-dir/esc", 0o755) }, sandbox.ErrEscape},
		{"rename file", func() error { return fsys.Rename(ctx, "a.txt", "x/y/a.txt") }, nil},
		{"rename over file", func() error { return fsys.Rename(ctx, "dir/b.txt", "x/y/a.txt") }, nil},
		{"rename missing", func() error { return fsys.Rename(ctx, "nope", "x/nope") }, fs.ErrNotExist},
		{"rename escape new", func() error { return fsys.Rename(ctx, "x/y/a.txt", "../stolen") }, sandbox.ErrEscape},
		{"rename escape old", func() error { return fsys.Rename(ctx, "../outside", "mine") }, sandbox.ErrEscape},
		{"rename into link out", func() error { return fsys.Rename(ctx, "x/y/a.txt", "out-dir/outside") }, sandbox.ErrEscape},
		{"remove link out", func() error { return fsys.Remove(ctx, "out-link") }, nil},
		{"remove dangling", func() error { return fsys.Remove(ctx, "dangling") }, nil},
		{"remove nonempty", func() error { return fsys.Remove(ctx, "x") }, nil /* checked below */},
		{"remove escape", func() error { return fsys.Remove(ctx, "../outside") }, sandbox.ErrEscape},
		{"remove through link out", func() error { return fsys.Remove(ctx, "out-dir/outside") }, sandbox.ErrEscape},
		{"remove root", func() error { return fsys.Remove(ctx, ".") }, fs.ErrInvalid},
		{"remove missing", func() error { return fsys.Remove(ctx, "missing") }, fs.ErrNotExist},
		{"remove empty dir", func() error { return fsys.Remove(ctx, "x/y/z") }, nil},
	}
	for _, s := range steps {
		err := s.do()
		switch {
		case s.name == "remove nonempty":
			if err == nil {
				t.Errorf("%s: removed a non-empty directory", s.name)
			}
		case s.wantErr == nil && err != nil:
			t.Errorf("%s: %v", s.name, err)
		case s.wantErr != nil && !errors.Is(err, s.wantErr):
			t.Errorf("%s: err = %v, want %v", s.name, err, s.wantErr)
		}
	}
	assertOutside(t, outside)
	if data, err := os.ReadFile(filepath.Join(ws, "x", "y", "a.txt")); err != nil || string(data) != "bee\n" {
		t.Errorf("x/y/a.txt = %q, %v", data, err)
	}
	for _, gone := range []string{"out-link", "dangling", "x/y/z", "a.txt", "dir/b.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still exists: %v", gone, err)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(ws), "esc")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("escape directory created: %v", err)
	}
}

// TestWriteRace flips ws/f between a regular file and a symbolic link to a
// file outside the root while writes, reads and renames through the FS run.
// The outside file must never change.
func TestWriteRace(t *testing.T) {
	fsys, ws, outside := setup(t)
	ctx := context.Background()
	f := filepath.Join(ws, "f")
	d := filepath.Join(ws, "d")
	must(t, os.Mkdir(d, 0o755))
	outDir := filepath.Dir(outside)

	writes := 2000
	if testing.Short() {
		writes = 200
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := filepath.Join(ws, "flip-tmp")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// f: a link to the outside file, then a regular file.
			os.Remove(tmp)
			if i%2 == 0 {
				os.Symlink(outside, tmp)
			} else {
				os.WriteFile(tmp, []byte("inside"), 0o644)
			}
			os.Rename(tmp, f)
			// d: a directory, then a link to the outside directory.
			if i%2 == 0 {
				os.RemoveAll(d)
				os.Symlink(outDir, d)
			} else {
				os.Remove(d)
				os.Mkdir(d, 0o755)
			}
		}
	}()
	for i := 0; i < writes; i++ {
		fsys.WriteFile(ctx, "f", []byte("payload"), 0o644)
		fsys.WriteFile(ctx, "d/outside", []byte("payload"), 0o644)
		if data, err := fsys.ReadFile(ctx, "f"); err == nil && string(data) == "secret\n" {
			t.Fatal("read the outside file through f")
		}
		if data, err := fsys.ReadFile(ctx, "d/outside"); err == nil && string(data) == "secret\n" {
			t.Fatal("read the outside file through d")
		}
		fsys.Remove(ctx, "d/outside")
	}
	close(stop)
	wg.Wait()
	assertOutside(t, outside)
}

// FuzzNames writes, reads and renames through arbitrary names: nothing
// outside the root is ever created or changed.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"a.txt", "../outside", "out-link", "out-dir/outside", "dir/../../x", "/etc/passwd", "in-dir/new", ".", "out-rel", "dangling"} {
		f.Add(s)
	}
	base := f.TempDir()
	ws := filepath.Join(base, "ws")
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		f.Fatal(err)
	}
	os.WriteFile(outside, []byte("secret\n"), 0o644)
	os.Symlink(outside, filepath.Join(ws, "out-link"))
	os.Symlink("../outside", filepath.Join(ws, "out-rel"))
	os.Symlink(base, filepath.Join(ws, "out-dir"))
	os.Symlink("nowhere", filepath.Join(ws, "dangling"))
	os.Mkdir(filepath.Join(ws, "dir"), 0o755)
	os.Symlink("dir", filepath.Join(ws, "in-dir"))
	fsys, err := dirfs.New(ws)
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, name string) {
		fsys.WriteFile(ctx, name, []byte("payload"), 0o644)
		fsys.MkdirAll(ctx, name+"-d", 0o755)
		fsys.Rename(ctx, name, "moved")
		fsys.Rename(ctx, "moved", name)
		if data, err := fsys.ReadFile(ctx, name); err == nil && string(data) == "secret\n" {
			t.Fatalf("read the outside file through %q", name)
		}
		ents, err := os.ReadDir(base)
		if err != nil || len(ents) != 2 {
			t.Fatalf("entries beside the root after %q: %v %v", name, ents, err)
		}
		assertOutside(t, outside)
	})
}

// A closed FS reads nothing, on either read path: its directory descriptor
// is not used after Close (a reused descriptor number could name another
// directory).
func TestReadAfterClose(t *testing.T) {
	for _, openat2 := range []bool{true, false} {
		restore := dirfs.UseOpenat2(openat2)
		ws := t.TempDir()
		must(t, os.WriteFile(filepath.Join(ws, "a.txt"), []byte("hello\n"), 0o644))
		fsys, err := dirfs.New(ws)
		must(t, err)
		must(t, fsys.(io.Closer).Close())
		// Descriptors opened now may take the closed one's number.
		other := t.TempDir()
		must(t, os.WriteFile(filepath.Join(other, "a.txt"), []byte("other\n"), 0o644))
		f, err := os.Open(other)
		must(t, err)
		got, err := fsys.ReadFile(context.Background(), "a.txt")
		f.Close()
		if err == nil || !errors.Is(err, os.ErrClosed) {
			t.Errorf("openat2=%v: ReadFile after Close = %q, %v; want an error wrapping os.ErrClosed", openat2, got, err)
		}
		restore()
	}
}
