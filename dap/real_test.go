package dap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	godap "github.com/google/go-dap"

	"berth.dev/berth/framing/framingtest"
)

// debianPython is Debian's python3, which has python3-debugpy; the python3
// first on PATH may be another build without Debian's packages.
const debianPython = "/usr/bin/python3"

const realScript = `import sys
def add(a, b):
    total = a + b
    return total
x = 2
y = 3
z = add(x, y)
print("sum", z)
print("err", file=sys.stderr)
`

// TestRealDebugpy drives Debian's debugpy adapter over stdio through a
// whole session. It skips when python3-debugpy is not installed (install it
// with apt-get install python3-debugpy).
func TestRealDebugpy(t *testing.T) {
	if err := exec.Command(debianPython, "-c", "import debugpy").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s cannot import debugpy (%v); CI must install python3-debugpy", debianPython, err)
		}
		t.Skipf("%s cannot import debugpy (%v); install python3-debugpy", debianPython, err)
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "main.py")
	if err := os.WriteFile(prog, []byte(realScript), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(debianPython, "-m", "debugpy.adapter")
	cmd.Env = append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second // the debuggee may hold the adapter's stderr
	stream, err := framingtest.Stdio(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when Wait returns, with waitErr set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() { // on failure: stop the adapter, boundedly
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Errorf("the killed adapter's Wait did not return")
			}
		}
	}()

	var logs strings.Builder
	c := NewClient(stream, Options{Logf: func(f string, a ...any) {
		fmt.Fprintf(&logs, f+"\n", a...)
	}})
	defer c.Close()
	s := NewSession(c, SessionOptions{AdapterID: "debugpy"})
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()

	if _, err := s.SetBreakpoints(ctx, prog, []Breakpoint{{Line: 7}}); err != nil {
		t.Fatal(err)
	}
	err = s.Launch(ctx, map[string]any{
		"program":    prog,
		"cwd":        dir,
		"console":    "internalConsole",
		"justMyCode": true,
		"python":     []string{debianPython},
		"env":        map[string]string{"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
	})
	if err != nil {
		t.Fatalf("launch: %v\nadapter stderr:\n%s", err, stderr.String())
	}
	if bps := s.Breakpoints()[prog]; len(bps) != 1 || !bps[0].Verified || bps[0].ActualLine != 7 {
		t.Errorf("breakpoint results = %+v, want line 7 verified", bps)
	}

	st, err := c.WaitStop(ctx, 0)
	if err != nil || st.Stopped == nil || st.Stopped.Reason != "breakpoint" {
		t.Fatalf("first stop = %+v, %v", st, err)
	}
	tid := st.Stopped.ThreadId
	top := topFrame(t, ctx, c, tid, 7, "<module>")

	scopes, err := c.Scopes(ctx, top.Id)
	if err != nil || len(scopes) == 0 {
		t.Fatalf("scopes = %+v, %v", scopes, err)
	}
	page, err := c.Variables(ctx, scopes[0].VariablesReference, 0)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]godap.Variable{}
	for _, v := range page.Vars {
		vals[v.Name] = v
	}
	if vals["x"].Value != "2" || vals["x"].Type != "int" || vals["y"].Value != "3" {
		t.Errorf("variables of %s = %+v, want x: int = 2 and y = 3", scopes[0].Name, page.Vars)
	}
	if _, ok := vals["z"]; ok {
		t.Errorf("z is already set before line 7 ran: %+v", vals["z"])
	}
	ev, err := c.Evaluate(ctx, "x * 10 + y", top.Id, "")
	if err != nil || ev.Result != "23" {
		t.Errorf("evaluate x * 10 + y = %+v, %v; want 23", ev, err)
	}

	// step in → add's first line; step out → back in the module; next → line 8.
	step := func(name string, f func(context.Context, int) error) {
		t.Helper()
		mark := c.State().Stops
		if err := f(ctx, tid); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		st, err := c.WaitStop(ctx, mark)
		if err != nil || st.Stopped == nil {
			t.Fatalf("%s: state %+v, %v", name, st, err)
		}
	}
	step("stepIn", c.StepIn)
	topFrame(t, ctx, c, tid, 3, "add")
	step("stepOut", c.StepOut)
	f := topFrame(t, ctx, c, tid, 0, "<module>")
	for f.Line == 7 { // stepOut may stop on the call's line before assigning z
		step("next", c.Next)
		f = topFrame(t, ctx, c, tid, 0, "<module>")
	}
	if f.Line != 8 {
		t.Errorf("after next: line %d, want 8", f.Line)
	}
	if ev, err := c.Evaluate(ctx, "z", f.Id, "watch"); err != nil || ev.Result != "5" {
		t.Errorf("evaluate z = %+v, %v; want 5", ev, err)
	}

	mark := c.State().Stops
	if err := c.Continue(ctx, tid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitStop(ctx, mark); err != nil {
		t.Fatal(err)
	}
	st, err = c.WaitFor(ctx, func(s State) bool { return s.Terminated })
	if err != nil || st.Stopped != nil {
		t.Fatalf("after continue: %+v, %v", st, err)
	}
	if st.Exited && st.ExitCode != 0 {
		t.Errorf("exit code %d", st.ExitCode)
	}
	chunks, dropped := c.Output()
	var out, errOut strings.Builder
	for _, ch := range chunks {
		switch ch.Category {
		case "stdout":
			out.WriteString(ch.Text)
		case "stderr":
			errOut.WriteString(ch.Text)
		}
	}
	if !strings.Contains(out.String(), "sum 5") || !strings.Contains(errOut.String(), "err") || dropped != 0 {
		t.Errorf("output: stdout %q, stderr %q, dropped %d", out.String(), errOut.String(), dropped)
	}

	if err := s.Close(ctx, true); err != nil {
		t.Errorf("close: %v", err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("adapter exit: %v\nstderr:\n%s", waitErr, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the adapter is still running 30 s after its stdin closed\nstderr:\n%s", stderr.String())
	}
	if logs.Len() > 0 {
		t.Logf("tolerated protocol oddities:\n%s", logs.String())
	}
}

// topFrame returns the top frame of tid and checks its function name and,
// when line > 0, its line.
func topFrame(t *testing.T, ctx context.Context, c *Client, tid, line int, name string) godap.StackFrame {
	t.Helper()
	frames, _, err := c.StackTrace(ctx, tid, 0)
	if err != nil || len(frames) == 0 {
		t.Fatalf("stackTrace = %+v, %v", frames, err)
	}
	f := frames[0]
	if f.Name != name || (line > 0 && f.Line != line) {
		t.Fatalf("top frame = %s line %d, want %s line %d", f.Name, f.Line, name, line)
	}
	return f
}
