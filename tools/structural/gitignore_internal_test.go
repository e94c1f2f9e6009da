package structural

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
)

func TestGitignoreRules(t *testing.T) {
	tests := []struct {
		name    string
		ignore  string
		path    string
		isDir   bool
		want    bool // ignored
		decided bool
	}{
		{"plain name anywhere", "foo", "a/b/foo", false, true, true},
		{"plain name at top", "foo", "foo", true, true, true},
		{"name is not a substring", "foo", "a/foobar", false, false, false},
		{"star", "*.log", "x/y/debug.log", false, true, true},
		{"star does not cross slash when anchored", "a/*.log", "a/b/c.log", false, false, false},
		{"star in anchored", "a/*.log", "a/c.log", false, true, true},
		{"question mark", "?.txt", "d/a.txt", false, true, true},
		{"question mark needs one char", "?.txt", ".txt", false, false, false},
		{"class", "[abc].go", "b.go", false, true, true},
		{"class miss", "[abc].go", "d.go", false, false, false},
		{"class range", "file[0-9].c", "file7.c", false, true, true},
		{"negated class", "file[!0-9].c", "filex.c", false, true, true},
		{"negated class miss", "file[!0-9].c", "file1.c", false, false, false},
		{"caret negation", "file[^0-9].c", "file1.c", false, false, false},
		{"posix class", "[[:digit:]]x", "5x", false, true, true},
		{"dir only matches dir", "build/", "build", true, true, true},
		{"dir only skips file", "build/", "build", false, false, false},
		{"dir only nested", "build/", "src/build", true, true, true},
		{"leading slash anchors", "/top.go", "top.go", false, true, true},
		{"leading slash anchors, not deeper", "/top.go", "sub/top.go", false, false, false},
		{"middle slash anchors", "doc/frotz", "doc/frotz", false, true, true},
		{"middle slash anchors, not deeper", "doc/frotz", "a/doc/frotz", false, false, false},
		{"leading double star", "**/foo", "x/y/foo", false, true, true},
		{"leading double star at top", "**/foo", "foo", false, true, true},
		{"double star dir then name", "**/foo/bar", "a/foo/bar", false, true, true},
		{"trailing double star", "abc/**", "abc/x/y", false, true, true},
		{"trailing double star not the dir itself", "abc/**", "abc", true, false, false},
		{"middle double star zero dirs", "a/**/b", "a/b", false, true, true},
		{"middle double star many dirs", "a/**/b", "a/x/y/b", false, true, true},
		{"other double star is a star", "a**b", "axyb", false, true, true},
		{"other double star does not cross slash", "a**b", "ax/yb", false, false, false},
		{"negation re-includes", "*.gen.go\n!keep.gen.go", "keep.gen.go", false, false, true},
		{"negation, others still ignored", "*.gen.go\n!keep.gen.go", "z.gen.go", false, true, true},
		{"last line wins", "!x.go\n*.go", "x.go", false, true, true},
		{"comment", "#foo\n", "#foo", false, false, false},
		{"escaped hash", "\\#foo", "#foo", false, true, true},
		{"escaped bang", "\\!important", "!important", false, true, true},
		{"trailing spaces trimmed", "foo   ", "foo", false, true, true},
		{"escaped trailing space kept", "foo\\ ", "foo ", false, true, true},
		{"escaped star is literal", "\\*.go", "*.go", false, true, true},
		{"escaped star is not a wildcard", "\\*.go", "a.go", false, false, false},
		{"crlf line ends", "a.txt\r\nb.txt\r\n", "b.txt", false, true, true},
		{"blank lines", "\n\n a \n", " a", false, true, true},
		{"invalid class ignored", "[abc", "[abc", false, false, false},
		{"dot is literal", "a.c", "abc", false, false, false},
		{"regexp metachars literal", "a+(b)", "a+(b)", false, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &ignoreFile{dir: ".", rules: parseGitignore(tt.ignore)}
			got, decided := f.match(tt.path, tt.isDir)
			if got != tt.want || decided != tt.decided {
				t.Errorf("%q on %q (dir %v): ignored %v decided %v, want %v %v", tt.ignore, tt.path, tt.isDir, got, decided, tt.want, tt.decided)
			}
		})
	}
}

// TestGitignoreWalk checks nested files, precedence, negation and that an
// excluded directory is not entered (so nothing below it is re-included).
func TestGitignoreWalk(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		".gitignore":           "*.tmp\nbuild/\n/rootonly.txt\nout\n!out/keep.txt\n",
		".git/info/exclude":    "excluded.txt\n",
		"a.txt":                "",
		"x.tmp":                "",
		"excluded.txt":         "",
		"rootonly.txt":         "",
		"sub/rootonly.txt":     "",
		"build/b.txt":          "",
		"out/keep.txt":         "", // out is excluded as a directory: not re-included (git semantics)
		"sub/.gitignore":       "!*.tmp\nlocal.txt\n",
		"sub/y.tmp":            "",
		"sub/local.txt":        "",
		"sub/deep/local.txt":   "",
		"sub/deep/.gitignore":  "!local.txt\n",
		"sub/deep/z.tmp":       "",
		"other/local.txt":      "",
		"other/build":          "", // a file named build: build/ is dir-only
		"sub/deep/build/q.txt": "",
		"node_modules/m/i.txt": "",
		"sub2/sub3/.gitignore": "/anch.txt\n",
		"sub2/sub3/anch.txt":   "",
		"sub2/sub3/s/anch.txt": "",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsys, err := dirfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	walk := func(start string) []string {
		ctx := context.Background()
		ig := newIgnoreStack()
		if err := ig.loadAncestors(ctx, fsys, start); err != nil {
			t.Fatal(err)
		}
		var kept []string
		err := fsys.Walk(ctx, start, sandbox.WalkOptions{SkipDirs: []string{".git"}}, func(name string, fi fs.FileInfo) error {
			if name != start && ig.ignored(name, fi.IsDir()) {
				if fi.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if fi.IsDir() {
				if fi.Name() == ".git" {
					return fs.SkipDir
				}
				return ig.enter(ctx, fsys, name)
			}
			if !strings.HasSuffix(name, ".gitignore") {
				kept = append(kept, name)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(kept)
		return kept
	}
	want := []string{
		"a.txt",
		"node_modules/m/i.txt",
		"other/build",
		"other/local.txt",
		"sub/deep/local.txt",
		"sub/deep/z.tmp", // sub/.gitignore's !*.tmp re-includes it below sub too
		"sub/rootonly.txt",
		"sub/y.tmp",
		"sub2/sub3/s/anch.txt",
	}
	if got := walk("."); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("walk . kept\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A walk from a subdirectory honours the parents' files.
	wantSub := []string{"sub/deep/local.txt", "sub/deep/z.tmp", "sub/rootonly.txt", "sub/y.tmp"}
	if got := walk("sub"); strings.Join(got, "\n") != strings.Join(wantSub, "\n") {
		t.Errorf("walk sub kept %v, want %v", got, wantSub)
	}
}
