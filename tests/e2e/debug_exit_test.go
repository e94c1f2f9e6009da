package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/debug/debugtest"
)

// exitCase is a program that exits with code 3, debugged in a container.
type exitCase struct {
	image    string
	optional bool              // the image may be missing (berth-test-go)
	files    map[string]string // the workspace, beside the container's own
	program  string            // as launch takes it
	file     string            // the breakpoint's file
	line     int
	adapter  string
	exitStop string   // the stop before the end, if the adapter makes one
	live     string   // a process that runs during the session
	words    []string // what no process may name after the session
}

// TestDebugExitPythonInContainer: under debugpy in berth-test-python
// (--network none), a program that exits with code 3 closes its session:
// the continue and later status say "the program exited (code 3)" with
// the end of its output, debugpy, its launcher and the program are gone
// with no zombie left in the container, the conversation's debug claim
// is given back (another run of the conversation can launch), and the
// next launch works.
func TestDebugExitPythonInContainer(t *testing.T) {
	checkExitInContainer(t, exitCase{
		image:    "berth-test-python",
		files:    map[string]string{"requirements.txt": "", "app/exit.py": debugtest.PyExit},
		program:  "app/exit.py",
		file:     "app/exit.py",
		line:     debugtest.PyExitLine,
		adapter:  "debugpy",
		exitStop: debugtest.PyExitStop,
		live:     "debugpy.adapter",
		words:    []string{"debugpy", "app/exit.py"},
	})
}

// TestDebugExitGoInContainer is [TestDebugExitPythonInContainer] under
// delve in berth-test-go; the session's build directory
// (/tmp/berth-debug-*) goes with it too. It skips when the image was not
// built.
func TestDebugExitGoInContainer(t *testing.T) {
	checkExitInContainer(t, exitCase{
		image:    "berth-test-go",
		optional: true,
		files:    map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n", "exit/main.go": debugtest.GoExit},
		program:  "exit",
		file:     "exit/main.go",
		line:     debugtest.GoExitLine,
		adapter:  "delve",
		live:     "dlv",
		words:    []string{"dlv", "__debug_bin"},
	})
}

func checkExitInContainer(t *testing.T, c exitCase) {
	needImage(t, c.image, c.optional)
	ctr := startContainer(t, c.image)
	for name, content := range c.files {
		ctr.put(t, name, content)
	}
	tmpBefore := tmpEntries(t, ctr)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	other, _ := a.open(ctr.conv) // a second run of the same conversation
	e := debugEnv(a, run, ctr, c.live, c.words...)
	gone := e.Gone
	e.Gone = func(t *testing.T) {
		t.Helper()
		gone(t)
		noScratch(t, ctr)
	}
	e.Reaped = func(t *testing.T) {
		t.Helper()
		noZombies(t, ctr)
	}
	o := debugEnv(a, other, ctr, c.live, c.words...)

	// The conversation's claim: held while the program runs, given back
	// by its end without terminate.
	e.Ok(t, map[string]any{"op": "breakpoints", "file": c.file, "lines": []any{c.line}})
	e.Ok(t, map[string]any{"op": "launch", "program": c.program}, fmt.Sprintf("stopped at %s:%d", c.file, c.line))
	o.Fails(t, map[string]any{"op": "launch", "program": c.program}, "only one debug session per conversation", "in run "+run)
	if c.exitStop != "" {
		e.Ok(t, map[string]any{"op": "continue"}, c.exitStop)
	}
	e.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 3)")
	e.Gone(t)
	e.Reaped(t)
	o.Ok(t, map[string]any{"op": "breakpoints", "file": c.file, "lines": []any{c.line}})
	o.Ok(t, map[string]any{"op": "launch", "program": c.program}, fmt.Sprintf("stopped at %s:%d", c.file, c.line))
	o.Ok(t, map[string]any{"op": "terminate"}, "terminated session")
	e.Gone(t)

	debugtest.CheckExit(t, e, c.program, c.file, c.line, c.adapter, c.exitStop)

	// Nothing the sessions made is left in /tmp (berth's own agent
	// directory, /tmp/.berth, aside).
	for _, p := range tmpEntries(t, ctr) {
		if !slices.Contains(tmpBefore, p) && !strings.HasPrefix(p, "/tmp/.berth") {
			t.Errorf("left in the container's /tmp after the sessions: %s", p)
		}
	}
}

// tmpEntries lists what /tmp holds in the container.
func tmpEntries(t *testing.T, ctr *container) []string {
	t.Helper()
	return strings.Fields(ctr.sh(t, "for f in /tmp/* /tmp/.[!.]*; do [ -e \"$f\" ] && echo \"$f\"; done; true"))
}

// noScratch waits until no session directory (/tmp/berth-debug-*) is
// left in the container.
func noScratch(t *testing.T, ctr *container) {
	t.Helper()
	var left string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = strings.TrimSpace(ctr.sh(t, "ls -d /tmp/berth-debug-* 2>/dev/null || true")); left == "" {
			return
		}
	}
	t.Errorf("session directories left in the container: %s", left)
}

// noZombies waits until no process in the container is a zombie (state Z
// in /proc/PID/stat), read with the test's own exec.
func noZombies(t *testing.T, ctr *container) {
	t.Helper()
	var z []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if z = zombies(t, ctr); len(z) == 0 {
			return
		}
	}
	t.Errorf("zombies in the container: %v", z)
}

// zombies lists the container's zombie processes as "PID (COMM) parent
// PPID".
func zombies(t *testing.T, ctr *container) []string {
	t.Helper()
	out := ctr.sh(t, `for s in /proc/[0-9]*/stat; do cat "$s" 2>/dev/null; echo; done`)
	var z []string
	for _, l := range strings.Split(out, "\n") {
		lp, rp := strings.IndexByte(l, '('), strings.LastIndexByte(l, ')')
		if lp < 0 || rp < lp {
			continue
		}
		f := strings.Fields(l[rp+1:])
		if len(f) > 1 && f[0] == "Z" {
			z = append(z, fmt.Sprintf("%s %s parent %s", strings.TrimSpace(l[:lp]), l[lp:rp+1], f[1]))
		}
	}
	return z
}
