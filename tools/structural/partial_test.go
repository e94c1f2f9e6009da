package structural_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"berth.dev/berth/tools/structural"
)

// TestPartialParseSearch checks that a search without a parse cache (the
// CLI's) parses only the declarations holding the pattern's tokens, skips a
// file none of whose declarations holds them all, falls back to the whole
// file on a partial parse with an error, and finds exactly what a search
// with a cache (always whole-file parses) finds, enclosing symbols included.
func TestPartialParseSearch(t *testing.T) {
	var big strings.Builder
	big.WriteString("package p\n\nimport \"fmt\"\n\n")
	for i := range 40 {
		fmt.Fprintf(&big, "// f%d does things.\nfunc f%d(a, b int) int {\n\tif a == b {\n\t\treturn 1\n\t}\n\treturn a + b\n}\n\n", i, i)
	}
	big.WriteString("func (s *S) same(x int) bool {\n\treturn x == x\n}\n\nvar s = `\nfunc g() { y == y }\n`\n")
	files := map[string]string{
		"big.go": big.String(),
		// No declaration holds ==: the file is not parsed.
		"none.go": "package p\n\nfunc h() { println(1 != 2) }\n\nfunc k() {}\n",
		// An error in the chosen declaration: the whole file is parsed.
		"broken.go": "package p\n\nfunc ok() { _ = 1 }\n\nfunc bad() { z == z + }\n\nfunc other() { w := 2 }\n",
	}
	for i := range 10 {
		files[fmt.Sprintf("small%d.go", i)] = fmt.Sprintf("package p\n\nfunc a%d() { q == q }\n\nfunc b%d() { r := 1; _ = r }\n\nfunc c%d() { s := 2; _ = s }\n", i, i, i)
	}
	cold := newEnv(t, files, structural.Options{CacheBytes: -1, Workers: 2})
	cached := newEnv(t, files, structural.Options{})
	ctx := context.Background()
	for _, pattern := range []string{"$A == $A", "$A + $B", "fmt.Println($$$)", "if $C { return $$$ }", "$X"} {
		req := structural.SearchRequest{Pattern: pattern, Language: "go", MaxResults: -1, Enclosing: true}
		got, err := cold.e.Search(ctx, cold.fs, req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := cached.e.Search(ctx, cached.fs, req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Matches, want.Matches) || got.Total != want.Total || got.FilesSearched != want.FilesSearched {
			t.Errorf("%q: without a cache found %d in %d files\n%+v\nwith a cache %d in %d files\n%+v", pattern, got.Total, got.FilesSearched, got.Matches, want.Total, want.FilesSearched, want.Matches)
		}
	}
	st := cold.e.Stats()
	if st.PartialParses == 0 || st.NoDeclaration == 0 || st.Fallbacks == 0 {
		t.Errorf("stats %+v: want partial parses, files with no declaration to parse and a fallback", st)
	}
	if cached.e.Stats().PartialParses != 0 {
		t.Errorf("a search with a parse cache parsed partially: %+v", cached.e.Stats())
	}
}
