package projectcheck

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the want and unparsed sections of testdata/*.txtar")

// A parser case is a txtar-like file: a comment saying where the output
// was recorded, then sections "-- name --":
//
//	checker   the checker id (Applicable.Checker)
//	root      where it ran
//	base      what relative paths are relative to (default: root)
//	status    the exit code (informational)
//	stdout    what it printed on stdout
//	stderr    what it printed on stderr
//	want      the diagnostics after tidy, one JSON object a line
//	unparsed  Result.Unparsed
type parserCase struct {
	comment  string
	names    []string
	sections map[string]string
}

func readCase(t *testing.T, file string) *parserCase {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	c := &parserCase{sections: map[string]string{}}
	cur := ""
	var b strings.Builder
	flush := func() {
		if cur == "" {
			c.comment = b.String()
		} else {
			c.sections[cur] = b.String()
		}
		b.Reset()
	}
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "-- "); ok && strings.HasSuffix(name, " --") {
			flush()
			cur = strings.TrimSuffix(name, " --")
			c.names = append(c.names, cur)
			continue
		}
		b.WriteString(l)
	}
	flush()
	return c
}

func (c *parserCase) write(t *testing.T, file string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(c.comment)
	for _, n := range c.names {
		b.WriteString("-- " + n + " --\n")
		b.WriteString(c.sections[n])
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (c *parserCase) set(name, value string) {
	if _, ok := c.sections[name]; !ok {
		c.names = append(c.names, name)
	}
	c.sections[name] = value
}

func parserFor(id string) parser {
	for _, l := range table {
		for _, tl := range l.tools {
			if tl.id == id {
				return tl.parse
			}
		}
	}
	return nil
}

func TestParsers(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.txtar: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			c := readCase(t, file)
			one := func(name string) string { return strings.TrimSpace(c.sections[name]) }
			parse := parserFor(one("checker"))
			if parse == nil {
				t.Fatalf("unknown checker %q", one("checker"))
			}
			in := parseInput{root: one("root"), base: one("base"), source: one("checker"), stdout: []byte(c.sections["stdout"]), stderr: []byte(c.sections["stderr"])}
			if in.base == "" {
				in.base = in.root
			}
			diags, un := parse(in)
			diags = tidy(diags)
			var got strings.Builder
			for _, d := range diags {
				if d.Source != in.source {
					t.Errorf("diagnostic %q has source %q, want %q", d.Message, d.Source, in.source)
				}
				if d.File != "" && !filepath.IsAbs(d.File) {
					t.Errorf("diagnostic %q has relative file %q", d.Message, d.File)
				}
				enc := json.NewEncoder(&got)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(d); err != nil {
					t.Fatal(err)
				}
			}
			gotUn := tail(un)
			if gotUn != "" {
				gotUn += "\n"
			}
			if *update {
				c.set("want", got.String())
				c.set("unparsed", gotUn)
				c.write(t, file)
				return
			}
			if _, ok := c.sections["want"]; !ok {
				t.Fatalf("no want section; run go test -run TestParsers -update and review the diff")
			}
			if got.String() != c.sections["want"] {
				t.Errorf("diagnostics:\n%s\nwant:\n%s", got.String(), c.sections["want"])
			}
			if gotUn != c.sections["unparsed"] {
				t.Errorf("unparsed:\n%s\nwant:\n%s", gotUn, c.sections["unparsed"])
			}
		})
	}
}

func TestTextDiag(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Diagnostic
		ok   bool
	}{
		{"./a.go:6:4: not enough arguments", Diagnostic{File: "./a.go", Line: 6, Column: 4, Message: "not enough arguments"}, true},
		{"a.py:3: undefined name 'x'", Diagnostic{File: "a.py", Line: 3, Message: "undefined name 'x'"}, true},
		{"app.py:7:14:7:20: error: bad", Diagnostic{File: "app.py", Line: 7, Column: 14, EndLine: 7, EndColumn: 20, Message: "error: bad"}, true},
		{"/abs/x y.go:1:2: msg: with: colons", Diagnostic{File: "/abs/x y.go", Line: 1, Column: 2, Message: "msg: with: colons"}, true},
		{"go: go.mod requires go >= 1.99 (running go 1.26.8)", Diagnostic{}, false},
		{"# example.com/pkg", Diagnostic{}, false},
	} {
		got, ok := textDiag(tc.line)
		if ok != tc.ok || got != tc.want {
			t.Errorf("textDiag(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTidyCapsAndOrders(t *testing.T) {
	var diags []Diagnostic
	for i := range 3 {
		diags = append(diags, Diagnostic{Severity: SeverityWarning, Line: i + 1, Message: "w"})
	}
	diags = append(diags, Diagnostic{Severity: SeverityError, Line: 9, Message: "e"}, Diagnostic{Severity: SeverityWarning, Line: 1, Message: "w"})
	got := tidy(diags)
	if len(got) != 4 || got[0].Message != "e" || got[1].Line != 1 || got[3].Line != 3 {
		t.Errorf("tidy = %+v; want the error first, then the three warnings in order, the repeated one dropped", got)
	}
}

func TestTail(t *testing.T) {
	var many []string
	for i := range 100 {
		many = append(many, strings.Repeat("x", i)+"é")
	}
	for _, tc := range []struct {
		name string
		in   []string
		want func(string) bool
	}{
		{"blank lines dropped", []string{"", "a", "  ", "b"}, func(s string) bool { return s == "a\nb" }},
		{"last lines kept", many, func(s string) bool {
			return strings.HasPrefix(s, "… (earlier lines left out)\n") && strings.HasSuffix(s, many[99]) && len(s) <= MaxUnparsed
		}},
		{"one huge line", []string{strings.Repeat("é", MaxUnparsed)}, func(s string) bool {
			return strings.HasPrefix(s, "… (earlier lines left out)\n") && len(s) <= MaxUnparsed && !strings.ContainsRune(s, '\uFFFD')
		}},
	} {
		if got := tail(tc.in); !tc.want(got) {
			t.Errorf("%s: tail = %q", tc.name, got)
		}
	}
}

func TestCapBuffer(t *testing.T) {
	b := &capBuffer{max: 5}
	for _, p := range []string{"abc", "def", "gh"} {
		if n, err := b.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if string(b.bytes()) != "abcde" || !b.dropped() {
		t.Errorf("kept %q, dropped %v; want \"abcde\", true", b.bytes(), b.dropped())
	}
}

func TestSplitDart(t *testing.T) {
	got := splitDart(`INFO||CODE|/a\|b.dart|1|2|3|x \\ y \| z\nw`)
	want := []string{"INFO", "", "CODE", "/a|b.dart", "1", "2", "3", "x \\ y | z\nw"}
	if strings.Join(got, "¦") != strings.Join(want, "¦") {
		t.Errorf("splitDart = %q; want %q", got, want)
	}
}
