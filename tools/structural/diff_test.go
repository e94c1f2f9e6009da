package structural_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/tools/structural"
)

func TestUnifiedDiffGolden(t *testing.T) {
	tests := []struct {
		name, old, new string
		context        int
		want           string
	}{
		{"equal", "a\n", "a\n", 3, ""},
		{"one line", "a\nb\nc\n", "a\nB\nc\n", 3, "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"no context", "a\nb\nc\n", "a\nB\nc\n", 0, "--- a/f\n+++ b/f\n@@ -2 +2 @@\n-b\n+B\n"},
		{"insert into empty", "", "x\n", 3, "--- a/f\n+++ b/f\n@@ -0,0 +1 @@\n+x\n"},
		{"delete all", "x\ny\n", "", 3, "--- a/f\n+++ b/f\n@@ -1,2 +0,0 @@\n-x\n-y\n"},
		{"no newline at end", "a\nb", "a\nc", 3, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "1\nX\n3\n4\n5\n6\n7\n8\nY\n10\n", 1,
			"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+X\n 3\n@@ -8,3 +8,3 @@\n 8\n-9\n+Y\n 10\n"},
		{"close changes merge", "1\n2\n3\n4\n5\n", "1\nX\n3\nY\n5\n", 1,
			"--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n 1\n-2\n+X\n 3\n-4\n+Y\n 5\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := structural.UnifiedDiff("f", []byte(tt.old), []byte(tt.new), tt.context); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

// TestUnifiedDiffPatch applies random diffs with patch(1): the diff of old
// and new must turn old into new.
func TestUnifiedDiffPatch(t *testing.T) {
	if _, err := exec.LookPath("patch"); err != nil {
		t.Skip("no patch(1) on PATH")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for i := range 42 {
		var old []string
		size := rng.IntN(60)
		if i == 41 {
			size = 6000 // past the edit bound: the middle is one replacement
		}
		for range size {
			old = append(old, fmt.Sprintf("line %d", rng.IntN(12)))
		}
		var nw []string
		for _, l := range old {
			switch rng.IntN(6) {
			case 0: // drop
			case 1:
				nw = append(nw, l, fmt.Sprintf("new %d", rng.IntN(5)))
			case 2:
				nw = append(nw, "changed "+l)
			default:
				nw = append(nw, l)
			}
		}
		o, n := strings.Join(old, "\n"), strings.Join(nw, "\n")
		if rng.IntN(2) == 0 {
			o += "\n"
			n += "\n"
		}
		d := structural.UnifiedDiff("f.txt", []byte(o), []byte(n), rng.IntN(4))
		if o == n {
			if d != "" {
				t.Fatalf("case %d: diff of equal texts: %q", i, d)
			}
			continue
		}
		f := filepath.Join(dir, "f.txt")
		if err := os.WriteFile(f, []byte(o), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("patch", "-p1", "--quiet", "--no-backup-if-mismatch", "-r", "-")
		cmd.Dir = dir
		cmd.Stdin = strings.NewReader(d)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("case %d: patch: %v: %s\ndiff:\n%s", i, err, out, d)
		}
		got, _ := os.ReadFile(f)
		if string(got) != n {
			t.Fatalf("case %d: patched file\n%q\nwant\n%q\ndiff:\n%s", i, got, n, d)
		}
	}
}
