package eval_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
