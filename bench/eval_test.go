package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/eval"
)

// Environment of the eval comparison.
const (
	envEvalImage = "BERTH_BENCH_EVAL_IMAGE" // the image with ipykernel (default berth-test-python)
	envEvalCells = "BERTH_BENCH_EVAL_N"     // cells per measurement (default 300)

	defaultEvalCells = 300
)

// jupyterAnchor is a plain Jupyter client (jupyter_client, the library
// every Jupyter frontend uses) talking straight to ipykernel on the host.
// It prints the kernel's cold start, then, for each number N it reads on
// stdin, the round trips of N trivial cells in microseconds and "done";
// for "first" it starts another kernel, waits until it is ready, times
// that kernel's first cell ("first" and microseconds), stops it and says
// "done".
const jupyterAnchor = `
import sys, time
from jupyter_client.manager import start_new_kernel
t0 = time.perf_counter()
km, kc = start_new_kernel(kernel_name="python3")
print("cold", int((time.perf_counter() - t0) * 1e6), flush=True)
for line in sys.stdin:
    if line.strip() == "first":
        km2, kc2 = start_new_kernel(kernel_name="python3")
        t = time.perf_counter()
        kc2.execute_interactive("1", timeout=30, output_hook=lambda m: None)
        print("first", int((time.perf_counter() - t) * 1e6))
        kc2.stop_channels()
        km2.shutdown_kernel(now=True)
        print("done", flush=True)
        continue
    for i in range(int(line)):
        t = time.perf_counter()
        kc.execute_interactive("1", timeout=30, output_hook=lambda m: None)
        print("rt", int((time.perf_counter() - t) * 1e6))
    print("done", flush=True)
kc.stop_channels()
km.shutdown_kernel(now=True)
`

// evalRound is how many cells each contender runs before the next one's
// turn: the three are measured in interleaved rounds, so that a slower or
// faster spell of the machine (the anchor alone varies by a sixth between
// runs on this 2-CPU machine) falls on all of them alike.
const evalRound = 20

// TestEvalReport compares a trivial cell through berth's eval tool (into a
// container, and on the host) with a Jupyter client talking straight to
// ipykernel on the host. Run it with BERTH_BENCH=1 (bench/run).
func TestEvalReport(t *testing.T) {
	if os.Getenv(envRun) != "1" {
		t.Skipf("set %s=1 to measure eval's round trip (takes a minute); bench/run does", envRun)
	}
	if exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client").Run() != nil {
		t.Skip("Debian's python3-ipykernel is not installed on the host")
	}
	image := os.Getenv(envEvalImage)
	if image == "" {
		image = "berth-test-python"
	}
	n := envInt(envEvalCells, defaultEvalCells)
	ctx := t.Context()

	anchor := startAnchor(t)
	// berth on the host (Debian's python first on PATH, so ipykernel).
	hsb := host.New(host.Options{Env: append(os.Environ(), "PATH=/usr/bin:/bin")})
	defer hsb.Close()
	hostEval := newEvalCells(t, hsb, t.TempDir())
	// berth into a container.
	_, sb := benchContainer(t, image, nil)
	ctrEval := newEvalCells(t, sb, benchWorkspace)
	// berth into a container, the kernel under the run's resident
	// supervisor (a run that outlives berth): the round trip must not move.
	_, rsb := benchContainer(t, image, nil)
	resEval := newEvalCellsWith(t, rsb, benchWorkspace, residentOption(t, rsb))

	// Warm up, then interleave.
	anchor.cells(t, evalRound)
	hostEval.cells(t, evalRound)
	ctrEval.cells(t, evalRound)
	resEval.cells(t, evalRound)
	var anchorRT, hostRT, ctrRT, resRT []time.Duration
	for len(ctrRT) < n {
		k := min(evalRound, n-len(ctrRT))
		anchorRT = append(anchorRT, anchor.cells(t, k)...)
		hostRT = append(hostRT, hostEval.cells(t, k)...)
		ctrRT = append(ctrRT, ctrEval.cells(t, k)...)
		resRT = append(resRT, resEval.cells(t, k)...)
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
	}

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "trivial cell \"1\"\tmedian round trip\tratio to the anchor\tkernel cold start\t\n")
	fmt.Fprintf(tw, "jupyter_client → ipykernel on the host (anchor)\t%s\t1.00\t%s\t\n", us(median(anchorRT)), millis(anchor.cold))
	fmt.Fprintf(tw, "berth eval → ipykernel on the host\t%s\t%.2f\t%s\t\n", us(median(hostRT)), ratio(hostRT, anchorRT), millis(hostEval.cold))
	verdict := "met"
	if ratio(ctrRT, anchorRT) >= 1.3 {
		verdict = "NOT met"
	}
	fmt.Fprintf(tw, "berth eval → ipykernel in a container\t%s\t%.2f (goal < 1.3: %s)\t%s\t\n", us(median(ctrRT)), ratio(ctrRT, anchorRT), verdict, millis(ctrEval.cold))
	verdict = "met"
	if ratio(resRT, anchorRT) >= 1.3 {
		verdict = "NOT met"
	}
	fmt.Fprintf(tw, "the same, kernel under the run's resident supervisor\t%s\t%.2f (goal < 1.3: %s)\t%s\t\n", us(median(resRT)), ratio(resRT, anchorRT), verdict, millis(resEval.cold))
	tw.Flush()
	t.Logf("eval round trip, median of %d cells each, in interleaved rounds of %d:\n%s", n, evalRound, b.String())
}

// anchorProc is the running jupyter_client anchor.
type anchorProc struct {
	in   io.WriteCloser
	out  *bufio.Scanner
	cold time.Duration
}

func startAnchor(t *testing.T) *anchorProc {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "/usr/bin/python3", "-c", jupyterAnchor)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("jupyter_client anchor: %v", err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	a := &anchorProc{in: in, out: bufio.NewScanner(out)}
	f := a.line(t)
	if len(f) != 2 || f[0] != "cold" {
		t.Fatalf("jupyter_client anchor said %q, want its cold start", f)
	}
	v, _ := strconv.Atoi(f[1])
	a.cold = time.Duration(v) * time.Microsecond
	return a
}

func (a *anchorProc) line(t *testing.T) []string {
	t.Helper()
	if !a.out.Scan() {
		t.Fatalf("jupyter_client anchor ended: %v", a.out.Err())
	}
	return strings.Fields(a.out.Text())
}

// first starts another kernel in the anchor and returns the round trip
// of its first cell, once it was ready.
func (a *anchorProc) first(t *testing.T) time.Duration {
	t.Helper()
	rts := a.ask(t, "first", "first")
	if len(rts) != 1 {
		t.Fatalf("jupyter_client anchor gave %d first cells", len(rts))
	}
	return rts[0]
}

// cells runs n trivial cells in the anchor and returns their round trips.
func (a *anchorProc) cells(t *testing.T, n int) []time.Duration {
	t.Helper()
	return a.ask(t, strconv.Itoa(n), "rt")
}

// ask sends the anchor a command line and collects the durations it
// reports under key until "done".
func (a *anchorProc) ask(t *testing.T, cmd, key string) []time.Duration {
	t.Helper()
	if _, err := fmt.Fprintf(a.in, "%s\n", cmd); err != nil {
		t.Fatal(err)
	}
	var rts []time.Duration
	for {
		f := a.line(t)
		switch {
		case len(f) == 1 && f[0] == "done":
			return rts
		case len(f) == 2 && f[0] == key:
			v, _ := strconv.Atoi(f[1])
			rts = append(rts, time.Duration(v)*time.Microsecond)
		default:
			t.Fatalf("jupyter_client anchor said %q", f)
		}
	}
}

// evalCells is berth's eval tool in one sandbox, with its kernel started.
type evalCells struct {
	reg  *tools.Registry
	cold time.Duration
}

// newEvalCells registers eval for sb (workspace ws) and measures the first
// call, which starts the kernel (its cold start).
func newEvalCells(t *testing.T, sb sandbox.Sandbox, ws string) *evalCells {
	t.Helper()
	return newEvalCellsWith(t, sb, ws, eval.Options{})
}

// residentOption starts a resident supervisor in sb and returns eval
// options that start kernels under it; the test's cleanup closes it.
func residentOption(t *testing.T, sb sandbox.Sandbox) eval.Options {
	t.Helper()
	secret := make([]byte, sandbox.MinResidentSecret)
	rand.Read(secret)
	res, err := sb.(sandbox.Residence).Resident(t.Context(), sandbox.ResidentSpec{Dir: "/tmp/berth-run-bench", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Close() })
	return eval.Options{Resident: func(context.Context) (sandbox.Resident, error) { return res, nil }}
}

// newEvalCellsWith is newEvalCells with eval's options.
func newEvalCellsWith(t *testing.T, sb sandbox.Sandbox, ws string, opts eval.Options) *evalCells {
	t.Helper()
	ctx := t.Context()
	fsys, err := sb.FS(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	reg := tools.NewRegistry()
	sup := eval.Register(reg, sb, fsys, runCtx, opts)
	t.Cleanup(func() {
		sup.Close()
		cancel()
	})
	e := &evalCells{reg: reg}
	e.cold = e.cell(t, "")
	return e
}

func (e *evalCells) cell(t *testing.T, code string) time.Duration {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"code": code, "description": "a trivial cell for the latency benchmark"})
	start := time.Now()
	res, err := e.reg.Call(t.Context(), tools.SurfaceDefault, "eval", raw)
	d := time.Since(start)
	if err != nil || res.IsError {
		t.Fatalf("eval: %v %v", err, res.AllText())
	}
	if code == "1" && !strings.Contains(res.AllText(), "1") {
		t.Fatalf("eval 1: %s", res.AllText())
	}
	return d
}

// cells runs n trivial cells and returns their round trips.
func (e *evalCells) cells(t *testing.T, n int) []time.Duration {
	rts := make([]time.Duration, n)
	for i := range rts {
		rts[i] = e.cell(t, "1")
	}
	return rts
}
