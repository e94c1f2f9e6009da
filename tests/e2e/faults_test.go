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
