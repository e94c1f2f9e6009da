package syntax

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// partialSample is how many files of each corpus the differential test
// parses (evenly spread over the sorted file list), which keeps it well
// under a minute on two cores.
const partialSample = 1000

// TestPartialParseMatchesWhole is the differential test of partial parsing:
// over a sample of Go's source tree (on every machine with Go) and of
// Debian's Python standard library (/usr/lib/python3.*), every match of
// each pattern on a ParseFor tree — file, byte range, points, text,
// captures, enclosing symbol — must equal the match on the whole file's
// tree. It also checks that partial parses, skipped files and fallbacks
// all happened, so that it compares something.
func TestPartialParseMatchesWhole(t *testing.T) {
	goPatterns := []string{
		"$A == $A", "$X($$$)", "$X.$Y($$$)", "$A != nil", "if err != nil { return $$$ }",
		"for $K, $V := range $X { $$$ }", "errors.New($MSG)", "package $P", "func $F($$$) error { $$$ }",
		"$A && $B", "type $T struct { $$$ }", "fmt.Sprintf($$$)", "$X[$I]",
		"$X[$I] = $V", "$A := $B", "func ($R $T) $M($$$) { $$$ }", "struct{}{}", "{ $$$ }",
		"if $C { $$$ } else { $$$ }", "for $$$ { $$$ }", "if $C { $$$ }",
	}
	pyPatterns := []string{
		"$A == $A", "$X($$$)", "$X.$Y($$$)", "self.$A = $B", "raise $E($$$)", "return $X",
		"def $F(self): $$$", "import $M", "class $C($B): $$$", "$A if $B else $C", "@property\ndef $F(self): $$$", "$X[$I]", "lambda $$$: $B",
		"def $F($$$): $$$", "await $X", "print($$$)", "return $X.$Y($$$)",
	}
	corpora := []struct {
		lang, root, ext string
		fixture         bool // a few files of chosen shapes: not every mode occurs
		patterns        []string
		wholeOnly       []string // patterns that must never parse partially
	}{
		{lang: "go", root: goRoot(t), ext: ".go", patterns: goPatterns, wholeOnly: []string{"$X", "$_"}},
		{lang: "go", root: "testdata/partial", ext: ".go.txt", fixture: true, patterns: goPatterns},
		{lang: "python", root: pythonLib(t), ext: ".py", patterns: pyPatterns, wholeOnly: []string{"$X"}},
		{lang: "python", root: "testdata/partial", ext: ".py", fixture: true, patterns: pyPatterns},
	}
	for _, c := range corpora {
		name := c.lang
		if c.fixture {
			name += "-shapes"
		}
		t.Run(name, func(t *testing.T) {
			if c.root == "" {
				t.Skipf("no %s corpus on this machine", c.lang)
			}
			lang := mustLang(t, c.lang)
			files := sampleFiles(t, c.root, c.ext, partialSample)
			var pats []*Pattern
			for _, src := range c.patterns {
				p, err := Compile(lang, src)
				if err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				if p.PartialTokens() == nil {
					t.Errorf("%q has no partial tokens; it should parse partially", src)
				}
				pats = append(pats, p)
			}
			for _, src := range c.wholeOnly {
				p, err := Compile(lang, src)
				if err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				if toks := p.PartialTokens(); toks != nil {
					t.Errorf("%q has partial tokens %q; it may match across declarations and must parse whole", src, toks)
				}
			}
			var (
				mu    sync.Mutex
				modes = map[ParseMode]int{}
				diffs int
				total int
			)
			work := make(chan string)
			var wg sync.WaitGroup
			for range runtime.GOMAXPROCS(0) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ps := new(Parser)
					defer ps.Close()
					for path := range work {
						src, err := os.ReadFile(path)
						if err != nil || len(src) > MaxSourceBytes {
							continue
						}
						whole, err := Parse(context.Background(), lang, src)
						if err != nil {
							continue // over the parse budget: the search skips it either way
						}
						for _, p := range pats {
							want := describe(t, p, whole)
							tr, mode, err := ps.ParseFor(context.Background(), p, src)
							if err != nil {
								t.Errorf("%s: %q: %v", path, p.String(), err)
								continue
							}
							var got []string
							if tr != nil {
								got = describe(t, p, tr)
							} else if mode != ParsedNone {
								t.Errorf("%s: %q: nil tree in mode %v", path, p.String(), mode)
							}
							mu.Lock()
							modes[mode]++
							total += len(want)
							if !slices.Equal(got, want) && diffs < 10 {
								diffs++
								t.Errorf("%s: %q (%v): partial parse found\n%s\nwhole parse found\n%s", path, p.String(), mode,
									strings.Join(got, "\n"), strings.Join(want, "\n"))
							}
							mu.Unlock()
						}
					}
				}()
			}
			for _, f := range files {
				work <- f
			}
			close(work)
			wg.Wait()
			t.Logf("%d files, %d patterns, %d matches; modes: whole %d, partial %d, none %d, fallback %d",
				len(files), len(pats), total, modes[ParsedWhole], modes[ParsedPartial], modes[ParsedNone], modes[ParsedFallback])
			if !c.fixture && (modes[ParsedPartial] == 0 || modes[ParsedNone] == 0 || modes[ParsedWhole] == 0) {
				t.Errorf("every mode should occur on this corpus (whole, partial, none): %v", modes)
			}
			if total == 0 {
				t.Error("no matches at all: the comparison compared nothing")
			}
		})
	}
}

// describe renders every match of p in tr with its range, captures and
// enclosing symbol, sorted.
func describe(t *testing.T, p *Pattern, tr *Tree) []string {
	ms, err := p.Match(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		var b strings.Builder
		fmt.Fprintf(&b, "%d-%d %d:%d-%d:%d %q in %q", m.StartByte, m.EndByte, m.Start.Line, m.Start.Column, m.End.Line, m.End.Column,
			m.Text, tr.Enclosing(m.StartByte, m.EndByte))
		names := make([]string, 0, len(m.Captures))
		for k := range m.Captures {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			c := m.Captures[k]
			fmt.Fprintf(&b, " $%s=%q@%d-%d", k, c.Text, c.Range.StartByte, c.Range.EndByte)
		}
		out = append(out, b.String())
	}
	sort.Strings(out)
	return out
}

// sampleFiles returns up to n files under root ending in ext, spread evenly
// over their sorted list.
func sampleFiles(t *testing.T, root, ext string, n int) []string {
	var all []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ext) {
			all = append(all, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(all)
	if len(all) <= n {
		return all
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, all[i*len(all)/n])
	}
	return out
}

// goRoot is $(go env GOROOT)/src, or "" without a go command.
func goRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Logf("go env GOROOT: %v", err)
		return ""
	}
	return filepath.Join(strings.TrimSpace(string(out)), "src")
}

// pythonLib is the newest /usr/lib/python3.* directory, or "".
func pythonLib(t *testing.T) string {
	ms, _ := filepath.Glob("/usr/lib/python3.*")
	sort.Strings(ms)
	for i := len(ms) - 1; i >= 0; i-- {
		if fi, err := os.Stat(filepath.Join(ms[i], "os.py")); err == nil && fi.Mode().IsRegular() {
			return ms[i]
		}
	}
	return ""
}

// TestSplit checks the declaration scanners on the cases they must refuse
// or must not split.
func TestSplit(t *testing.T) {
	cases := []struct {
		lang, src string
		starts    []uint32 // nil: unsplittable
	}{
		{"go", "package p\n\nfunc a() {}\n\nfunc b() {}\n", []uint32{0, 11, 24}},
		{"go", "package p\nvar s = `\nfunc x() {}\n`\nfunc b() {}\n", []uint32{0, 10, 34}},
		{"go", "package p\n/*\nfunc x() {}\n*/\nfunc b() {}\n", []uint32{0, 28}},
		{"go", "package p\nvar x = a +\nfunc() int { return 1 }()\n", []uint32{0, 10}},
		{"go", "package p\nfunc a() {\n", nil},
		{"go", "package p\nvar s = `open\n", nil},
		{"go", "package p\nvar s = \"open\n\"\n", nil},
		{"go", "package p\nvar r = '\\''\nfunc b() {}\n", []uint32{0, 10, 23}},
		// function bodies split at their statements, the closing brace last
		{"go", "package p\nfunc f() {\n\ta()\n\tb(1,\n\t\t2)\n}\n", []uint32{0, 10, 21, 26, 37}},
		{"go", "package p\nfunc f() {\nL:\n\tfor {\n\t\tbreak L\n\t}\n\tif x {\n\t} else {\n\t}\n}\n", []uint32{0, 10, 21, 44, 52, 62, 65}},
		// if and for statements split too, down to goMaxLevel, an else a tail of its own
		{"go", "package p\nfunc f() {\n\tfor i := range x {\n\t\ta[i] = 1\n\t\tb()\n\t}\n}\n", []uint32{0, 10, 21, 41, 52, 58, 61}},
		{"go", "package p\nfunc f() {\n\tif x {\n\t\ta()\n\t} else if y {\n\t\tb()\n\t} else {\n\t\tc()\n\t}\n}\n", []uint32{0, 10, 21, 29, 35, 50, 56, 66, 72, 75}},
		{"go", "package p\nfunc f() {\n\tif x {\n\t\tif y {\n\t\t\tfor {\n\t\t\t\ta()\n\t\t\t}\n\t\t}\n\t}\n}\n", []uint32{0, 10, 21, 29, 38, 60, 64, 67}},
		{"go", "package p\nfunc f() {\n\tfor _, x := range []int{1, 2} {\n\t\tg(x)\n\t}\n}\n", []uint32{0, 10, 21, 64}},
		{"go", "package p\nfunc f() {\n\tif x {\n\t\ta()\n\t} else { b() }\n}\n", []uint32{0, 10, 21, 51}},
		{"go", "package p\nfunc f() {\n\tif x {\n\t\ta() }\n\tc()\n}\n", []uint32{0, 10, 21, 37, 42}},
		{"go", "package p\nfunc f() {\n\ta()\n} // done\n\n// g does\nfunc g() {}\n", []uint32{0, 10, 21, 26, 47}},
		{"go", "package p\nfunc (r *T) m(\n\ta int,\n) error {\n\treturn nil\n}\n", []uint32{0, 10, 43, 55}},
		// and kept whole where the body's braces are not alone at a line's end and start
		{"go", "package p\nfunc f() interface {\n\tM()\n} {\n\treturn nil\n}\n", []uint32{0, 10}},
		{"go", "package p\nfunc f() {\n\ta() }\n", []uint32{0, 10}},
		{"go", "package p\nfunc f() { a()\n}\n", []uint32{0, 10}},
		{"python", "import os\n\ndef f():\n    pass\n", []uint32{0, 11, 20}},
		{"python", "@dec\n@dec2(1)\ndef f():\n    pass\nclass C:\n    pass\n", []uint32{0, 23, 32, 41}},
		{"python", "class C:\n    x = 1\n\n    def f(self):\n        pass\n    @d\n    def g(self):\n        pass\ny = 2\n", []uint32{0, 9, 20, 37, 50, 74, 87}},
		// functions split too, methods of a class, down to pyMaxLevel
		{"python", "async def f():\n    await x\n", []uint32{0, 15}},
		{"python", "def f():\n    def g():\n        return 1\n    return g\n", []uint32{0, 9, 22, 39}},
		{"python", "class C:\n    def f(self):\n        def g():\n            return 1\n        return g\n", []uint32{0, 9, 26, 64}},
		{"python", "class C:\n    def f(self):\n        a\n      b\n", []uint32{0, 9}},
		{"python", "@d\nclass C(\n  B):\n    '''doc'''\n    if x:\n        a\n    else:\n        b\n", []uint32{0, 18, 32}},
		{"python", "class C:\n    x = 1\n  y = 2\nz = 3\n", []uint32{0, 27}},
		{"python", "class C: pass\nz = 3\n", []uint32{0, 14}},
		{"python", "if x:\n    pass\nelse:\n    pass\ntry:\n    a\nexcept E:\n    b\nfinally:\n    c\n", []uint32{0, 30}},
		{"python", "s = '''\ndef f():\n'''\nx = (1,\n2)\ny = 1 + \\\n2\nz = 3\n", []uint32{0, 21, 32, 44}},
		{"python", "x = (1,\n", nil},
		{"python", "s = '''never closed\n", nil},
		{"python", "# comment\nx = 1\n", []uint32{0, 10}},
	}
	for _, c := range cases {
		chunks, ok := splitters[c.lang].split([]byte(c.src), nil)
		var starts []uint32
		if ok {
			for i, ch := range chunks {
				starts = append(starts, ch.start)
				if i > 0 && chunks[i-1].end != ch.start {
					t.Errorf("%s %q: chunks not contiguous: %v", c.lang, c.src, chunks)
				}
			}
			if chunks[len(chunks)-1].end != uint32(len(c.src)) {
				t.Errorf("%s %q: last chunk ends at %d, not at the end", c.lang, c.src, chunks[len(chunks)-1].end)
			}
		}
		if !slices.Equal(starts, c.starts) {
			t.Errorf("%s %q: starts %v (ok %v), want %v", c.lang, c.src, starts, ok, c.starts)
		}
	}
}

// TestJoinGaps: a gap is parsed when gapWorth times its length is below the
// bytes parsed after it, and total grows by the gaps joined.
func TestJoinGaps(t *testing.T) {
	r := func(start, end uint32) parseRange { return parseRange{startByte: start, endByte: end} }
	big := uint32(gapWorth * 10)
	tests := []struct {
		name      string
		in, want  []parseRange
		wantTotal int
	}{
		{"one range", []parseRange{r(0, 10)}, []parseRange{r(0, 10)}, 10},
		{"short gap before much", []parseRange{r(0, 10), r(15, 15+big)}, []parseRange{r(0, 15+big)}, 10 + int(big) + 5},
		{"long gap before little", []parseRange{r(0, 10), r(5000, 5010)}, []parseRange{r(0, 10), r(5000, 5010)}, 20},
		{"only the early gap", []parseRange{r(0, 10), r(12, 12+big), r(12+big+20, 12+big+30)},
			[]parseRange{r(0, 12+big), r(12+big+20, 12+big+30)}, 10 + 2 + int(big) + 10},
	}
	for _, tc := range tests {
		total := 0
		for _, x := range tc.in {
			total += int(x.endByte - x.startByte)
		}
		got, gotTotal := joinGaps(slices.Clone(tc.in), total)
		if !slices.Equal(got, tc.want) || gotTotal != tc.wantTotal {
			t.Errorf("%s: joinGaps = %v, total %d; want %v, total %d", tc.name, got, gotTotal, tc.want, tc.wantTotal)
		}
	}
}
