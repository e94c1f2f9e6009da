package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/debug/debugtest"
)

// residentServe returns the run's resident supervisor (below its keeper)
// in ctr.
func residentServe(t *testing.T, ctr *container) proc {
	t.Helper()
	for _, p := range ctr.procTable(t) {
		if strings.Contains(p.args, "berth-shim resident-serve") {
			return p
		}
	}
	t.Fatalf("no resident supervisor in the container: %v", ctr.procTable(t))
	return proc{}
}

// TestResidentKilledIsReplaced kills the run's resident supervisor (kill
// -9, in a container whose PID 1 never reaps): its kernel ends with it,
// the next eval starts a new resident and a new kernel and says what was
// lost, the dead one's directory goes, and the run's close leaves no
// resident directory and no zombie.
func TestResidentKilledIsReplaced(t *testing.T) {
	d := startDurable(t)
	ctr, c, run := d.ctr, d.client, d.run.ID
	oneOfEach(t, ctr, "before the resident was killed", 1)
	serve := residentServe(t, ctr)
	ctr.sh(t, fmt.Sprintf("kill -9 %d", serve.pid))
	waitFor(t, time.Minute, "the kernel and the keeper to end with their resident", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })

	// Before berth looks again: the kernel's directory, with its
	// connection file and key, went with the kernel.
	waitFor(t, time.Minute, "the dead kernel's directory (its connection file) to be removed", func() bool {
		return strings.TrimSpace(ctr.sh(t, "ls -d /tmp/berth-kernel.* 2>/dev/null || true")) == ""
	}, func() string { return ctr.sh(t, "ls -la /tmp") })

	got := evalText(t, c, run, "print(1 + 1)")
	if !strings.Contains(got, "2") {
		t.Fatalf("eval after the resident was killed: %q; want 2", got)
	}
	if !strings.Contains(got, "resident supervisor died") || !strings.Contains(got, "state") {
		t.Errorf("the first eval after the resident was killed does not say what was lost: %q", got)
	}
	oneOfEach(t, ctr, "after the resident was replaced", 1)
	// Said once.
	if got := evalText(t, c, run, "print(3)"); strings.Contains(got, "resident supervisor died") {
		t.Errorf("the second eval after the replacement says the loss again: %q", got)
	}
	dirs := strings.Fields(ctr.sh(t, "ls -d /tmp/berth-run-* 2>/dev/null || true"))
	if len(dirs) != 1 || dirs[0] == "/tmp/berth-run-"+run {
		t.Errorf("resident directories after the replacement: %q; want only the new one (the dead one's removed by its keeper)", dirs)
	}
	if err := c.CloseRun(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the run's resident supervisor and kernel to end after DELETE", func() bool {
		res, kern := berthProcs(t, ctr)
		return len(res) == 0 && len(kern) == 0
	}, func() string { return fmt.Sprint(ctr.procTable(t)) })
	if out := ctr.sh(t, "ls -d /tmp/berth-run-* 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("a resident directory is left after DELETE: %s", out)
	}
	if out := ctr.sh(t, "ls -d /tmp/berth-kernel.* 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("a kernel's directory (its connection file) is left after DELETE: %s", out)
	}
	noZombies(t, ctr)
}

// TestDebugBinaryGoesWithBerth: delve's build output (__debug_bin in its
// scratch directory) goes when the adapter does, also when berth was
// killed and nobody is there to remove it.
func TestDebugBinaryGoesWithBerth(t *testing.T) {
	const image = "berth-test-go"
	needImage(t, image, true)
	durableBackend(t)
	ctr := startContainer(t, image)
	ctr.put(t, "go.mod", "module example.com/hello\n\ngo 1.22\n")
	ctr.put(t, "main.go", debugtest.GoProgram)
	s, c := durableBerth(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	info, err := c.OpenRun(ctx, durableSpec(ctr))
	if err != nil {
		t.Fatal(err)
	}
	debugCall(t, c, info.ID, map[string]any{"op": "breakpoints", "file": "main.go", "lines": []any{12}})
	debugCall(t, c, info.ID, map[string]any{"op": "launch", "program": "main.go"}, "stopped at main.go:12")
	if out := ctr.sh(t, "ls -d /tmp/berth-debug-*/__debug_bin 2>/dev/null || true"); strings.TrimSpace(out) == "" {
		t.Fatalf("no delve build output in the container while the session runs: %s", ctr.sh(t, "ls -la /tmp"))
	}
	s.Kill()
	waitFor(t, 2*time.Minute, "dlv to end and its build directory to be removed after berth was killed", func() bool {
		return len(matching(ctr.procTable(t), "dlv")) == 0 &&
			strings.TrimSpace(ctr.sh(t, "ls -d /tmp/berth-debug-* 2>/dev/null || true")) == ""
	}, func() string { return fmt.Sprint(ctr.procTable(t), ctr.sh(t, "ls -la /tmp")) })
}
