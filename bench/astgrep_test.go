package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
	"berth.dev/berth/tools/structural"
)

// Environment of the comparison.
const (
	envRun      = "BERTH_BENCH"       // "1" runs TestReport
	envASTGrep  = "BERTH_AST_GREP"    // path of the ast-grep CLI binary (node_modules/.bin/ast-grep)
	envBerth    = "BERTH_BIN"         // path of a built berth binary; built into a temp dir when unset
	envPyLib    = "BERTH_BENCH_PYLIB" // Python standard library directory; default /usr/lib/python3.11 or a pyenv one
	envColdRuns = "BERTH_BENCH_COLD"  // cold runs per tool and pattern (default 5)
	envWarmRuns = "BERTH_BENCH_WARM"  // warm in-process runs per pattern (default 10)
	envOnly     = "BERTH_BENCH_ONLY"  // run only corpora whose name contains this ("go", "python")

	defaultColdRuns = 5
	defaultWarmRuns = 10
)

// pattern is one row of the comparison. A row with differs set is a known,
// explained difference between the tools (differs says why): its counts are
// reported, not compared, and it is not timed.
type pattern struct {
	text    string
	differs string
}

// Explanations of the known differences.
const (
	whyLadder       = "ladder: the CLI parses the fragment as a type conversion and finds nothing (gh #646); berth's context ladder finds the calls"
	whyBlockComment = "comments: the CLI does not skip a comment that is a direct child of a Go block (before its statement_list), so blocks opening with a comment do not match; berth skips comments"
)

type corpus struct {
	name, lang, root string
	patterns         []pattern
}

// corpora returns the Go source tree and a Python standard library.
func corpora(t testing.TB) []corpus {
	goroot := runtime.GOROOT()
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		goroot = strings.TrimSpace(string(out))
	}
	cs := []corpus{{
		name: "go " + filepath.Join(goroot, "src"), lang: "go", root: filepath.Join(goroot, "src"),
		patterns: []pattern{
			{text: "$X.Lock()"},
			{text: "fmt.Errorf($F, $$$A)"},
			{text: "return nil, $E"},
			{text: "fmt.Errorf($$$)", differs: whyLadder},
			{text: "errors.New($A)", differs: whyLadder},
			{text: "if err != nil { return $$$ }", differs: whyBlockComment},
		},
	}}
	if py := pythonLib(); py != "" {
		cs = append(cs, corpus{
			name: "python " + py, lang: "python", root: py,
			patterns: []pattern{
				{text: "print($$$)"},
				{text: "def $F(self): $$$"},
				{text: "raise $E($$$)"},
			},
		})
	} else {
		t.Logf("no Python standard library found (set %s); the Python corpus is left out", envPyLib)
	}
	if only := os.Getenv(envOnly); only != "" {
		cs = slices.DeleteFunc(cs, func(c corpus) bool { return !strings.Contains(c.name, only) })
	}
	return cs
}

// pythonLib is $BERTH_BENCH_PYLIB, Debian's /usr/lib/python3.11, or the
// newest pyenv standard library.
func pythonLib() string {
	if p := os.Getenv(envPyLib); p != "" {
		return p
	}
	if fi, err := os.Stat("/usr/lib/python3.11"); err == nil && fi.IsDir() {
		return "/usr/lib/python3.11"
	}
	ms, _ := filepath.Glob("/root/.pyenv/versions/*/lib/python3.*")
	if len(ms) == 0 {
		return ""
	}
	slices.Sort(ms)
	return ms[len(ms)-1]
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// berthBinary returns $BERTH_BIN or builds cmd/berth into a temp dir.
func berthBinary(t *testing.T) string {
	if p := os.Getenv(envBerth); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "berth")
	cmd := exec.Command("go", "build", "-o", bin, "berth.dev/berth/cmd/berth")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build berth: %v (or set %s to a built binary)", err, envBerth)
	}
	return bin
}

// hit identifies a match in both tools' output: file, 1-based start line,
// matched text (columns differ: ast-grep counts characters, berth bytes).
type hit struct {
	file string
	line int
	text string
}

// runCLI runs a command, returns its wall time and the JSON lines it
// printed (parsed only when keep is set; counted otherwise).
func runCLI(ctx context.Context, keep bool, name string, args ...string) (time.Duration, int, [][]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, nil, err
	}
	n := 0
	var lines [][]byte
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		n++
		if keep {
			lines = append(lines, bytes.Clone(sc.Bytes()))
		}
	}
	_, _ = io.Copy(io.Discard, out)
	werr := cmd.Wait()
	d := time.Since(start)
	if ee, ok := werr.(*exec.ExitError); ok && ee.ExitCode() == 1 && n == 0 {
		werr = nil // no match
	}
	if werr != nil {
		return d, n, nil, fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), werr, stderr.String())
	}
	return d, n, lines, nil
}

func astGrepArgs(c corpus, p pattern) []string {
	return []string{"run", "--pattern", p.text, "--lang", c.lang, "--json=stream", c.root}
}

func berthArgs(c corpus, p pattern) []string {
	return []string{"ast-grep", "--pattern", p.text, "--lang", c.lang, "--json", c.root}
}

func astGrepHits(lines [][]byte) (map[hit]int, error) {
	out := map[hit]int{}
	for _, l := range lines {
		var m struct {
			File  string `json:"file"`
			Text  string `json:"text"`
			Range struct {
				Start struct{ Line int } `json:"start"`
			} `json:"range"`
		}
		if err := json.Unmarshal(l, &m); err != nil {
			return nil, fmt.Errorf("ast-grep output %q: %w", l, err)
		}
		out[hit{m.File, m.Range.Start.Line + 1, m.Text}]++
	}
	return out, nil
}

func berthHits(lines [][]byte) (map[hit]int, error) {
	out := map[hit]int{}
	for _, l := range lines {
		var m struct {
			File      string `json:"file"`
			StartLine int    `json:"start_line"`
			Text      string `json:"text"`
		}
		if err := json.Unmarshal(l, &m); err != nil {
			return nil, fmt.Errorf("berth output %q: %w", l, err)
		}
		out[hit{m.File, m.StartLine, m.Text}]++
	}
	return out, nil
}

// only returns how many hits a counts beyond b, and up to max of them as
// lines.
func only(a, b map[hit]int, max int) (int, []string) {
	n := 0
	var out []string
	for h, c := range a {
		if c > b[h] {
			n += c - b[h]
			text, _, _ := strings.Cut(h.text, "\n")
			out = append(out, fmt.Sprintf("%s:%d: %s", h.file, h.line, text))
		}
	}
	slices.Sort(out)
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("… %d more", len(out)-max))
	}
	return n, out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64)
}

// row is one line of the report.
type row struct {
	corpus, pattern      string
	agCount, berthCount  int
	agMS, coldMS, warmMS time.Duration
	differs              string
	mismatch             bool
	note                 string
}

// TestReport runs the comparison and prints the table. It takes minutes,
// so it runs only with BERTH_BENCH=1 (bench/run sets it) and needs the
// ast-grep CLI in BERTH_AST_GREP.
func TestReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to compare with the ast-grep CLI (takes minutes); bench/run does", envRun)
	}
	sg := os.Getenv(envASTGrep)
	if sg == "" {
		t.Skipf("set %s to the ast-grep CLI binary (npm install @ast-grep/cli; node_modules/.bin/ast-grep); bench/run installs it", envASTGrep)
	}
	if _, err := os.Stat(sg); err != nil {
		t.Skipf("%s=%s: %v", envASTGrep, sg, err)
	}
	berth := berthBinary(t)
	coldN, warmN := envInt(envColdRuns, defaultColdRuns), envInt(envWarmRuns, defaultWarmRuns)
	ctx := t.Context()

	var rows []row
	for _, c := range corpora(t) {
		if _, err := os.Stat(c.root); err != nil {
			t.Errorf("corpus %s: %v", c.name, err)
			continue
		}
		fsys, err := dirfs.New(c.root)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.patterns {
			r := row{corpus: c.name, pattern: p.text, differs: p.differs}
			// Correctness first: both tools once, full output compared.
			_, n, agLines, err := runCLI(ctx, true, sg, astGrepArgs(c, p)...)
			if err != nil {
				t.Fatalf("ast-grep: %v", err)
			}
			r.agCount = n
			_, n, bLines, err := runCLI(ctx, true, berth, berthArgs(c, p)...)
			if err != nil {
				t.Fatalf("berth: %v", err)
			}
			r.berthCount = n
			if r.agCount != r.berthCount {
				agH, err1 := astGrepHits(agLines)
				bH, err2 := berthHits(bLines)
				if err1 != nil || err2 != nil {
					t.Fatalf("parse outputs: %v %v", err1, err2)
				}
				nAG, onlyAG := only(agH, bH, 8)
				nB, onlyB := only(bH, agH, 8)
				r.note = fmt.Sprintf("only ast-grep finds %d, only berth %d; first of berth's: %s", nAG, nB, strings.Join(onlyB[:min(3, len(onlyB))], " | "))
				if p.differs == "" {
					r.mismatch = true
					t.Errorf("%s %q: ast-grep finds %d, berth %d — the timing comparison is meaningless\nonly ast-grep:\n  %s\nonly berth:\n  %s",
						c.name, p.text, r.agCount, r.berthCount, strings.Join(onlyAG, "\n  "), strings.Join(onlyB, "\n  "))
				}
			}
			if p.differs != "" {
				rows = append(rows, r)
				continue
			}

			// Cold: both processes, interleaved, alternating who goes first.
			var ag, cold []time.Duration
			for i := range coldN {
				order := []bool{true, false}
				if i%2 == 1 {
					order = []bool{false, true}
				}
				for _, isAG := range order {
					if isAG {
						d, _, _, err := runCLI(ctx, false, sg, astGrepArgs(c, p)...)
						if err != nil {
							t.Fatal(err)
						}
						ag = append(ag, d)
					} else {
						d, _, _, err := runCLI(ctx, false, berth, berthArgs(c, p)...)
						if err != nil {
							t.Fatal(err)
						}
						cold = append(cold, d)
					}
				}
			}
			r.agMS, r.coldMS = median(ag), median(cold)

			// Warm: one Engine, primed once, then timed.
			eng := structural.NewEngine(structural.Options{})
			req := structural.SearchRequest{Pattern: p.text, Language: c.lang, MaxResults: -1}
			res, err := eng.Search(ctx, fsys, req)
			if err != nil {
				t.Fatalf("warm prime: %v", err)
			}
			if res.Total != r.berthCount {
				t.Errorf("%s %q: in-process search finds %d, the berth binary %d", c.name, p.text, res.Total, r.berthCount)
			}
			var warm []time.Duration
			for range warmN {
				start := time.Now()
				if _, err := eng.Search(ctx, fsys, req); err != nil {
					t.Fatal(err)
				}
				warm = append(warm, time.Since(start))
			}
			r.warmMS = median(warm)
			st := eng.Stats()
			r.note = strings.TrimPrefix(fmt.Sprintf("%s; warm: %d parses, %d cache hits, %d prefiltered", r.note, st.Parses, st.CacheHits, st.Prefiltered), "; ")
			rows = append(rows, r)
			t.Logf("%s %q: %d matches, ast-grep %s ms, berth cold %s ms, warm %s ms", c.name, p.text, r.agCount, ms(r.agMS), ms(r.coldMS), ms(r.warmMS))
		}
		if cl, ok := fsys.(io.Closer); ok {
			cl.Close()
		}
	}
	printTable(os.Stdout, rows, coldN, warmN)
}

func printTable(w io.Writer, rows []row, coldN, warmN int) {
	fmt.Fprintf(w, "\nberth vs ast-grep CLI — medians of %d cold runs (both as processes, JSON lines) and %d warm in-process searches; %d CPUs\n\n", coldN, warmN, runtime.NumCPU())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "corpus\tpattern\tmatches\tast-grep ms\tberth cold ms\tratio (≤1.0)\tberth warm ms\tspeedup (≥5)\t")
	for _, r := range rows {
		matches := strconv.Itoa(r.agCount)
		if r.agCount != r.berthCount {
			matches = fmt.Sprintf("%d vs %d", r.agCount, r.berthCount)
		}
		if r.differs != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t(known difference, not timed)\t\t\t\t\t\n", r.corpus, r.pattern, matches)
			continue
		}
		ratio := float64(r.coldMS) / float64(r.agMS)
		speedup := float64(r.agMS) / float64(r.warmMS)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%.1f\t\n", r.corpus, r.pattern, matches, ms(r.agMS), ms(r.coldMS), ratio, ms(r.warmMS), speedup)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rows {
		if r.differs != "" {
			fmt.Fprintf(w, "  %q (ast-grep %d, berth %d) %s\n", r.pattern, r.agCount, r.berthCount, r.differs)
		}
	}
	for _, r := range rows {
		if r.note != "" {
			fmt.Fprintf(w, "  %s %q: %s\n", r.corpus, r.pattern, r.note)
		}
	}
}

// benchCases are the timed rows of the comparison, for the Benchmark
// functions (the profiling entry points: go test -bench Cold -cpuprofile).
func benchCases(b *testing.B) []struct {
	name string
	c    corpus
	p    pattern
	fsys sandbox.FS
} {
	var out []struct {
		name string
		c    corpus
		p    pattern
		fsys sandbox.FS
	}
	for _, c := range corpora(b) {
		if _, err := os.Stat(c.root); err != nil {
			continue
		}
		fsys, err := dirfs.New(c.root)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if cl, ok := fsys.(io.Closer); ok {
				cl.Close()
			}
		})
		for _, p := range c.patterns {
			if p.differs != "" {
				continue
			}
			out = append(out, struct {
				name string
				c    corpus
				p    pattern
				fsys sandbox.FS
			}{c.lang + "/" + p.text, c, p, fsys})
		}
	}
	return out
}

// BenchmarkSearchCold is a search with a fresh Engine (no parse cache)
// each time, in-process: the berth binary's cold time minus process start.
func BenchmarkSearchCold(b *testing.B) {
	for _, bc := range benchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			req := structural.SearchRequest{Pattern: bc.p.text, Language: bc.c.lang, MaxResults: -1}
			for b.Loop() {
				eng := structural.NewEngine(structural.Options{CacheBytes: -1})
				if _, err := eng.Search(b.Context(), bc.fsys, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSearchWarm is a repeated search on one Engine (parse cache
// primed).
func BenchmarkSearchWarm(b *testing.B) {
	for _, bc := range benchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			req := structural.SearchRequest{Pattern: bc.p.text, Language: bc.c.lang, MaxResults: -1}
			eng := structural.NewEngine(structural.Options{})
			if _, err := eng.Search(b.Context(), bc.fsys, req); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := eng.Search(b.Context(), bc.fsys, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
