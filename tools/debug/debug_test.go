package debug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/debug/debugtest"
	"berth.dev/berth/tools/internal/proc"
)

// debianPython is Debian's python3, which has python3-debugpy; the python3
// first on PATH may be another build without it.
const debianPython = "/usr/bin/python3"

// unavailable skips, or fails when CI=true.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// fixture is a host sandbox with a temporary workspace and a debug tool;
// its Env drives the tool through the registry and watches the session's
// processes on the host.
type fixture struct {
	debugtest.Env
	dir string
	sb  *host.Sandbox
	sup *Supervisor
	reg *tools.Registry
	// progress, when set, receives the calls' progress notes.
	progress tools.ProgressFunc
}

func newFixture(t *testing.T, files map[string]string, opts Options) *fixture {
	t.Helper()
	return newFixturePath(t, files, opts, "")
}

// newFixturePath is newFixture with the sandbox's PATH set to pathEnv, in
// which WS stands for the workspace; "" keeps berth's own environment.
func newFixturePath(t *testing.T, files map[string]string, opts Options, pathEnv string) *fixture {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		put(t, dir, name, content)
	}
	var env []string
	if pathEnv != "" {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		env = append(env, "PATH="+strings.ReplaceAll(pathEnv, "WS", dir))
	}
	sb := host.New(host.Options{Env: env})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	sup := Register(reg, sb, ws, runCtx, opts)
	f := &fixture{dir: dir, sb: sb, sup: sup, reg: reg}
	f.Env = f.env()
	t.Cleanup(func() {
		if err := sup.Close(); err != nil {
			t.Errorf("supervisor close: %v", err)
		}
		cancel()
		sb.Close()
	})
	return f
}

// env is the checks' Env on the host. Live and Gone follow the adapter's
// pid and the processes whose command line names the workspace; Kill
// kills the adapter's pid.
func (f *fixture) env() debugtest.Env {
	var pid int
	return debugtest.Env{
		Call: f.call,
		Live: func(t *testing.T) {
			t.Helper()
			if pid = f.session().pid; !alive(pid) {
				t.Fatalf("adapter pid %d is not alive", pid)
			}
		},
		Gone: func(t *testing.T) {
			t.Helper()
			if alive(pid) {
				t.Errorf("adapter pid %d still alive after terminate", pid)
			}
			if p := lingering(f.dir); len(p) > 0 {
				t.Errorf("processes left after terminate: %v", p)
			}
		},
		Reaped: func(t *testing.T) {
			t.Helper()
			var z []string
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if z = zombiesUnder(os.Getpid()); len(z) == 0 {
					return
				}
			}
			t.Errorf("zombies under the test process (berth): %v", z)
		},
		Kill: func(t *testing.T) {
			t.Helper()
			pid := f.session().pid
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(time.Minute); alive(pid); {
				if time.Now().After(deadline) {
					t.Fatal("the killed adapter is still alive")
				}
				time.Sleep(50 * time.Millisecond)
			}
		},
	}
}

// call calls the debug tool through the registry.
func (f *fixture) call(t *testing.T, args map[string]any) debugtest.Result {
	t.Helper()
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if f.progress != nil {
		ctx = tools.WithProgress(ctx, f.progress)
	}
	res, err := f.reg.Call(ctx, tools.SurfaceDefault, "debug", raw)
	if err != nil {
		t.Fatalf("debug %s: call error: %v", raw, err)
	}
	r := debugtest.Result{Text: res.AllText(), IsError: res.IsError}
	if res.StructuredContent != nil {
		if r.Structured, err = json.Marshal(res.StructuredContent); err != nil {
			t.Fatalf("debug %s: structured content: %v", raw, err)
		}
	}
	return r
}

// put writes the file name under dir: content "symlink:TARGET" makes a
// link, and a script starting with "#!" is executable.
func put(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if target, ok := strings.CutPrefix(content, "symlink:"); ok {
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return
	}
	mode := os.FileMode(0o644)
	if strings.HasPrefix(content, "#!") {
		mode = 0o755
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// write adds a file to the workspace, as put does.
func (f *fixture) write(t *testing.T, name, content string) { put(t, f.dir, name, content) }

func (f *fixture) session() *session {
	f.sup.mu.Lock()
	defer f.sup.mu.Unlock()
	return f.sup.cur
}

// alive reports whether a host process exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	return len(f) > 2 && f[2] != "Z"
}

// stat is the part of /proc/PID/stat the tests read.
type stat struct {
	pid, ppid int
	state     string
	comm      string
}

// readStat reads /proc/PID/stat; ok is false when the process is gone.
func readStat(pid int) (st stat, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, false
	}
	// comm is in parentheses and may hold spaces: the fields follow the
	// last ')'.
	s := string(data)
	lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if lp < 0 || rp < lp {
		return st, false
	}
	f := strings.Fields(s[rp+1:])
	if len(f) < 2 {
		return st, false
	}
	st.pid, st.comm, st.state = pid, s[lp+1:rp], f[0]
	fmt.Sscanf(f[1], "%d", &st.ppid)
	return st, true
}

// zombiesUnder lists the zombie processes that descend from pid.
func zombiesUnder(pid int) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var p int
		if _, err := fmt.Sscanf(e.Name(), "%d", &p); err != nil {
			continue
		}
		st, ok := readStat(p)
		if !ok || st.state != "Z" {
			continue
		}
		for a, hops := st.ppid, 0; a > 1 && hops < 64; hops++ {
			if a == pid {
				out = append(out, fmt.Sprintf("%d (%s), parent %d", st.pid, st.comm, st.ppid))
				break
			}
			up, ok := readStat(a)
			if !ok {
				break
			}
			a = up.ppid
		}
	}
	return out
}

// processesWith lists host processes whose command line contains s.
// lingerWait bounds how long the supervisor of an ended adapter may take
// to follow it (it reports the exit first, then sweeps and exits): not a
// speed claim, room for a loaded machine.
const lingerWait = 10 * time.Second

// lingering returns the processes whose command line names s that are
// still there after lingerWait, or none as soon as none is.
func lingering(s string) []string {
	p := processesWith(s)
	for deadline := time.Now().Add(lingerWait); len(p) > 0 && time.Now().Before(deadline); p = processesWith(s) {
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

// scratches are the scratch directories this test process's sessions
// made (testScratch).
var scratches struct {
	sync.Mutex
	dirs []string
}

func init() {
	testScratch = func(dir string) {
		scratches.Lock()
		defer scratches.Unlock()
		scratches.dirs = append(scratches.dirs, dir)
	}
}

// ourScratches returns the scratch directories this process's sessions
// made that still exist.
func ourScratches() []string {
	scratches.Lock()
	defer scratches.Unlock()
	var left []string
	for _, d := range scratches.dirs {
		if _, err := os.Stat(d); err == nil {
			left = append(left, d)
		}
	}
	return left
}

// ourDebuggees lists the running programs delve built for this process's
// sessions (a __debug_bin in one of their scratch directories); another
// test process's on the machine are not counted.
func ourDebuggees() []string {
	scratches.Lock()
	dirs := slices.Clone(scratches.dirs)
	scratches.Unlock()
	var out []string
	for _, p := range processesWith("__debug_bin") {
		for _, d := range dirs {
			if strings.Contains(p, d+"/") {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

func processesWith(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !alive(pid) {
			continue
		}
		cmd := strings.ReplaceAll(string(data), "\x00", " ")
		if strings.Contains(cmd, s) {
			out = append(out, e.Name()+" "+cmd)
		}
	}
	return out
}

// ---- unit tests ----

func TestInputValidation(t *testing.T) {
	f := newFixture(t, map[string]string{"main.py": "print(1)\n", "requirements.txt": ""}, Options{})
	tests := []struct {
		name  string
		args  map[string]any
		wants []string
	}{
		{"empty op", map[string]any{"op": " "}, []string{"no operation", "launch"}},
		{"unknown op", map[string]any{"op": "explode"}, []string{`unknown operation "explode"`}},
		{"continue without session", map[string]any{"op": "continue"}, []string{"no debug session", "launch"}},
		{"stack without session", map[string]any{"op": "stack"}, []string{"no debug session"}},
		{"launch without program", map[string]any{"op": "launch"}, []string{"program is empty"}},
		{"launch outside", map[string]any{"op": "launch", "program": "../x.py"}, []string{"outside the workspace"}},
		{"launch absolute outside", map[string]any{"op": "launch", "program": "/etc/passwd"}, []string{"outside the workspace"}},
		{"launch missing", map[string]any{"op": "launch", "program": "nope.py"}, []string{"nope.py does not exist"}},
		{"launch unknown adapter", map[string]any{"op": "launch", "program": "main.py", "adapter": "gdb"}, []string{`unknown adapter "gdb"`}},
		{"launch unknown kind", map[string]any{"op": "launch", "program": "requirements.txt"}, []string{"cannot tell which debugger"}},
		{"attach without port", map[string]any{"op": "attach"}, []string{"attach needs port"}},
		{"attach lldb", map[string]any{"op": "attach", "port": 4000, "adapter": "lldb"}, []string{"cannot attach by port"}},
		{"breakpoints without file", map[string]any{"op": "breakpoints", "lines": []any{3}}, []string{"needs file"}},
		{"breakpoints bad line", map[string]any{"op": "breakpoints", "file": "main.py", "lines": []any{0}}, []string{"start at 1"}},
		{"breakpoints fractional", map[string]any{"op": "breakpoints", "file": "main.py", "lines": []any{1.5}}, []string{"whole line number"}},
		{"breakpoints string line", map[string]any{"op": "breakpoints", "file": "main.py", "lines": []any{"3"}}, []string{"give a line number"}},
		{"breakpoints unknown field", map[string]any{"op": "breakpoints", "file": "main.py", "lines": []any{map[string]any{"line": 2, "when": "x"}}}, []string{`unknown field "when"`}},
		{"breakpoints missing file", map[string]any{"op": "breakpoints", "file": "gone.py", "lines": []any{1}}, []string{"gone.py does not exist"}},
		{"breakpoints in a dir", map[string]any{"op": "breakpoints", "file": ".", "lines": []any{1}}, []string{"is a directory"}},
		{"variables without reference", map[string]any{"op": "variables"}, []string{"no debug session"}},
		{"launch program and module", map[string]any{"op": "launch", "program": "main.py", "module": "main"}, []string{"program or module, not both"}},
		{"launch module with delve", map[string]any{"op": "launch", "module": "main", "adapter": "delve"}, []string{"only debugpy runs", "package directory"}},
		{"launch lines without file", map[string]any{"op": "launch", "program": "main.py", "lines": []any{1}}, []string{"both file and lines"}},
		{"launch file without lines", map[string]any{"op": "launch", "program": "main.py", "file": "main.py"}, []string{"both file and lines", "call breakpoints"}},
		{"launch bad breakpoint", map[string]any{"op": "launch", "program": "main.py", "file": "main.py", "lines": []any{0}}, []string{"start at 1"}},
		{"launch test with debugpy", map[string]any{"op": "launch", "program": "main.py", "test": true}, []string{"test and test_run debug a Go package's tests", "module pytest"}},
		{"launch test_run with debugpy", map[string]any{"op": "launch", "program": "main.py", "test_run": "TestX"}, []string{"test and test_run debug a Go package's tests"}},
		{"launch a path as module", map[string]any{"op": "launch", "module": "app/main"}, []string{`module "app/main" is not a Python module name`}},
		{"launch cwd outside", map[string]any{"op": "launch", "program": "main.py", "cwd": "../"}, []string{"cwd", "outside the workspace"}},
		{"launch cwd absolute outside", map[string]any{"op": "launch", "module": "main", "cwd": "/tmp"}, []string{"cwd", "outside the workspace"}},
		{"launch cwd a file", map[string]any{"op": "launch", "program": "main.py", "cwd": "main.py"}, []string{"cwd: main.py is not a directory"}},
		{"launch cwd missing", map[string]any{"op": "launch", "program": "main.py", "cwd": "nope"}, []string{"nope does not exist"}},
		{"launch env BERTH_", map[string]any{"op": "launch", "program": "main.py", "env": map[string]any{"BERTH_TOKEN": "x"}}, []string{"env: BERTH_TOKEN cannot be set", "berth's own"}},
		{"launch env LD_PRELOAD", map[string]any{"op": "launch", "program": "main.py", "env": map[string]any{"LD_PRELOAD": "./x.so"}}, []string{"env: LD_PRELOAD cannot be set on the host", "loader"}},
		{"launch env PYTHONPATH", map[string]any{"op": "launch", "module": "main", "env": map[string]any{"PYTHONPATH": "."}}, []string{"env: PYTHONPATH cannot be set on the host", "PYTHONUNBUFFERED"}},
		{"launch env GOFLAGS", map[string]any{"op": "launch", "program": "main.py", "env": map[string]any{"GOFLAGS": "-toolexec=./x"}}, []string{"env: GOFLAGS cannot be set on the host", "delve builds"}},
		{"launch env PATH", map[string]any{"op": "launch", "program": "main.py", "env": map[string]any{"PATH": "."}}, []string{"env: PATH cannot be set on the host"}},
		{"launch env bad name", map[string]any{"op": "launch", "program": "main.py", "env": map[string]any{"A-B": "1"}}, []string{`env: "A-B" is not a variable name`}},
		{"launch env NUL", map[string]any{"op": "launch", "program": "main.py", "env": map[string]any{"A": "x\x00y"}}, []string{"env: the value of A holds a NUL byte"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.Fails(t, tt.args, tt.wants...)
		})
	}
	// Unknown fields are refused by the registry before the tool runs.
	if _, err := f.reg.Call(t.Context(), tools.SurfaceDefault, "debug", json.RawMessage(`{"op":"status","bogus":1}`)); err == nil {
		t.Errorf("an unknown field was accepted")
	}
	// The tool is exec level and serial (DBG-2).
	tl, _ := f.reg.Lookup("debug")
	if tl.Level != tools.LevelExec || !tl.Serial {
		t.Errorf("debug tool = %+v, want exec level and serial", tl)
	}
	if len(f.reg.List(tools.SurfacePlan)) != 0 {
		t.Errorf("the plan surface lists the debug tool")
	}
}

// TestEnvironment: env's names in a container and on the host.
func TestEnvironment(t *testing.T) {
	container, onHost := &Supervisor{}, &Supervisor{opts: Options{Host: true}}
	for _, name := range []string{"GREETING", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK", "_X1", "LANG", "TMPDIR"} {
		if _, err := onHost.environment(map[string]string{name: "1"}); err != nil {
			t.Errorf("%s on the host: %v", name, err)
		}
	}
	hostOnly := []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "GCONV_PATH", "PATH", "HOME", "XDG_CONFIG_HOME", "BASH_ENV", "ENV",
		"PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONHOME", "PYTHONBREAKPOINT", "PYTHONWARNINGS", "PYDEVD_LOAD_NATIVE_LIB", "DEBUGPY_LOG_DIR",
		"NODE_OPTIONS", "PERL5OPT", "RUBYOPT", "JAVA_TOOL_OPTIONS", "GOFLAGS", "GOTOOLCHAIN", "GOROOT", "GOENV", "GOPROXY", "CGO_CFLAGS", "CC", "CXX", "PKG_CONFIG"}
	for _, name := range hostOnly {
		if _, err := onHost.environment(map[string]string{name: "x"}); err == nil || !strings.Contains(err.Error(), name+" cannot be set on the host") {
			t.Errorf("%s on the host: %v, want a refusal", name, err)
		}
		if _, err := container.environment(map[string]string{name: "x"}); err != nil {
			t.Errorf("%s in a container: %v", name, err)
		}
	}
	for _, s := range []*Supervisor{container, onHost} {
		if _, err := s.environment(map[string]string{"BERTH_HOST_ENV": "x"}); err == nil || !strings.Contains(err.Error(), "BERTH_HOST_ENV cannot be set:") {
			t.Errorf("BERTH_HOST_ENV (host %v): %v", s.opts.Host, err)
		}
		for _, name := range []string{"", "1A", "A=B", "A B", "Ä"} {
			if _, err := s.environment(map[string]string{name: "x"}); err == nil || !strings.Contains(err.Error(), "is not a variable name") {
				t.Errorf("%q (host %v): %v", name, s.opts.Host, err)
			}
		}
	}
	names, err := container.environment(map[string]string{"B": "2", "A": "1", "C": ""})
	if err != nil || !slices.Equal(names, []string{"A", "B", "C"}) {
		t.Errorf("names = %v, %v", names, err)
	}
	if got := envList(map[string]string{"B": "2", "A": "x=y"}, []string{"A", "B"}); !slices.Equal(got, []string{"A=x=y", "B=2"}) {
		t.Errorf("envList = %q", got)
	}
}

func TestBreakpointsBeforeLaunch(t *testing.T) {
	f := newFixture(t, map[string]string{"src/main.py": "a = 1\nb = 2\nc = 3\n"}, Options{})
	res := f.Ok(t, map[string]any{"op": "breakpoints", "file": "src/main.py", "lines": []any{1, map[string]any{"line": 3, "condition": "b > 1", "hit_condition": "2", "log_message": "b is {b}"}}},
		"line 1: pending", `line 3 if b > 1 hit 2 log "b is {b}": pending`)
	if data := string(res.Structured); !strings.Contains(data, `"pending":true`) || !strings.Contains(data, `"file":"src/main.py"`) {
		t.Errorf("structured content: %s", data)
	}
	f.Ok(t, map[string]any{"op": "breakpoints"}, "src/main.py:", "line 1: pending")
	f.Ok(t, map[string]any{"op": "status"}, "no debug session", "src/main.py")
	f.Ok(t, map[string]any{"op": "breakpoints", "file": f.dir + "/src/main.py", "lines": []any{}}, "cleared")
	f.Ok(t, map[string]any{"op": "breakpoints"}, "no breakpoints set")
	f.Ok(t, map[string]any{"op": "terminate"}, "no debug session to terminate")
}

func TestPickBinary(t *testing.T) {
	tests := []struct {
		found []string
		names []string
		want  string
	}{
		{[]string{"/usr/bin/lldb-vscode-14", "/usr/bin/lldb-vscode-16"}, adapterTable[2].names, "/usr/bin/lldb-vscode-16"},
		{[]string{"/usr/bin/lldb-vscode", "/usr/local/bin/lldb-dap"}, adapterTable[2].names, "/usr/local/bin/lldb-dap"},
		{[]string{"/a/lldb-vscode-14", "/b/lldb-dap-18"}, adapterTable[2].names, "/b/lldb-dap-18"},
		{[]string{"/a/dlv", "/b/dlv"}, []string{"dlv"}, "/a/dlv"},
		{[]string{"/a/dlvx"}, []string{"dlv"}, ""},
		{nil, []string{"dart"}, ""},
	}
	for _, tt := range tests {
		if got := proc.PickBinary(tt.found, tt.names); got != tt.want {
			t.Errorf("pickBinary(%v) = %q, want %q", tt.found, got, tt.want)
		}
	}
}

// TestDiscovery runs discovery in the host sandbox over workspaces with and
// without markers and venvs.
func TestDiscovery(t *testing.T) {
	if err := exec.Command(debianPython, "-c", "import debugpy").Run(); err != nil {
		unavailable(t, "%s cannot import debugpy (%v); install python3-debugpy", debianPython, err)
	}
	// A bin directory inside the workspace on PATH must never supply an
	// adapter; a dlv there is ignored.
	fakeDlv := "#!/bin/sh\necho fake\n"
	// marks is outside every workspace: a spy that ran leaves a file there.
	marks := t.TempDir()
	spy := "#!/bin/sh\n: > \"" + marks + "/ran-$$\"\nexit 0\n" // builtins only: it leaves its mark whatever PATH it has
	noDebugpy := filepath.Join(marks, "python-without-debugpy")
	if err := os.WriteFile(noDebugpy, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// linkDir holds python3, a link to WS/tools/python3: made per case.
	linkDir := filepath.Join(t.TempDir(), "bin")
	tests := []struct {
		name    string
		files   map[string]string
		path    string // PATH, with WS replaced by the workspace
		program string
		check   func(t *testing.T, f *fixture, avs map[string]Availability)
	}{
		{
			name:  "no markers",
			files: map[string]string{"main.py": "print(1)\n"},
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				for id, av := range avs {
					if id == AdapterDebugpy {
						// debugpy runs any script: without a marker its
						// root is the workspace root.
						if !av.NoMarker || av.Root != "." || strings.Contains(av.Reason, "marker missing") {
							t.Errorf("%s: %+v, want the workspace root without a marker", id, av)
						}
						continue
					}
					if av.Usable || !strings.Contains(av.Reason, "marker missing") {
						t.Errorf("%s: %+v, want marker missing", id, av)
					}
				}
				if r := avs[AdapterDart].Reason; !strings.Contains(r, "pubspec.yaml") || !strings.Contains(r, "binary missing: no dart") {
					t.Errorf("dart reason = %q", r)
				}
			},
		},
		{
			name:  "venv preferred over PATH (DBG-4)",
			files: map[string]string{"requirements.txt": "", "app/main.py": "print(1)\n", ".venv/bin/python": "symlink:" + debianPython},
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				av := avs[AdapterDebugpy]
				if !av.Usable || av.Binary != filepath.Join(f.dir, ".venv/bin/python") || av.Root != "." || av.Marker != "requirements.txt" {
					t.Errorf("debugpy = %+v, want usable with the workspace's .venv python", av)
				}
				// On the host it is used because it resolves outside the
				// workspace, and the result names what it resolves to.
				if real, _ := filepath.EvalSymlinks(debianPython); av.Interpreter != ".venv/bin/python → "+real {
					t.Errorf("debugpy interpreter %q; want .venv/bin/python → %s", av.Interpreter, real)
				}
			},
		},
		{
			name:    "nearest root and its venv",
			files:   map[string]string{"requirements.txt": "", "sub/pyproject.toml": "", "sub/pkg/main.py": "print(1)\n", "sub/venv/bin/python": "symlink:" + debianPython},
			program: "sub/pkg/main.py",
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				av := avs[AdapterDebugpy]
				if !av.Usable || av.Root != "sub" || av.Marker != "pyproject.toml" || av.Binary != filepath.Join(f.dir, "sub/venv/bin/python") {
					t.Errorf("debugpy = %+v, want root sub with sub/venv's python", av)
				}
			},
		},
		{
			name:  "python without debugpy",
			files: map[string]string{"setup.py": "", "main.py": "print(1)\n", ".venv/bin/python": "symlink:" + noDebugpy},
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				av := avs[AdapterDebugpy]
				if av.Usable || !strings.Contains(av.Reason, "module missing") || !strings.Contains(av.Reason, ".venv/bin/python") {
					t.Errorf("debugpy = %+v, want module missing for the venv python", av)
				}
			},
		},
		{
			name:  "the workspace's own pythons never run on the host",
			files: map[string]string{"setup.py": "", "main.py": "print(1)\n", ".venv/bin/python": spy, "venv/bin/python": spy},
			path:  "/nonexistent",
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				if ran, _ := filepath.Glob(filepath.Join(marks, "ran-*")); len(ran) > 0 {
					t.Errorf("workspace pythons were run: %q", ran)
				}
				av := avs[AdapterDebugpy]
				for _, want := range []string{".venv/bin/python is the workspace's own program", "venv/bin/python is the workspace's own program", "binary missing"} {
					if av.Usable || !strings.Contains(av.Reason, want) {
						t.Errorf("debugpy reason %q; want %q", av.Reason, want)
					}
				}
			},
		},
		{
			name:  "a PATH python3 linking into the workspace is not run",
			files: map[string]string{"setup.py": "", "main.py": "print(1)\n", "tools/python3": spy},
			path:  linkDir,
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				if ran, _ := filepath.Glob(filepath.Join(marks, "ran-*")); len(ran) > 0 {
					t.Errorf("workspace pythons were run: %q", ran)
				}
				if av := avs[AdapterDebugpy]; av.Usable || !strings.Contains(av.Reason, "inside the workspace") {
					t.Errorf("debugpy = %+v; want the linked python3 skipped", av)
				}
			},
		},
		{
			name:  "no python at all",
			files: map[string]string{"setup.py": "", "main.py": "print(1)\n"},
			path:  "/nonexistent",
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				if av := avs[AdapterDebugpy]; av.Usable || !strings.Contains(av.Reason, "binary missing") {
					t.Errorf("debugpy = %+v, want binary missing", av)
				}
			},
		},
		{
			name:  "binaries in the workspace are ignored",
			files: map[string]string{"go.mod": "module x\n", "bin/dlv": fakeDlv, "Cargo.toml": "", "bin/lldb-dap": fakeDlv},
			path:  "WS/bin:/nonexistent",
			check: func(t *testing.T, f *fixture, avs map[string]Availability) {
				for _, id := range []string{AdapterDelve, AdapterLLDB} {
					if av := avs[id]; av.Usable || av.Binary != "" || !strings.Contains(av.Reason, "binary missing") || av.Marker == "" {
						t.Errorf("%s = %+v, want marker found and binary missing", id, av)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixturePath(t, tt.files, Options{}, tt.path)
			if tt.path == linkDir {
				os.RemoveAll(linkDir)
				os.MkdirAll(linkDir, 0o755)
				if err := os.Symlink(filepath.Join(f.dir, "tools/python3"), filepath.Join(linkDir, "python3")); err != nil {
					t.Fatal(err)
				}
			}
			args := map[string]any{"op": "adapters"}
			if tt.program != "" {
				args["program"] = tt.program
			}
			res := f.Ok(t, args)
			var got struct{ Adapters []Availability }
			debugtest.Decode(t, res, &got)
			avs := map[string]Availability{}
			for _, av := range got.Adapters {
				avs[av.Adapter] = av
			}
			if len(avs) != 4 {
				t.Fatalf("adapters = %s", res.Structured)
			}
			tt.check(t, f, avs)
		})
	}
}

// ---- debugpy end to end on the host ----

func needDebugpy(t *testing.T) {
	t.Helper()
	if err := exec.Command(debianPython, "-c", "import debugpy").Run(); err != nil {
		unavailable(t, "%s cannot import debugpy (%v); install python3-debugpy", debianPython, err)
	}
}

// pyFixture is a workspace with debugtest.PyProgram as main.py, a marker
// and a .venv python that is Debian's (the python3 first on PATH may lack
// debugpy, so this also shows DBG-4's preference). Its Live also wants
// the debuggee running main.py.
func pyFixture(t *testing.T, opts Options) *fixture {
	needDebugpy(t)
	f := newFixture(t, map[string]string{
		"requirements.txt": "",
		"main.py":          debugtest.PyProgram,
		".venv/bin/python": "symlink:" + debianPython,
	}, opts)
	live := f.Live
	f.Live = func(t *testing.T) {
		t.Helper()
		live(t)
		if len(processesWith(filepath.Join(f.dir, "main.py"))) == 0 {
			t.Errorf("no debuggee process runs main.py")
		}
	}
	return f
}

func TestDebugpyHost(t *testing.T) {
	debugtest.CheckPython(t, pyFixture(t, Options{}).Env, "main.py")
}

// TestDebugpyReportHost: module, cwd and env; the stack and locals caps;
// a statement's "no value"; the value step_out returned; an exception's
// message.
func TestDebugpyReportHost(t *testing.T) {
	f := pyFixture(t, Options{})
	f.write(t, "app/report.py", debugtest.PyReport)
	debugtest.CheckPythonReport(t, f.Env, "app")
}

// TestHostEnvRunsNoWorkspaceCode: on the host, a launch's env cannot make
// python or the Go build run code of the workspace that the call does not
// name — here a sitecustomize.py on PYTHONPATH and a -toolexec program in
// GOFLAGS, each of which would leave a mark outside the workspace.
func TestHostEnvRunsNoWorkspaceCode(t *testing.T) {
	marks := t.TempDir()
	spies := map[string]string{
		"evil/sitecustomize.py": fmt.Sprintf("open(%q, 'w').close()\n", filepath.Join(marks, "sitecustomize")),
		"evil/toolexec":         fmt.Sprintf("#!/bin/sh\n: > %q\nexec \"$@\"\n", filepath.Join(marks, "toolexec")),
	}
	// refused wants the launch refused, and (had it run) no mark left.
	refused := func(t *testing.T, f *fixture, args map[string]any, want string) {
		t.Helper()
		if r := f.Call(t, args); !r.IsError || !strings.Contains(r.Text, want) {
			t.Errorf("launch: want a tool error with %q, got:\n%s", want, r.Text)
		}
		f.Ok(t, map[string]any{"op": "terminate"})
		if ran, _ := filepath.Glob(filepath.Join(marks, "*")); len(ran) > 0 {
			t.Errorf("workspace code ran on the host: %q", ran)
		}
	}
	t.Run("python", func(t *testing.T) {
		f := pyFixture(t, Options{})
		for name, content := range spies {
			f.write(t, name, content)
		}
		refused(t, f, map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true, "env": map[string]any{"PYTHONPATH": filepath.Join(f.dir, "evil")}},
			"PYTHONPATH cannot be set on the host")
	})
	t.Run("go build", func(t *testing.T) {
		if _, err := exec.LookPath("dlv"); err != nil {
			t.Skipf("no dlv on PATH (%v)", err)
		}
		f := newFixture(t, map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n", "main.go": debugtest.GoProgram, "evil/toolexec": spies["evil/toolexec"]}, Options{Wait: 2 * time.Minute})
		refused(t, f, map[string]any{"op": "launch", "program": ".", "env": map[string]any{"GOFLAGS": "-toolexec=" + filepath.Join(f.dir, "evil/toolexec")}},
			"GOFLAGS cannot be set on the host")
	})
}

func TestDebugpyLogpointAndRunning(t *testing.T) {
	f := newFixture(t, map[string]string{
		"requirements.txt": "",
		".venv/bin/python": "symlink:" + debianPython,
		"loop.py":          "import time\nfor i in range(3):\n    n = i * 10\nwhile True:\n    time.sleep(0.05)\n",
	}, Options{Wait: 2 * time.Second})
	needDebugpy(t)
	f.Ok(t, map[string]any{"op": "breakpoints", "file": "loop.py", "lines": []any{map[string]any{"line": 3, "log_message": "n={i*10}"}}})
	f.Ok(t, map[string]any{"op": "launch", "program": "loop.py"}, "still running after 2s", "the program is running")
	f.Fails(t, map[string]any{"op": "stack"}, "running")
	f.Fails(t, map[string]any{"op": "step_over"}, "running, not stopped", "pause")
	out := ""
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !strings.Contains(out, "n=20"); {
		out += f.Call(t, map[string]any{"op": "output"}).Text
	}
	if !strings.Contains(out, "n=0") || !strings.Contains(out, "n=20") {
		t.Errorf("logpoint output = %q", out)
	}
	f.Ok(t, map[string]any{"op": "pause"}, "stopped at loop.py:", "(pause)")
	f.Ok(t, map[string]any{"op": "pause"}, "already stopped")
	f.Ok(t, map[string]any{"op": "terminate"}, "terminated")
	if p := processesWith(f.dir); len(p) > 0 {
		t.Errorf("processes left after terminate: %v", p)
	}
}

func TestDebugpyTTL(t *testing.T) {
	f := pyFixture(t, Options{TTL: 3 * time.Second})
	f.Ok(t, map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true}, "stopped at main.py:1")
	pid := f.session().pid
	for deadline := time.Now().Add(2 * time.Minute); f.session() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("the session outlived its TTL by two minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.Fails(t, map[string]any{"op": "stack"}, "time limit", "no debug session")
	if alive(pid) {
		t.Errorf("adapter pid %d alive after the TTL", pid)
	}
	if p := processesWith(f.dir); len(p) > 0 {
		t.Errorf("processes left after the TTL: %v", p)
	}
	f.Ok(t, map[string]any{"op": "status"}, "no debug session") // the note is shown once
	f.Ok(t, map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true}, "stopped at main.py:1")
}

// claimCounter is an Options.Claim that counts the claims held, or
// refuses with refusal when it is set.
type claimCounter struct {
	held, taken atomic.Int32
	refusal     atomic.Pointer[string]
}

func (c *claimCounter) claim() (func(), error) {
	if r := c.refusal.Load(); r != nil {
		return nil, errors.New(*r)
	}
	c.taken.Add(1)
	c.held.Add(1)
	var once sync.Once
	return func() { once.Do(func() { c.held.Add(-1) }) }, nil
}

// want checks the claims taken in all and held now; the release after a
// TTL or a dead adapter may come a moment after the call that saw it.
func (c *claimCounter) want(t *testing.T, taken, held int32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); c.held.Load() != held && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if c.taken.Load() != taken || c.held.Load() != held {
		t.Errorf("claims taken %d, held %d; want %d, %d", c.taken.Load(), c.held.Load(), taken, held)
	}
}

// TestClaim: a session holds the conversation's claim from its start to
// its end — terminate, a failed start, a killed adapter, its TTL, the
// run's close — and a refused claim starts no adapter and names the
// holder.
func TestClaim(t *testing.T) {
	var c claimCounter
	f := pyFixture(t, Options{Claim: c.claim})
	launch := map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true}
	f.Ok(t, launch, "stopped at main.py:1")
	c.want(t, 1, 1)
	f.Fails(t, launch, "already running") // the run's own session: no second claim
	c.want(t, 1, 1)
	f.Ok(t, map[string]any{"op": "terminate"}, "terminated")
	c.want(t, 1, 0)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	f.Fails(t, map[string]any{"op": "attach", "port": port}, "cannot connect")
	c.want(t, 2, 0)

	f.Ok(t, launch, "stopped at main.py:1")
	f.Kill(t)
	f.Fails(t, map[string]any{"op": "stack"}, "exited unexpectedly")
	c.want(t, 3, 0)

	// The program's end closes the session and gives the claim back.
	f.Ok(t, map[string]any{"op": "launch", "program": "main.py"}, "the program exited (code 0)")
	c.want(t, 4, 0)
	f.Ok(t, launch, "stopped at main.py:1")
	c.want(t, 5, 1)

	msg := `conversation "c-1" already has a debug session, in run r-1: use that run, or end the session there (debug terminate)`
	f.Ok(t, map[string]any{"op": "terminate"})
	c.refusal.Store(&msg)
	f.Fails(t, launch, "cannot launch here: only one debug session per conversation: "+msg)
	f.Fails(t, map[string]any{"op": "attach", "port": port}, "cannot attach here", "in run r-1")
	if p := processesWith(f.dir); len(p) > 0 {
		t.Errorf("a refused claim started processes: %v", p)
	}
	c.want(t, 5, 0)
	c.refusal.Store(nil)

	f.Ok(t, launch, "stopped at main.py:1")
	c.want(t, 6, 1)
	if err := f.sup.Close(); err != nil {
		t.Fatal(err)
	}
	c.want(t, 6, 0)

	var ttl claimCounter
	g := pyFixture(t, Options{TTL: 2 * time.Second, Claim: ttl.claim})
	g.Ok(t, launch, "stopped at main.py:1")
	ttl.want(t, 1, 1)
	for deadline := time.Now().Add(time.Minute); g.session() != nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	ttl.want(t, 1, 0)
}

func TestDebugpyKilledAdapter(t *testing.T) {
	debugtest.CheckPythonKilled(t, pyFixture(t, Options{}).Env, "main.py")
}

func TestDebugpyAttachHost(t *testing.T) {
	f := pyFixture(t, Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := f.sb.Start(ctx, &sandbox.Cmd{
		Args: []string{debianPython, "-m", "debugpy", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--wait-for-client", filepath.Join(f.dir, "main.py")},
		Env:  []string{"PYDEVD_DISABLE_FILE_VALIDATION=1"},
		Dir:  f.dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	waitListen(t, func() string { data, _ := os.ReadFile("/proc/net/tcp"); return string(data) }, port)
	debugtest.CheckPythonAttach(t, f.Env, "main.py", port)
	st, err := p.Wait()
	if err != nil || !st.Success() {
		t.Errorf("debuggee: %v %v", st, err)
	}
}

// waitListen polls a /proc/net/tcp listing until port is in LISTEN state.
func waitListen(t *testing.T, read func() string, port int) {
	t.Helper()
	hexPort := fmt.Sprintf(":%04X 00000000:0000 0A", port)
	for deadline := time.Now().Add(time.Minute); !strings.Contains(read(), hexPort); {
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on port %d", port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ---- delve on the host, when dlv is on PATH ----

func TestDelveHost(t *testing.T) {
	if _, err := exec.LookPath("dlv"); err != nil {
		t.Skipf("no dlv on PATH (%v): install dlv v1.27.2 (go install github.com/go-delve/delve/cmd/dlv@v1.27.2) to run this test", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go on PATH: dlv's debug mode builds the program")
	}
	f := newFixture(t, map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n", "main.go": debugtest.GoProgram}, Options{Wait: 2 * time.Minute})
	gone := f.Gone
	f.Gone = func(t *testing.T) {
		t.Helper()
		gone(t)
		// The directory dlv built into goes with the session.
		if left := ourScratches(); len(left) > 0 {
			t.Errorf("the session's build directories are left: %v", left)
		}
		if p := ourDebuggees(); len(p) > 0 {
			t.Errorf("debuggee left after terminate: %v", p)
		}
		if _, err := os.Stat(filepath.Join(f.dir, "__debug_bin")); err == nil {
			t.Errorf("dlv left its binary in the workspace")
		}
	}
	f.Ok(t, map[string]any{"op": "adapters", "program": "main.go"}, "delve: usable")
	debugtest.CheckGo(t, f.Env)
	f.write(t, "report/main.go", debugtest.GoReport)
	debugtest.CheckGoReport(t, f.Env)
	// A program that exits with code 3: the end closes the session, dlv
	// and the program are reaped, its build directory removed.
	f.write(t, "exit/main.go", debugtest.GoExit)
	f.Live = func(t *testing.T) {
		t.Helper()
		if pid := f.session().pid; !alive(pid) {
			t.Fatalf("adapter pid %d is not alive", pid)
		}
		if len(ourDebuggees()) == 0 {
			t.Errorf("no debuggee (__debug_bin) runs")
		}
	}
	debugtest.CheckExit(t, f.Env, "exit", "exit/main.go", debugtest.GoExitLine, "delve", "")
	// At entry delve has no goroutine to trace yet: the stop is reported
	// all the same, and continuing runs to the breakpoint.
	f.Ok(t, map[string]any{"op": "launch", "program": "exit", "stop_on_entry": true}, "stopped (entry)")
	f.Ok(t, map[string]any{"op": "continue"}, fmt.Sprintf("stopped at exit/main.go:%d", debugtest.GoExitLine))
	f.Ok(t, map[string]any{"op": "terminate"}, "terminated session")
	f.Gone(t)
}

// TestDebugpyExitHost: a program that exits with code 3 closes its session
// — debugpy, its launcher and the program are gone and reaped, the
// continue and every later status say "the program exited (code 3)" with
// the end of its output — and the next launch works.
func TestDebugpyExitHost(t *testing.T) {
	needDebugpy(t)
	f := newFixture(t, map[string]string{"requirements.txt": "", ".venv/bin/python": "symlink:" + debianPython, "exit.py": debugtest.PyExit}, Options{})
	live := f.Live
	f.Live = func(t *testing.T) {
		t.Helper()
		live(t)
		if len(processesWith(filepath.Join(f.dir, "exit.py"))) == 0 {
			t.Errorf("no debuggee process runs exit.py")
		}
	}
	debugtest.CheckExit(t, f.Env, "exit.py", "exit.py", debugtest.PyExitLine, "debugpy", debugtest.PyExitStop)
}

// TestKilledProgramHost kills the program of a session stopped at a
// breakpoint from outside (kill -9 of its pid), under delve and under
// debugpy: the next call says how it ended, not the old stop, and no
// zombie of it is left, with no terminate (debugtest.CheckKilled). delve
// itself does not notice: the session reads the program's /proc entry.
func TestKilledProgramHost(t *testing.T) {
	tests := []struct {
		adapter, program, file string
		files                  map[string]string
		line                   int
		how                    string
		need                   func(t *testing.T)
		end                    func(t *testing.T, st debugtest.Status)
	}{
		{adapter: "delve", program: ".", file: "main.go", line: 12, need: needDelve,
			files: map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n", "main.go": debugtest.GoProgram},
			how:   "was killed by signal 9 (SIGKILL) outside the debugger",
			end: func(t *testing.T, st debugtest.Status) {
				if st.Signal != "SIGKILL" || st.ExitCode != nil {
					t.Errorf("the end = %+v, want signal SIGKILL and no exit code", st)
				}
			}},
		{adapter: "debugpy", program: "main.py", file: "main.py", line: 7, need: needDebugpy,
			files: map[string]string{"requirements.txt": "", ".venv/bin/python": "symlink:" + debianPython, "main.py": debugtest.PyProgram},
			how:   "exited (code 247, which is how debugpy reports a program killed by signal 9 (SIGKILL))",
			end: func(t *testing.T, st debugtest.Status) {
				if st.ExitCode == nil || *st.ExitCode != 247 {
					t.Errorf("the end = %+v, want exit code 247, as debugpy reports it", st)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.adapter, func(t *testing.T) {
			tt.need(t)
			f := newFixture(t, tt.files, Options{Wait: 2 * time.Minute})
			var program int
			f.KillProgram = func(t *testing.T) {
				t.Helper()
				// The pid the adapter's process event gave: the program's
				// own, whatever else runs on this machine.
				if p := f.session().ds.State().Process; p != nil {
					program = p.SystemProcessId
				}
				if program <= 0 || !alive(program) {
					t.Fatalf("no live program pid from the adapter's process event (%d)", program)
				}
				if err := syscall.Kill(program, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(time.Minute); alive(program); time.Sleep(20 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("the killed program (pid %d) is still alive", program)
					}
				}
			}
			reaped := f.Reaped
			f.Reaped = func(t *testing.T) {
				t.Helper()
				reaped(t)
				for deadline := time.Now().Add(lingerWait); ; time.Sleep(20 * time.Millisecond) {
					st, ok := readStat(program)
					if !ok {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("the killed program (pid %d) is left: state %s, parent %d", program, st.state, st.ppid)
						break
					}
				}
			}
			tt.end(t, debugtest.CheckKilled(t, f.Env, tt.program, tt.file, tt.line, tt.adapter, tt.how))
		})
	}
}

// TestKilledRunningGoHost: a Go program killed (kill -9) while delve runs
// it is reaped by delve, which reports the exit code -9: the next call
// says the program was killed by signal 9 (SIGKILL).
func TestKilledRunningGoHost(t *testing.T) {
	needDelve(t)
	f := newFixture(t, map[string]string{"go.mod": "module example.com/loop\n\ngo 1.22\n",
		"main.go": "package main\n\nimport \"time\"\n\nfunc main() {\n\tfor {\n\t\ttime.Sleep(10 * time.Millisecond)\n\t}\n}\n"},
		Options{Wait: 3 * time.Second})
	f.Ok(t, map[string]any{"op": "launch", "program": "."}, "still running after 3s")
	p := f.session().ds.State().Process
	if p == nil || !alive(p.SystemProcessId) {
		t.Fatalf("no live program pid from delve's process event: %+v", p)
	}
	if err := syscall.Kill(p.SystemProcessId, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var st debugtest.Status
	debugtest.Decode(t, f.Ok(t, map[string]any{"op": "status"}, "no debug session: the program was killed by signal 9 (SIGKILL).", "session 1 (delve, .) is closed"), &st)
	if st.State != "exited" || st.Signal != "SIGKILL" || st.ExitCode != nil {
		t.Errorf("status after the kill = %+v, want exited by SIGKILL with no exit code", st)
	}
	f.Gone(t)
	f.Reaped(t)
}

// ---- lldb on the host, when lldb-dap or lldb-vscode(-N) is on PATH ----

const cProgram = `#include <stdio.h>

int add(int a, int b) {
    int total = a + b;
    return total;
}

int main(void) {
    int x = 2;
    int y = 3;
    int z = add(x, y);
    printf("sum %d\n", z);
    return 0;
}
`

// needLLDB skips without lldb-dap (or lldb-vscode) or a C compiler.
func needLLDB(t *testing.T) {
	t.Helper()
	var found string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		for _, pat := range []string{"lldb-dap", "lldb-dap-[0-9]*", "lldb-vscode", "lldb-vscode-[0-9]*"} {
			if m, _ := filepath.Glob(filepath.Join(dir, pat)); len(m) > 0 && found == "" {
				found = m[0]
			}
		}
	}
	if found == "" {
		t.Skip("no lldb-dap or lldb-vscode on PATH: install Debian's lldb (it ships lldb-vscode-14) to run this test")
	}
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc) on PATH")
	}
}

func TestLLDBHost(t *testing.T) {
	needLLDB(t)
	f := newFixture(t, map[string]string{"CMakeLists.txt": "project(hello C)\nadd_executable(hello main.c)\n", "main.c": cProgram}, Options{})
	if out, err := exec.Command("cc", "-g", "-O0", "-o", filepath.Join(f.dir, "hello"), filepath.Join(f.dir, "main.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	f.Ok(t, map[string]any{"op": "adapters"}, "lldb: usable")
	f.Ok(t, map[string]any{"op": "breakpoints", "file": "main.c", "lines": []any{10}}, "pending")
	f.Ok(t, map[string]any{"op": "launch", "program": "hello"}, "launched hello with lldb", "stopped at main.c:10 in main", "int y = 3;")
	pid := f.session().pid
	f.Ok(t, map[string]any{"op": "stack"}, "#0 main at main.c:10")
	f.Ok(t, map[string]any{"op": "evaluate", "expression": "x * 21"}, "42")
	f.Ok(t, map[string]any{"op": "step_over"}, "stopped at main.c:11")
	f.Ok(t, map[string]any{"op": "step_in"}, "main.c:4 in add")
	f.Ok(t, map[string]any{"op": "step_out"}, "in main")
	f.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 0)")
	f.Ok(t, map[string]any{"op": "terminate"}, "already closed")
	if alive(pid) {
		t.Errorf("lldb adapter pid %d alive after terminate", pid)
	}
	if p := processesWith(filepath.Join(f.dir, "hello")); len(p) > 0 {
		t.Errorf("processes left: %v", p)
	}
}

// stuckTimeout is TestStuckAdapter's request deadline: short, yet long
// enough for a loaded machine's real answers.
const stuckTimeout = 5 * time.Second

// TestStuckAdapter stops (SIGSTOP) the adapter of a session stopped at a
// breakpoint, under debugpy and under delve: a call that needs it fails
// within the request deadline with a message naming the adapter, its pid
// and the wait and saying to terminate; status answers meanwhile from the
// last stop report; a call made while another waits on the stuck adapter
// gets its turn after that deadline, not never; and terminate — after
// SIGCONT for debugpy, with the adapter still stopped for delve — leaves
// no process behind.
func TestStuckAdapter(t *testing.T) {
	tests := []struct {
		adapter string
		files   map[string]string
		program string
		at      string // the stop report of the breakpoint
		bp      []any
		name    string // how the error names the adapter
		resume  bool   // SIGCONT before terminate
		need    func(t *testing.T)
	}{
		{adapter: "debugpy", files: map[string]string{"requirements.txt": "", ".venv/bin/python": "symlink:" + debianPython, "main.py": debugtest.PyProgram},
			program: "main.py", at: "stopped at main.py:7 in main", bp: []any{7}, name: "the debugpy debug adapter (pid %d)", resume: true, need: needDebugpy},
		{adapter: "delve", files: map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n", "main.go": debugtest.GoProgram},
			program: ".", at: "stopped at main.go:12 in main.main", bp: []any{12}, name: "the delve debug adapter dlv", need: needDelve},
	}
	for _, tt := range tests {
		t.Run(tt.adapter, func(t *testing.T) {
			tt.need(t)
			f := newFixture(t, tt.files, Options{RequestTimeout: stuckTimeout, Wait: 2 * time.Minute})
			file := "main.py"
			if tt.adapter == "delve" {
				file = "main.go"
			}
			f.Ok(t, map[string]any{"op": "breakpoints", "file": file, "lines": tt.bp})
			f.Ok(t, map[string]any{"op": "launch", "program": tt.program}, tt.at)
			pid := f.session().pid
			name := tt.name
			if strings.Contains(name, "%d") {
				name = fmt.Sprintf(name, pid)
			} else {
				name += fmt.Sprintf(" (pid %d)", pid) // dlv's name is its binary's
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer syscall.Kill(pid, syscall.SIGCONT) // a failed test leaves nothing stopped
			waitState(t, pid, "T")

			// stack waits the deadline and says what to do; a status call
			// made meanwhile answers once stack has given up.
			var wg sync.WaitGroup
			var during debugtest.Result
			wg.Go(func() {
				time.Sleep(stuckTimeout / 5)
				during = f.Call(t, map[string]any{"op": "status"})
			})
			start := time.Now()
			f.Fails(t, map[string]any{"op": "stack"}, name+" did not answer stack within 5s", "stuck or stopped", "op terminate", "launch again")
			if d := time.Since(start); d > stuckTimeout+30*time.Second {
				t.Errorf("stack failed after %v; its deadline is %v", d, stuckTimeout)
			}
			wg.Wait()
			if during.IsError || !strings.Contains(during.Text, tt.at) {
				t.Errorf("status while stack waited on the stuck adapter:\n%s", during.Text)
			}
			// status answers from the last stop report, without asking.
			f.Ok(t, map[string]any{"op": "status"}, tt.at, "warning: "+name+" did not answer stack within 5s", "op terminate")
			f.Fails(t, map[string]any{"op": "continue"}, name+" did not answer continue within 5s", "op terminate")

			if tt.resume {
				if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				waitNotState(t, pid, "T")
			}
			f.Ok(t, map[string]any{"op": "terminate"}, "terminated session")
			if alive(pid) {
				t.Errorf("adapter pid %d alive after terminate", pid)
			}
			if p := lingering(f.dir); len(p) > 0 {
				t.Errorf("processes left after terminate: %v", p)
			}
			if p := ourDebuggees(); len(p) > 0 {
				t.Errorf("debuggee left after terminate: %v", p)
			}
			f.Reaped(t)
			// A new session works.
			f.Ok(t, map[string]any{"op": "launch", "program": tt.program}, tt.at)
			f.Ok(t, map[string]any{"op": "stack"}, "#0 ")
			f.Ok(t, map[string]any{"op": "terminate"}, "terminated session")
		})
	}
}

func needDelve(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dlv"); err != nil {
		unavailable(t, "no dlv on PATH (%v): install dlv v1.27.2 (go install github.com/go-delve/delve/cmd/dlv@v1.27.2)", err)
	}
	if _, err := exec.LookPath("go"); err != nil {
		unavailable(t, "no go on PATH: dlv's debug mode builds the program")
	}
}

// waitState waits until the host process pid is in state (T: stopped).
func waitState(t *testing.T, pid int, state string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, ok := readStat(pid); ok && st.state == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %s", pid, state)
		}
	}
}

// waitNotState waits until the host process pid leaves state.
func waitNotState(t *testing.T, pid int, state string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, ok := readStat(pid); !ok || st.state != state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still in state %s", pid, state)
		}
	}
}

// TestDelveGoTestHost debugs the tests of a package of Go's own source
// tree, made a module of its own (debugtest.CheckGoTest), and follows the
// launch's progress: while delve builds, the notes say so.
func TestDelveGoTestHost(t *testing.T) {
	needDelve(t)
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	files := debugtest.GoListFiles(t, strings.TrimSpace(string(out)), "list")
	f := newFixture(t, files, Options{Wait: 2 * time.Minute})
	var mu sync.Mutex
	var notes []string
	f.progress = func(note string) {
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, note)
	}
	debugtest.CheckGoTest(t, f.Env, "list", files["list/list_test.go"])
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, "delve is building the tests of list (go test -c)") }) {
		t.Errorf("no progress note says delve is building: %q", notes)
	}
}

// TestStopLocalsOrder: debugpy lists a frame's locals by name, so with
// more than MaxStopLocals the one a step just assigned could be cut; a
// stop report shows first the locals new or changed since the previous
// stop in the same function, marked so, and counts the ones left out.
func TestStopLocalsOrder(t *testing.T) {
	needDebugpy(t)
	var src strings.Builder
	src.WriteString("def main():\n")
	for i := range 12 {
		fmt.Fprintf(&src, "    a%02d = %d\n", i, i)
	}
	src.WriteString("    zz = 5\n    a05 = 50\n    print(zz, a05)\n\n\nmain()\n")
	f := newFixture(t, map[string]string{"requirements.txt": "", ".venv/bin/python": "symlink:" + debianPython, "many.py": src.String()}, Options{})
	const zzLine = 14 // zz = 5, after a00…a11
	f.Ok(t, map[string]any{"op": "breakpoints", "file": "many.py", "lines": []any{zzLine}})
	type stop struct {
		Stopped struct {
			FrameID int `json:"frame_id"`
			Locals  struct {
				Vars []Var `json:"variables"`
				More int   `json:"more"`
			} `json:"locals"`
		} `json:"stopped"`
	}
	var st stop
	debugtest.Decode(t, f.Ok(t, map[string]any{"op": "launch", "program": "many.py"}, fmt.Sprintf("stopped at many.py:%d", zzLine), "locals:\n  a00: int = 0\n", "… 2 more"), &st)
	if n := len(st.Stopped.Locals.Vars); n != MaxStopLocals || st.Stopped.Locals.More != 2 {
		t.Errorf("first stop: %d locals shown and %d more, want %d and 2", n, st.Stopped.Locals.More, MaxStopLocals)
	}
	// zz is new, and last by name: it comes first.
	r := f.Ok(t, map[string]any{"op": "step_over"}, fmt.Sprintf("stopped at many.py:%d", zzLine+1), "locals:\n  zz: int = 5  (new)\n  a00: int = 0\n", "… 3 more")
	debugtest.Decode(t, r, &st)
	if v := st.Stopped.Locals.Vars; len(v) != MaxStopLocals || v[0].Name != "zz" || v[0].Changed != "new" || st.Stopped.Locals.More != 3 {
		t.Errorf("after zz = 5: %+v", st.Stopped.Locals)
	}
	// a05 changed; zz did not.
	f.Ok(t, map[string]any{"op": "step_over"}, "locals:\n  a05: int = 50  (changed)\n  a00: int = 0\n")
	// The stop report's frame_id is the one stack shows for the frame.
	debugtest.Decode(t, f.Ok(t, map[string]any{"op": "status"}), &st)
	var fr debugtest.Frames
	debugtest.Decode(t, f.Ok(t, map[string]any{"op": "stack"}), &fr)
	if len(fr.Frames) == 0 || fr.Frames[0].FrameID != st.Stopped.FrameID {
		t.Errorf("stack %+v, want the stop's frame_id %d first", fr.Frames, st.Stopped.FrameID)
	}
	f.Ok(t, map[string]any{"op": "terminate"}, "terminated")
}
