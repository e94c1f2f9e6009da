package lsp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/files"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/lsp/lsptest"
)

// need skips (or under CI fails) when a server binary is not on PATH.
func need(t *testing.T, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not on PATH; tests/run installs it", bin)
		}
		t.Skipf("%s is not on PATH", bin)
	}
}

type hostRun struct {
	dir string
	sb  *host.Sandbox
	reg *tools.Registry
	sup *lsp.Supervisor
}

func newHostRun(t *testing.T, opts lsp.Options) *hostRun {
	t.Helper()
	dir := t.TempDir()
	sb := host.New(host.Options{})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	files.Register(reg, ws)
	opts.Host = true
	sup := lsp.Register(reg, sb, ws, runCtx, opts)
	t.Cleanup(func() {
		if err := sup.Close(); err != nil {
			t.Errorf("supervisor close: %v", err)
		}
		cancel()
		sb.Close()
	})
	return &hostRun{dir: dir, sb: sb, reg: reg, sup: sup}
}

func (h *hostRun) env() lsptest.Env {
	return lsptest.Env{
		Call: func(t *testing.T, tool string, args map[string]any) lsptest.Result {
			t.Helper()
			raw, _ := json.Marshal(args)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := h.reg.Call(ctx, tools.SurfaceDefault, tool, raw)
			if err != nil {
				t.Fatalf("%s %s: call error: %v", tool, raw, err)
			}
			sc, _ := json.Marshal(res.StructuredContent)
			return lsptest.Result{Text: res.AllText(), IsError: res.IsError, Structured: sc}
		},
		Put: func(t *testing.T, name, content string) {
			t.Helper()
			p := filepath.Join(h.dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		Sh: func(t *testing.T, script string) string {
			t.Helper()
			var out bytes.Buffer
			p, err := h.sb.Start(t.Context(), &sandbox.Cmd{Args: []string{"/bin/sh", "-c", script}, Dir: h.dir, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Wait(); err != nil {
				t.Fatal(err)
			}
			return out.String()
		},
	}
}

func TestGoplsOnHost(t *testing.T) {
	need(t, "gopls")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.PutAll(t, lsptest.GoProject)
	e.PutAll(t, lsptest.GoResolveProject)
	t.Run("actions", func(t *testing.T) { lsptest.CheckGo(t, e) })
	t.Run("resolve", func(t *testing.T) { lsptest.CheckResolve(t, e, lsptest.GoResolve) })
	t.Run("write", func(t *testing.T) { lsptest.CheckGoWriteScenario(t, e) })
	t.Run("watched", func(t *testing.T) { lsptest.CheckWatched(t, e) })
	t.Run("rename", func(t *testing.T) { lsptest.CheckGoRename(t, e) })
	t.Run("lifecycle", func(t *testing.T) { lsptest.CheckLifecycle(t, e, "gopls", "main.go", 11, "Hello") })
	t.Run("caps", func(t *testing.T) {
		e.PutAll(t, lsptest.GoCapsProject(60, 210))
		lsptest.CheckGoCaps(t, e, 60, 210, lsp.MaxReferences, lsp.MaxDocumentSymbols, lsp.MaxWorkspaceSymbols)
	})
}

func TestPylspOnHost(t *testing.T) {
	need(t, "pylsp")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.PutAll(t, lsptest.PythonProject)
	e.PutAll(t, lsptest.PythonResolveProject)
	t.Run("actions", func(t *testing.T) { lsptest.CheckPython(t, e) })
	t.Run("resolve", func(t *testing.T) { lsptest.CheckResolve(t, e, lsptest.PythonResolve) })
}

// statusRow is one row of lsp status's structuredContent.
type statusRow struct {
	Server   string `json:"server"`
	Root     string `json:"root"`
	Marker   string `json:"marker"`
	Fallback string `json:"fallback"`
	Binary   string `json:"binary"`
	Missing  string `json:"missing"`
	State    string `json:"state"`
	Pid      int    `json:"pid"`
	Restarts int    `json:"restarts"`
	LastErr  string `json:"last_error"`
}

func status(t *testing.T, e lsptest.Env, file string) map[string]statusRow {
	t.Helper()
	args := map[string]any{"action": "status"}
	if file != "" {
		args["file"] = file
	}
	r := e.Call(t, "lsp", args)
	if r.IsError {
		t.Fatalf("status: %s", r.Text)
	}
	var sc struct {
		Servers []statusRow `json:"servers"`
	}
	if err := json.Unmarshal(r.Structured, &sc); err != nil {
		t.Fatal(err)
	}
	out := map[string]statusRow{}
	for _, s := range sc.Servers {
		out[s.Server] = s
	}
	t.Logf("status %s:\n%s", file, r.Text)
	return out
}

// TestStatusSaysWhichHalfIsMissing: a marker without a binary, a binary
// without a marker, both; and a server binary shipped in the workspace is
// never run on the host, even when the workspace is on PATH.
func TestStatusSaysWhichHalfIsMissing(t *testing.T) {
	need(t, "gopls")
	need(t, "pylsp")
	// The sandbox's PATH holds gopls and pylsp only, whatever else this
	// machine has.
	bin := t.TempDir()
	for _, b := range []string{"gopls", "pylsp"} {
		p, _ := exec.LookPath(b)
		if err := os.Symlink(p, filepath.Join(bin, b)); err != nil {
			t.Fatal(err)
		}
	}
	h := newHostRunIn(t, t.TempDir(), []string{"PATH=" + bin}, lsp.Options{})
	e := h.env()
	e.PutAll(t, lsptest.GoProject)
	e.Put(t, "rs/Cargo.toml", "[package]\nname = \"x\"\n")
	e.Put(t, "rs/src/main.rs", "fn main() {}\n")
	e.Put(t, "py/x.py", "x = 1\n")

	st := status(t, e, "")
	if g := st["gopls"]; g.Missing != "" || g.Marker != "go.mod" || g.Root != "." || g.Binary == "" {
		t.Errorf("gopls: want marker and binary found, got %+v", g)
	}
	// pylsp works without a marker: it falls back to the workspace root.
	if p := st["pylsp"]; p.Missing != "" || p.Root != "." || p.Marker != "" || p.Fallback != "no marker found; pylsp works without one" || p.Binary == "" {
		t.Errorf("pylsp: want the workspace root as its fallback, got %+v", p)
	}
	st = status(t, e, "rs/src/main.rs")
	if r := st["rust-analyzer"]; r.Marker != "Cargo.toml" || r.Root != "rs" || !strings.Contains(r.Missing, "binary missing: no rust-analyzer") || strings.Contains(r.Missing, "marker missing") {
		t.Errorf("rust-analyzer: want only the binary missing, got %+v", r)
	}
	if c := st["clangd"]; c.Fallback == "" || !strings.Contains(c.Missing, "binary missing") || strings.Contains(c.Missing, "marker missing") {
		t.Errorf("clangd (works without a marker): want only the binary missing, got %+v", c)
	}
	r := e.Call(t, "lsp", map[string]any{"action": "hover", "file": "rs/src/main.rs", "line": 1, "symbol": "main"})
	if !r.IsError || !strings.Contains(r.Text, "binary missing: no rust-analyzer") {
		t.Errorf("hover in a Rust project without rust-analyzer: %s", r.Text)
	}
	// A Python file without a marker is served from the workspace root.
	r = e.Call(t, "lsp", map[string]any{"action": "hover", "file": "py/x.py", "line": 1, "symbol": "x"})
	if r.IsError || !strings.Contains(r.Text, `hover of "x"`) {
		t.Errorf("hover in a Python file without a marker: %s", r.Text)
	}
	if st := status(t, e, "py/x.py")["pylsp"]; st.State != "running" || st.Fallback == "" {
		t.Errorf("pylsp for py/x.py: %+v", st)
	}
	// A write no server can diagnose says why, once per reason.
	lsptest.CheckNoServerSaysSo(t, e, "rs/src/lib.rs", "pub fn f() {}\n", "rust-analyzer: binary missing: no rust-analyzer")
}

// TestPythonWithoutMarker: pylsp serves a markerless Python workspace
// from its root.
func TestPythonWithoutMarker(t *testing.T) {
	need(t, "pylsp")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	lsptest.CheckPythonNoMarker(t, e)
	// A server that needs its marker still says that half is missing.
	if _, err := exec.LookPath("gopls"); err == nil {
		if g := status(t, e, "")["gopls"]; g.Binary == "" || g.Fallback != "" || !strings.Contains(g.Missing, "marker missing: none of go.work, go.mod") {
			t.Errorf("gopls without go.mod: want only the marker missing, got %+v", g)
		}
	}
}

// TestWorkspaceBinariesNeverRunOnHost puts a fake gopls and a project venv
// pylsp in the workspace, and the workspace's bin on PATH: neither runs.
func TestWorkspaceBinariesNeverRunOnHost(t *testing.T) {
	need(t, "gopls")
	real, _ := exec.LookPath("gopls")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.PutAll(t, lsptest.GoProject)
	trap := "#!/bin/sh\ntouch \"$(dirname \"$0\")/../RAN\"\nexec " + real + " \"$@\"\n"
	for _, name := range []string{"bin/gopls", ".venv/bin/pylsp"} {
		e.Put(t, name, trap)
		os.Chmod(filepath.Join(h.dir, name), 0o755)
	}
	t.Setenv("PATH", filepath.Join(h.dir, "bin")+":"+os.Getenv("PATH"))
	h2 := newHostRunIn(t, h.dir, nil, lsp.Options{})
	e2 := h2.env()
	e2.Put(t, "setup.py", "")
	st := status(t, e2, "")
	if b := st["gopls"].Binary; b == filepath.Join(h.dir, "bin/gopls") || b == "" {
		t.Errorf("gopls binary = %q, want one outside the workspace", b)
	}
	if b := st["pylsp"].Binary; strings.HasPrefix(b, h.dir) {
		t.Errorf("pylsp binary = %q, inside the workspace", b)
	}
	e2.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"})
	if _, err := os.Stat(filepath.Join(h.dir, "RAN")); err == nil {
		t.Fatal("a server binary from the workspace was run")
	}
}

func newHostRunIn(t *testing.T, dir string, env []string, opts lsp.Options) *hostRun {
	t.Helper()
	sb := host.New(host.Options{Env: env})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	files.Register(reg, ws)
	opts.Host = true
	sup := lsp.Register(reg, sb, ws, runCtx, opts)
	t.Cleanup(func() {
		sup.Close()
		cancel()
		sb.Close()
	})
	return &hostRun{dir: dir, sb: sb, reg: reg, sup: sup}
}

// TestCloseLeavesNoServer: closing the run stops every server it started.
func TestCloseLeavesNoServer(t *testing.T) {
	need(t, "gopls")
	need(t, "pylsp")
	h := newHostRun(t, lsp.Options{})
	e := h.env()
	e.PutAll(t, lsptest.GoProject)
	e.Put(t, "py/setup.py", "")
	e.Put(t, "py/a.py", "def f():\n    return 1\n")
	e.Call(t, "lsp", map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"})
	e.Call(t, "lsp", map[string]any{"action": "hover", "file": "py/a.py", "line": 1, "symbol": "f"})
	var pids []int
	for _, f := range []string{"", "py/a.py"} {
		for _, row := range status(t, e, f) {
			if row.Pid != 0 && !slices.Contains(pids, row.Pid) {
				pids = append(pids, row.Pid)
			}
		}
	}
	if len(pids) != 2 {
		t.Fatalf("want gopls and pylsp running, got pids %v", pids)
	}
	if err := h.sup.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("server pid %d still runs after the run closed", pid)
		}
	}
	r := e.Call(t, "lsp", map[string]any{"action": "status"})
	if !r.IsError || !strings.Contains(r.Text, "closed") {
		t.Errorf("status after close: %s", r.Text)
	}
}

// crashServer is a configured server that exits at once: a real process
// that crashes, for the supervisor's restart and give-up logic.
var crashServer = lsp.Server{ID: "crasher", Languages: map[string]string{".crash": "crash"}, Markers: []string{"crash.toml"},
	Binaries: []string{"sh"}, Args: []string{"-c", "echo 'boom: cannot start' >&2; exit 3"}}

func TestCrashingServerIsGivenUp(t *testing.T) {
	h := newHostRun(t, lsp.Options{Servers: lsp.MergeServers(lsp.DefaultServers(), []lsp.Server{crashServer})})
	e := h.env()
	e.Put(t, "crash.toml", "")
	e.Put(t, "a.crash", "x\n")
	hover := map[string]any{"action": "hover", "file": "a.crash", "line": 1, "symbol": "x"}
	var last string
	for i := 0; i < lsp.MaxCrashes+1; i++ {
		r := e.Call(t, "lsp", hover)
		if !r.IsError {
			t.Fatalf("a crashing server answered: %s", r.Text)
		}
		last = r.Text
	}
	if !strings.Contains(last, "gave up on crasher") || !strings.Contains(last, "reload") {
		t.Fatalf("after %d crashes: %s", lsp.MaxCrashes, last)
	}
	st := status(t, e, "a.crash")["crasher"]
	if !strings.Contains(st.State, "given up") || !strings.Contains(st.LastErr, "boom: cannot start") {
		t.Fatalf("status: %+v", st)
	}
	r := e.Call(t, "lsp", map[string]any{"action": "reload", "file": "a.crash"})
	if !strings.Contains(r.Text, "crasher") {
		t.Fatalf("reload: %s", r.Text)
	}
}

// TestIdleServerIsStopped: an idle server is stopped and the next call
// starts it again.
func TestIdleServerIsStopped(t *testing.T) {
	need(t, "gopls")
	h := newHostRun(t, lsp.Options{IdleTimeout: 500 * time.Millisecond})
	e := h.env()
	e.PutAll(t, lsptest.GoProject)
	hover := map[string]any{"action": "hover", "file": "main.go", "line": 11, "symbol": "Hello"}
	e.Call(t, "lsp", hover)
	// On a loaded machine the server may be stopped before status looks:
	// then there is no pid to watch, and the state says why.
	if pid := status(t, e, "")["gopls"].Pid; pid > 0 {
		deadline := time.Now().Add(20 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Fatalf("idle gopls %d was not stopped", pid)
		}
	}
	if st := status(t, e, "")["gopls"].State; !strings.Contains(st, "idle") {
		t.Errorf("state of the idle server: %q", st)
	}
	if r := e.Call(t, "lsp", hover); r.IsError {
		t.Fatalf("hover after the idle stop: %s", r.Text)
	}
}

// TestWriteWhileStarting: a write that finds the server starting says
// that diagnostics follow, and the next write reports what it introduced.
func TestWriteWhileStarting(t *testing.T) {
	need(t, "gopls")
	h := newHostRun(t, lsp.Options{StartWait: time.Nanosecond})
	e := h.env()
	e.PutAll(t, lsptest.GoProject)
	r := e.Call(t, "edit", map[string]any{"path": "main.go", "old_string": `greet.Hello(e, "world")`, "new_string": `greet.Hello(e)`})
	if r.IsError || !strings.Contains(r.Text, "still starting") {
		t.Fatalf("first write: %s", r.Text)
	}
	e.Call(t, "lsp", map[string]any{"action": "status"})
	deadline := time.Now().Add(time.Minute)
	for status(t, e, "")["gopls"].State != "running" && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	r = e.Call(t, "write", map[string]any{"path": "extra.go", "content": "package main\n"})
	if r.IsError || !strings.Contains(r.Text, "main.go:11:") || !strings.Contains(r.Text, "not enough arguments") {
		t.Fatalf("next write: %s", r.Text)
	}
}

// TestStuckServerFailsInTime: a server that stops answering (SIGSTOP, as a
// deadlock or a pause would) fails a call after the request timeout,
// saying what to do, instead of holding it until the caller gives up; a
// reload starts a server that answers.
//
// The timeout applies to the healthy server's hovers too, so it is no
// tighter than a loaded machine needs for one: a 2 s deadline failed CI's
// hover after the reload at a load of 6–20. A stopped server takes the
// whole timeout, which is the price of the test.
func TestStuckServerFailsInTime(t *testing.T) {
	need(t, "pylsp")
	const timeout = 20 * time.Second
	h := newHostRun(t, lsp.Options{RequestTimeout: timeout})
	e := h.env()
	e.Put(t, "setup.py", "")
	e.Put(t, "a.py", "def f():\n    return 1\n")
	hover := map[string]any{"action": "hover", "file": "a.py", "line": 1, "symbol": "f"}
	if r := e.Call(t, "lsp", hover); r.IsError {
		t.Fatalf("hover: %s", r.Text)
	}
	pid := 0
	for _, row := range status(t, e, "a.py") {
		if row.Server == "pylsp" {
			pid = row.Pid
		}
	}
	if pid == 0 {
		t.Fatal("no pylsp pid in status")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	r := e.Call(t, "lsp", hover)
	if !r.IsError || !strings.Contains(r.Text, "pylsp did not answer hover within "+timeout.String()) || !strings.Contains(r.Text, "reload") {
		t.Fatalf("hover of a stopped server: %+v", r)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	if r := e.Call(t, "lsp", map[string]any{"action": "reload", "file": "a.py"}); r.IsError {
		t.Fatalf("reload: %s", r.Text)
	}
	if r := e.Call(t, "lsp", hover); r.IsError {
		t.Fatalf("hover after reload: %s", r.Text)
	}
}
