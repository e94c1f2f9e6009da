package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"
)

// everyFile are the patterns of the partial-parsing report: none has a
// literal the file prefilter could use, so every file of the corpus passes
// it, and only partial parsing (syntax.ParseFor: the declarations holding
// the pattern's tokens) saves parsing. A row with differs set is a known
// difference in what the tools find; it is timed all the same (both tools
// still parse every file), and its counts are reported, not compared.
var everyFile = map[string][]pattern{
	"go": {
		{text: "$A == $A"},
		{text: "$X($$$)", differs: "comments: berth skips a comment between a callee and its arguments (f /* ERROR … */ (x), 273 calls in go/types testdata) and finds those calls; the CLI does not. Not from partial parsing: berth's output is byte-identical with it off"},
		{text: "$X.$Y($$$)", differs: "ladder: the CLI finds nothing for this Go fragment (it does not take it as a call expression, as with gh #646); berth's context ladder finds the calls"},
		{text: "$A != nil"},
		{text: "$X[$I] = $V"},
	},
	"python": {
		{text: "$A == $A"},
		{text: "$X($$$)", differs: whyContinuation},
		{text: "$X.$Y($$$)", differs: whyContinuation},
		{text: "self.$A = $B"},
		{text: "$A if $B else $C"},
	},
}

// whyContinuation explains the one Python call only berth finds.
const whyContinuation = "continuation: berth finds the call re.compile \\<newline> (…) in distutils/command/build_ext.py, whose callee and arguments a backslash continuation separates; the CLI does not. Not from partial parsing: berth's output is byte-identical with it off"

// procRun is one whole-process run: wall time, peak RSS, peak anonymous
// memory, JSON lines printed.
type procRun struct {
	wall  time.Duration
	rss   int64 // bytes
	anon  int64 // bytes
	lines int
}

// runProc runs name with args, counting the lines it prints, and returns
// its wall time, peak RSS (the child's rusage ru_maxrss) and peak
// anonymous memory (sampled, see sampleAnon).
func runProc(t *testing.T, name string, args ...string) procRun {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	anon := make(chan int64, 1)
	stop := make(chan struct{})
	go func() { anon <- sampleAnon(cmd.Process.Pid, stop) }()
	n := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		n++
	}
	_, _ = io.Copy(io.Discard, out)
	close(stop)
	peakAnon := <-anon
	werr := cmd.Wait()
	r := procRun{wall: time.Since(start), lines: n, anon: peakAnon}
	if ee, ok := werr.(*exec.ExitError); ok && ee.ExitCode() == 1 && n == 0 {
		werr = nil // no match
	}
	if werr != nil {
		t.Fatalf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), werr, stderr.String())
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.rss = ru.Maxrss << 10 // KiB on Linux
	}
	return r
}

// sampleAnon returns the largest Anonymous of /proc/PID/smaps_rollup seen
// every 5 ms until stop closes: the memory a process allocated itself, apart
// from the pages of its executable that it maps. Both count in ru_maxrss,
// and a big Go binary maps tens of MiB of its own file at start (58 MiB of
// berth's on the kernel this was written on, which maps a file's large
// folios whole), against about 10 MiB of the CLI's. Sampled, so a spike
// shorter than 5 ms may be missed, for both tools alike.
func sampleAnon(pid int, stop <-chan struct{}) int64 {
	path := fmt.Sprintf("/proc/%d/smaps_rollup", pid)
	var peak int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			for line := range strings.Lines(string(b)) {
				if rest, ok := strings.CutPrefix(line, "Anonymous:"); ok {
					kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
					peak = max(peak, kb<<10)
				}
			}
		}
		select {
		case <-stop:
			return peak
		case <-tick.C:
		}
	}
}

// TestParseReport compares `berth ast-grep` with the ast-grep CLI on
// patterns every file must be parsed for (see everyFile): whole processes,
// interleaved and alternating who goes first, medians of wall time and of
// peak RSS. It prints a table; it asserts only that the match counts agree
// (where no known difference is declared), never a time. Runs with
// BERTH_BENCH=1 and BERTH_AST_GREP, like TestReport.
func TestParseReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to compare with the ast-grep CLI (takes minutes); bench/run does", envRun)
	}
	sg := os.Getenv(envASTGrep)
	if sg == "" {
		t.Skipf("set %s to the ast-grep CLI binary", envASTGrep)
	}
	berth := berthBinary(t)
	runs := envInt(envColdRuns, defaultColdRuns)
	type prow struct {
		corpus, pattern, differs string
		agN, bN                  int
		ag, b                    []procRun
	}
	var rows []prow
	for _, c := range corpora(t) {
		for _, p := range everyFile[c.lang] {
			r := prow{corpus: c.name, pattern: p.text, differs: p.differs}
			for i := range runs {
				first := i%2 == 0
				for k := range 2 {
					if (k == 0) == first {
						r.ag = append(r.ag, runProc(t, sg, astGrepArgs(c, p)...))
					} else {
						r.b = append(r.b, runProc(t, berth, berthArgs(c, p)...))
					}
				}
			}
			r.agN, r.bN = r.ag[0].lines, r.b[0].lines
			if r.agN != r.bN && p.differs == "" {
				t.Errorf("%s %q: ast-grep finds %d, berth %d — the timing comparison is meaningless", c.name, p.text, r.agN, r.bN)
			}
			t.Logf("%s %q: ast-grep %d matches %s ms, berth %d matches %s ms", c.name, p.text, r.agN, ms(medianWall(r.ag)), r.bN, ms(medianWall(r.b)))
			rows = append(rows, r)
		}
	}
	fmt.Fprintf(os.Stdout, "\nberth ast-grep vs ast-grep CLI on every-file patterns (partial parsing) — medians of %d interleaved whole-process runs each, JSON lines; %d CPUs, machine shared with other work\n\n", runs, runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "corpus\tpattern\tmatches\tast-grep ms\tberth ms\tratio (goal ≤0.6)\tratio range\tRSS MiB ast-grep/berth\tanon MiB ast-grep/berth\t")
	for _, r := range rows {
		matches := strconv.Itoa(r.agN)
		if r.agN != r.bN {
			matches = fmt.Sprintf("%d vs %d", r.agN, r.bN)
		}
		lo, hi := pairRange(r.ag, r.b)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f–%.2f\t%d / %d\t%d / %d\t\n", r.corpus, r.pattern, matches,
			ms(medianWall(r.ag)), ms(medianWall(r.b)), float64(medianWall(r.b))/float64(medianWall(r.ag)), lo, hi,
			medianMem(r.ag, rssOf)>>20, medianMem(r.b, rssOf)>>20, medianMem(r.ag, anonOf)>>20, medianMem(r.b, anonOf)>>20)
	}
	tw.Flush()
	for _, r := range rows {
		if r.differs != "" {
			fmt.Fprintf(os.Stdout, "  %q (ast-grep %d, berth %d) %s\n", r.pattern, r.agN, r.bN, r.differs)
		}
	}
}

func medianWall(rs []procRun) time.Duration {
	ds := make([]time.Duration, len(rs))
	for i, r := range rs {
		ds[i] = r.wall
	}
	return median(ds)
}

func rssOf(r procRun) int64  { return r.rss }
func anonOf(r procRun) int64 { return r.anon }

// medianMem is the median of one memory measure of rs.
func medianMem(rs []procRun, of func(procRun) int64) int64 {
	v := make([]int64, len(rs))
	for i, r := range rs {
		v[i] = of(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// pairRange is the lowest and highest ratio berth/ast-grep over the
// interleaved pairs.
func pairRange(ag, b []procRun) (lo, hi float64) {
	for i := range min(len(ag), len(b)) {
		q := float64(b[i].wall) / float64(ag[i].wall)
		if i == 0 || q < lo {
			lo = q
		}
		if i == 0 || q > hi {
			hi = q
		}
	}
	return lo, hi
}
