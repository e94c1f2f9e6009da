package syntax

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the want and golden sections of testdata/*.txtar")

// A corpus case is a txtar-like file:
//
//	lang: go
//	context: statement          (optional: the rung that must accept)
//	differs: why                (optional: a deliberate difference from ast-grep)
//	-- pattern --
//	-- src --
//	-- want --                  (one line per match: L:C text-first-line, then "  $X = text")
//	-- rewrite --               (optional template)
//	-- golden --                (the source after Rewrite + Apply)
type corpusCase struct {
	path     string
	header   map[string]string
	sections map[string]string
	order    []string
}

func readCase(t *testing.T, path string) *corpusCase {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &corpusCase{path: path, header: map[string]string{}, sections: map[string]string{}}
	cur := ""
	var buf strings.Builder
	flush := func() {
		if cur != "" {
			c.sections[cur] = buf.String()
			c.order = append(c.order, cur)
		}
		buf.Reset()
	}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		trim := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trim, "-- ") && strings.HasSuffix(trim, " --") && len(trim) > 6 {
			flush()
			cur = trim[3 : len(trim)-3]
			continue
		}
		if cur == "" {
			if k, v, ok := strings.Cut(trim, ":"); ok {
				c.header[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
			continue
		}
		buf.WriteString(line)
	}
	flush()
	return c
}

func (c *corpusCase) write() error {
	var b strings.Builder
	keys := make([]string, 0, len(c.header))
	for k := range c.header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range []string{"lang", "context", "differs"} {
		if v, ok := c.header[k]; ok {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	for _, k := range keys {
		if k != "lang" && k != "context" && k != "differs" {
			fmt.Fprintf(&b, "%s: %s\n", k, c.header[k])
		}
	}
	for _, s := range c.order {
		fmt.Fprintf(&b, "-- %s --\n%s", s, c.sections[s])
	}
	return os.WriteFile(c.path, []byte(b.String()), 0o644)
}

func (c *corpusCase) set(name, val string) {
	if _, ok := c.sections[name]; !ok {
		c.order = append(c.order, name)
	}
	c.sections[name] = val
}

// pattern returns the pattern text (one trailing newline stripped).
func (c *corpusCase) pattern() string { return strings.TrimSuffix(c.sections["pattern"], "\n") }

func formatMatches(ms []Match) string {
	var b strings.Builder
	for _, m := range ms {
		first, _, _ := strings.Cut(m.Text, "\n")
		fmt.Fprintf(&b, "%d:%d %s\n", m.Start.Line+1, m.Start.Column, first)
		names := make([]string, 0, len(m.Captures))
		for n := range m.Captures {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			cp := m.Captures[n]
			sig := "$"
			if cp.Multi {
				sig = "$$$"
			}
			fmt.Fprintf(&b, "  %s%s = %q\n", sig, n, cp.Text)
		}
	}
	return b.String()
}

func corpusFiles(t *testing.T) []string {
	files, err := filepath.Glob("testdata/corpus/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	return files
}

// TestCorpus runs every corpus case: compile, search, compare with want,
// and for cases with a rewrite, compare Apply(Rewrite(…)) with golden.
func TestCorpus(t *testing.T) {
	langs := map[string]bool{}
	for _, f := range corpusFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txtar"), func(t *testing.T) {
			c := readCase(t, f)
			lang := corpusLang(t, c.header["lang"])
			langs[lang.ID] = true
			p, err := Compile(lang, c.pattern())
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			if want := c.header["context"]; want != "" && p.Context() != want {
				t.Errorf("pattern accepted in context %q, want %q", p.Context(), want)
			}
			src := []byte(c.sections["src"])
			ms, err := p.Search(context.Background(), src)
			if err != nil {
				t.Fatalf("search: %v", err)
			}
			got := formatMatches(ms)
			changed := false
			if got != c.sections["want"] {
				if *update {
					c.set("want", got)
					changed = true
				} else {
					t.Errorf("matches differ\n got:\n%s\nwant:\n%s", got, c.sections["want"])
				}
			}
			if tmpl, ok := c.sections["rewrite"]; ok {
				edits, err := Rewrite(src, ms, strings.TrimSuffix(tmpl, "\n"))
				if err != nil {
					t.Fatalf("rewrite: %v", err)
				}
				out := string(Apply(src, edits))
				if out != c.sections["golden"] {
					if *update {
						c.set("golden", out)
						changed = true
					} else {
						t.Errorf("rewrite differs\n got:\n%s\nwant:\n%s", out, c.sections["golden"])
					}
				}
			}
			if changed {
				if err := c.write(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if len(langs) < 10 {
		t.Errorf("the corpus covers %d languages, want at least 10", len(langs))
	}
}

// corpusLang returns a bundled language, or loads an installed dynamic one
// (dart, swift) from the grammar directory (see builtGrammar).
func corpusLang(t *testing.T, id string) *Language {
	t.Helper()
	if l, err := Lookup(id); err == nil {
		return l
	}
	if id == "dart" || id == "swift" {
		return builtGrammar(t, id)
	}
	t.Fatalf("corpus case: unknown language %q", id)
	return nil
}

// astGrepCLI returns the path of the ast-grep CLI from $BERTH_AST_GREP or
// /tmp/sgcli, or "" when there is none.
func astGrepCLI() string {
	for _, p := range []string{os.Getenv("BERTH_AST_GREP"), "/tmp/sgcli/node_modules/.bin/ast-grep"} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}
