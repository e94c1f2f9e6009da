package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
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

// debugger calls the debug tool of one run.
type debugger struct {
	t   *testing.T
	a   *api
	run string
}

func (d *debugger) call(args map[string]any) result {
	d.t.Helper()
	raw, _ := json.Marshal(args)
	return d.a.call(d.run, "debug", "default", string(raw))
}

func (d *debugger) ok(args map[string]any, wants ...string) result {
	d.t.Helper()
	res := d.call(args)
	if res.IsError {
		d.t.Fatalf("debug %v: tool error:\n%s", args, res.text())
	}
	for _, w := range wants {
		if !strings.Contains(res.text(), w) {
			d.t.Fatalf("debug %v: result lacks %q:\n%s", args, w, res.text())
		}
	}
	d.t.Logf("debug %v:\n%s", args["op"], res.text())
	return res
}

func (d *debugger) fails(args map[string]any, wants ...string) {
	d.t.Helper()
	res := d.call(args)
	if !res.IsError {
		d.t.Fatalf("debug %v: want a tool error, got:\n%s", args, res.text())
	}
	for _, w := range wants {
		if !strings.Contains(res.text(), w) {
			d.t.Fatalf("debug %v: error lacks %q:\n%s", args, w, res.text())
		}
	}
}

// structured calls and decodes the result's structuredContent into v.
func (d *debugger) structured(args map[string]any, v any) {
	d.t.Helper()
	raw, _ := json.Marshal(args)
	r := d.a.do("POST", "/v1/runs/"+d.run+"/tools/debug", token, fmt.Sprintf(`{"args":%s,"surface":"default"}`, raw))
	var res struct {
		IsError           bool
		StructuredContent json.RawMessage
	}
	r.decode(d.t, &res)
	if r.status != http.StatusOK || res.IsError {
		d.t.Fatalf("debug %s: %s", raw, r)
	}
	if err := json.Unmarshal(res.StructuredContent, v); err != nil {
		d.t.Fatalf("structuredContent of %s: %v: %s", raw, err, res.StructuredContent)
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

const pyDebuggee = `import sys
def add(a, b):
    total = a + b
    return total
def main():
    x = 2
    y = 3
    z = add(x, y)
    print("sum", z)
    for i in range(5):
        z += i
    print("done", z)
    print("err", file=sys.stderr)
main()
`

// TestDebugPythonInContainer drives debugpy in berth-test-python through
// the HTTP API: breakpoints before launch, stops, stack, variables,
// evaluate, steps, output, a refused second launch, a killed adapter,
// attach by port, and no process left after terminate and after the run's
// close (checked with ps through the test's own docker exec).
func TestDebugPythonInContainer(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	ctr.put(t, "requirements.txt", "")
	ctr.put(t, "app/main.py", pyDebuggee)
	a := newAPI(t)
	run, ref := a.open(ctr.conv)
	if ref != ctr.ref {
		t.Fatalf("run placed in %q, want %s", ref, ctr.ref)
	}
	d := &debugger{t: t, a: a, run: run}

	var avs struct {
		Adapters []struct {
			Adapter, Binary, Reason string
			Usable                  bool
		}
	}
	d.structured(map[string]any{"op": "adapters"}, &avs)
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

	t.Run("launch", func(t *testing.T) {
		d.t = t
		d.ok(map[string]any{"op": "breakpoints", "file": "app/main.py", "lines": []any{7, 12}}, "pending")
		d.ok(map[string]any{"op": "launch", "program": "app/main.py"}, "stopped at app/main.py:7 in main (breakpoint)", "y = 3", "line 7: verified")
		if left := leftovers(t, ctr, "debugpy.adapter"); len(left) == 0 {
			t.Errorf("no debugpy adapter runs in the container during the session")
		}
		d.fails(map[string]any{"op": "launch", "program": "app/main.py"}, "already running", "stopped at app/main.py:7")
		d.ok(map[string]any{"op": "stack"}, "#0 main at app/main.py:7", "#1 <module> at app/main.py:14")
		var scopes struct {
			Scopes []struct {
				Name      string
				Reference int
			}
		}
		d.structured(map[string]any{"op": "scopes"}, &scopes)
		if len(scopes.Scopes) == 0 {
			t.Fatal("no scopes")
		}
		d.ok(map[string]any{"op": "variables", "reference": scopes.Scopes[0].Reference}, "x: int = 2")
		d.ok(map[string]any{"op": "evaluate", "expression": "x * 21"}, "= 42")
		d.ok(map[string]any{"op": "step_over"}, "stopped at app/main.py:8", "z = add(x, y)")
		d.ok(map[string]any{"op": "step_in"}, "stopped at app/main.py:3 in add", "total = a + b")
		d.ok(map[string]any{"op": "step_out"}, "stopped at app/main.py:8 in main")
		d.ok(map[string]any{"op": "continue"}, "stopped at app/main.py:12 in main (breakpoint)")
		d.ok(map[string]any{"op": "evaluate", "expression": "z"}, "z: int = 15")
		d.ok(map[string]any{"op": "output"}, "sum 5")
		// debugpy may interleave stderr between the parts of one print.
		d.ok(map[string]any{"op": "continue"}, "exited with code 0", "done", "15", "[stderr] err")
		d.ok(map[string]any{"op": "terminate"}, "terminated")
		noLeftovers(t, ctr, "debugpy", "app/main.py")
	})

	t.Run("killed adapter", func(t *testing.T) {
		d.t = t
		d.ok(map[string]any{"op": "launch", "program": "app/main.py", "stop_on_entry": true}, "stopped at app/main.py:1")
		ctr.sh(t, "pkill -KILL -f 'debugpy[.]adapter'")
		noLeftovers(t, ctr, "debugpy.adapter")
		d.fails(map[string]any{"op": "stack"}, "exited unexpectedly", "launch again")
		d.ok(map[string]any{"op": "launch", "program": "app/main.py"}, "stopped at app/main.py:7")
		d.ok(map[string]any{"op": "terminate"}, "terminated")
		noLeftovers(t, ctr, "debugpy", "app/main.py")
	})

	t.Run("attach", func(t *testing.T) {
		d.t = t
		ctr.spawn(t, workspace, "python3", "-m", "debugpy", "--listen", "127.0.0.1:5678", "--wait-for-client", "app/main.py")
		for deadline := time.Now().Add(time.Minute); !strings.Contains(ctr.sh(t, "cat /proc/net/tcp"), ":162E 00000000:0000 0A"); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the debuggee never listened on 5678")
			}
		}
		d.ok(map[string]any{"op": "breakpoints", "file": "app/main.py", "lines": []any{3}}, "line 3")
		d.ok(map[string]any{"op": "attach", "port": 5678}, "stopped at app/main.py:3 in add", "total = a + b")
		d.ok(map[string]any{"op": "evaluate", "expression": "a * b"}, "= 6")
		d.ok(map[string]any{"op": "breakpoints", "file": "app/main.py", "lines": []any{}}, "cleared")
		d.ok(map[string]any{"op": "continue"}, "ended")
		d.ok(map[string]any{"op": "terminate"}, "detached")
		noLeftovers(t, ctr, "debugpy", "app/main.py")
	})

	t.Run("run close", func(t *testing.T) {
		d.t = t
		d.ok(map[string]any{"op": "breakpoints", "file": "app/main.py", "lines": []any{7}})
		d.ok(map[string]any{"op": "launch", "program": "app/main.py"}, "stopped at app/main.py:7")
		if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
			t.Fatalf("close run: %s", r)
		}
		noLeftovers(t, ctr, "debugpy", "app/main.py")
	})
}

const goDebuggee = `package main

import "fmt"

func add(a, b int) int {
	total := a + b
	return total
}

func main() {
	x := 2
	y := 3
	z := add(x, y)
	fmt.Println("sum", z)
	for i := 0; i < 5; i++ {
		z += i
	}
	fmt.Println("done", z)
}
`

// TestDebugGoInContainer drives delve in berth-test-go: dlv listens on a
// loopback port inside the container, reached through the agent's Dial.
// It skips when the image was not built.
func TestDebugGoInContainer(t *testing.T) {
	const image = "berth-test-go"
	needImage(t, image, true)
	ctr := startContainer(t, image)
	ctr.put(t, "go.mod", "module example.com/hello\n\ngo 1.22\n")
	ctr.put(t, "main.go", goDebuggee)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	d := &debugger{t: t, a: a, run: run}

	d.ok(map[string]any{"op": "adapters"}, "delve: usable (/usr/local/bin/dlv", "dart: not usable")
	d.ok(map[string]any{"op": "breakpoints", "file": "main.go", "lines": []any{12, 18}}, "pending")
	d.ok(map[string]any{"op": "launch", "program": "."}, "stopped at main.go:12 in main.main (breakpoint)", "y := 3")
	d.fails(map[string]any{"op": "launch", "program": "."}, "already running")
	d.ok(map[string]any{"op": "stack"}, "#0 main.main at main.go:12")
	var scopes struct {
		Scopes []struct {
			Name      string
			Reference int
		}
	}
	d.structured(map[string]any{"op": "scopes"}, &scopes)
	if len(scopes.Scopes) == 0 {
		t.Fatal("no scopes")
	}
	d.ok(map[string]any{"op": "variables", "reference": scopes.Scopes[0].Reference}, "x: int = 2")
	d.ok(map[string]any{"op": "evaluate", "expression": "x * 21"}, "= 42")
	d.ok(map[string]any{"op": "step_over"}, "stopped at main.go:13")
	d.ok(map[string]any{"op": "step_in"}, "in main.add")
	d.ok(map[string]any{"op": "step_out"}, "stopped at main.go:13 in main.main")
	d.ok(map[string]any{"op": "continue"}, "stopped at main.go:18 in main.main (breakpoint)")
	d.ok(map[string]any{"op": "evaluate", "expression": "z"}, "z: int = 15")
	d.ok(map[string]any{"op": "output"}, "sum 5")
	d.ok(map[string]any{"op": "continue"}, "done 15")
	d.ok(map[string]any{"op": "terminate"}, "terminated")
	noLeftovers(t, ctr, "dlv", "__debug_bin")
	// Listeners: nothing of dlv's remains listening in the container.
	if tcp := ctr.sh(t, "cat /proc/net/tcp"); strings.Count(tcp, " 0A ") > 0 {
		t.Errorf("a TCP listener remains in the container:\n%s", tcp)
	}

	// The run's close ends a live session.
	d.ok(map[string]any{"op": "launch", "program": "main.go"}, "stopped at main.go:12")
	if r := a.do("DELETE", "/v1/runs/"+run, token, ""); r.status/100 != 2 {
		t.Fatalf("close run: %s", r)
	}
	noLeftovers(t, ctr, "dlv", "__debug_bin")
}
