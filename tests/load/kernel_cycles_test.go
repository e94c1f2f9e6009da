package load

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// kernelCycles is how many open/eval/close cycles TestKernelCycles
	// runs, kernelCycleWorkers at a time, one container each.
	kernelCycles       = 200
	kernelCycleWorkers = 8
	// killEvery: every killEvery-th cycle the kernel kills itself mid-cell
	// and the next cell runs on its replacement.
	killEvery = 4
	// kernelCyclesTimeout bounds the whole test (a hang fails it).
	kernelCyclesTimeout = 10 * time.Minute
	defaultMinimalImage = "berth-test-minimal:latest"
)

// TestKernelCycles opens, evaluates in and closes kernelCycles runs,
// kernelCycleWorkers at a time, each in its own berth-test-minimal
// container (the bundled kernel: no ipykernel there), through a real
// `berth serve`. Every killEvery-th cycle the kernel SIGKILLs itself in
// the middle of a cell, and the next cell runs on its replacement, which
// says the state was lost. Afterwards berth's goroutines and descriptors
// are back within the slack of TestLoad, no run is open, no descendant of
// berth is a zombie, and the containers hold only PID 1 and no /tmp/berth-*.
func TestKernelCycles(t *testing.T) {
	image := os.Getenv("BERTH_TEST_IMAGE_MINIMAL")
	if image == "" {
		image = defaultMinimalImage
	}
	ctx, cancel := context.WithTimeout(t.Context(), kernelCyclesTimeout)
	defer cancel()
	if _, err := docker(ctx, nil, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		unavailable(t, "no image %s (images/build minimal): %v", image, err)
	}
	start := time.Now()
	srv := startServer(t)
	ctrs := startContainers(t, image, labelKey, kernelCycleWorkers, map[string]string{"workspace/.keep": ""})
	api := newClient(srv, true)
	probe := newClient(srv, false)
	var lat latencies

	// Warm-up: one cycle of each kind, then the baseline.
	for k := int64(killEvery - 1); k <= killEvery; k++ {
		if err := kernelCycle(ctx, api, ctrs[0], k, &lat); err != nil {
			t.Fatalf("warm-up: %v\n%s", err, srv.Log())
		}
	}
	if left := noneLeft(ctx, t, ctrs[:1]); left != "" {
		t.Fatalf("after the warm-up: %s", left)
	}
	api.closeIdle()
	base, err := steady(ctx, probe)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline after the warm-up: %s (%v)", base, time.Since(start).Round(time.Millisecond))

	var next atomic.Int64
	errs := make([]error, len(ctrs))
	var wg sync.WaitGroup
	cstart := time.Now()
	for i, c := range ctrs {
		wg.Go(func() {
			for k := next.Add(1); k <= kernelCycles; k = next.Add(1) {
				if err := kernelCycle(ctx, api, c, k, &lat); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("cycles: %v\nberth's log:\n%s", err, srv.Log())
	}
	t.Logf("%d cycles, %d at a time, every %dth with a kernel killed mid-cell: %v",
		kernelCycles, kernelCycleWorkers, killEvery, time.Since(cstart).Round(time.Millisecond))

	if left := noneLeft(ctx, t, ctrs); left != "" {
		t.Error(left)
	}
	api.closeIdle()
	var after gauges
	ok, detail, err := settle(ctx, settleTimeout, func() (bool, string, error) {
		g, err := probe.metrics(ctx)
		after = g
		return g.runs == 0 && g.goroutines <= base.goroutines+goroutineSlack && g.fds <= base.fds+fdSlack, g.String(), err
	})
	switch {
	case err != nil:
		t.Errorf("metrics after the cycles: %v", err)
	case !ok:
		t.Errorf("berth did not come back to its baseline within %s: %s, baseline %s (slack %d goroutines, %d fds)",
			settleTimeout, detail, base, goroutineSlack, fdSlack)
		t.Logf("berth's goroutines (SIGQUIT):\n%s", srv.Dump())
	}
	t.Logf("after the cycles: %s (baseline %s)", after, base)
	if zs, seen := zombies(srv.Pid()); len(zs) > 0 {
		t.Errorf("zombies among berth's %d descendants: %v", seen, zs)
	}
	report(t, "kernel cycles", lat.stats())
	if err := srv.Stop(); err != nil {
		t.Errorf("berth serve after SIGTERM: %v\n%s", err, srv.Log())
	}
	t.Logf("TestKernelCycles took %v", time.Since(start).Round(time.Millisecond))
}

// kernelCycle is cycle k in c: open a run, evaluate a cell (which starts
// the kernel), on every killEvery-th cycle kill the kernel mid-cell and
// evaluate on its replacement, and close the run.
func kernelCycle(ctx context.Context, api *client, c *container, k int64, lat *latencies) (err error) {
	t0 := time.Now()
	run, _, err := api.openRun(ctx, c.conv, workspace)
	if err != nil {
		return fmt.Errorf("cycle %d: %w", k, err)
	}
	lat.add("open", time.Since(t0))
	defer func() {
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer cancel()
		if cerr := api.closeRun(cctx, run); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cycle %d: close: %w", k, cerr))
		}
		lat.add("close", time.Since(t0))
	}()
	cell := func(name, code string, wants ...string) (toolReply, error) {
		t0 := time.Now()
		res, err := api.call(ctx, run, "eval", map[string]any{"code": code, "description": "a cell of the kernel cycle test"}, wants...)
		lat.add(name, time.Since(t0))
		if err != nil {
			return res, fmt.Errorf("cycle %d, %s in %s: %w", k, name, c.conv, err)
		}
		return res, nil
	}
	if _, err := cell("eval (starts the kernel)", fmt.Sprintf("n = %d\nprint('cycle', n)", k), fmt.Sprintf("cycle %d", k)); err != nil {
		return err
	}
	if k%killEvery != 0 {
		return nil
	}
	// The kernel dies in the middle of the cell: an error result that says
	// so, not a hang.
	t0 = time.Now()
	res, err := api.Call(ctx, run, "eval", map[string]any{"code": "import os\nprint('dying')\nos.kill(os.getpid(), 9)", "description": "the kernel kills itself mid-cell"})
	lat.add("eval (kernel killed mid-cell)", time.Since(t0))
	if err != nil {
		return fmt.Errorf("cycle %d: the cell that kills its kernel: %w", k, err)
	}
	if !res.IsError {
		return fmt.Errorf("cycle %d: the cell that killed its kernel is not an error result: %s", k, res.Text())
	}
	// The replacement runs the next cell and says what was lost.
	_, err = cell("eval (on the replacement)", "print('n' in globals())", "False", "lost")
	return err
}
