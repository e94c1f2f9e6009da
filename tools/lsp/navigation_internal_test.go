package lsp

import (
	"strings"
	"testing"
)

// TestBriefHover: the brief of a hover is its leading code blocks and
// rules and one paragraph of prose, at most MaxLibraryHoverChars of it.
func TestBriefHover(t *testing.T) {
	long := strings.Repeat("word ", 400)
	tests := []struct{ in, want string }{
		{"```go\nfunc F()\n```\n---\nF does a thing.\nIt does it well.\n\nMore about F.", "```go\nfunc F()\n```\n---\nF does a thing.\nIt does it well."},
		{"int([x]) -> integer\n\nConvert a number.", "int([x]) -> integer"},
		{"```python\nf(a)\n```\n\nDoc of f.\n```python\nexample()\n```", "```python\nf(a)\n```\n\nDoc of f."},
		{"just one paragraph", "just one paragraph"},
		{long, strings.TrimSpace(long[:MaxLibraryHoverChars])},
	}
	for _, tc := range tests {
		if got := briefHover(tc.in); got != tc.want {
			t.Errorf("briefHover(%.40q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := cutAt("aé", 2); got != "a" {
		t.Errorf("cutAt cut inside a rune: %q", got)
	}
}
