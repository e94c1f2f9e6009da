package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/controller"
	"berth.dev/berth/kernel"
)

// TestContainerPausedMidRun pauses the run's container (docker pause, as
// platforms pause idle sandboxes) with a kernel holding state: a call
// while it is paused answers 503 sandbox_unavailable, saying the run is
// kept, instead of hanging or ending the run; after docker unpause the run
// is used as before, and the kernel — frozen for longer than its
// heartbeat's time-to-dead — still has its state.
func TestContainerPausedMidRun(t *testing.T) {
	dockerOnly(t, "docker pause")
	image := needDocker(t)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	if res := a.call(run, "eval", "default", `{"code":"x = 41","description":"set x before the container is paused"}`); res.IsError {
		t.Fatalf("eval before the pause: %s", res.text())
	}

	mustDocker(t, "pause", ctr.id)
	paused := true
	t.Cleanup(func() {
		if paused {
			dockerCLI(context.Background(), "unpause", ctr.id)
		}
	})
	// The write's file session is frozen with the container: berth cuts
	// the call short.
	r := a.do("POST", "/v1/runs/"+run+"/tools/write", token, `{"args":{"path":"during-pause.txt","content":"x\n"}}`)
	if r.status != http.StatusServiceUnavailable || r.errorCode(t) != "sandbox_unavailable" || !strings.Contains(string(r.body), "kept") {
		t.Fatalf("write while paused: %s, want 503 sandbox_unavailable saying the run is kept", r)
	}
	// Longer than the kernel's time-to-dead.
	time.Sleep(kernel.DefaultTimeToDead + 2*time.Second)
	mustDocker(t, "unpause", ctr.id)
	paused = false

	// berth looks again after its wait (at most UnavailableRetryMax).
	deadline := time.Now().Add(controller.UnavailableRetryMax + 30*time.Second)
	for {
		r := a.do("POST", "/v1/runs/"+run+"/tools/read", token, `{"args":{"path":"hello.txt"}}`)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("read after unpause: %s", r)
		}
		time.Sleep(controller.UnavailableRetryMin / 2)
	}
	res := a.call(run, "eval", "default", `{"code":"x + 1","description":"read x back after the pause ended"}`)
	if res.IsError || !strings.Contains(res.text(), "42") {
		t.Fatalf("eval after the pause: %s; want 42 (the kernel's state kept)", res.text())
	}
	if res := a.call(run, "write", "default", `{"path":"after-pause.txt","content":"ok\n"}`); res.IsError {
		t.Fatalf("write after the pause: %s", res.text())
	}
}

// pauseCutWithin is how long a call caught by a pause may take to answer:
// the run's watch looks after UnavailableCheckAfter, and a state check
// takes at most sandbox.CheckTimeout; the rest is slack for a loaded
// machine.
const pauseCutWithin = controller.UnavailableCheckAfter + 5*time.Second + 5*time.Second

// TestContainerPausedDuringCall pauses the container while a cell runs:
// the call in flight answers 503 sandbox_unavailable within its deadline
// instead of hanging until the pause ends, and after unpause the run and
// its kernel are used as before — the state set before the pause is
// there, and exactly one kernel runs.
func TestContainerPausedDuringCall(t *testing.T) {
	dockerOnly(t, "docker pause")
	image := needDocker(t)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	if res := a.call(run, "eval", "default", `{"code":"x = 41","description":"set x before the pause"}`); res.IsError {
		t.Fatalf("eval before the pause: %s", res.text())
	}

	type answer struct {
		r    reply
		took time.Duration
	}
	answered := make(chan answer, 1)
	var paused time.Time
	go func() {
		began := time.Now()
		r := a.do("POST", "/v1/runs/"+run+"/tools/eval", token,
			`{"args":{"code":"import time\nopen('cell-started', 'w').close()\nfor _ in range(20):\n    time.sleep(0.5)\nprint('slept')","description":"a cell the pause catches"}}`)
		answered <- answer{r, time.Since(began)}
	}()
	// Pause once the cell runs in the kernel (it made its marker file).
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := dockerCLI(context.Background(), "exec", ctr.id, "test", "-e", workspace+"/cell-started"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cell did not start within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustDocker(t, "pause", ctr.id)
	paused = time.Now()
	stillPaused := true
	t.Cleanup(func() {
		if stillPaused {
			dockerCLI(context.Background(), "unpause", ctr.id)
		}
	})

	select {
	case got := <-answered:
		sincePause := time.Since(paused)
		if got.r.status != http.StatusServiceUnavailable || got.r.errorCode(t) != "sandbox_unavailable" {
			t.Fatalf("the cell caught by the pause answered %s after %v; want 503 sandbox_unavailable", got.r, got.took)
		}
		t.Logf("the cell caught by the pause answered 503 %v after the pause", sincePause.Round(time.Millisecond))
	case <-time.After(pauseCutWithin):
		t.Fatalf("the cell caught by the pause did not answer within %v of the pause", pauseCutWithin)
	}

	mustDocker(t, "unpause", ctr.id)
	stillPaused = false

	deadline = time.Now().Add(controller.UnavailableRetryMax + 30*time.Second)
	for {
		r := a.do("POST", "/v1/runs/"+run+"/tools/read", token, `{"args":{"path":"hello.txt"}}`)
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("read after unpause: %s", r)
		}
		time.Sleep(controller.UnavailableRetryMin / 2)
	}
	res := a.call(run, "eval", "default", `{"code":"x + 1","description":"read x back after the pause"}`)
	if res.IsError || !strings.Contains(res.text(), "42") {
		t.Fatalf("eval after the pause: %s; want 42 (the kernel's state kept)", res.text())
	}
	if k := matching(ctr.procTable(t), "ipykernel"); len(k) != 1 {
		t.Errorf("want exactly one kernel after the pause: %v", k)
	}
}
