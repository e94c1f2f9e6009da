package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
	"berth.dev/berth/tools/structural"
)

// Environment of the large-workspace comparison.
const (
	envBigFiles   = "BERTH_BENCH_BIG_FILES" // files of the large workspace (default 100000)
	envBigQueries = "BERTH_BENCH_BIG_N"     // hovers per side and round (default 20)
)

// bigFillScript writes $N small files into $DIR, 100 to a directory, next
// to the Go project: the rest of a monorepo (docs, data, another
// language's sources) that berth must not pay for on every question.
const bigFillScript = `set -e; cd "$DIR"; i=0; while [ $i -lt $N ]; do d=vendorish/d$((i / 100)); mkdir -p $d; j=0; while [ $j -lt 100 ] && [ $i -lt $N ]; do echo "line $i" > $d/f$i.txt; i=$((i + 1)); j=$((j + 1)); done; done`

// TestBigWorkspaceReport measures a language-server question's cost on a
// large workspace: lsp hover (through the lsp tool, as a model asks it)
// on the small Go project alone and on the same project inside a
// workspace of BERTH_BENCH_BIG_FILES more files, on the host and in a
// container, interleaved; and a warm ast_grep on both. Before the
// workspace watch, each query walked the whole tree. Goal: the hover on
// the large workspace within 2 ms of the small one's.
func TestBigWorkspaceReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to measure questions on a large workspace (builds %d files); bench/run does", envRun, envInt(envBigFiles, 100000))
	}
	if _, err := exec.LookPath("gopls"); err != nil {
		t.Skip("gopls is not on PATH (tests/run links the go image's gopls into its tool cache)")
	}
	image := os.Getenv(envLSPImage)
	if image == "" {
		image = "berth-test-go"
	}
	nFiles, n := envInt(envBigFiles, 100000), envInt(envBigQueries, 20)

	type side struct {
		name  string
		reg   *tools.Registry
		walks bool // the anchor: the workspace not watched, walked per query
	}
	open := func(name string, sb sandbox.Sandbox, root string, walks bool) side {
		ws, err := sb.FS(t.Context(), root)
		if err != nil {
			t.Fatal(err)
		}
		if walks {
			ws = unwatched{ws}
		}
		runCtx, cancel := context.WithCancel(t.Context())
		reg := tools.NewRegistry()
		sup := lsp.Register(reg, sb, ws, runCtx, lsp.Options{})
		eng := structural.NewEngine(structural.Options{})
		structural.Register(reg, ws, eng)
		eng.Follow(ws)
		t.Cleanup(func() { sup.Close(); eng.Close(); cancel() })
		return side{name, reg, walks}
	}
	call := func(s side, tool string, args map[string]any, want string) time.Duration {
		raw, _ := json.Marshal(args)
		start := time.Now()
		res, err := s.reg.Call(t.Context(), tools.SurfaceDefault, tool, raw)
		d := time.Since(start)
		if err != nil || res.IsError || !strings.Contains(res.AllText(), want) {
			t.Fatalf("%s %s %v: %v %s", s.name, tool, args, err, res.AllText())
		}
		return d
	}
	hover := map[string]any{"action": "hover", "file": "greet/greet.go", "line": 15, "symbol": "Hello"}
	grep := map[string]any{"pattern": "fmt.Println($$$)", "language": "go"}

	// The host: two directories.
	small, big := t.TempDir(), t.TempDir()
	for _, dir := range []string{small, big} {
		for name, text := range lsptest.GoProject {
			os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
			os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
		}
	}
	fill := exec.Command("sh", "-c", bigFillScript)
	fill.Env = append(os.Environ(), "DIR="+big, fmt.Sprintf("N=%d", nFiles))
	if out, err := fill.CombinedOutput(); err != nil {
		t.Fatalf("filling the large workspace: %v %s", err, out)
	}
	hsb := host.New(host.Options{Env: os.Environ()})
	t.Cleanup(func() { hsb.Close() })
	sides := []side{open("host, 10 files", hsb, small, false), open(fmt.Sprintf("host, %d files", nFiles), hsb, big, false)}

	// The container: the same two workspaces.
	ctrID, sb := benchContainer(t, image, lsptest.GoProject)
	script := "cp -r " + benchWorkspace + " /big && DIR=/big N=" + fmt.Sprint(nFiles) + " sh -c '" + bigFillScript + "'"
	if out, err := exec.Command("docker", "exec", ctrID, "sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("filling the container's large workspace: %v %s", err, out)
	}
	sides = append(sides, open("container, 10 files", sb, benchWorkspace, false), open(fmt.Sprintf("container, %d files", nFiles), sb, "/big", false),
		// The anchor: what every query cost before the watch.
		open(fmt.Sprintf("host, %d files, walked per query (no watch)", nFiles), hsb, big, true))

	// Start every server and warm the searches, then interleave.
	for _, s := range sides {
		call(s, "lsp", hover, "func Hello")
		call(s, "ast_grep", grep, "Println")
	}
	hovers := make([][]time.Duration, len(sides))
	greps := make([][]time.Duration, len(sides))
	for range 5 {
		for i, s := range sides {
			k := n
			if s.walks {
				k = max(1, n/10) // each walks the whole tree
			}
			for range k {
				hovers[i] = append(hovers[i], call(s, "lsp", hover, "func Hello"))
			}
			greps[i] = append(greps[i], call(s, "ast_grep", grep, "Println"))
		}
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workspace\tlsp hover\tadded over 10 files\twarm ast_grep\t\n")
	for i, s := range sides {
		added := ""
		if s.walks {
			added = fmt.Sprintf("%s (walking, %.0f× the watched)", millis(median(hovers[i])-median(hovers[0])), ratio(hovers[i], hovers[1]))
		} else if i%2 == 1 {
			d := median(hovers[i]) - median(hovers[i-1])
			verdict := "met"
			if d > 2*time.Millisecond {
				verdict = "NOT met"
			}
			added = fmt.Sprintf("%s (goal ≤ 2 ms: %s)", millis(d), verdict)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", s.name, millis(median(hovers[i])), added, millis(median(greps[i])))
	}
	tw.Flush()
	t.Logf("questions on a large workspace, medians (%d hovers, 5 searches each, interleaved):\n%s", 5*n, b.String())
}

// unwatched hides an FS's Watcher: its tools walk it, as before the watch.
type unwatched struct{ sandbox.FS }
