package e2e

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/debug/debugtest"
)

// needImage checks that the backend answers and the image exists. A
// missing image fails under CI=true unless optional is set: then it always
// skips (berth-test-go is built separately, with images/build go).
func needImage(t *testing.T, image string, optional bool) {
	t.Helper()
	needSandboxes(t, image, optional)
}

// put writes a file into the container's workspace with the test's own exec.
func (c *container) put(t *testing.T, name, content string) {
	t.Helper()
	c.sh(t, fmt.Sprintf("mkdir -p \"$(dirname %s/%s)\" && echo %s | base64 -d > %s/%s",
		workspace, name, base64.StdEncoding.EncodeToString([]byte(content)), workspace, name))
}

// debugEnv drives the debug checks through the HTTP API against a run in
// ctr. Live wants a process matching adapter in the container, Gone none
// matching words, both seen with the test's own exec.
func debugEnv(a *api, run string, ctr *container, adapter string, words ...string) debugtest.Env {
	return debugtest.Env{
		Call: func(t *testing.T, args map[string]any) debugtest.Result {
			t.Helper()
			r := a.callTool(t, run, "debug", args)
			return debugtest.Result{Text: r.texts(), IsError: r.IsError, Structured: r.StructuredContent}
		},
		Live: func(t *testing.T) {
			t.Helper()
			if len(leftovers(t, ctr, adapter)) == 0 {
				t.Errorf("no %s runs in the container during the session", adapter)
			}
		},
		Gone: func(t *testing.T) {
			t.Helper()
			noLeftovers(t, ctr, words...)
		},
	}
}

// leftovers lists the container's processes whose command line contains
// any of words.
func leftovers(t *testing.T, ctr *container, words ...string) []string {
	t.Helper()
	var out []string
	for _, p := range ctr.processes(t) {
		for _, w := range words {
			if strings.Contains(p, w) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// noLeftovers waits until no process matches words; the agent kills the
// adapter's group when its stream closes, which takes a moment to show.
func noLeftovers(t *testing.T, ctr *container, words ...string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = leftovers(t, ctr, words...); len(left) == 0 {
			return
		}
	}
	t.Errorf("processes left in the container: %v", left)
}

// TestDebugPythonInContainer drives debugpy in berth-test-python through
// the HTTP API: breakpoints before launch, stops, stack, variables,
// evaluate, steps, output, a refused second launch, a killed adapter,
// module, cwd and env, the caps, an exception's message and a returned
// value,
// attach by port, and no process left after terminate and after the run's
// close (checked with ps through the test's own docker exec).
func TestDebugPythonInContainer(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	ctr.put(t, "requirements.txt", "")
	ctr.put(t, "app/main.py", debugtest.PyProgram)
	ctr.put(t, "app/report.py", debugtest.PyReport)
	a := newAPI(t)
	run, ref := a.open(ctr.conv)
	if ref != ctr.ref {
		t.Fatalf("run placed in %q, want %s", ref, ctr.ref)
	}
	e := debugEnv(a, run, ctr, "debugpy.adapter", "debugpy", "app/main.py")
	e.Kill = func(t *testing.T) {
		t.Helper()
		ctr.sh(t, "pkill -KILL -f 'debugpy[.]adapter'")
		noLeftovers(t, ctr, "debugpy.adapter")
	}

	var avs struct {
		Adapters []struct {
			Adapter, Binary, Reason string
			Usable                  bool
		}
	}
	debugtest.Decode(t, e.Ok(t, map[string]any{"op": "adapters"}), &avs)
	for _, av := range avs.Adapters {
		switch av.Adapter {
		case "debugpy":
			if !av.Usable || av.Binary != "/usr/bin/python3" {
				t.Errorf("debugpy: %+v, want usable with /usr/bin/python3", av)
			}
		case "dart":
			if av.Usable || !strings.Contains(av.Reason, "marker missing") || !strings.Contains(av.Reason, "binary missing: no dart") {
				t.Errorf("dart: %+v, want marker and binary missing", av)
			}
		case "delve", "lldb":
			if av.Usable || !strings.Contains(av.Reason, "binary missing") {
				t.Errorf("%s: %+v, want binary missing", av.Adapter, av)
			}
		}
	}

	t.Run("launch", func(t *testing.T) { debugtest.CheckPython(t, e, "app/main.py") })
	t.Run("killed adapter", func(t *testing.T) { debugtest.CheckPythonKilled(t, e, "app/main.py") })
	t.Run("report", func(t *testing.T) { debugtest.CheckPythonReport(t, e, "app") })

	t.Run("attach", func(t *testing.T) {
		ctr.spawn(t, workspace, "python3", "-m", "debugpy", "--listen", "127.0.0.1:5678", "--wait-for-client", "app/main.py")
		for deadline := time.Now().Add(time.Minute); !strings.Contains(ctr.sh(t, "cat /proc/net/tcp"), ":162E 00000000:0000 0A"); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the debuggee never listened on 5678")
			}
		}
		debugtest.CheckPythonAttach(t, e, "app/main.py", 5678)
		noLeftovers(t, ctr, "debugpy", "app/main.py")
	})

	t.Run("run close", func(t *testing.T) {
		e.Ok(t, map[string]any{"op": "breakpoints", "file": "app/main.py", "lines": []any{7}})
		e.Ok(t, map[string]any{"op": "launch", "program": "app/main.py"}, "stopped at app/main.py:7")
		if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
			t.Fatalf("close run: %s", r)
		}
		noLeftovers(t, ctr, "debugpy", "app/main.py")
	})
}

// TestDebugGoInContainer drives delve in berth-test-go: dlv listens on a
// loopback port inside the container, reached through the agent's Dial.
// It skips when the image was not built.
func TestDebugGoInContainer(t *testing.T) {
	const image = "berth-test-go"
	needImage(t, image, true)
	ctr := startContainer(t, image)
	ctr.put(t, "go.mod", "module example.com/hello\n\ngo 1.22\n")
	ctr.put(t, "main.go", debugtest.GoProgram)
	ctr.put(t, "report/main.go", debugtest.GoReport)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := debugEnv(a, run, ctr, "dlv", "dlv", "__debug_bin")

	e.Ok(t, map[string]any{"op": "adapters"}, "delve: usable (/usr/local/bin/dlv", "dart: not usable")
	debugtest.CheckGo(t, e)
	debugtest.CheckGoReport(t, e)
	// Listeners: nothing of dlv's remains listening in the container.
	if tcp := ctr.sh(t, "cat /proc/net/tcp"); strings.Count(tcp, " 0A ") > 0 {
		t.Errorf("a TCP listener remains in the container:\n%s", tcp)
	}

	// The run's close ends a live session.
	e.Ok(t, map[string]any{"op": "launch", "program": "main.go"}, "stopped at main.go:12")
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
	noLeftovers(t, ctr, "dlv", "__debug_bin")
}
