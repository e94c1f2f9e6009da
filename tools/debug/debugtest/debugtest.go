// Package debugtest holds the checks of the debug tool that every placement
// must pass — the same programs, breakpoints, stops and answers on the host
// (tools/debug's tests) and in containers (tests/e2e) — against real
// adapters (debugpy, delve).
//
// Each placement supplies an [Env]: how to call the tool, and how to see
// the session's processes in its sandbox. A check expects a run whose
// debug tool has no session; it ends with none.
package debugtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Result is a tool result as the checks see it.
type Result struct {
	Text       string
	IsError    bool
	Structured json.RawMessage
}

// Env is how the checks drive one run's debug tool.
type Env struct {
	// Call calls the debug tool with args; a call error fails the test.
	Call func(t *testing.T, args map[string]any) Result
	// Live checks, while a launched program is stopped, that the session's
	// adapter (and the program, where the placement can tell) runs in the
	// sandbox.
	Live func(t *testing.T)
	// Gone checks, after terminate, that no process of the session is
	// left in the sandbox; it may wait a moment for them to go.
	Gone func(t *testing.T)
	// Kill kills the session's adapter (SIGKILL) from outside berth and
	// returns once it is gone. Only [CheckPythonKilled] uses it.
	Kill func(t *testing.T)
}

// Ok calls the tool and fails the test on a tool error or a missing want.
func (e Env) Ok(t *testing.T, args map[string]any, wants ...string) Result {
	t.Helper()
	r := e.Call(t, args)
	if r.IsError {
		t.Fatalf("debug %v: tool error:\n%s", args, r.Text)
	}
	for _, w := range wants {
		if !strings.Contains(r.Text, w) {
			t.Fatalf("debug %v: result lacks %q:\n%s", args, w, r.Text)
		}
	}
	t.Logf("debug %v:\n%s", args["op"], r.Text)
	return r
}

// Fails calls the tool and wants a tool error containing every want.
func (e Env) Fails(t *testing.T, args map[string]any, wants ...string) Result {
	t.Helper()
	r := e.Call(t, args)
	if !r.IsError {
		t.Fatalf("debug %v: want a tool error, got:\n%s", args, r.Text)
	}
	for _, w := range wants {
		if !strings.Contains(r.Text, w) {
			t.Fatalf("debug %v: error lacks %q:\n%s", args, w, r.Text)
		}
	}
	return r
}

// Decode decodes r's structured content into v.
func Decode(t *testing.T, r Result, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Structured, v); err != nil {
		t.Fatalf("structuredContent: %v: %s", err, r.Structured)
	}
}

// Status is the part of a run-control answer's structured content the
// checks read.
type Status struct {
	State   string `json:"state"`
	Session int    `json:"session"`
	Stopped *struct {
		Path     string `json:"path"`
		Line     int    `json:"line"`
		Function string `json:"function"`
	} `json:"stopped"`
	ExitCode *int `json:"exit_code"`
}

// Scopes is the structured content of scopes.
type Scopes struct {
	Scopes []struct {
		Name      string `json:"name"`
		Reference int    `json:"reference"`
	} `json:"scopes"`
}

// PyProgram is the Python debuggee; with requirements.txt beside it,
// debugpy debugs it.
const PyProgram = `import sys
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

// GoProgram is the Go debuggee, main.go of a module's root (with go.mod
// beside it), launched as ".".
const GoProgram = `package main

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

// scopes checks the scopes of a frame (frameID 0: the default, the top
// frame) and returns their first reference.
func (e Env) scopes(t *testing.T, frameID int) int {
	t.Helper()
	args := map[string]any{"op": "scopes"}
	if frameID != 0 {
		args["frame_id"] = frameID
	}
	var sc Scopes
	Decode(t, e.Ok(t, args, "Locals (reference"), &sc)
	if len(sc.Scopes) == 0 {
		t.Fatal("no scopes")
	}
	return sc.Scopes[0].Reference
}

// CheckPython debugs PyProgram at prog (workspace-relative) with debugpy:
// breakpoints before launch (one conditional), the stop and its structured
// status, a refused second launch and attach (DBG-3), status, threads,
// stack, scopes, variables, evaluate, a failing evaluate, every step,
// output read once, breakpoints changed during the session, the exit, a
// step refused after it, terminate, and a second launch that stops on
// entry and keeps the breakpoints.
func CheckPython(t *testing.T, e Env, prog string) {
	t.Helper()
	at := func(line int) string { return fmt.Sprintf("stopped at %s:%d", prog, line) }
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{7, map[string]any{"line": 11, "condition": "i == 3"}, 12}}, "pending")
	var st Status
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": prog},
		"launched "+prog+" with debugpy", at(7)+" in main (breakpoint)", "y = 3", "line 7: verified", "line 11 if i == 3: verified"), &st)
	if st.State != "stopped" || st.Stopped == nil || st.Stopped.Line != 7 || st.Stopped.Path != prog || st.Stopped.Function != "main" {
		t.Errorf("launch structured = %+v", st)
	}
	n := st.Session
	e.Live(t)

	// A second launch is refused with the current status (DBG-3).
	e.Fails(t, map[string]any{"op": "launch", "program": prog}, "already running", at(7))
	e.Fails(t, map[string]any{"op": "attach", "port": 5678}, "already running")

	e.Ok(t, map[string]any{"op": "status"}, fmt.Sprintf("session %d: debugpy", n), at(7))
	e.Ok(t, map[string]any{"op": "threads"}, "MainThread")
	var stack struct {
		Frames []struct {
			FrameID int `json:"frame_id"`
		} `json:"frames"`
	}
	Decode(t, e.Ok(t, map[string]any{"op": "stack"}, "#0 main at "+prog+":7", "#1 <module> at "+prog+":14"), &stack)
	if len(stack.Frames) < 2 {
		t.Fatalf("frames = %+v", stack)
	}
	e.scopes(t, 0)
	ref := e.scopes(t, stack.Frames[0].FrameID)
	e.Ok(t, map[string]any{"op": "variables", "reference": ref}, "x: int = 2")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "x * 21"}, "x * 21: int = 42")
	e.Fails(t, map[string]any{"op": "evaluate", "expression": "undefined_name"}, "undefined_name")
	e.Fails(t, map[string]any{"op": "variables", "reference": 0}, "needs reference")

	e.Ok(t, map[string]any{"op": "step_over"}, at(8), "z = add(x, y)")
	e.Ok(t, map[string]any{"op": "step_in"}, at(3)+" in add", "total = a + b")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "a + b"}, "= 5")
	e.Ok(t, map[string]any{"op": "step_over"}, at(4))
	e.Ok(t, map[string]any{"op": "step_out"}, at(8)+" in main")
	// The conditional breakpoint stops only when i == 3.
	e.Ok(t, map[string]any{"op": "continue"}, at(11)+" in main (breakpoint)")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "i"}, "i: int = 3")
	e.Ok(t, map[string]any{"op": "output"}, "sum 5")
	e.Ok(t, map[string]any{"op": "output"}, "no new output")
	// Breakpoints changed during the session go to the adapter at once.
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{12}}, "line 12: verified")
	e.Ok(t, map[string]any{"op": "continue"}, at(12)+" in main (breakpoint)", `print("done", z)`)
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "z"}, "z: int = 15")
	// debugpy may interleave stderr between the parts of one print.
	Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "exited with code 0", "done", "15", "[stderr] err"), &st)
	if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Errorf("exit structured = %+v", st)
	}
	e.Fails(t, map[string]any{"op": "step_over"}, "exited with code 0", "launch again")
	e.Ok(t, map[string]any{"op": "terminate"}, fmt.Sprintf("terminated session %d", n))
	e.Gone(t)
	e.Ok(t, map[string]any{"op": "status"}, "no debug session")

	// Launch again: breakpoints persist; stop_on_entry stops on line 1.
	e.Ok(t, map[string]any{"op": "launch", "program": prog, "stop_on_entry": true}, fmt.Sprintf("session %d", n+1), at(1), "import sys")
	e.Live(t)
	e.Ok(t, map[string]any{"op": "continue"}, at(12))
	e.Ok(t, map[string]any{"op": "terminate"}, fmt.Sprintf("terminated session %d", n+1))
	e.Gone(t)
}

// CheckPythonKilled kills the adapter of a session on PyProgram at prog:
// the next call says the adapter exited unexpectedly, and a new launch
// works and reaches a breakpoint.
func CheckPythonKilled(t *testing.T, e Env, prog string) {
	t.Helper()
	at := func(line int) string { return fmt.Sprintf("stopped at %s:%d", prog, line) }
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{7}}, "line 7")
	var st Status
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": prog, "stop_on_entry": true}, at(1)), &st)
	e.Live(t)
	e.Kill(t)
	e.Fails(t, map[string]any{"op": "stack"}, "exited unexpectedly", "launch again")
	e.Ok(t, map[string]any{"op": "launch", "program": prog, "stop_on_entry": true}, fmt.Sprintf("session %d", st.Session+1), at(1))
	e.Live(t)
	e.Ok(t, map[string]any{"op": "continue"}, at(7))
	e.Ok(t, map[string]any{"op": "terminate"}, fmt.Sprintf("terminated session %d", st.Session+1))
	e.Gone(t)
}

// CheckPythonAttach attaches to PyProgram at prog, which the caller
// started under python -m debugpy --listen 127.0.0.1:port
// --wait-for-client: it stops at a breakpoint set before, evaluates, runs
// to the end and detaches. The caller checks what became of the debuggee.
func CheckPythonAttach(t *testing.T, e Env, prog string, port int) {
	t.Helper()
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{3}}, "line 3")
	e.Ok(t, map[string]any{"op": "attach", "port": port}, fmt.Sprintf("attached the debuggee on port %d", port), fmt.Sprintf("stopped at %s:3 in add", prog), "total = a + b")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "a * b"}, "= 6")
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{}}, "cleared")
	e.Ok(t, map[string]any{"op": "continue"}, "the program ended")
	e.Ok(t, map[string]any{"op": "terminate"}, "detached session")
}

// CheckGo debugs GoProgram with delve, launched as the package ".":
// breakpoints before launch, the stop, a refused second launch, stack,
// scopes, variables, evaluate, every step (delve stops at a function's
// entry line first), output, the exit and terminate.
func CheckGo(t *testing.T, e Env) {
	t.Helper()
	e.Ok(t, map[string]any{"op": "breakpoints", "file": "main.go", "lines": []any{12, 18}}, "pending")
	var st Status
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": "."},
		"launched . with delve", "stopped at main.go:12 in main.main (breakpoint)", "y := 3", "line 12: verified"), &st)
	e.Live(t)
	e.Fails(t, map[string]any{"op": "launch", "program": "."}, "already running")
	e.Ok(t, map[string]any{"op": "stack"}, "#0 main.main at main.go:12")
	ref := e.scopes(t, 0)
	e.Ok(t, map[string]any{"op": "variables", "reference": ref}, "x: int = 2")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "x * 21"}, "= 42")
	e.Ok(t, map[string]any{"op": "step_over"}, "stopped at main.go:13", "z := add(x, y)")
	e.Ok(t, map[string]any{"op": "step_in"}, "main.go:5 in main.add")
	e.Ok(t, map[string]any{"op": "step_over"}, "main.go:6 in main.add", "total := a + b")
	e.Ok(t, map[string]any{"op": "step_out"}, "stopped at main.go:13 in main.main")
	e.Ok(t, map[string]any{"op": "continue"}, "stopped at main.go:18 in main.main (breakpoint)")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "z"}, "z: int = 15")
	e.Ok(t, map[string]any{"op": "output"}, "sum 5")
	var end Status
	Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "done 15"), &end)
	if end.State != "exited" {
		t.Errorf("after the last continue: %+v", end)
	}
	e.Ok(t, map[string]any{"op": "terminate"}, fmt.Sprintf("terminated session %d", st.Session))
	e.Gone(t)
}
