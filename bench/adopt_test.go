package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"berth.dev/berth/tests/berthtest"
)

// envAdoptRounds is how many restarts TestAdoptReport measures (default 5).
const envAdoptRounds = "BERTH_BENCH_ADOPT_N"

// adoptToken is the bearer token of the berth serve the report starts.
const adoptToken = "bench-adopt-token"

// TestAdoptReport measures what a restart of berth costs a conversation:
// the time from starting `berth serve` on the state directory of a killed
// berth (kill -9) to the first answered cell of the run it adopts, whose
// kernel kept its variables, against the anchor of a berth that keeps
// nothing: the time from its start to the first answered cell of a new run
// (opening it and a cold kernel start), which is what the same
// conversation paid before runs outlived berth. Both in a container, in
// interleaved rounds. Goal: the adopted run answers within one second.
func TestAdoptReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to measure adoption after a restart (takes a minute); bench/run does", envRun)
	}
	image := os.Getenv(envEvalImage)
	if image == "" {
		image = "berth-test-python"
	}
	rounds := envInt(envAdoptRounds, 5)
	ctx := t.Context()
	ctr, _ := benchContainer(t, image, nil)
	spec := map[string]any{"sandbox": "docker://" + ctr, "workspace": benchWorkspace}
	serve := func(state string) (*berthtest.Server, *berthtest.Client, time.Time) {
		start := time.Now()
		s := berthtest.Start(t, berthtest.Options{
			Args: []string{"--mode", "local", "--allow-unlabelled", "--state-dir=" + state},
			Env:  []string{"BERTH_TOKEN=" + adoptToken},
		})
		return s, &berthtest.Client{URL: s.URL, Token: adoptToken}, start
	}
	cell := func(c *berthtest.Client, run, code string) string {
		res, err := c.Call(ctx, run, "eval", map[string]any{"code": code, "description": "measure the first cell after a restart"})
		if err != nil || res.IsError {
			t.Fatalf("eval %q: %v %s", code, err, res.Text())
		}
		return res.Text()
	}

	state := t.TempDir()
	s, c, _ := serve(state)
	run, err := c.OpenRun(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	cell(c, run.ID, "x = 41")
	var adopted, fresh []time.Duration
	for i := range rounds {
		// The adopted run: kill -9, start again, first cell.
		s.Kill()
		var start time.Time
		s, c, start = serve(state)
		if got := cell(c, run.ID, "x + 1"); !strings.Contains(got, "42") {
			t.Fatalf("round %d: the adopted kernel answered %q, want 42", i, got)
		}
		adopted = append(adopted, time.Since(start))

		// The anchor: a berth that keeps nothing, a new run, a cold kernel.
		fs, fc, fstart := serve("")
		frun, err := fc.OpenRun(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		cell(fc, frun.ID, "x = 41")
		fresh = append(fresh, time.Since(fstart))
		fc.CloseRun(ctx, frun.ID)
		fs.Stop()
	}
	c.CloseRun(context.WithoutCancel(ctx), run.ID)

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "from berth serve's start to the first answered cell\tmedian\tratio to the anchor\t\n")
	fmt.Fprintf(tw, "a new run, cold kernel, on a berth that keeps nothing (anchor)\t%s\t1.00\t\n", millis(median(fresh)))
	verdict := "met"
	if median(adopted) >= time.Second {
		verdict = "NOT met"
	}
	fmt.Fprintf(tw, "the adopted run after kill -9, kernel kept\t%s (goal < 1 s: %s)\t%.2f\t\n", millis(median(adopted)), verdict, ratio(adopted, fresh))
	tw.Flush()
	t.Logf("restart of berth in a container, median of %d rounds:\n%s", rounds, b.String())
}
