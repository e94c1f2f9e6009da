package bench

import (
	"context"
	"encoding/json"
	"fmt"
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
// every Jupyter frontend uses) talking straight to ipykernel on the host:
// it prints the kernel's cold start and each trivial cell's round trip in
// microseconds.
const jupyterAnchor = `
import sys, time
from jupyter_client.manager import start_new_kernel
n = int(sys.argv[1])
t0 = time.perf_counter()
km, kc = start_new_kernel(kernel_name="python3")
print("cold", int((time.perf_counter() - t0) * 1e6))
for i in range(20 + n):
    t = time.perf_counter()
    kc.execute_interactive("1", timeout=30, output_hook=lambda m: None)
    if i >= 20:
        print("rt", int((time.perf_counter() - t) * 1e6))
kc.stop_channels()
km.shutdown_kernel(now=True)
`

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

	// The anchor.
	out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", jupyterAnchor, strconv.Itoa(n)).Output()
	if err != nil {
		t.Fatalf("jupyter_client anchor: %v", err)
	}
	var anchorCold time.Duration
	var anchor []time.Duration
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "cold":
			anchorCold = time.Duration(v) * time.Microsecond
		case "rt":
			anchor = append(anchor, time.Duration(v)*time.Microsecond)
		}
	}

	// berth on the host (Debian's python first on PATH, so ipykernel).
	hsb := host.New(host.Options{Env: append(os.Environ(), "PATH=/usr/bin:/bin")})
	defer hsb.Close()
	hostCold, hostRT := evalCells(t, hsb, t.TempDir(), n)

	// berth into a container.
	_, sb := benchContainer(t, image, nil)
	ctrCold, ctrRT := evalCells(t, sb, benchWorkspace, n)

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "trivial cell \"1\"\tmedian round trip\tratio to the anchor\tkernel cold start\t\n")
	fmt.Fprintf(tw, "jupyter_client → ipykernel on the host (anchor)\t%s\t1.00\t%s\t\n", us(median(anchor)), millis(anchorCold))
	fmt.Fprintf(tw, "berth eval → ipykernel on the host\t%s\t%.2f\t%s\t\n", us(median(hostRT)), ratio(hostRT, anchor), millis(hostCold))
	verdict := "met"
	if ratio(ctrRT, anchor) >= 1.3 {
		verdict = "NOT met"
	}
	fmt.Fprintf(tw, "berth eval → ipykernel in a container\t%s\t%.2f (goal < 1.3: %s)\t%s\t\n", us(median(ctrRT)), ratio(ctrRT, anchor), verdict, millis(ctrCold))
	tw.Flush()
	t.Logf("eval round trip, median of %d cells:\n%s", n, b.String())
}

// evalCells starts eval in sb (workspace ws), measures the first cell (the
// kernel's cold start) and then n trivial cells through the registry.
func evalCells(t *testing.T, sb sandbox.Sandbox, ws string, n int) (time.Duration, []time.Duration) {
	t.Helper()
	ctx := t.Context()
	fsys, err := sb.FS(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg := tools.NewRegistry()
	sup := eval.Register(reg, sb, fsys, runCtx, eval.Options{})
	defer sup.Close()
	cell := func(code string) time.Duration {
		raw, _ := json.Marshal(map[string]any{"code": code, "description": "a trivial cell for the latency benchmark"})
		start := time.Now()
		res, err := reg.Call(ctx, tools.SurfaceDefault, "eval", raw)
		d := time.Since(start)
		if err != nil || res.IsError {
			t.Fatalf("eval: %v %v", err, res.AllText())
		}
		if code == "1" && !strings.Contains(res.AllText(), "1") {
			t.Fatalf("eval 1: %s", res.AllText())
		}
		return d
	}
	cold := cell("")
	var rts []time.Duration
	for i := range 20 + n {
		d := cell("1")
		if i >= 20 {
			rts = append(rts, d)
		}
	}
	return cold, rts
}
