package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/controller"
	"berth.dev/berth/kernel"
	"berth.dev/berth/runstore"
	"berth.dev/berth/tools/eval"
)

// One kernel per run, always (issue 33, findings 2 and 7): a stream to a
// kernel that breaks — its `berth-shim dial` relay killed, the engine's
// connections cut — is not the kernel's death, and a pause that catches a
// running cell does not cost the kernel.

// durableAPI is an in-process berth with a run store, so that kernels run
// under the run's resident supervisor, reaching its engine through p when
// p is not nil.
func durableAPI(t *testing.T, p *engineProxy) *api {
	t.Helper()
	st, _, err := runstore.Open(t.TempDir(), runstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newAPIConfig(t, func(c *controller.Config) {
		c.Store = st
		if p != nil {
			c.Providers = proxiedProviders(t, p)
		}
	})
}

// awaitUsable waits until a read in run answers 200 again after an outage
// (berth looks again after its wait, at most UnavailableRetryMax).
func awaitUsable(t *testing.T, a *api, run string) {
	t.Helper()
	deadline := time.Now().Add(controller.UnavailableRetryMax + 30*time.Second)
	for {
		r := a.do("POST", "/v1/runs/"+run+"/tools/read", token, `{"args":{"path":"hello.txt"}}`)
		if r.status == http.StatusOK {
			return
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("read after the outage: %s", r)
		}
		time.Sleep(controller.UnavailableRetryMin / 2)
	}
}

// oneKernelWithX fails unless x + 1 is 42 in the run's kernel (its state
// kept) and exactly one kernel runs in the container.
func oneKernelWithX(t *testing.T, a *api, ctr *container, run, after string) toolReply {
	t.Helper()
	r := a.callTool(t, run, "eval", map[string]any{"code": "print(x + 1)", "description": "read x back after " + after})
	if r.IsError || !strings.Contains(r.texts(), "42") {
		t.Errorf("eval after %s: %s; want 42 (the kernel and its state kept)", after, r.texts())
	}
	if k := matching(ctr.procTable(t), "ipykernel"); len(k) != 1 {
		t.Errorf("want exactly one kernel in the container after %s: %v", after, k)
	}
	return r
}

// TestDialRelayKilledKeepsKernel kills every `berth-shim dial` relay in
// the container (the kernel's resident process stream, berth's hold on
// the resident), twice: each time the next cell runs on the same kernel,
// x still defined, one kernel runs, and berth holds the resident again.
// Before, berth took the broken process stream for the kernel's exit and
// started a second kernel, the first running on with its state; and it
// never made the hold again, so the resident would have ended everything
// after its grace.
func TestDialRelayKilledKeepsKernel(t *testing.T) {
	durableBackend(t)
	dockerOnly(t, "kill in the container with docker exec")
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	a := durableAPI(t, nil)
	run, _ := a.open(ctr.conv)
	if r := a.callTool(t, run, "eval", map[string]any{"code": "x = 41", "description": "set x before the relays are killed"}); r.IsError {
		t.Fatalf("eval: %s", r.texts())
	}
	for i := range 2 {
		relays := matchingAgent(ctr.procTable(t), "berth-shim dial")
		if len(relays) == 0 {
			t.Fatal("no berth-shim dial relay in the container")
		}
		t.Logf("round %d: killing %v", i, relays)
		killAll(t, ctr, relays)
		awaitKernelState(t, a, run, "dead")
		oneKernelWithX(t, a, ctr, run, "the dial relays were killed")
		// berth holds its resident again (else the resident would count
		// berth gone and end the kernel after its grace): a connection to
		// the resident's socket for the hold, one for the kernel's stream.
		deadline := time.Now().Add(callTimeout)
		for {
			n := len(matchingAgent(ctr.procTable(t), "berth-shim dial unix /tmp/berth-run-"))
			if n >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v after the relays were killed, %d connection(s) to the resident, want 2 (berth's hold made again, and the kernel's stream)", callTimeout, n)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// TestEngineCutKeepsKernel cuts every connection to the engine (an engine
// restarting) for longer than the kernel's time-to-dead, with the kernel
// under the run's resident supervisor: afterwards the kernel is the same,
// x still defined, and one kernel runs.
func TestEngineCutKeepsKernel(t *testing.T) {
	durableBackend(t)
	dockerOnly(t, "an engine proxy before docker's socket")
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	p := newEngineProxy(t, "/var/run/docker.sock")
	a := durableAPI(t, p)
	run, _ := a.open(ctr.conv)
	if r := a.callTool(t, run, "eval", map[string]any{"code": "x = 41", "description": "set x before the engine is cut"}); r.IsError {
		t.Fatalf("eval: %s", r.texts())
	}
	for i := range 2 {
		p.cut()
		time.Sleep(kernel.DefaultTimeToDead + 2*time.Second)
		if err := p.restore(); err != nil {
			t.Fatal(err)
		}
		awaitUsable(t, a, run)
		t.Logf("round %d", i)
		oneKernelWithX(t, a, ctr, run, "the engine cut")
	}
}

// TestPausedMidCellKeepsKernel pauses the container while a cell runs and
// keeps it paused for longer than berth's interrupt wait and the kernel's
// time-to-dead: the call answers 503 sandbox_unavailable, and after
// unpause the cell's result arrives with the next call, x is still
// defined, and one kernel runs. Before, berth interrupted the cut call's
// cell into the frozen container, gave up after its interrupt wait and
// replaced the kernel, losing its state.
func TestPausedMidCellKeepsKernel(t *testing.T) {
	dockerOnly(t, "docker pause")
	image := needDocker(t)
	ctr := startContainer(t, image)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	if res := a.call(run, "eval", "default", `{"code":"x = 41","description":"set x before the pause"}`); res.IsError {
		t.Fatalf("eval before the pause: %s", res.text())
	}
	answered := make(chan reply, 1)
	go func() {
		answered <- a.do("POST", "/v1/runs/"+run+"/tools/eval", token,
			`{"args":{"code":"import time\nopen('cell-started', 'w').close()\nfor _ in range(20):\n    time.sleep(0.5)\nprint('slept', x)","description":"a cell the pause catches"}}`)
	}()
	deadline := time.Now().Add(callTimeout)
	for {
		if _, err := dockerCLI(context.Background(), "exec", ctr.id, "test", "-e", workspace+"/cell-started"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cell did not start within %v", callTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustDocker(t, "pause", ctr.id)
	paused := time.Now()
	stillPaused := true
	t.Cleanup(func() {
		if stillPaused {
			dockerCLI(context.Background(), "unpause", ctr.id)
		}
	})
	if r := <-answered; r.status != http.StatusServiceUnavailable || r.errorCode(t) != "sandbox_unavailable" {
		t.Fatalf("the cell caught by the pause answered %s; want 503 sandbox_unavailable", r)
	}
	// Frozen for longer than the abandoned cell's interrupt wait and the
	// heartbeat's time-to-dead.
	if hold := eval.DefaultInterruptWait + kernel.DefaultTimeToDead + 3*time.Second - time.Since(paused); hold > 0 {
		time.Sleep(hold)
	}
	mustDocker(t, "unpause", ctr.id)
	stillPaused = false
	awaitUsable(t, a, run)
	r := oneKernelWithX(t, a, ctr, run, "the pause")
	if !strings.Contains(r.texts(), "slept 41") {
		t.Errorf("eval after the pause: %s; want the result of the cell the pause caught (slept 41)", r.texts())
	}
}

// matchingAgent lists the live agent processes whose command line
// contains word.
func matchingAgent(procs []proc, word string) []proc {
	var out []proc
	for _, p := range procs {
		if strings.Contains(p.args, word) && p.state != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// awaitKernelState waits until the run's resources show its kernel in a
// state starting with want: berth has noticed what the test did.
func awaitKernelState(t *testing.T, a *api, run, want string) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		r := a.do("GET", "/v1/runs/"+run+"/resources", token, "")
		var got struct {
			Resources []struct{ Kind, Name, State string }
		}
		if r.status == http.StatusOK {
			r.decode(t, &got)
			for _, res := range got.Resources {
				if res.Kind == "kernel" && strings.HasPrefix(res.State, want) {
					t.Logf("kernel %s: %s", res.Name, res.State)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's kernel did not show %q within %v: %s", want, callTimeout, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killAll kills procs in ctr with SIGKILL; one already gone is no error.
func killAll(t *testing.T, ctr *container, procs []proc) {
	t.Helper()
	pids := make([]string, len(procs))
	for i, p := range procs {
		pids[i] = strconv.Itoa(p.pid)
	}
	ctr.sh(t, "kill -9 "+strings.Join(pids, " ")+" 2>/dev/null; true")
}
