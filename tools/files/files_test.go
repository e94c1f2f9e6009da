package files_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/files"
)

// env is a workspace "ws" in a temp dir, with a file "outside" beside it.
type env struct {
	base, ws, outside string
	fs                sandbox.FS
	reg               *tools.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{base: base, ws: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	e.mkfile(t, "a.txt", "alpha\nbeta\ngamma\n", 0o644)
	e.mkfile(t, "dir/b.txt", "bee\n", 0o644)
	e.mkfile(t, "script.sh", "#!/bin/sh\necho hi\n", 0o755)
	must(t, os.WriteFile(e.outside, []byte("secret\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(base, "ws2"), 0o755))
	must(t, os.WriteFile(filepath.Join(base, "ws2", "x"), []byte("sibling\n"), 0o644))
	must(t, os.Symlink(e.outside, filepath.Join(e.ws, "out-link")))
	must(t, os.Symlink(base, filepath.Join(e.ws, "out-dir")))
	must(t, os.Symlink("a.txt", filepath.Join(e.ws, "in-link")))
	fsys, err := dirfs.New(e.ws)
	must(t, err)
	t.Cleanup(func() { fsys.(io.Closer).Close() })
	e.fs = fsys
	e.reg = tools.NewRegistry()
	files.Register(e.reg, fsys)
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) mkfile(t *testing.T, name, content string, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(e.ws, name)
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(content), mode))
	must(t, os.Chmod(p, mode))
}

func (e *env) content(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.ws, name))
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return string(data)
}

func (e *env) mode(t *testing.T, name string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(e.ws, name))
	must(t, err)
	return fi.Mode()
}

// call runs a tool on the default surface and fails the test on a call error.
func (e *env) call(t *testing.T, tool string, args any) *tools.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	must(t, err)
	res, err := e.reg.Call(context.Background(), tools.SurfaceDefault, tool, raw)
	if err != nil {
		t.Fatalf("%s: call error: %v", tool, err)
	}
	return res
}

// snapshot records every entry below base (the workspace and the files
// beside it): type, mode and content.
func snapshot(t *testing.T, base string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(data)
		}
		snap[rel] = v
		return nil
	})
	must(t, err)
	return snap
}

func assertSame(t *testing.T, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed: %q -> %q", k, v, after[k])
		}
	}
	for k, v := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s appeared: %q", k, v)
		}
	}
}

func wantError(t *testing.T, res *tools.Result, substrs ...string) {
	t.Helper()
	if !res.IsError {
		t.Fatalf("want a tool error, got success: %s", res.AllText())
	}
	for _, s := range substrs {
		if !strings.Contains(res.AllText(), s) {
			t.Errorf("error text lacks %q:\n%s", s, res.AllText())
		}
	}
	if len(res.Touched) > 0 {
		t.Errorf("failed call touched %v", res.Touched)
	}
}

func wantOK(t *testing.T, res *tools.Result, substrs ...string) {
	t.Helper()
	if res.IsError {
		t.Fatalf("want success, got error: %s", res.AllText())
	}
	for _, s := range substrs {
		if !strings.Contains(res.AllText(), s) {
			t.Errorf("result lacks %q:\n%s", s, res.AllText())
		}
	}
}

// TestPathEscapes runs every tool against paths that leave the workspace:
// each is a tool error naming the workspace, and nothing changes anywhere.
func TestPathEscapes(t *testing.T) {
	e := newEnv(t)
	paths := []string{
		"../outside",
		"dir/../../outside",
		"a/../../x",
		"..",
		e.outside,
		"/etc/passwd",
		filepath.Join(e.base, "ws2", "x"), // a sibling sharing the prefix
		e.ws + "2/x",
		"~/x",
		"out-link",
		"out-dir/outside",
		"out-dir/ws2/new",
	}
	for _, p := range paths {
		patchUpdate := fmt.Sprintf("*** Begin Patch\n*** Update File: %s\n-secret\n+stolen\n*** End Patch", p)
		patchAdd := fmt.Sprintf("*** Begin Patch\n*** Add File: %s\n+new\n*** End Patch", p)
		patchDelete := fmt.Sprintf("*** Begin Patch\n*** Delete File: %s\n*** End Patch", p)
		patchMove := fmt.Sprintf("*** Begin Patch\n*** Update File: a.txt\n*** Move to: %s\n*** End Patch", p)
		calls := []struct {
			tool string
			args any
		}{
			{"read", map[string]any{"path": p}},
			{"write", map[string]any{"path": p, "content": "stolen\n"}},
			{"edit", map[string]any{"path": p, "old_string": "secret", "new_string": "stolen"}},
			{"apply_patch", map[string]any{"patch": patchUpdate}},
			{"apply_patch", map[string]any{"patch": patchAdd}},
			{"apply_patch", map[string]any{"patch": patchDelete}},
			{"apply_patch", map[string]any{"patch": patchMove}},
		}
		for i, c := range calls {
			t.Run(fmt.Sprintf("%s/%d/%s", c.tool, i, p), func(t *testing.T) {
				before := snapshot(t, e.base)
				res := e.call(t, c.tool, c.args)
				wantError(t, res, "outside the workspace", e.ws)
				if strings.Contains(res.AllText(), "secret") || strings.Contains(res.AllText(), "sibling") {
					t.Errorf("outside content leaked: %s", res.AllText())
				}
				assertSame(t, before, snapshot(t, e.base))
			})
		}
	}
	t.Run("NUL", func(t *testing.T) {
		wantError(t, e.call(t, "write", map[string]any{"path": "a\x00b", "content": "x"}), "NUL")
	})
}

func TestPathsInside(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"a.txt", "./a.txt", "dir/../a.txt", filepath.Join(e.ws, "a.txt"), e.ws + "/dir/../a.txt", "in-link"} {
		wantOK(t, e.call(t, "read", map[string]any{"path": p}), "     1\talpha")
	}
	wantOK(t, e.call(t, "read", map[string]any{"path": e.ws}), "directory "+e.ws, "a.txt", "dir/")
	wantOK(t, e.call(t, "write", map[string]any{"path": filepath.Join(e.ws, "abs.txt"), "content": "x"}), "created")
	if e.content(t, "abs.txt") != "x" {
		t.Error("abs.txt not written")
	}
}

func TestRead(t *testing.T) {
	e := newEnv(t)
	var long strings.Builder
	for i := 1; i <= files.DefaultReadLines+5; i++ {
		fmt.Fprintf(&long, "line %d\n", i)
	}
	e.mkfile(t, "long.txt", long.String(), 0o644)
	e.mkfile(t, "bin", "\x7fELF\x00\x01\x02", 0o644)
	e.mkfile(t, "empty", "", 0o644)
	e.mkfile(t, "crlf.txt", "one\r\ntwo\r\n", 0o644)
	e.mkfile(t, "wide.txt", strings.Repeat("é", files.MaxLineChars)+"\nshort\n", 0o644)
	e.mkfile(t, "nonl.txt", "no newline", 0o644)
	must(t, os.Symlink("nowhere", filepath.Join(e.ws, "dangling")))
	var big strings.Builder
	for big.Len() < 2*files.MaxReadChars {
		big.WriteString(strings.Repeat("x", 99) + "\n")
	}
	e.mkfile(t, "big.txt", big.String(), 0o644)

	tests := []struct {
		name    string
		args    map[string]any
		isError bool
		want    []string
		notWant []string
	}{
		{name: "whole file", args: map[string]any{"path": "a.txt"}, want: []string{"     1\talpha\n     2\tbeta\n     3\tgamma\n"}, notWant: []string{"offset="}},
		{name: "offset and limit", args: map[string]any{"path": "a.txt", "offset": 2, "limit": 1}, want: []string{"     2\tbeta\n", "showing lines 2-2 of 3", "offset=3"}, notWant: []string{"alpha", "gamma"}},
		{name: "offset past end", args: map[string]any{"path": "a.txt", "offset": 9}, isError: true, want: []string{"has 3 lines", "past the end"}},
		{name: "negative", args: map[string]any{"path": "a.txt", "offset": -1}, isError: true, want: []string{"must not be negative"}},
		{name: "default limit", args: map[string]any{"path": "long.txt"}, want: []string{"  2000\tline 2000\n", fmt.Sprintf("showing lines 1-2000 of %d", files.DefaultReadLines+5), "offset=2001"}, notWant: []string{"line 2001"}},
		{name: "continue", args: map[string]any{"path": "long.txt", "offset": 2001}, want: []string{"  2005\tline 2005"}, notWant: []string{"offset="}},
		{name: "char cap", args: map[string]any{"path": "big.txt"}, want: []string{"call read with offset="}},
		{name: "directory", args: map[string]any{"path": "dir"}, want: []string{"directory dir (1 entry):\nb.txt"}},
		{name: "root listing", args: map[string]any{"path": "."}, want: []string{"entries):\n", "dir/", "out-link (symbolic link, leads outside the workspace)", "in-link (symbolic link to a file)", "dangling (symbolic link, dangling)"}},
		{name: "missing", args: map[string]any{"path": "dir/nope.go"}, isError: true, want: []string{"dir/nope.go does not exist", "list its parent directory dir"}},
		{name: "binary", args: map[string]any{"path": "bin"}, isError: true, want: []string{"binary"}},
		{name: "empty", args: map[string]any{"path": "empty"}, want: []string{"empty (0 bytes)"}},
		{name: "crlf", args: map[string]any{"path": "crlf.txt"}, want: []string{"     1\tone\n", "CRLF"}, notWant: []string{"\r"}},
		{name: "long line", args: map[string]any{"path": "wide.txt"}, want: []string{"[line cut]", "     2\tshort", "1 line longer than"}},
		{name: "no final newline", args: map[string]any{"path": "nonl.txt"}, want: []string{"     1\tno newline\n"}},
		{name: "dangling link", args: map[string]any{"path": "dangling"}, isError: true, want: []string{"does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := e.call(t, "read", tt.args)
			if res.IsError != tt.isError {
				t.Fatalf("IsError = %v: %s", res.IsError, res.AllText())
			}
			text := res.AllText()
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("lacks %q:\n%.600s", w, text)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(text, w) {
					t.Errorf("contains %q:\n%.600s", w, text)
				}
			}
			if len(text) > files.MaxReadChars+1000 {
				t.Errorf("result is %d chars, more than the cap", len(text))
			}
			if res.Touched != nil {
				t.Errorf("read touched %v", res.Touched)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		content string
		isError bool
		want    []string
		check   func(t *testing.T, e *env)
	}{
		{name: "create with parents", path: "new/deep/f.go", content: "package f\n", want: []string{"new/deep/f.go: created, 10 bytes, 1 line"},
			check: func(t *testing.T, e *env) {
				if e.content(t, "new/deep/f.go") != "package f\n" || e.mode(t, "new/deep/f.go").Perm()&0o600 != 0o600 {
					t.Error("new file wrong")
				}
			}},
		{name: "overwrite keeps mode", path: "script.sh", content: "#!/bin/sh\necho bye\n", want: []string{"overwrote (was 18 bytes)", "2 lines"},
			check: func(t *testing.T, e *env) {
				if e.mode(t, "script.sh") != 0o755 || e.content(t, "script.sh") != "#!/bin/sh\necho bye\n" {
					t.Errorf("script.sh: %v %q", e.mode(t, "script.sh"), e.content(t, "script.sh"))
				}
			}},
		{name: "empty content", path: "empty.txt", content: "", want: []string{"created, 0 bytes, 0 lines"}},
		{name: "directory", path: "dir", isError: true, want: []string{"is a directory"}},
		{name: "workspace root", path: ".", isError: true, want: []string{"workspace directory"}},
		{name: "symlink inside", path: "in-link", isError: true, want: []string{"symbolic link"},
			check: func(t *testing.T, e *env) {
				if e.mode(t, "in-link")&fs.ModeSymlink == 0 || e.content(t, "a.txt") != "alpha\nbeta\ngamma\n" {
					t.Error("in-link or a.txt changed")
				}
			}},
		{name: "parent is a file", path: "a.txt/x", isError: true, want: []string{"a.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			var before map[string]string
			if tt.isError {
				before = snapshot(t, e.base)
			}
			res := e.call(t, "write", map[string]any{"path": tt.path, "content": tt.content})
			if tt.isError {
				wantError(t, res, tt.want...)
				assertSame(t, before, snapshot(t, e.base))
			} else {
				wantOK(t, res, tt.want...)
				if !slices.Equal(res.Touched, []string{filepath.Clean(tt.path)}) {
					t.Errorf("Touched = %v", res.Touched)
				}
			}
			if tt.check != nil {
				tt.check(t, e)
			}
		})
	}
}

func TestEdit(t *testing.T) {
	const src = "func a() {\n\treturn 1\n}\n\nfunc b() {\n\treturn 1\n}\n"
	tests := []struct {
		name    string
		file    string // content of f.go; src when empty
		args    map[string]any
		isError bool
		want    []string
		result  string // f.go afterwards, for successes
	}{
		{name: "unique", args: map[string]any{"old_string": "func a() {\n\treturn 1", "new_string": "func a() {\n\treturn 2"},
			want: []string{"f.go: 1 replacement at line 1", "     2\t\treturn 2"}, result: strings.Replace(src, "return 1", "return 2", 1)},
		{name: "not unique", args: map[string]any{"old_string": "\treturn 1\n", "new_string": "\treturn 2\n"}, isError: true,
			want: []string{"occurs 2 times in f.go", "lines 2 and 6", "replace_all"}},
		{name: "replace all", args: map[string]any{"old_string": "return 1", "new_string": "return 2", "replace_all": true},
			want: []string{"2 replacements at lines 2 and 6"}, result: strings.ReplaceAll(src, "return 1", "return 2")},
		{name: "not found, whitespace differs", args: map[string]any{"old_string": "func b() {\n    return 1\n}", "new_string": "x"}, isError: true,
			want: []string{"not found in f.go", "whitespace", "line 5"}},
		{name: "not found at all", args: map[string]any{"old_string": "nothing like it", "new_string": "x"}, isError: true,
			want: []string{"not found in f.go", "indentation", "read the file again"}},
		{name: "same strings", args: map[string]any{"old_string": "return 1", "new_string": "return 1"}, isError: true, want: []string{"the same"}},
		{name: "empty old", args: map[string]any{"old_string": "", "new_string": "x"}, isError: true, want: []string{"old_string is empty"}},
		{name: "missing file", args: map[string]any{"path": "nope.go", "old_string": "a", "new_string": "b"}, isError: true,
			want: []string{"nope.go does not exist", "list its parent directory . (the workspace root)"}},
		{name: "crlf file", file: "one\r\ntwo\r\nthree\r\n", args: map[string]any{"old_string": "one\ntwo\n", "new_string": "uno\ndos\n"},
			want: []string{"1 replacement"}, result: "uno\r\ndos\r\nthree\r\n"},
		{name: "directory", args: map[string]any{"path": "dir", "old_string": "a", "new_string": "b"}, isError: true, want: []string{"is a directory"}},
		{name: "symlink inside", args: map[string]any{"path": "in-link", "old_string": "alpha", "new_string": "b"}, isError: true, want: []string{"symbolic link"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			content := src
			if tt.file != "" {
				content = tt.file
			}
			e.mkfile(t, "f.go", content, 0o640)
			if _, ok := tt.args["path"]; !ok {
				tt.args["path"] = "f.go"
			}
			before := snapshot(t, e.base)
			res := e.call(t, "edit", tt.args)
			if tt.isError {
				wantError(t, res, tt.want...)
				assertSame(t, before, snapshot(t, e.base))
				return
			}
			wantOK(t, res, tt.want...)
			if got := e.content(t, "f.go"); got != tt.result {
				t.Errorf("f.go = %q, want %q", got, tt.result)
			}
			if m := e.mode(t, "f.go"); m != 0o640 {
				t.Errorf("mode = %v, want 0640", m)
			}
			if !slices.Equal(res.Touched, []string{"f.go"}) {
				t.Errorf("Touched = %v", res.Touched)
			}
		})
	}
}

func TestEditHardlink(t *testing.T) {
	e := newEnv(t)
	if err := os.Link(e.outside, filepath.Join(e.ws, "hard")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	before := snapshot(t, e.base)
	wantError(t, e.call(t, "edit", map[string]any{"path": "hard", "old_string": "secret", "new_string": "x"}), "hard links")
	assertSame(t, before, snapshot(t, e.base))
}

// TestReadHardlink: read refuses a hard link to a file outside the
// workspace (both under one t.TempDir, so on one file system), as the
// editors do, also when reached through a symbolic link inside; the
// outside file's content never shows.
func TestReadHardlink(t *testing.T) {
	e := newEnv(t)
	if err := os.Link(e.outside, filepath.Join(e.ws, "hard")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	must(t, os.Symlink("hard", filepath.Join(e.ws, "to-hard")))
	for _, p := range []string{"hard", "to-hard", filepath.Join(e.ws, "hard")} {
		res := e.call(t, "read", map[string]any{"path": p})
		wantError(t, res, "has 2 hard links, which may reach outside the workspace, so it is not read", "copy it first")
		if strings.Contains(res.AllText(), "secret") {
			t.Errorf("read %s showed the outside file: %s", p, res.AllText())
		}
	}
	wantOK(t, e.call(t, "read", map[string]any{"path": "a.txt"}), "alpha")
}

func TestApplyPatch(t *testing.T) {
	tests := []struct {
		name    string
		patch   string
		isError bool
		want    []string
		touched []string
		files   map[string]string // expected content; "" means absent
	}{
		{
			name: "add update delete move",
			patch: `*** Begin Patch
*** Add File: pkg/new.go
+package pkg
+
+func New() {}
*** Update File: a.txt
@@
 alpha
-beta
+BETA
 gamma
*** Delete File: dir/b.txt
*** Update File: script.sh
*** Move to: bin/run.sh
@@ #!/bin/sh
-echo hi
+echo moved
*** End Patch`,
			want:    []string{"applied the patch to 4 files", "A pkg/new.go (+3)", "M a.txt (+1 -1)", "D dir/b.txt", "M bin/run.sh (moved from script.sh, +1 -1)"},
			touched: []string{"pkg/new.go", "a.txt", "dir/b.txt", "script.sh", "bin/run.sh"},
			files: map[string]string{
				"pkg/new.go": "package pkg\n\nfunc New() {}\n", "a.txt": "alpha\nBETA\ngamma\n", "dir/b.txt": "",
				"script.sh": "", "bin/run.sh": "#!/bin/sh\necho moved\n",
			},
		},
		{
			name:    "trailing whitespace tolerated",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n alpha  \n-beta\t\n+b\n*** End Patch\n",
			touched: []string{"a.txt"},
			files:   map[string]string{"a.txt": "alpha\nb\ngamma\n"},
		},
		{
			name:    "end of file anchor and pure addition",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n gamma\n+delta\n*** End of File\n*** End Patch",
			touched: []string{"a.txt"},
			files:   map[string]string{"a.txt": "alpha\nbeta\ngamma\ndelta\n"},
		},
		{
			name:    "two hunks",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+A\n@@\n-gamma\n+G\n*** End Patch",
			touched: []string{"a.txt"},
			files:   map[string]string{"a.txt": "A\nbeta\nG\n"},
		},
		{
			name:    "second file fails: nothing written",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n-alpha\n+A\n*** Add File: z/new.txt\n+z\n*** Update File: dir/b.txt\n-not there\n+x\n*** End Patch",
			isError: true,
			want:    []string{"hunk 1 of dir/b.txt", "did not apply", "not there", "No file was changed"},
		},
		{
			name:    "hunks out of order",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n-gamma\n+G\n@@\n-alpha\n+A\n*** End Patch",
			isError: true,
			want:    []string{"hunk 2 of a.txt", "file order"},
		},
		{
			name:    "missing file",
			patch:   "*** Begin Patch\n*** Update File: nope.txt\n-a\n+b\n*** End Patch",
			isError: true,
			want:    []string{"nope.txt does not exist"},
		},
		{
			name:    "add existing",
			patch:   "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch",
			isError: true,
			want:    []string{"a.txt already exists", "*** Update File:"},
		},
		{
			name:    "move onto existing",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n*** Move to: dir/b.txt\n*** End Patch",
			isError: true,
			want:    []string{"dir/b.txt already exists"},
		},
		{
			name:    "same file twice",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n-alpha\n+A\n*** Delete File: ./a.txt\n*** End Patch",
			isError: true,
			want:    []string{"already changed by the section at patch line 2"},
		},
		{
			name:    "no begin",
			patch:   "*** Update File: a.txt\n-alpha\n+A\n*** End Patch",
			isError: true,
			want:    []string{"must start with the line \"*** Begin Patch\""},
		},
		{
			name:    "no end",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n-alpha\n+A\n",
			isError: true,
			want:    []string{"must end with the line \"*** End Patch\""},
		},
		{
			name:    "bad hunk line",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n-alpha\nA\n*** End Patch",
			isError: true,
			want:    []string{"patch line 4", "start with a space"},
		},
		{
			name:    "bad add line",
			patch:   "*** Begin Patch\n*** Add File: n.txt\n+one\ntwo\n*** End Patch",
			isError: true,
			want:    []string{"patch line 4", "starts with +"},
		},
		{
			name:    "unknown anchor",
			patch:   "*** Begin Patch\n*** Update File: a.txt\n@@ func missing()\n-beta\n+B\n*** End Patch",
			isError: true,
			want:    []string{"@@ line \"func missing()\" was not found"},
		},
		{
			name:    "empty patch",
			patch:   "*** Begin Patch\n*** End Patch",
			isError: true,
			want:    []string{"changes no file"},
		},
		{
			name:    "delete a directory",
			patch:   "*** Begin Patch\n*** Delete File: dir\n*** End Patch",
			isError: true,
			want:    []string{"dir is a directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			before := snapshot(t, e.base)
			res := e.call(t, "apply_patch", map[string]any{"patch": tt.patch})
			if tt.isError {
				wantError(t, res, tt.want...)
				assertSame(t, before, snapshot(t, e.base))
				return
			}
			wantOK(t, res, tt.want...)
			if !slices.Equal(res.Touched, tt.touched) {
				t.Errorf("Touched = %v, want %v", res.Touched, tt.touched)
			}
			for name, want := range tt.files {
				data, err := os.ReadFile(filepath.Join(e.ws, name))
				switch {
				case want == "" && !errors.Is(err, fs.ErrNotExist):
					t.Errorf("%s exists: %v", name, err)
				case want != "" && string(data) != want:
					t.Errorf("%s = %q, %v; want %q", name, data, err, want)
				}
			}
			if m, ok := tt.files["bin/run.sh"]; ok && m != "" && e.mode(t, "bin/run.sh") != 0o755 {
				t.Errorf("moved file mode = %v, want 0755", e.mode(t, "bin/run.sh"))
			}
		})
	}
}

// failFS is the real workspace FS with one injected fault: WriteFile of the
// name fail (or Remove of it) fails as a full disk would.
type failFS struct {
	sandbox.FS
	fail string
}

var errDiskFull = errors.New("no space left on device")

func (f *failFS) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	if name == f.fail {
		return &fs.PathError{Op: "write", Path: name, Err: errDiskFull}
	}
	return f.FS.WriteFile(ctx, name, data, perm)
}

// rollbackPatch touches every kind of change before the failing file
// "zz.txt", which is updated last.
const rollbackPatch = `*** Begin Patch
*** Add File: newdir/sub/added.txt
+added
*** Update File: a.txt
-beta
+BETA
*** Delete File: dir/b.txt
*** Update File: script.sh
*** Move to: moved/run.sh
-echo hi
+echo moved
*** Update File: zz.txt
-last
+LAST
*** End Patch`

func TestApplyPatchRollback(t *testing.T) {
	e := newEnv(t)
	e.mkfile(t, "zz.txt", "last\n", 0o644)
	reg := tools.NewRegistry()
	files.Register(reg, &failFS{FS: e.fs, fail: "zz.txt"})
	before := snapshot(t, e.base)
	res, err := reg.Call(context.Background(), tools.SurfaceDefault, "apply_patch", json.RawMessage(mustJSON(t, map[string]any{"patch": rollbackPatch})))
	must(t, err)
	wantError(t, res, "writing zz.txt failed", "no space left", "restored")
	assertSame(t, before, snapshot(t, e.base))
}

// TestApplyPatchRollbackReal makes the last write fail for real: through a
// read-only directory for an ordinary user, through an immutable file for
// root.
func TestApplyPatchRollbackReal(t *testing.T) {
	e := newEnv(t)
	e.mkfile(t, "zz/zz.txt", "last\n", 0o644)
	zz := filepath.Join(e.ws, "zz")
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", filepath.Join(zz, "zz.txt")).CombinedOutput(); err != nil {
			t.Skipf("running as root and chattr +i is not available: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", filepath.Join(zz, "zz.txt")).Run() })
	} else {
		must(t, os.Chmod(zz, 0o555))
		t.Cleanup(func() { os.Chmod(zz, 0o755) })
	}
	before := snapshot(t, e.base)
	patch := strings.Replace(rollbackPatch, "*** Update File: zz.txt", "*** Update File: zz/zz.txt", 1)
	res := e.call(t, "apply_patch", map[string]any{"patch": patch})
	wantError(t, res, "writing zz/zz.txt failed", "restored")
	assertSame(t, before, snapshot(t, e.base))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	return b
}

// TestSurfaces checks that the write-level tools are hidden from and
// refused on the plan and readonly surfaces, before anything is written.
func TestSurfaces(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	calls := map[string]any{
		"write":       map[string]any{"path": "planned.txt", "content": "x"},
		"edit":        map[string]any{"path": "a.txt", "old_string": "alpha", "new_string": "A"},
		"apply_patch": map[string]any{"patch": "*** Begin Patch\n*** Add File: planned.txt\n+x\n*** End Patch"},
	}
	for _, s := range []tools.Surface{tools.SurfacePlan, tools.SurfaceReadonly} {
		var names []string
		for _, info := range e.reg.List(s) {
			names = append(names, info.Name)
		}
		if !slices.Equal(names, []string{"read"}) {
			t.Errorf("%s lists %v, want only read", s, names)
		}
		before := snapshot(t, e.base)
		for tool, args := range calls {
			res, err := e.reg.Call(ctx, s, tool, mustJSON(t, args))
			if !errors.Is(err, tools.ErrDenied) || res != nil {
				t.Errorf("%s on %s: %v, %v; want ErrDenied", tool, s, res, err)
			}
		}
		assertSame(t, before, snapshot(t, e.base))
		res, err := e.reg.Call(ctx, s, "read", mustJSON(t, map[string]any{"path": "a.txt"}))
		if err != nil || res.IsError {
			t.Errorf("read on %s: %v, %v", s, res, err)
		}
	}
}

func TestSchemas(t *testing.T) {
	e := newEnv(t)
	want := map[string][]string{
		"read":        {"path"},
		"write":       {"path", "content"},
		"edit":        {"path", "old_string", "new_string"},
		"apply_patch": {"patch"},
	}
	infos := e.reg.List(tools.SurfaceDefault)
	if len(infos) != len(want) {
		t.Fatalf("listed %d tools", len(infos))
	}
	for _, info := range infos {
		if !slices.Equal(info.InputSchema.Required, want[info.Name]) {
			t.Errorf("%s requires %v, want %v", info.Name, info.InputSchema.Required, want[info.Name])
		}
		for prop, s := range info.InputSchema.Properties {
			if s.Description == "" {
				t.Errorf("%s.%s has no description", info.Name, prop)
			}
		}
		if info.Description == "" {
			t.Errorf("%s has no description", info.Name)
		}
	}
	_, err := e.reg.Call(context.Background(), tools.SurfaceDefault, "edit", json.RawMessage(`{"path":"a.txt","old_string":"a","new_string":"b","extra":1}`))
	var ie *tools.InputError
	if !errors.As(err, &ie) {
		t.Errorf("unknown field: err = %v, want InputError", err)
	}
}

func TestCanceled(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := snapshot(t, e.base)
	res, err := e.reg.Call(ctx, tools.SurfaceDefault, "write", mustJSON(t, map[string]any{"path": "c.txt", "content": "x"}))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("write with a canceled ctx: %v, %v", res, err)
	}
	assertSame(t, before, snapshot(t, e.base))
}
