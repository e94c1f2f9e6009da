package eval_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/eval"
)

// trustRun is a host run with eval only, in dir, with PATH set to pathEnv.
func trustRun(t *testing.T, dir, pathEnv string) *tools.Registry {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	sb := host.New(host.Options{Env: append(env, "PATH="+pathEnv)})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	sup := eval.Register(reg, sb, ws, runCtx, eval.Options{}) // Host comes from sb.Ref()
	t.Cleanup(func() {
		sup.Close()
		cancel()
		sb.Close()
	})
	return reg
}

// systemPython has ipykernel on Debian (python3-ipykernel); the python3
// first on PATH may be another build without it.
const systemPython = "/usr/bin/python3"

func cell(t *testing.T, reg *tools.Registry, code string) *tools.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	raw, _ := json.Marshal(map[string]any{"code": code, "description": "print the interpreter of the kernel"})
	res, err := reg.Call(ctx, tools.SurfaceDefault, "eval", raw)
	if err != nil {
		t.Fatalf("eval: call error %v", err)
	}
	return res
}

func needIPyKernel(t *testing.T) {
	t.Helper()
	if exec.Command(systemPython, "-c", "import ipykernel").Run() != nil {
		t.Skipf("%s cannot import ipykernel: apt-get install python3-ipykernel to run this test", systemPython)
	}
}

// TestWorkspacePythonsNeverRunOnHost plants .venv/bin/python and
// venv/bin/python (scripts leaving a mark outside the workspace) and a
// PATH python3 that links to one of them: eval on the host runs none of
// them, says it skipped them, and uses the python3 found after them.
func TestWorkspacePythonsNeverRunOnHost(t *testing.T) {
	needIPyKernel(t)
	dir, marks, bin, bin2 := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	spy := "#!/bin/sh\n: > \"" + marks + "/ran-$$\"\nexit 0\n" // builtins only: it leaves its mark whatever PATH it has
	for _, rel := range []string{".venv/bin/python", "venv/bin/python", "tools/python3"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(spy), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "tools/python3"), filepath.Join(bin, "python3")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(systemPython, filepath.Join(bin2, "python3")); err != nil {
		t.Fatal(err)
	}
	// The workspace's own tools directory on PATH is dropped too.
	reg := trustRun(t, dir, filepath.Join(dir, "tools")+":"+bin+":"+bin2+":/usr/bin:/bin")
	res := cell(t, reg, "import sys; print(sys.executable)")
	text := res.AllText()
	t.Log(text)
	if ran, _ := filepath.Glob(filepath.Join(marks, "ran-*")); len(ran) > 0 {
		t.Errorf("workspace pythons were run on the host: %q", ran)
	}
	// bin's python3 links into the workspace: skipped, and bin2's used.
	for _, want := range []string{
		"skipped .venv/bin/python: it is the workspace's own program",
		"skipped venv/bin/python: it is the workspace's own program",
		"skipped " + filepath.Join(bin, "python3") + " on PATH: it resolves to " + filepath.Join(dir, "tools/python3"),
		filepath.Join(bin2, "python3"),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the result does not say %q", want)
		}
	}
	if res.IsError {
		t.Errorf("eval failed: %s", text)
	}
}

// TestVenvLinkedOutsideIsUsedOnHost: a .venv/bin/python linking to the
// system's python3 is the kernel's interpreter on the host, and named.
func TestVenvLinkedOutsideIsUsedOnHost(t *testing.T) {
	needIPyKernel(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".venv/bin"), 0o755)
	if err := os.Symlink(systemPython, filepath.Join(dir, ".venv/bin/python")); err != nil {
		t.Fatal(err)
	}
	reg := trustRun(t, dir, "/usr/bin:/bin")
	res := cell(t, reg, "import sys; print(sys.executable)")
	text := res.AllText()
	t.Log(text)
	real, _ := filepath.EvalSymlinks(systemPython)
	if res.IsError || !strings.Contains(text, "python: .venv/bin/python → "+real) || !strings.Contains(text, filepath.Join(dir, ".venv/bin/python")) {
		t.Errorf("want the kernel on .venv/bin/python, named as resolving to %s; got %s", real, text)
	}
}

// plantVenv makes dir/.venv a virtualenv of the system's python (pyvenv.cfg,
// bin/python linking to it) whose site-packages hold evil.pth, an import
// line that creates marker, and returns marker.
func plantVenv(t *testing.T, dir string) string {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "pth-ran")
	site := filepath.Join(dir, ".venv/lib/python3.11/site-packages")
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, ".venv/bin"), 0o755)
	if err := os.Symlink(systemPython, filepath.Join(dir, ".venv/bin/python")); err != nil {
		t.Fatal(err)
	}
	cfg := "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.11.2\n"
	if err := os.WriteFile(filepath.Join(dir, ".venv/pyvenv.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	pth := "import os; open(" + strconv.Quote(marker) + ", 'w').close()\n"
	if err := os.WriteFile(filepath.Join(site, "evil.pth"), []byte(pth), 0o644); err != nil {
		t.Fatal(err)
	}
	return marker
}

// TestVenvStartupIsAStepOnHost: a workspace venv whose site-packages hold
// a .pth import line is not started without a step of its own: with no
// gate to ask (fail closed) the kernel does not start and the line never
// runs (before, it ran in the ipykernel probe and in the kernel); approved,
// the kernel runs with the venv's python, berth's Python kernel.
func TestVenvStartupIsAStepOnHost(t *testing.T) {
	dir := t.TempDir()
	marker := plantVenv(t, dir)
	reg := trustRun(t, dir, "/usr/bin:/bin")
	res := cell(t, reg, "print(1 + 1)")
	text := res.AllText()
	t.Log(text)
	if _, err := os.Stat(marker); err == nil {
		t.Fatalf("the venv's .pth import line ran on the host without a step of its own")
	}
	if !res.IsError || !strings.Contains(text, "the workspace venv .venv runs at start: .venv/lib/python3.11/site-packages/evil.pth (import line)") {
		t.Errorf("want the kernel refused, naming evil.pth; got %s", text)
	}

	var steps []tools.Step
	reg2 := trustRun(t, dir, "/usr/bin:/bin")
	reg2.Use(func(_ tools.Tool, next tools.Handler) tools.Handler {
		return func(ctx context.Context, args json.RawMessage) (*tools.Result, error) {
			ctx = tools.WithStepApprover(ctx, func(ctx context.Context, s tools.Step) error {
				steps = append(steps, s)
				return nil
			})
			return next(ctx, args)
		}
	})
	res = cell(t, reg2, "import sys; print(sys.executable, 1 + 1)")
	text = res.AllText()
	t.Log(text)
	if res.IsError || !strings.Contains(text, filepath.Join(dir, ".venv/bin/python")+" 2") {
		t.Errorf("approved: want the cell run on the venv's python; got %s", text)
	}
	if len(steps) != 1 || steps[0].Level != tools.LevelExec || !strings.Contains(steps[0].Why, "evil.pth (import line)") {
		t.Errorf("steps asked: %+v; want one exec step naming evil.pth", steps)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("approved, the .pth line did not run: the kernel did not use the venv")
	}
}

// TestWorkspaceIPykernelLauncherNotImported: python -m ipykernel_launcher
// in the workspace would import a workspace ipykernel_launcher.py (python
// -m puts the current directory first on its path); ipykernel is started
// from a file in the kernel's private directory instead.
func TestWorkspaceIPykernelLauncherNotImported(t *testing.T) {
	needIPyKernel(t)
	dir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "launcher-ran")
	for _, name := range []string{"ipykernel_launcher.py", "sitecustomize.py"} {
		src := "open(" + strconv.Quote(marker) + ", 'a').write(" + strconv.Quote(name+"\n") + ")\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := t.TempDir()
	if err := os.Symlink(systemPython, filepath.Join(bin, "python3")); err != nil {
		t.Fatal(err)
	}
	reg := trustRun(t, dir, bin+":/usr/bin:/bin")
	res := cell(t, reg, "import ipykernel, os; print(os.getcwd(), ipykernel.__file__)")
	text := res.AllText()
	t.Log(text)
	if ran, err := os.ReadFile(marker); err == nil {
		t.Errorf("the workspace's %q ran at the kernel's start", ran)
	}
	if res.IsError || !strings.Contains(text, dir+" /usr/lib/python3/dist-packages/ipykernel/") {
		t.Errorf("want ipykernel from the system, in the workspace; got %s", text)
	}
}
