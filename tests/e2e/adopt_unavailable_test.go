package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/controller"
)

// Issue 33, finding 1: a sandbox that is only unavailable while berth
// restarts — the container paused, the engine stalled — keeps its run:
// the restarted berth answers 503 sandbox_unavailable (never 410, never
// 404), keeps the record and the resident supervisor, and adopts the run
// with its kernel's state once the sandbox answers.

// unavailableAcross restarts berth (SIGKILL) on the run's state directory
// with flags while away() holds the sandbox away, checks that the run is
// kept and said so, then calls back() and waits for the run to be adopted
// with x = 41 in its kernel.
func unavailableAcross(t *testing.T, d durableRun, away, back func(), flags ...string) {
	t.Helper()
	away()
	d.server.Kill()
	_, c2 := durableBerth(t, d.state, flags...)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	// berth serves while it adopts.
	if st, b, err := c2.Do(ctx, "GET", "/healthz", nil); err != nil || st != http.StatusOK {
		t.Fatalf("/healthz after the restart: %d %s %v", st, b, err)
	}
	// The Client asks a run being adopted again (503 adopting); what
	// remains is the answer of a run whose sandbox is away.
	st, b, err := c2.Do(ctx, "POST", "/v1/runs/"+d.run.ID+"/tools/eval", map[string]any{"args": map[string]any{"code": "x", "description": "read x while the sandbox is away"}})
	if err != nil {
		t.Fatal(err)
	}
	if st != http.StatusServiceUnavailable || !strings.Contains(string(b), "sandbox_unavailable") || !strings.Contains(string(b), "kept") {
		t.Fatalf("a call of the run whose sandbox is away after the restart: %d %s; want 503 sandbox_unavailable saying the run is kept", st, b)
	}
	back()
	// Tried again after at most UnavailableRetryMax.
	waitFor(t, controller.UnavailableRetryMax+callTimeout, "the run to be adopted once its sandbox answers", func() bool {
		st, _, err := c2.Do(ctx, "GET", "/v1/runs/"+d.run.ID, nil)
		return err == nil && st == http.StatusOK
	}, nil)
	got := evalText(t, c2, d.run.ID, "x + 1")
	if !strings.Contains(got, "42") || !strings.Contains(got, "kept") {
		t.Fatalf("after the sandbox came back, x + 1 = %q; want 42, saying the kernel was kept", got)
	}
	oneOfEach(t, d.ctr, "after the adoption", 1)
}

func TestPausedAcrossRestart(t *testing.T) {
	dockerOnly(t, "docker pause")
	d := startDurable(t)
	paused := false
	t.Cleanup(func() {
		if paused {
			dockerCLI(context.Background(), "unpause", d.ctr.id)
		}
	})
	unavailableAcross(t, d,
		func() { mustDocker(t, "pause", d.ctr.id); paused = true },
		func() { mustDocker(t, "unpause", d.ctr.id); paused = false })
}

// TestEngineStalledAcrossRestart: berth reaches Docker through a proxy
// that holds every byte while it restarts: the adoption cannot finish
// (before: 60 s of nothing served, then the run answered 404 until the
// next restart).
func TestEngineStalledAcrossRestart(t *testing.T) {
	dockerOnly(t, "the engine proxy stands before Docker's socket")
	p := newEngineProxy(t, "/var/run/docker.sock")
	flags := []string{"--docker-host", "unix://" + p.path}
	d := startDurable(t, flags...)
	unavailableAcross(t, d, p.stall, p.flow, flags...)
}

// busyCell is how long the cell of TestBusyKernelAcrossRestart runs after
// berth is killed: longer than the 20 s after which the adoption of a
// busy kernel used to give up.
const busyCell = 40 * time.Second

// TestBusyKernelAcrossRestart: berth is killed (SIGKILL) while a cell
// runs, and the next berth waits for the busy kernel as long as its
// heartbeat answers, instead of giving it up after 20 s with its state
// (issue 33, finding 3): once the cell ends, the run is adopted with the
// kernel, which has the cell's result, and berth answered /healthz
// throughout.
func TestBusyKernelAcrossRestart(t *testing.T) {
	d := startDurable(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := fmt.Sprintf("import time\nopen('/tmp/berth-busy-cell', 'w').close()\ntime.sleep(%d)\nx = 43", int(busyCell.Seconds()))
	go d.client.Call(ctx, d.run.ID, "eval", map[string]any{"code": code, "description": "a long cell berth is killed under"}) // ends with berth
	waitFor(t, callTimeout, "the long cell to start", func() bool {
		return strings.TrimSpace(d.ctr.sh(t, "test -e /tmp/berth-busy-cell && echo started || true")) == "started"
	}, nil)
	d.server.Kill()
	_, c2 := durableBerth(t, d.state)
	hctx, hcancel := context.WithTimeout(context.Background(), callTimeout)
	defer hcancel()
	if st, b, err := c2.Do(hctx, "GET", "/healthz", nil); err != nil || st != http.StatusOK {
		t.Fatalf("/healthz while the busy kernel is adopted: %d %s %v", st, b, err)
	}
	// The Client waits while the run answers 503 adopting.
	got := evalText(t, c2, d.run.ID, "x + 1")
	if !strings.Contains(got, "44") || !strings.Contains(got, "kept") {
		t.Fatalf("after the restart under a long cell, x + 1 = %q; want 44 (the cell's x = 43, the kernel kept)", got)
	}
	oneOfEach(t, d.ctr, "after the busy kernel was adopted", 1)
}
