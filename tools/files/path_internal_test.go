package files

import (
	"io/fs"
	"path"
	"strings"
	"testing"
)

func TestRel(t *testing.T) {
	tests := []struct {
		root, in, want string // want "" means outside
	}{
		{"/workspace", "a.go", "a.go"},
		{"/workspace", "./a.go", "a.go"},
		{"/workspace", "src/../a.go", "a.go"},
		{"/workspace", "src/", "src"},
		{"/workspace", ".", "."},
		{"/workspace", "/workspace", "."},
		{"/workspace", "/workspace/", "."},
		{"/workspace", "/workspace/src/a.go", "src/a.go"},
		{"/workspace", "/workspace//src/./a.go", "src/a.go"},
		{"/workspace", "%2e%2e/x", "%2e%2e/x"}, // a literal name, not ".."
		{"/workspace", "link/..", "."},
		{"/workspace", "..", ""},
		{"/workspace", "../x", ""},
		{"/workspace", "a/../../x", ""},
		{"/workspace", "/workspace/../etc/passwd", ""},
		{"/workspace", "/workspace2/x", ""},
		{"/workspace", "/work", ""},
		{"/workspace", "/etc/passwd", ""},
		{"/workspace", "/", ""},
		{"/workspace", "~/x", ""},
		{"/workspace", "~", ""},
		{"/workspace", "", ""},
		{"/workspace", "a\x00b", ""},
		{"/", "/etc/passwd", "etc/passwd"},
		{"/", "/", "."},
		{"/", "../etc", ""},
	}
	for _, tt := range tests {
		w := &workspace{root: tt.root}
		got, err := w.rel(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("rel(%q) under %s = %q, want an error", tt.in, tt.root, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("rel(%q) under %s = %q, %v; want %q", tt.in, tt.root, got, err, tt.want)
		}
	}
}

// FuzzRel checks that every name rel accepts is a valid FS name that stays
// below the workspace.
func FuzzRel(f *testing.F) {
	for _, s := range []string{"a", "../a", "/workspace/a", "/workspace/../a", "a/../..", "/workspace2", "~/a", ".", "//workspace/a"} {
		f.Add(s)
	}
	w := &workspace{root: "/workspace"}
	f.Fuzz(func(t *testing.T, in string) {
		name, err := w.rel(in)
		if err != nil {
			return
		}
		if !fs.ValidPath(name) || strings.IndexByte(name, 0) >= 0 {
			t.Fatalf("rel(%q) = %q, not a valid FS name", in, name)
		}
		if full := path.Join(w.root, name); full != w.root && !strings.HasPrefix(full, w.root+"/") {
			t.Fatalf("rel(%q) = %q leaves the workspace", in, name)
		}
	})
}
