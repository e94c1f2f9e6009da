package syntax

import (
	"context"
	"strings"
	"testing"
)

func TestQuotings(t *testing.T) {
	for _, c := range []struct {
		frag string
		want []string
	}{
		{`import type { $$$ } from $S`, []string{`import type { $$$ } from "$S"`}},
		{`import $X from $S`, []string{`import $X from "$S"`, `import "$X" from $S`, `import "$X" from "$S"`}},
		{`f("$X", $$$A, $$B)`, nil},                          // already quoted; ellipses are never quoted
		{`obj.on$EVENT($_)`, []string{`obj.on$EVENT("$_")`}}, // $EVENT is inside a name
		{`x + y`, nil},
	} {
		var got []string
		for _, q := range quotings(c.frag, '$', `"`) {
			got = append(got, q.frag)
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("quotings(%q) = %q, want %q", c.frag, got, c.want)
		}
	}
}

// TestQuotedVar: a metavariable where TypeScript wants a string literal is
// accepted and matches any module specifier; a pattern that is broken
// elsewhere is still refused.
func TestQuotedVar(t *testing.T) {
	ts := mustLang(t, "typescript")
	src := []byte("import type { A } from \"./a\";\nimport { B } from './b';\nconst s = \"$S\";\n")
	for _, c := range []struct {
		pattern string
		want    []string
	}{
		{`import type { $$$ } from $S`, []string{`import type { A } from "./a";`}},
		{`import { $$$ } from $S`, []string{`import { B } from './b';`}},
	} {
		ms, err := Search(context.Background(), ts, c.pattern, src)
		if err != nil {
			t.Fatalf("%s: %v", c.pattern, err)
		}
		if got := matchTexts(ms); strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("%s: matches %q, want %q", c.pattern, got, c.want)
		}
	}
	if _, err := Compile(ts, `import type { $$$ } from $S +`); err == nil || !strings.Contains(err.Error(), "bare (") {
		t.Errorf("a broken pattern compiled: %v", err)
	}
	// Languages without VarQuote do not retry.
	if _, err := Compile(mustLang(t, "go"), `import $S`); err == nil {
		t.Error("go: `import $S` compiled; Go has no VarQuote")
	}
}
