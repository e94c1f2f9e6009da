package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/eval"
)

// envFirstCellRounds is how many new runs TestFirstCellReport measures per
// contender (default 7).
const envFirstCellRounds = "BERTH_BENCH_FIRST_N"

// TestFirstCellReport measures the first cell of a new run in a container:
// with its kernel prewarmed as the run opened (eval.Supervisor.Prewarm,
// what "prewarm": ["python"] does; measured once the run's resources say
// the kernel runs), and without (the first cell pays the kernel's cold
// start), against the anchor of jupyter_client's cell on an ipykernel it
// started earlier, in interleaved rounds. Goal: the prewarmed first cell
// within 1.2× of the anchor's.
func TestFirstCellReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to measure a new run's first cell; bench/run does", envRun)
	}
	if exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client").Run() != nil {
		t.Skip("Debian's python3-ipykernel is not installed on the host")
	}
	image := os.Getenv(envEvalImage)
	if image == "" {
		image = "berth-test-python"
	}
	rounds := envInt(envFirstCellRounds, 7)
	anchor := startAnchor(t)
	_, sb := benchContainer(t, image, nil)

	var anchorRT, warm, cold []time.Duration
	for range rounds {
		anchorRT = append(anchorRT, anchor.first(t))
		warm = append(warm, firstCell(t, sb, true))
		cold = append(cold, firstCell(t, sb, false))
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "a new run's first cell \"1\"\tmedian\tratio to the anchor\t\n")
	fmt.Fprintf(tw, "jupyter_client → the first cell of an ipykernel it started earlier, on the host (anchor)\t%s\t1.00\t\n", us(median(anchorRT)))
	verdict := "met"
	if ratio(warm, anchorRT) > 1.2 {
		verdict = "NOT met"
	}
	fmt.Fprintf(tw, "berth eval in a container, kernel prewarmed as the run opened\t%s\t%.2f (goal ≤ 1.2: %s)\t\n", us(median(warm)), ratio(warm, anchorRT), verdict)
	fmt.Fprintf(tw, "berth eval in a container, no prewarm (the kernel's cold start)\t%s\t%.2f\t\n", millis(median(cold)), ratio(cold, anchorRT))
	tw.Flush()
	t.Logf("first cell of a new run, median of %d runs each, interleaved:\n%s", rounds, b.String())
}

// firstCell opens eval for a new run in sb — prewarming its python kernel
// and waiting until it runs, when prewarm is set — and times its first
// cell; it closes the run's kernel afterwards.
func firstCell(t *testing.T, sb sandbox.Sandbox, prewarm bool) time.Duration {
	t.Helper()
	ctx := t.Context()
	fsys, err := sb.FS(ctx, benchWorkspace)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg := tools.NewRegistry()
	sup := eval.Register(reg, sb, fsys, runCtx, eval.Options{})
	defer sup.Close()
	if prewarm {
		sup.Prewarm([]string{eval.Python}, func(context.Context, string) error { return nil })
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if rs := sup.Resources(); len(rs) == 1 && rs[0].State == "running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the prewarmed kernel did not run within 2 minutes: %v", sup.Resources())
			}
		}
	}
	return (&evalCells{reg: reg}).cell(t, "1")
}
