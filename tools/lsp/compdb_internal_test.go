package lsp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/sandbox/dirfs"
)

// TestFindCompDB: where clangd looks by itself needs no flag; a database
// in out/, cmake-build-*/ or two levels down is found, the shallowest
// first and by name at one depth; compile_flags.txt only when no
// compile_commands.json is there; hidden directories, node_modules and
// vendor are not entered, nor anything deeper than two levels.
func TestFindCompDB(t *testing.T) {
	cases := []struct {
		name   string
		files  []string
		root   string
		file   string
		own    bool
		others string
	}{
		{"none", []string{"a.c", "src/b.c"}, ".", "", false, ""},
		{"root", []string{"compile_commands.json", "out/compile_commands.json"}, ".", "compile_commands.json", true, ""},
		{"root build", []string{"build/compile_commands.json", "out/compile_commands.json"}, ".", "build/compile_commands.json", true, ""},
		{"root flags", []string{"compile_flags.txt", "out/compile_commands.json"}, ".", "compile_flags.txt", true, ""},
		{"above the root", []string{"compile_commands.json", "lib/CMakeLists.txt"}, "lib", "compile_commands.json", true, ""},
		{"out", []string{"a.c", "out/compile_commands.json"}, ".", "out/compile_commands.json", false, ""},
		{"two cmake builds", []string{"cmake-build-release/compile_commands.json", "cmake-build-debug/compile_commands.json"}, ".", "cmake-build-debug/compile_commands.json", false, "cmake-build-release/compile_commands.json"},
		{"shallowest first", []string{"a/b/compile_commands.json", "z/compile_commands.json"}, ".", "z/compile_commands.json", false, "a/b/compile_commands.json"},
		{"under build", []string{"build/debug/compile_commands.json"}, ".", "build/debug/compile_commands.json", false, ""},
		{"json before flags", []string{"a/compile_flags.txt", "b/c/compile_commands.json"}, ".", "b/c/compile_commands.json", false, "a/compile_flags.txt"},
		{"below a subproject root", []string{"lib/CMakeLists.txt", "lib/builddir/compile_commands.json"}, "lib", "lib/builddir/compile_commands.json", false, ""},
		{"skipped", []string{".build/compile_commands.json", "node_modules/x/compile_commands.json", "vendor/compile_commands.json", "a/b/c/compile_commands.json"}, ".", "", false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range c.files {
				p := filepath.Join(dir, f)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte("[]\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ws, err := dirfs.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			d, err := findCompDB(context.Background(), ws, c.root)
			if err != nil {
				t.Fatal(err)
			}
			if d.file != c.file || d.own != c.own || strings.Join(d.others, ",") != c.others || d.cut {
				t.Fatalf("found %+v, want %q (own %v, others %q)", d, c.file, c.own, c.others)
			}
			sv := DefaultServers()
			for _, s := range sv {
				if s.ID != "clangd" {
					continue
				}
				args := s.compDBArgs(d, "/ws")
				if want := !c.own && c.file != ""; want != (len(args) == 1) {
					t.Fatalf("arguments %q for %+v", args, d)
				}
				if len(args) == 1 && args[0] != "--compile-commands-dir=/ws/"+filepath.Dir(c.file) {
					t.Fatalf("arguments %q, want the directory of %s", args, c.file)
				}
			}
		})
	}
}

// TestFindCompDBBound: the search lists at most MaxCompDBDirs directories
// and says that it stopped.
func TestFindCompDBBound(t *testing.T) {
	dir := t.TempDir()
	for i := range MaxCompDBDirs + 10 {
		os.MkdirAll(filepath.Join(dir, "d", strings.Repeat("x", 1+i/26)+string(rune('a'+i%26))), 0o755)
	}
	os.MkdirAll(filepath.Join(dir, "zz"), 0o755)
	os.WriteFile(filepath.Join(dir, "zz", "compile_commands.json"), []byte("[]\n"), 0o644)
	ws, _ := dirfs.New(dir)
	d, err := findCompDB(context.Background(), ws, ".")
	if err != nil {
		t.Fatal(err)
	}
	// zz/ is at depth 1, listed before the depth-2 directories that
	// exhaust the bound.
	if d.file != "zz/compile_commands.json" || !d.cut || d.listed != MaxCompDBDirs {
		t.Fatalf("%+v", d)
	}
}

// TestCompDBCause: the verdict's label names what clangd lacks: nothing
// when it started with a database; a database that appeared since it
// started, and the reload that reads it; else where berth looked.
func TestCompDBCause(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.c"), []byte("int f(void);\n"), 0o644)
	q := verdictQuery(t, dir)
	for _, sv := range DefaultServers() {
		if sv.ID == "clangd" {
			q.in.spec = sv
		}
	}
	q.in.key = key{"clangd", "."}
	ctx := context.Background()
	if got := q.likelyCause(ctx, "", nil); !strings.Contains(got, "clangd has no compilation database (no compile_commands.json or compile_flags.txt in the workspace root, their build/ or the directories up to two levels below)") {
		t.Errorf("no database anywhere: %q", got)
	}
	os.MkdirAll(filepath.Join(dir, "cmake-build-debug"), 0o755)
	os.WriteFile(filepath.Join(dir, "cmake-build-debug", "compile_commands.json"), []byte("[]\n"), 0o644)
	if got := q.likelyCause(ctx, "", nil); !strings.Contains(got, "clangd started without a compilation database") || !strings.Contains(got, "cmake-build-debug/compile_commands.json has appeared since: call lsp with action reload") {
		t.Errorf("a database that appeared after the start: %q", got)
	}
	q.g.compDB = compDB{file: "cmake-build-debug/compile_commands.json"}
	if got := q.likelyCause(ctx, "", nil); got != "" {
		t.Errorf("a server started with a database: %q", got)
	}
}
