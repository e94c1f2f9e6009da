package lsp

import (
	"fmt"
	"strings"
	"testing"
)

// TestFindSymbol is a table of whole-identifier resolution (LSP-2): a
// symbol is found as a whole identifier first, as a part of one only when
// no whole one is on the line, and resolves to the identifier around it.
func TestFindSymbol(t *testing.T) {
	tests := []struct {
		line, sym string
		dollar    bool
		want      string // the resolved identifiers with 1-based columns; "partial:" when only parts matched
	}{
		{"pages = page_count(total, per_page)", "page", false, "partial: pages@1 page_count@9 per_page@27"},
		{"pages = page_count(total, per_page)", "page_count", false, "page_count@9"},
		{"pages = page_count(total, per_page)", "pages", false, "pages@1"},
		{"    return _default_encoder.encode(obj)", "encode", false, "encode@29"},
		{"    return _default_encoder.encode(obj)", "default", false, "partial: _default_encoder@12"},
		{"func (English) Greet(name string) string { return \"Hello, \" + name }", "name", false, "name@22 name@63"},
		{"var e greet.English", "e greet", false, "e@5"},
		{"var e greet.English", "greet.English", false, "greet@7"},
		{"x := a+b", "+", false, "+@7"},
		{"const $el = $(sel)", "el", true, "partial: $el@7 sel@15"},
		{"const $el = $(sel)", "el", false, "el@8"},
		{"const $el = $(sel)", "$", true, "$@13"},
		{"größe := größe2 + größe", "größe", false, "größe@1 größe@23"}, // byte columns
		{"aaaa", "aa", false, "partial: aaaa@1"},
		{"nothing here", "zzz", false, ""},
	}
	for _, tc := range tests {
		idxs, partial := findSymbol(tc.line, tc.sym, tc.dollar)
		var got []string
		for _, i := range idxs {
			sp := identAt(tc.line, i, len(tc.sym), tc.dollar)
			if s := fmt.Sprintf("%s@%d", sp.ident, sp.col+1); len(got) == 0 || got[len(got)-1] != s {
				got = append(got, s)
			}
		}
		g := strings.Join(got, " ")
		if partial {
			g = "partial: " + g
		}
		if g != tc.want {
			t.Errorf("findSymbol(%q, %q): %q, want %q", tc.line, tc.sym, g, tc.want)
		}
	}
}

// TestChangedIdents: a rename's occurrences are the identifiers it
// replaced, however the server cut its edits (one edit for the whole file
// counts three places).
func TestChangedIdents(t *testing.T) {
	tests := []struct {
		old, cur string
		want     int
	}{
		{"a = page(1)\nb = page(2) + pages\n# page\n", "a = leaf(1)\nb = leaf(2) + pages\n# leaf\n", 3},
		{"x := f()\n", "x := f()\n", 0},
		{"func F() {}\n", "import \"fmt\"\n\nfunc G() {}\n", 3}, // lengths differ: import, fmt, G are new
	}
	for _, tc := range tests {
		if got := changedIdents([]byte(tc.old), []byte(tc.cur), false); got != tc.want {
			t.Errorf("changedIdents(%q, %q) = %d, want %d", tc.old, tc.cur, got, tc.want)
		}
	}
}
