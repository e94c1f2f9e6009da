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
	"os"
	"path"
	"path/filepath"
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
	// KillProgram kills the session's program (SIGKILL) from outside
	// berth and the adapter, as kill -9 of its pid does, and returns once
	// it is dead (a zombie counts). Only [CheckKilled] uses it.
	KillProgram func(t *testing.T)
	// Reaped checks that no process of the sandbox that berth started, or
	// that descends from one, is a zombie (state Z in /proc); it may wait
	// a moment for a parent to reap. Only [CheckExit] and [CheckKilled]
	// use it.
	Reaped func(t *testing.T)
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
	ExitCode *int   `json:"exit_code"`
	Signal   string `json:"signal"`
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

// PyReport is the Python debuggee of [CheckPythonReport], app/report.py
// beside PyProgram's requirements.txt: it prints a variable of its
// environment and its working directory, recurses deeper than a stack
// lists, has more locals than a stop shows and a list longer than a page,
// returns a value and fails with an uncaught exception.
const PyReport = `import os


def depth(n):
    if n == 0:
        return n
    return depth(n - 1)


def many():
    a0, a1, a2, a3, a4, a5 = 0, 1, 2, 3, 4, 5
    a6, a7, a8, a9, a10, a11 = 6, 7, 8, 9, 10, 11
    big = list(range(120))
    text = "x" * 1000
    return a11 + len(big) + len(text)


def fail(d):
    return 10 / d


print("env", os.environ.get("GREETING"), "cwd", os.path.basename(os.getcwd()))
depth(40)
many()
fail(0)
`

// GoReport is [PyReport] in Go: report/main.go, the package report of
// GoProgram's module.
const GoReport = `package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func depth(n int) int {
	if n == 0 {
		return n
	}
	return depth(n - 1)
}

func many() int {
	a0, a1, a2, a3, a4, a5 := 0, 1, 2, 3, 4, 5
	a6, a7, a8, a9, a10, a11 := 6, 7, 8, 9, 10, 11
	big := make([]int, 120)
	return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 + len(big)
}

func fail(xs []int, i int) int {
	return xs[i]
}

func main() {
	wd, _ := os.Getwd()
	fmt.Println("env", os.Getenv("GREETING"), "cwd", filepath.Base(wd))
	depth(40)
	fmt.Println("many", many())
	fail(nil, 3)
}
`

// Frames is the part of stack's structured content the checks read.
type Frames struct {
	Frames []struct {
		FrameID  int    `json:"frame_id"`
		Function string `json:"function"`
	} `json:"frames"`
	Total int `json:"total"`
}

// Stop is the part of a stop report's structured content the report
// checks read.
type Stop struct {
	State   string `json:"state"`
	Program string `json:"program"`
	Stopped *struct {
		Line      int `json:"line"`
		Exception *struct {
			ID      string `json:"id"`
			Message string `json:"message"`
		} `json:"exception"`
		Returned []struct {
			Name, Value string
		} `json:"returned"`
		Locals *struct {
			Reference int `json:"reference"`
			Variables []struct {
				Name, Value string
			} `json:"variables"`
			More  int `json:"more"`
			Start int `json:"start"`
		} `json:"locals"`
	} `json:"stopped"`
}

// stackCapped checks that the stack of depth(40) lists 30 of its frames,
// all fn's, and says exactly how many more there are: the recursion's 11
// others and those below it.
func (e Env) stackCapped(t *testing.T, fn string) {
	t.Helper()
	var fr Frames
	r := e.Ok(t, map[string]any{"op": "stack"}, "#29 "+fn+" at ")
	Decode(t, r, &fr)
	if len(fr.Frames) != 30 || fr.Total <= 41 || fr.Total > 60 {
		t.Errorf("stack of depth(40): %d frames of %d, want 30 of 42 to 60", len(fr.Frames), fr.Total)
	}
	for _, f := range fr.Frames {
		if f.Function != fn {
			t.Errorf("frame %+v, want %s", f, fn)
		}
	}
	if want := fmt.Sprintf("\n(%d more frames not shown; at most 30 are listed)", fr.Total-30); !strings.HasSuffix(r.Text, want) || strings.Contains(r.Text, "#30 ") {
		t.Errorf("stack: want 30 frames and %q:\n%s", want, r.Text)
	}
}

// localsCapped checks a stop in many(): 10 of its 14 locals, the rest
// counted, and variables showing them from where the stop left off.
func (e Env) localsCapped(t *testing.T, r Result, more int) {
	t.Helper()
	var st Stop
	Decode(t, r, &st)
	l := st.Stopped.Locals
	if l == nil || len(l.Variables) != 10 || l.More != more || l.Start != 10 {
		t.Fatalf("locals of many(): %+v, want 10 shown and %d more from 10", l, more)
	}
	want := fmt.Sprintf("… %d more: call variables with reference %d and start 10", more, l.Reference)
	if !strings.Contains(r.Text, want) {
		t.Errorf("the stop lacks %q:\n%s", want, r.Text)
	}
	page := e.Ok(t, map[string]any{"op": "variables", "reference": l.Reference, "start": 10})
	var vs struct {
		Variables []struct{ Name string } `json:"variables"`
	}
	Decode(t, page, &vs)
	if len(vs.Variables) != more {
		t.Errorf("variables from 10: %d, want %d:\n%s", len(vs.Variables), more, page.Text)
	}
}

// CheckPythonReport debugs PyReport at dir/report.py (dir
// workspace-relative, with PyProgram's marker above it) as the module
// report with cwd dir and an env variable: the stack of a deep recursion
// is capped at 30 frames, a stop shows the first 10 locals, variables
// pages 50 at a time, a statement evaluates to "no value", step_out shows
// the value returned, and the uncaught exception's stop shows its message.
func CheckPythonReport(t *testing.T, e Env, dir string) {
	t.Helper()
	file := dir + "/report.py"
	e.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": []any{6, 15}}, "pending")
	var st Stop
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "module": "report", "cwd": dir, "env": map[string]any{"GREETING": "hello", "PYTHONUNBUFFERED": "1"}},
		"launched module report with debugpy", "stopped at "+file+":6 in depth (breakpoint)", "locals:\n  n: int = 0"), &st)
	if st.Program != "module report" || st.Stopped == nil || st.Stopped.Locals == nil || st.Stopped.Locals.Variables[0].Name != "n" {
		t.Errorf("launch structured = %+v", st)
	}
	e.Ok(t, map[string]any{"op": "output"}, "env hello cwd "+path.Base(dir))
	e.stackCapped(t, "depth")

	r := e.Ok(t, map[string]any{"op": "continue"}, "stopped at "+file+":15 in many", "a0: int = 0", "locals:")
	e.localsCapped(t, r, 4)
	// The list's items come 50 at a time.
	big := e.Ok(t, map[string]any{"op": "evaluate", "expression": "big"}, "big: list = [0, 1, 2")
	var ev struct {
		Reference int `json:"reference"`
	}
	Decode(t, big, &ev)
	page := e.Ok(t, map[string]any{"op": "variables", "reference": ev.Reference}, "\n000: int = 0\n", fmt.Sprintf("more: call variables with reference %d and start 50", ev.Reference))
	var vs struct {
		Variables []struct{ Name string } `json:"variables"`
		Remaining int                     `json:"remaining"`
	}
	Decode(t, page, &vs)
	if len(vs.Variables) != 50 || vs.Remaining < 50 { // debugpy lists 100 of a list's items
		t.Errorf("a page of big: %d variables and %d remaining, want 50 and at least 50", len(vs.Variables), vs.Remaining)
	}
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "text"}, "… (", "more characters)")

	// A statement runs and says it has no value.
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "a0 = 42"}, "a0 = 42: no value; debugpy ran it")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "a0"}, "a0: int = 42")

	// step_out shows what many returned: 11 + 120 + 1000.
	Decode(t, e.Ok(t, map[string]any{"op": "step_out"}, "in <module>", "returned from many: int = 1131"), &st)
	if st.Stopped == nil || len(st.Stopped.Returned) != 1 || st.Stopped.Returned[0].Name != "many" || st.Stopped.Returned[0].Value != "1131" {
		t.Errorf("step_out structured = %+v", st.Stopped)
	}

	// The uncaught exception stops with its type and message.
	Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "stopped at "+file+":19 in fail (exception)", "exception: ZeroDivisionError: division by zero", "d: int = 0"), &st)
	if ex := st.Stopped.Exception; ex == nil || ex.ID != "ZeroDivisionError" || ex.Message != "division by zero" {
		t.Errorf("exception structured = %+v", ex)
	}
	// The end shows the program's own frames, not debugpy's and runpy's.
	end := e.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 1)", "ZeroDivisionError: division by zero",
		"report.py\", line 19, in fail", "frames of debugpy and Python's runpy left out]")
	if strings.Contains(end.Text, "pydevd") || strings.Contains(end.Text, "runpy.py") || strings.Contains(end.Text, "debugpy/") {
		t.Errorf("the end shows the debugger's own frames:\n%s", end.Text)
	}
	e.Gone(t)
	e.Ok(t, map[string]any{"op": "terminate"}, "no debug session to terminate", "already closed")
}

// CheckGoReport debugs GoReport, the package report of a module whose
// root holds go.mod, with cwd report and an env variable: the stack of a
// deep recursion is capped at 30 frames, a stop shows the first 10
// locals, call x = 5 has no value, step_out says delve reports no return
// value, and the panic's stop shows its message.
func CheckGoReport(t *testing.T, e Env) {
	t.Helper()
	e.Ok(t, map[string]any{"op": "breakpoints", "file": "report/main.go", "lines": []any{11, 20}}, "pending")
	e.Fails(t, map[string]any{"op": "launch", "module": "report", "adapter": "delve"}, "only debugpy runs", "package directory")
	e.Ok(t, map[string]any{"op": "launch", "program": "report", "cwd": "report", "env": map[string]any{"GREETING": "hello", "GOMAXPROCS": "2"}},
		"launched report with delve", "stopped at report/main.go:11 in main.depth (breakpoint)", "locals:\n  n: int = 0")
	e.Ok(t, map[string]any{"op": "output"}, "env hello cwd report")
	e.stackCapped(t, "main.depth")

	r := e.Ok(t, map[string]any{"op": "continue"}, "stopped at report/main.go:20 in main.many", "a0: int = 0", "locals:")
	e.localsCapped(t, r, 4) // a0…a11, big and ~r0, the result
	e.Fails(t, map[string]any{"op": "evaluate", "expression": "a0 = 42"}, "call x = 5 assigns")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "call a0 = 42"}, "call a0 = 42: no value; delve ran it")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "a0"}, "a0: int = 42")
	e.Ok(t, map[string]any{"op": "step_out"}, "in main.main", "delve does not report the value step_out returned")

	var st Stop
	Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "(exception)", `exception: panic: "runtime error: index out of range [3] with length 0"`), &st)
	if ex := st.Stopped.Exception; ex == nil || ex.ID != "panic" || !strings.Contains(ex.Message, "index out of range") {
		t.Errorf("exception structured = %+v", ex)
	}
	e.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 2)", "many 228")
	e.Gone(t)
	e.Ok(t, map[string]any{"op": "terminate"}, "no debug session to terminate", "already closed")
}

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
// breakpoints before launch (one conditional), the stop with its locals
// and its structured status, a refused second launch and attach (DBG-3), status, threads,
// stack, scopes, variables, evaluate, a failing evaluate, every step
// (step_out with the value returned), output read once, breakpoints changed during the session, the exit, a
// step refused after it, terminate, and a second launch that stops on
// entry and keeps the breakpoints.
func CheckPython(t *testing.T, e Env, prog string) {
	t.Helper()
	at := func(line int) string { return fmt.Sprintf("stopped at %s:%d", prog, line) }
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{7, map[string]any{"line": 11, "condition": "i == 3"}, 12}}, "pending")
	var st Status
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": prog},
		"launched "+prog+" with debugpy", at(7)+" in main (breakpoint)", "y = 3", "line 7: verified", "line 11 if i == 3: verified", "locals:\n  x: int = 2"), &st)
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
	e.Ok(t, map[string]any{"op": "step_out"}, at(8)+" in main", "returned from add: int = 5")
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
	// The end closes the session: the adapter and the program are gone.
	Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 0)", "done", "15", "[stderr] err", fmt.Sprintf("session %d (debugpy, %s) is closed", n, prog)), &st)
	if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Errorf("exit structured = %+v", st)
	}
	e.Gone(t)
	e.Fails(t, map[string]any{"op": "step_over"}, "no debug session", "exited (code 0)", "launch again")
	e.Ok(t, map[string]any{"op": "status"}, "no debug session", "the program exited (code 0)")
	e.Ok(t, map[string]any{"op": "terminate"}, fmt.Sprintf("session %d (debugpy, %s) was already closed", n, prog))
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
// --wait-for-client: it stops at a breakpoint set before (with the
// frame's locals), evaluates, steps out (with the value returned), runs
// to the end and detaches. The caller checks what became of the debuggee.
func CheckPythonAttach(t *testing.T, e Env, prog string, port int) {
	t.Helper()
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{3}}, "line 3")
	e.Ok(t, map[string]any{"op": "attach", "port": port}, fmt.Sprintf("attached the debuggee on port %d", port), fmt.Sprintf("stopped at %s:3 in add", prog), "total = a + b", "locals:\n  a: int = 2\n  b: int = 3")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "a * b"}, "= 6")
	e.Ok(t, map[string]any{"op": "step_out"}, fmt.Sprintf("stopped at %s:8 in main", prog), "returned from add: int = 5")
	e.Ok(t, map[string]any{"op": "breakpoints", "file": prog, "lines": []any{}}, "cleared")
	e.Ok(t, map[string]any{"op": "continue"}, "the program ended", "the debugger detached")
	e.Ok(t, map[string]any{"op": "terminate"}, "no debug session to terminate")
}

// CheckGo debugs GoProgram with delve, launched as the package ".":
// breakpoints before launch, the stop with its locals, a refused second
// launch, stack, scopes, variables, evaluate, every step (delve stops at a
// function's entry line first; step_out says delve reports no return
// value), output, the exit and terminate.
func CheckGo(t *testing.T, e Env) {
	t.Helper()
	e.Ok(t, map[string]any{"op": "breakpoints", "file": "main.go", "lines": []any{12, 18}}, "pending")
	var st Status
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": "."},
		"launched . with delve", "stopped at main.go:12 in main.main (breakpoint)", "y := 3", "line 12: verified", "locals:\n  x: int = 2"), &st)
	e.Live(t)
	e.Fails(t, map[string]any{"op": "launch", "program": "."}, "already running")
	e.Ok(t, map[string]any{"op": "stack"}, "#0 main.main at main.go:12")
	ref := e.scopes(t, 0)
	e.Ok(t, map[string]any{"op": "variables", "reference": ref}, "x: int = 2")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "x * 21"}, "= 42")
	e.Ok(t, map[string]any{"op": "step_over"}, "stopped at main.go:13", "z := add(x, y)")
	e.Ok(t, map[string]any{"op": "step_in"}, "main.go:5 in main.add")
	e.Ok(t, map[string]any{"op": "step_over"}, "main.go:6 in main.add", "total := a + b")
	e.Ok(t, map[string]any{"op": "step_out"}, "stopped at main.go:13 in main.main", "delve does not report the value step_out returned")
	e.Ok(t, map[string]any{"op": "continue"}, "stopped at main.go:18 in main.main (breakpoint)")
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "z"}, "z: int = 15")
	e.Ok(t, map[string]any{"op": "output"}, "sum 5")
	var end Status
	Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 0)", "done 15"), &end)
	if end.State != "exited" || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("after the last continue: %+v", end)
	}
	e.Gone(t)
	e.Ok(t, map[string]any{"op": "terminate"}, fmt.Sprintf("session %d (delve, .) was already closed", st.Session))
}

// PyExit is the Python debuggee of [CheckExit]: it prints to stdout and
// stderr and exits with code 3. PyExitLine is the line of its first print.
const PyExit = `import sys


def main():
    n = 7
    print(f"before exit {n}", flush=True)  # one write: debugpy may split a print's parts
    print("to stderr", file=sys.stderr)
    sys.exit(3)


main()
`

// PyExitLine is the line of PyExit's first print.
const PyExitLine = 6

// PyExitStop is how debugpy's stop on PyExit's sys.exit(3) reads: an
// exit with a code other than 0 is an uncaught SystemExit.
const PyExitStop = "exit.py:8 in main (exception)"

// GoExit is [PyExit] in Go: main.go of a module of its own.
const GoExit = `package main

import (
	"fmt"
	"os"
)

func main() {
	n := 7
	fmt.Println("before exit", n)
	fmt.Fprintln(os.Stderr, "to stderr")
	os.Exit(3)
}
`

// GoExitLine is the line of GoExit's first print.
const GoExitLine = 10

// CheckExit debugs a program that exits with code 3 (PyExit or GoExit,
// launched as program with adapter) from a breakpoint on line: when
// exitStop is set, the first continue stops with it (debugpy stops on
// the uncaught SystemExit of sys.exit(3)); the continue that runs into the
// end says "the program exited (code 3)" with
// the end of its output; the session is closed then — the adapter and the
// program are gone and reaped, with no terminate — and status and a
// refused step say so; a second launch works the same; terminate after it
// says there was nothing left to end.
func CheckExit(t *testing.T, e Env, program, file string, line int, adapter, exitStop string) {
	t.Helper()
	at := fmt.Sprintf("stopped at %s:%d", file, line)
	e.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": []any{line}})
	for round := range 2 {
		var st Status
		Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": program}, at), &st)
		e.Live(t)
		n := st.Session
		closed := fmt.Sprintf("session %d (%s, %s) is closed", n, adapter, program)
		if exitStop != "" {
			e.Ok(t, map[string]any{"op": "continue"}, exitStop)
		}
		Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 3).", "the end of its output:", "before exit 7", "to stderr", closed), &st)
		if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 3 || st.Session != n {
			t.Errorf("round %d: the end's structured content = %+v, want exited with code 3 in session %d", round, st, n)
		}
		// No terminate: the end took the adapter and the program.
		e.Gone(t)
		e.Reaped(t)
		Decode(t, e.Ok(t, map[string]any{"op": "status"}, "no debug session: the program exited (code 3).", "before exit 7", closed), &st)
		if st.State != "exited" || st.ExitCode == nil || *st.ExitCode != 3 {
			t.Errorf("round %d: status after the end = %+v", round, st)
		}
		e.Fails(t, map[string]any{"op": "stack"}, "no debug session", fmt.Sprintf("session %d ended: the program exited (code 3)", n), "launch again")
		e.Ok(t, map[string]any{"op": "status"}, "the program exited (code 3)") // every later status says so
	}
	e.Ok(t, map[string]any{"op": "terminate"}, "no debug session to terminate", "already closed when its program exited (code 3)")
	e.Ok(t, map[string]any{"op": "status"}, "no debug session.")
	e.Gone(t)
}

// CheckKilled debugs a program (launched as program with adapter) to a
// breakpoint on line of file, then kills it from outside (KillProgram):
// the next call — status, with no terminate — says the program how
// ("was killed by signal 9 (SIGKILL) outside the debugger") and that the
// session is closed, not the old stop; the adapter and the program are
// gone, with no zombie left; a later stack is refused saying how the
// program ended, terminate says there was nothing left to end, and a new
// launch works. It returns the structured status of the end, for the
// caller to check the exit code or signal its adapter reports.
func CheckKilled(t *testing.T, e Env, program, file string, line int, adapter, how string) Status {
	t.Helper()
	at := fmt.Sprintf("stopped at %s:%d", file, line)
	e.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": []any{line}})
	var st Status
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": program}, at), &st)
	e.Live(t)
	n := st.Session
	e.KillProgram(t)
	closed := fmt.Sprintf("session %d (%s, %s) is closed", n, adapter, program)
	var end Status
	r := e.Ok(t, map[string]any{"op": "status"}, "no debug session: the program "+how+".", closed)
	if strings.Contains(r.Text, at) {
		t.Errorf("status after the program was killed still reports its stop:\n%s", r.Text)
	}
	Decode(t, r, &end)
	if end.State != "exited" || end.Session != n || end.Stopped != nil {
		t.Errorf("status after the program was killed = %+v, want exited in session %d", end, n)
	}
	e.Gone(t)
	e.Reaped(t)
	e.Fails(t, map[string]any{"op": "stack"}, "no debug session", fmt.Sprintf("session %d ended: the program %s", n, how), "launch again")
	e.Ok(t, map[string]any{"op": "terminate"}, "no debug session to terminate", "already closed when its program "+how)
	e.Ok(t, map[string]any{"op": "launch", "program": program}, fmt.Sprintf("session %d", n+1), at)
	e.Ok(t, map[string]any{"op": "terminate"}, fmt.Sprintf("terminated session %d", n+1))
	e.Gone(t)
	return end
}

// GoListFiles is container/list from the Go source tree of the machine
// running the test (goroot, as go env GOROOT says), made a module of its
// own under dir: code none of berth's authors wrote, with its tests.
func GoListFiles(t *testing.T, goroot, dir string) map[string]string {
	t.Helper()
	files := map[string]string{dir + "/go.mod": "module example.com/list\n\ngo 1.22\n"}
	for _, name := range []string{"list.go", "list_test.go", "example_test.go"} {
		data, err := os.ReadFile(filepath.Join(goroot, "src", "container", "list", name))
		if err != nil {
			t.Skipf("Go's source tree is not here: %v", err)
		}
		files[dir+"/"+name] = string(data)
	}
	return files
}

// lineOf returns the 1-based line of src that holds want, which must occur
// once.
func lineOf(t *testing.T, src, want string) int {
	t.Helper()
	if strings.Count(src, want) != 1 {
		t.Fatalf("%q occurs %d times in the source, want once", want, strings.Count(src, want))
	}
	return strings.Count(src[:strings.Index(src, want)], "\n") + 1
}

// Stopped is the part of a stop's structured content CheckGoTest reads.
type Stopped struct {
	State   string `json:"state"`
	Program string `json:"program"`
	Stopped *struct {
		Path     string `json:"path"`
		Line     int    `json:"line"`
		Function string `json:"function"`
		FrameID  int    `json:"frame_id"`
		Locals   *struct {
			Variables []struct{ Name, Value string } `json:"variables"`
		} `json:"locals"`
	} `json:"stopped"`
}

// CheckGoTest debugs the tests of container/list, as [GoListFiles] put it
// under dir, with delve's test mode: launching the package without test
// says how to debug its tests; launch with test and test_run stops at a
// breakpoint in the test it names, with the stop's line and a local's
// value as the source has them, and the same frame_id as stack; the test
// passes; a _test.go file as program runs that file's tests, launched
// with its breakpoint in the same call (file and lines); test_run
// chooses the test (a breakpoint in another test is not hit), and args
// take go test's -v.
func CheckGoTest(t *testing.T, e Env, dir, listTest string) {
	t.Helper()
	file := dir + "/list_test.go"
	sumLine := lineOf(t, listTest, "\tif sum != 4 {")                                         // in TestList, after summing the list's ints
	removeLine := lineOf(t, listTest, "\te := l.Front()\n\tl.Remove(e)\n\tcheckListPointers") // in TestRemove
	e.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": []any{sumLine, removeLine}}, "pending")

	e.Fails(t, map[string]any{"op": "launch", "program": dir}, dir+" is package list, not a main package", "test: true", "test_run")
	e.Fails(t, map[string]any{"op": "launch", "program": dir + "/list.go"}, "not a main package", "test: true")
	e.Fails(t, map[string]any{"op": "launch", "program": dir, "test_run": "Test("}, "not a regular expression")
	e.Fails(t, map[string]any{"op": "launch", "program": dir, "test_run": "TestList", "args": []any{"-run", "X"}}, "give one of them")

	// One call: the package's test, stopped at the breakpoint.
	at := fmt.Sprintf("stopped at %s:%d in list.TestList (breakpoint)", file, sumLine)
	var st Stopped
	Decode(t, e.Ok(t, map[string]any{"op": "launch", "program": dir, "test": true, "test_run": "^TestList$"},
		"launched the tests of "+dir+" with delve", "-test.run ^TestList$", at, "if sum != 4 {"), &st)
	if st.Stopped == nil || st.Stopped.Path != file || st.Stopped.Line != sumLine {
		t.Fatalf("the stop's structured content = %+v, want %s:%d", st.Stopped, file, sumLine)
	}
	sum := ""
	if l := st.Stopped.Locals; l != nil {
		for _, v := range l.Variables {
			if v.Name == "sum" {
				sum = v.Value
			}
		}
	}
	if sum != "4" { // the list holds 1, "banana" and 3 then: its ints sum to 4, as the test's own check says
		t.Errorf("the stop's local sum = %q, want 4; locals %+v", sum, st.Stopped.Locals)
	}
	e.Ok(t, map[string]any{"op": "evaluate", "expression": "l.len"}, "l.len: int = 3")
	e.Live(t)
	var fr Frames
	Decode(t, e.Ok(t, map[string]any{"op": "stack"}, "#0 list.TestList at "+file), &fr)
	if len(fr.Frames) == 0 || fr.Frames[0].FrameID != st.Stopped.FrameID {
		t.Errorf("stack's top frame %+v, want the stop's frame_id %d", fr.Frames, st.Stopped.FrameID)
	}
	var end Status
	Decode(t, e.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 0)", "PASS"), &end)
	if end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("the test's end = %+v, want exit code 0", end)
	}
	e.Gone(t)

	// A _test.go file as program: its own tests, TestList among them; the
	// breakpoint comes with the launch, in one call.
	e.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": []any{}}, "cleared")
	e.Ok(t, map[string]any{"op": "launch", "program": file, "file": file, "lines": []any{sumLine}},
		"launched the tests of "+dir, "-test.run ^(TestList|", "(the tests of list_test.go)", fmt.Sprintf("line %d: verified", sumLine), at)
	e.Ok(t, map[string]any{"op": "terminate"}, "terminated session")
	e.Gone(t)

	// test_run chooses TestRemove: TestList's breakpoint is not hit; -v is go test's.
	e.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": []any{sumLine, removeLine}}, "pending")
	e.Ok(t, map[string]any{"op": "launch", "program": dir, "test_run": "^TestRemove$", "args": []any{"-v"}},
		fmt.Sprintf("stopped at %s:%d in list.TestRemove (breakpoint)", file, removeLine))
	e.Ok(t, map[string]any{"op": "output"}, "=== RUN   TestRemove")
	e.Ok(t, map[string]any{"op": "terminate"}, "terminated session")
	e.Gone(t)
	e.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": []any{}})
}
