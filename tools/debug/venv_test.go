package debug

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/debug/debugtest"
)

// TestVenvStartupIsAStepOnHost: a workspace venv (pyvenv.cfg, bin/python
// linking to Debian's python) whose site-packages hold a .pth import line
// and a debugpy of its own. Discovery runs none of it (before, the venv's
// python was asked to import debugpy, and the .pth line ran); a launch
// with no gate to ask is refused naming the .pth; approved as a step of
// its own, the program runs under the venv's python with debugpy from
// outside the workspace, and the workspace's debugpy is never imported.
func TestVenvStartupIsAStepOnHost(t *testing.T) {
	needDebugpy(t)
	marks := t.TempDir()
	mark := func(name string) string {
		return "import os; open(" + strconv.Quote(filepath.Join(marks, name)) + ", 'w').close()\n"
	}
	site := ".venv/lib/python3.11/site-packages/"
	f := newFixture(t, map[string]string{
		"requirements.txt":             "",
		"main.py":                      debugtest.PyProgram,
		".venv/bin/python":             "symlink:" + debianPython,
		".venv/pyvenv.cfg":             "home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.11.2\n",
		site + "evil.pth":              mark("pth"),
		site + "debugpy/__init__.py":   mark("venv-debugpy"),
		site + "debugpy/adapter/x.py":  mark("venv-debugpy-adapter"),
		"debugpy/__init__.py":          mark("workspace-debugpy"),
		"debugpy/adapter/__init__.py":  mark("workspace-debugpy-adapter"),
		"debugpy/adapter/__main__.py":  mark("workspace-debugpy-adapter-main"),
		site + "debugpy/launcher/a.py": mark("venv-launcher"),
	}, Options{})
	var (
		mu      sync.Mutex
		approve bool
		steps   []tools.Step
	)
	f.reg.Use(func(_ tools.Tool, next tools.Handler) tools.Handler {
		return func(ctx context.Context, args json.RawMessage) (*tools.Result, error) {
			mu.Lock()
			ok := approve
			mu.Unlock()
			if ok {
				ctx = tools.WithStepApprover(ctx, func(ctx context.Context, s tools.Step) error {
					mu.Lock()
					steps = append(steps, s)
					mu.Unlock()
					return nil
				})
			}
			return next(ctx, args)
		}
	})
	ran := func() []string {
		m, _ := filepath.Glob(filepath.Join(marks, "*"))
		return m
	}

	r := f.Call(t, map[string]any{"op": "adapters"})
	t.Log(r.Text)
	if m := ran(); len(m) > 0 {
		t.Fatalf("discovery ran the workspace's code: %q", m)
	}
	r = f.Call(t, map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true})
	t.Log(r.Text)
	if !r.IsError || !strings.Contains(r.Text, "the workspace venv .venv runs at start: "+site+"evil.pth (import line)") {
		t.Errorf("launch with no gate: want a refusal naming evil.pth, got:\n%s", r.Text)
	}
	if m := ran(); len(m) > 0 {
		t.Fatalf("a refused launch ran the workspace's code: %q", m)
	}

	mu.Lock()
	approve = true
	mu.Unlock()
	r = f.Call(t, map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true})
	t.Log(r.Text)
	if r.IsError {
		t.Fatalf("approved launch failed:\n%s", r.Text)
	}
	f.Ok(t, map[string]any{"op": "terminate"})
	mu.Lock()
	if len(steps) != 1 || steps[0].Level != tools.LevelExec || !strings.Contains(steps[0].Why, "evil.pth (import line)") {
		t.Errorf("steps asked: %+v; want one exec step naming evil.pth", steps)
	}
	mu.Unlock()
	if _, err := os.Stat(filepath.Join(marks, "pth")); err != nil {
		t.Errorf("approved, the debuggee did not run under the venv's python (its .pth line did not run)")
	}
	for _, m := range ran() {
		if b := filepath.Base(m); b != "pth" {
			t.Errorf("the workspace's debugpy was imported: %s", b)
		}
	}
}
