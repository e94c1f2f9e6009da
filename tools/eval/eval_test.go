package eval_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/eval"
	"berth.dev/berth/tools/eval/evaltest"
	"berth.dev/berth/tools/files"
)

// hostRun is a run on the host with the file tools, eval, and a slow tool
// for the bridge's budget check.
type hostRun struct {
	dir string
	reg *tools.Registry
	sup *eval.Supervisor
}

func newHostRun(t *testing.T, path string, opts eval.Options) *hostRun {
	t.Helper()
	dir := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+path)
	sb := host.New(host.Options{Env: env})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	files.Register(reg, ws)
	type slowIn struct{}
	tools.Register(reg, tools.Tool{Name: "slow", Level: tools.LevelRead, Description: "sleeps 3 seconds (test tool)"}, func(ctx context.Context, _ slowIn) (*tools.Result, error) {
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return tools.Text("slept"), nil
	})
	sup := eval.Register(reg, sb, ws, runCtx, opts)
	t.Cleanup(func() {
		if err := sup.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		cancel()
		sb.Close()
	})
	return &hostRun{dir: dir, reg: reg, sup: sup}
}

func (h *hostRun) env() evaltest.Env {
	return evaltest.Env{
		Call: func(t *testing.T, tool string, args map[string]any) evaltest.Result {
			t.Helper()
			raw, _ := json.Marshal(args)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := h.reg.Call(ctx, tools.SurfaceDefault, tool, raw)
			if err != nil {
				t.Fatalf("%s: call error: %v", tool, err)
			}
			var r evaltest.Result
			for _, c := range res.Content {
				switch c.Type {
				case "text":
					r.Text += c.Text + "\n"
				case "image":
					r.Images = append(r.Images, c.Data)
				}
			}
			r.IsError = res.IsError
			r.Structured, _ = json.Marshal(res.StructuredContent)
			return r
		},
		Put: func(t *testing.T, name, content string) {
			p := filepath.Join(h.dir, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func need(t *testing.T, what string, ok bool) {
	t.Helper()
	if !ok {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing; tests/run installs it", what)
		}
		t.Skipf("%s is missing", what)
	}
}

func debianPython(t *testing.T, modules ...string) {
	t.Helper()
	for _, m := range modules {
		err := exec.Command("/usr/bin/python3", "-c", "import "+m).Run()
		need(t, "Debian's python3-"+m, err == nil)
	}
}

// TestIPykernelOnHost: Debian's python3 with ipykernel, pandas, matplotlib
// and pip.
func TestIPykernelOnHost(t *testing.T) {
	debianPython(t, "ipykernel", "pandas", "matplotlib", "pip")
	h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
	e := h.env()
	e.Cell(t, "python", "", "ipykernel")
	evaltest.CheckPython(t, e, true, true)
	evaltest.CheckBudget(t, newHostRun(t, "/usr/bin:/bin", eval.Options{Budget: 2 * time.Second}).env(), "python", "slow")
}

// noIPykernelPython makes a python3 without site-packages (so without
// ipykernel) first on PATH: eval must bring its own kernel.
func noIPykernelPython(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "python3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin + ":/usr/bin:/bin"
}

// TestBundledPythonOnHost: a python without ipykernel gets berth's kernel.
func TestBundledPythonOnHost(t *testing.T) {
	_, err := os.Stat("/usr/bin/python3")
	need(t, "/usr/bin/python3", err == nil)
	path := noIPykernelPython(t)
	h := newHostRun(t, path, eval.Options{})
	e := h.env()
	e.Cell(t, "python", "", "berth's Python kernel")
	evaltest.CheckPython(t, e, false, false)
	evaltest.CheckBudget(t, newHostRun(t, path, eval.Options{Budget: 2 * time.Second}).env(), "python", "slow")
}

// TestJavaScriptOnHost: node gets berth's JavaScript kernel.
func TestJavaScriptOnHost(t *testing.T) {
	_, err := exec.LookPath("node")
	need(t, "node", err == nil)
	h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
	e := h.env()
	e.Cell(t, "javascript", "", "berth's JavaScript kernel")
	evaltest.CheckJavaScript(t, e)
	evaltest.CheckBudget(t, newHostRun(t, "/usr/bin:/bin", eval.Options{Budget: 2 * time.Second}).env(), "javascript", "slow")
}

func TestDescriptionIsRequired(t *testing.T) {
	h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
	raw, _ := json.Marshal(map[string]any{"code": "1", "description": "too short"})
	res, err := h.reg.Call(t.Context(), tools.SurfaceDefault, "eval", raw)
	if err != nil || !res.IsError || !strings.Contains(res.AllText(), "5 to 10 words") {
		t.Fatalf("%v %v", err, res.AllText())
	}
}

// TestAbandonedCellIsInterrupted: a caller that goes away mid-cell does
// not leave the next call stuck behind the cell.
func TestAbandonedCellIsInterrupted(t *testing.T) {
	h := newHostRun(t, noIPykernelPython(t), eval.Options{})
	e := h.env()
	e.Cell(t, "python", "x = 7")
	raw, _ := json.Marshal(map[string]any{"code": "import time\ntime.sleep(120)", "description": "sleep long enough to be abandoned"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := h.reg.Call(ctx, tools.SurfaceDefault, "eval", raw); err == nil {
		t.Fatal("the abandoned call returned no error")
	}
	start := time.Now()
	e.Cell(t, "python", "x * 6", "42")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the next cell waited %v behind the abandoned one", d)
	}
}

// TestDeadKernelIsRestartedWithANote: a kernel killed between calls is
// reported, and the next call runs in a new one.
func TestDeadKernelIsRestartedWithANote(t *testing.T) {
	h := newHostRun(t, noIPykernelPython(t), eval.Options{})
	e := h.env()
	e.Cell(t, "python", "import os\nx = 1\nprint(os.getpid())")
	r := e.Cell(t, "python", "os.getpid()")
	pid := strings.TrimSpace(strings.Split(r.Text, "\n")[0])
	if err := exec.Command("kill", "-9", pid).Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	r = e.Cell(t, "python", "'x' in dir()", "False", "had died", "state", "lost")
	_ = r
}

// TestWallLimit: an operator's wall limit ends a cell that keeps printing.
func TestWallLimit(t *testing.T) {
	h := newHostRun(t, noIPykernelPython(t), eval.Options{WallLimit: 2 * time.Second})
	e := h.env()
	e.Fails(t, "python", "import time\nfor i in range(40):\n    print(i, flush=True)\n    time.sleep(0.25)", "interrupted", "limit for one cell", "survived")
	e.Cell(t, "python", "1+1", "2")
}

// droppedRE reads the note on dropped output.
var droppedRE = regexp.MustCompile(`\[… ([0-9,]+) bytes of output dropped \((?:kept the first ([0-9,]+) and last ([0-9,]+)|kept none of it)(?:; the kernel dropped ([0-9,]+) of them[^)]*)?\)`)

// TestDroppedOutputIsCounted: a cell that writes 70 MB at once — more
// than berth's bundled kernel buffers towards berth, which used to drop
// it whole and report "(no output)" — says how many bytes were dropped,
// and what it kept plus what it dropped is exactly what the cell wrote,
// however the loss splits between the kernel's buffer and berth's bound.
func TestDroppedOutputIsCounted(t *testing.T) {
	h := newHostRun(t, noIPykernelPython(t), eval.Options{})
	e := h.env()
	const n = 70_000_000
	for _, code := range []string{
		fmt.Sprintf("import sys\n_ = sys.stdout.write('x' * %d)", n),
		fmt.Sprintf("for i in range(%d):\n    print('y' * 99999)", n/100_000),
	} {
		r := e.Cell(t, "python", code, "bytes of output dropped")
		if strings.Contains(r.Text, "(no output)") {
			t.Fatalf("output was produced, and the result says (no output): %.300s", r.Text)
		}
		m := droppedRE.FindStringSubmatch(r.Text)
		if m == nil {
			t.Fatalf("no note on dropped output: %.300s", r.Text)
		}
		num := func(s string) int64 {
			v, _ := strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
			return v
		}
		dropped, first, last, lost := num(m[1]), num(m[2]), num(m[3]), num(m[4])
		t.Logf("dropped %d (the kernel %d), kept %d + %d", dropped, lost, first, last)
		if dropped+first+last != n {
			t.Errorf("dropped %d + kept %d + %d = %d bytes, want the %d the cell wrote", dropped, first, last, dropped+first+last, n)
		}
	}
	e.Cell(t, "python", "1+1", "2") // the kernel still answers
}

// TestNextCellWaitsForAbandonedOne: a cell that its caller abandoned and
// that ignores the interrupt makes berth replace the kernel; the next
// call waits for that verdict and runs in the new kernel, instead of
// running into the old one and being blamed for its death.
func TestNextCellWaitsForAbandonedOne(t *testing.T) {
	h := newHostRun(t, noIPykernelPython(t), eval.Options{InterruptWait: 2 * time.Second})
	e := h.env()
	e.Cell(t, "python", "x = 7")
	raw, _ := json.Marshal(map[string]any{"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('deaf', flush=True)\ntime.sleep(120)", "description": "a cell deaf to interrupts, abandoned"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := h.reg.Call(ctx, tools.SurfaceDefault, "eval", raw); err == nil {
		t.Fatal("the abandoned call returned no error")
	}
	r := e.Cell(t, "python", "6 * 7", "42")
	if strings.Contains(r.Text, "died while running the cell") {
		t.Errorf("the next cell was blamed for the abandoned one:\n%s", r.Text)
	}
	if !strings.Contains(r.Text, "did not stop the cell abandoned by an earlier call") {
		t.Errorf("the next cell does not say the kernel was replaced:\n%s", r.Text)
	}
}

// TestCellNotTakenRunsOnNewKernel: a kernel that died (hung: SIGSTOP, so
// its process lives on and only its heartbeat tells) before it took the
// next cell is not blamed for the cell: the cell runs once on a new
// kernel, and the result says the old kernel's state was lost. Before,
// the call ended with "the python kernel died while running the cell".
func TestCellNotTakenRunsOnNewKernel(t *testing.T) {
	debianPython(t, "ipykernel")
	h := newHostRun(t, "/usr/bin:/bin", eval.Options{})
	e := h.env()
	for _, sig := range []string{"-STOP", "-KILL"} {
		r := e.Cell(t, "python", "import os\nx = 1\nprint(os.getpid())")
		pid := strings.TrimSpace(strings.Split(r.Text, "\n")[0])
		if err := exec.Command("kill", sig, pid).Run(); err != nil {
			t.Fatal(err)
		}
		r = e.Cell(t, "python", "print('x' in dir())", "False", "state", "lost")
		if strings.Contains(r.Text, "died while running the cell") {
			t.Errorf("kill %s: the cell was blamed for the kernel's death:\n%s", sig, r.Text)
		}
		if sig == "-STOP" && !strings.Contains(r.Text, "had died before it took the cell") {
			t.Errorf("kill %s: the result does not say the cell ran on a new kernel:\n%s", sig, r.Text)
		}
		t.Logf("kill %s: %s", sig, r.Text)
	}
}

// TestStopAfterRunEndIsPrompt: when a run ends, its context is canceled
// first (the kernel gets SIGTERM) and its supervisor closed after. Close
// must not then wait the shutdown grace for a shutdown_reply from a kernel
// whose process has already ended.
func TestStopAfterRunEndIsPrompt(t *testing.T) {
	debianPython(t, "ipykernel")
	dir := t.TempDir()
	sb := host.New(host.Options{Env: []string{"PATH=/usr/bin:/bin"}})
	defer sb.Close()
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := tools.NewRegistry()
	sup := eval.Register(reg, sb, ws, runCtx, eval.Options{})
	raw, _ := json.Marshal(map[string]any{"code": "import os\nprint(os.getpid())", "description": "start a kernel to stop it later"})
	res, err := reg.Call(t.Context(), tools.SurfaceDefault, "eval", raw)
	if err != nil || res.IsError {
		t.Fatalf("%v %s", err, res.AllText())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.AllText()))
	if err != nil {
		t.Fatalf("pid %q: %v", res.AllText(), err)
	}
	cancel() // the run ends: the kernel gets SIGTERM
	start := time.Now()
	// The kernel's process ends (it is not reaped by this test: poll it).
	for exec.Command("kill", "-0", strconv.Itoa(pid)).Run() == nil {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the kernel did not exit on SIGTERM within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	exited := time.Since(start)
	if err := sup.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	took := time.Since(start)
	t.Logf("the kernel exited %v after the run's end; Close returned %v after it", exited.Round(time.Millisecond), (took - exited).Round(time.Millisecond))
	if took-exited >= eval.ShutdownWait {
		t.Errorf("Close took %v after the kernel had exited: it waited the shutdown grace (%v) for a dead kernel", took-exited, eval.ShutdownWait)
	}
}

// kernelDir reads the private directory of the kernel with pid from its
// command line (… -f DIR/conn.json).
func kernelDir(t *testing.T, pid string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "-f" && i+1 < len(args) && strings.HasPrefix(args[i+1], "/tmp/berth-kernel.") {
			return filepath.Dir(args[i+1])
		}
	}
	t.Fatalf("no connection file in the kernel's command line %q", args)
	return ""
}

// TestKernelDirGoesWithKernel: the kernel's private directory (connection
// file with its key, sockets, berth's kernel source) is removed when the
// kernel ends: replaced after it died, and when the run closes.
func TestKernelDirGoesWithKernel(t *testing.T) {
	h := newHostRun(t, noIPykernelPython(t), eval.Options{})
	e := h.env()
	pid := func() string {
		r := e.Cell(t, "python", "import os\nprint(os.getpid())")
		for _, l := range strings.Split(r.Text, "\n") {
			if _, err := strconv.Atoi(strings.TrimSpace(l)); err == nil {
				return strings.TrimSpace(l)
			}
		}
		t.Fatalf("no pid in %q", r.Text)
		return ""
	}
	p := pid()
	dir := kernelDir(t, p)
	if _, err := os.Stat(filepath.Join(dir, "conn.json")); err != nil {
		t.Fatalf("the kernel's directory: %v", err)
	}
	if err := exec.Command("kill", "-9", p).Run(); err != nil {
		t.Fatal(err)
	}
	p2 := pid() // runs on a new kernel
	dir2 := kernelDir(t, p2)
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dead kernel's directory %s is still there (%v)", dir, err)
	}
	if err := h.sup.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir2); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the closed run's kernel directory %s is still there (%v)", dir2, err)
	}
}

// TestLibraryFramesLeftOut: an error raised deep in the standard library
// shows the cell's frame, the frame that raised it and the error, and
// counts the library frames between them instead of printing them — with
// ipykernel and with berth's own kernel.
func TestLibraryFramesLeftOut(t *testing.T) {
	debianPython(t, "ipykernel")
	for _, c := range []struct {
		name, path string
	}{
		{"ipykernel", "/usr/bin:/bin"},
		{"berth's Python kernel", noIPykernelPython(t)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newHostRun(t, c.path, eval.Options{}).env()
			e.Cell(t, "python", "", c.name)
			r := e.Fails(t, "python", "import json\nconfig = json.loads('{\"a\": 1,')",
				"config = json.loads", "[… 2 frames in libraries left out: json/__init__.py, json/decoder.py …]", "raw_decode", "JSONDecodeError")
			if strings.Contains(r.Text, "in loads") || strings.Contains(r.Text, "in decode") {
				t.Errorf("the frames between the cell and the raise are shown:\n%s", r.Text)
			}
		})
	}
}
