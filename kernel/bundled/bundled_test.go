package bundled

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/kernel"
	"go.uber.org/goleak"
)

// mplDir is a matplotlib config and cache directory shared by the tests,
// so the font cache is built once.
var mplDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-bundled-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mplDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// systemPython is Debian's python, which has ipykernel and matplotlib
// from apt; the python3 first on PATH may be a build without them.
const systemPython = "/usr/bin/python3"

// Test timeouts.
const (
	execTimeout    = 60 * time.Second
	connectTimeout = 60 * time.Second
	deadTimeout    = 30 * time.Second
)

// need skips (or, under CI=true, fails) when a tool the test needs is missing.
func need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %v", what, err)
	}
	t.Skipf("%s: %v", what, err)
}

// runner is one way to start a kernel.
type runner struct {
	name        string
	lang        string
	interpreter string // the python or node binary
	ipykernel   bool   // the reference kernel instead of a bundled one
	// source, when set, changes the bundled kernel's source before it
	// starts (a smaller cap, to reach it quickly).
	source func(t *testing.T, src string) string
}

// pythonRunners lists the bundled Python kernel on Debian's python, on
// the first python3 on PATH, and on any interpreters in
// BERTH_TEST_PYTHONS (colon-separated, e.g. a Python 3.8).
func pythonRunners(t *testing.T) []runner {
	var out []runner
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" || seen[p] {
			return
		}
		if err := exec.Command(p, "-c", "import sys; assert sys.version_info >= (3, 8)").Run(); err != nil {
			t.Logf("skipping %s: %v", p, err)
			return
		}
		seen[p] = true
		// No slash in the name, so -run can select it.
		out = append(out, runner{name: "bundled " + strings.ReplaceAll(p, "/", "_"), lang: Python, interpreter: p})
	}
	add(systemPython)
	if p, err := exec.LookPath("python3"); err == nil {
		add(p)
	}
	for _, p := range strings.Split(os.Getenv("BERTH_TEST_PYTHONS"), ":") {
		add(p)
	}
	if len(out) == 0 {
		need(t, "no python3 to run the bundled kernel", errors.New("python3 not found"))
	}
	return out
}

func ipykernelRunner() (runner, error) {
	if err := exec.Command(systemPython, "-c", "import ipykernel").Run(); err != nil {
		return runner{}, fmt.Errorf("ipykernel is not importable by %s (%v); install python3-ipykernel", systemPython, err)
	}
	return runner{name: "ipykernel", lang: Python, interpreter: systemPython, ipykernel: true}, nil
}

// nodeRunners lists the bundled JavaScript kernel on the node on PATH
// and on any in BERTH_TEST_NODES (colon-separated, e.g. a Node 18).
func nodeRunners(t *testing.T) []runner {
	p, err := exec.LookPath("node")
	need(t, "node is not on PATH", err)
	out := []runner{{name: "bundled node", lang: JavaScript, interpreter: p}}
	for _, p := range strings.Split(os.Getenv("BERTH_TEST_NODES"), ":") {
		if p != "" {
			out = append(out, runner{name: "bundled " + strings.ReplaceAll(p, "/", "_"), lang: JavaScript, interpreter: p})
		}
	}
	return out
}

type testKernel struct {
	info kernel.ConnectionInfo
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error         // Wait's result, set before done closes
	out  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the kernel in its own process group with a fresh connection
// file; the group is killed and the process reaped at cleanup.
func start(t *testing.T, r runner) *testKernel {
	t.Helper()
	return startWith(t, r, kernel.ConnectionConfig{KernelName: r.lang})
}

func startWith(t *testing.T, r runner, cfg kernel.ConnectionConfig) *testKernel {
	t.Helper()
	dir := t.TempDir()
	if cfg.Transport == "ipc" {
		cfg.IP = filepath.Join(dir, "kernel")
	}
	info, err := kernel.NewConnectionInfo(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file, err := info.MarshalFile()
	if err != nil {
		t.Fatal(err)
	}
	connPath := filepath.Join(dir, "conn.json")
	if err := os.WriteFile(connPath, file, 0o600); err != nil {
		t.Fatal(err)
	}
	var argv []string
	if r.ipykernel {
		argv = []string{r.interpreter, "-m", "ipykernel_launcher", "-f", connPath}
	} else {
		k, err := Lookup(r.lang)
		if err != nil {
			t.Fatal(err)
		}
		script := filepath.Join(dir, k.File)
		src := k.Source
		if r.source != nil {
			src = r.source(t, src)
		}
		if err := os.WriteFile(script, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		argv = k.Argv(r.interpreter, script, connPath)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHON") && !strings.HasPrefix(kv, "MPLBACKEND=") && !strings.HasPrefix(kv, "NODE_OPTIONS=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+dir, "IPYTHONDIR="+filepath.Join(dir, "ipython"), "JUPYTER_RUNTIME_DIR="+dir,
		"MPLCONFIGDIR="+mplDir, "PYDEVD_DISABLE_FILE_VALIDATION=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &testKernel{info: info, cmd: cmd, done: make(chan struct{}), out: out}
	go func() {
		k.err = cmd.Wait()
		close(k.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-k.done
		if t.Failed() {
			t.Logf("%s output:\n%s", r.name, out.String())
		}
	})
	return k
}

func connectWith(t *testing.T, k *testKernel, dial kernel.DialFunc) *kernel.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	c, err := kernel.Connect(ctx, kernel.Config{Conn: k.info, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connect connects with the default local dialer (nil Dial).
func connect(t *testing.T, k *testKernel) *kernel.Client {
	t.Helper()
	return connectWith(t, k, nil)
}

// run executes code and collects its events.
func run(t *testing.T, c *kernel.Client, code string, opts kernel.ExecuteOptions) (*kernel.ExecuteReply, []kernel.Event) {
	t.Helper()
	var events []kernel.Event
	opts.OnEvent = func(e kernel.Event) { events = append(events, e) }
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	r, err := c.Execute(ctx, code, opts)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return r, events
}

func streamText(events []kernel.Event, name string) string {
	var b strings.Builder
	for _, e := range events {
		if e.Type == kernel.EventStream && e.Name == name {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func ofType(events []kernel.Event, typ string) []kernel.Event {
	var out []kernel.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// resultText returns the text/plain of the only execute_result, or
// reports that there is not exactly one.
func resultText(t *testing.T, events []kernel.Event) string {
	t.Helper()
	rs := ofType(events, kernel.EventExecuteResult)
	if len(rs) != 1 {
		t.Fatalf("%d execute_result events, want 1; events: %s", len(rs), describe(events))
	}
	s, _ := rs[0].TextData("text/plain")
	return s
}

func describe(events []kernel.Event) string {
	var parts []string
	for _, e := range events {
		switch e.Type {
		case kernel.EventStream:
			parts = append(parts, fmt.Sprintf("%s:%s:%q", e.Type, e.Name, e.Text))
		case kernel.EventError:
			parts = append(parts, fmt.Sprintf("error:%s:%s", e.Error.Name, e.Error.Value))
		default:
			parts = append(parts, fmt.Sprintf("%s%v", e.Type, mimeKeys(e)))
		}
	}
	return strings.Join(parts, " ")
}

func mimeKeys(e kernel.Event) []string {
	var keys []string
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// shape is what must match between ipykernel and a bundled kernel: the
// event types in order (a stream's consecutive messages merged), the MIME
// types of rich outputs, error names and the reply status.
func shape(r *kernel.ExecuteReply, events []kernel.Event) string {
	var parts []string
	for _, e := range events {
		var s string
		switch e.Type {
		case kernel.EventStream:
			s = "stream:" + e.Name
			if len(parts) > 0 && parts[len(parts)-1] == s {
				continue
			}
		case kernel.EventError:
			s = "error:" + e.Error.Name
		case kernel.EventDisplayData, kernel.EventUpdateDisplayData, kernel.EventExecuteResult:
			s = e.Type + "[" + strings.Join(mimeKeys(e), ",") + "]"
		default:
			s = e.Type
		}
		parts = append(parts, s)
	}
	s := "reply:" + r.Status
	if r.Error != nil {
		s += ":" + r.Error.Name
	}
	return strings.Join(append(parts, s), " ")
}

// wantError checks the reply and the error event of a failed cell.
func wantError(t *testing.T, r *kernel.ExecuteReply, events []kernel.Event, name, valueHas, tracebackHas string) {
	t.Helper()
	if r.Status != "error" || r.Error == nil || r.Error.Name != name || !strings.Contains(r.Error.Value, valueHas) {
		t.Fatalf("reply %+v %+v, want error %s containing %q", r, r.Error, name, valueHas)
	}
	errs := ofType(events, kernel.EventError)
	if len(errs) != 1 {
		t.Fatalf("%d error events, want 1: %s", len(errs), describe(events))
	}
	tb := strings.Join(errs[0].Error.Traceback, "\n")
	if errs[0].Error.Name != name || !strings.Contains(tb, tracebackHas) {
		t.Errorf("error event %s: traceback %q does not contain %q", errs[0].Error.Name, tb, tracebackHas)
	}
	if strings.Contains(tb, "berth_kernel") {
		t.Errorf("traceback shows the kernel's own frames:\n%s", tb)
	}
}

// answerInput answers input() with "berth-" + prompt, slowly, like a tool.
func answerInput(ctx context.Context, req kernel.InputRequest) (string, error) {
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return "berth-" + req.Prompt, nil
}

// toolHandler answers tool() calls: "add" returns {"n": x+1}, anything
// else fails with "no such file: <path>". An input() prompt fails the cell.
func toolHandler(t *testing.T) func(ctx context.Context, req kernel.InputRequest) (string, error) {
	return func(ctx context.Context, req kernel.InputRequest) (string, error) {
		call, ok := ParseToolRequest(req.Prompt)
		if !ok || req.Password {
			t.Errorf("input_request %+v is not a tool envelope", req)
			return "", errors.New("not a tool call")
		}
		var args struct {
			X    float64 `json:"x"`
			Path string  `json:"path"`
		}
		if err := json.Unmarshal(call.Args, &args); err != nil {
			return ReplyError("bad args: " + err.Error()), nil
		}
		if call.Tool == "add" {
			return ReplyOK(map[string]float64{"n": args.X + 1})
		}
		return ReplyError("no such file: " + args.Path), nil
	}
}

// cellCase is one cell run against every kernel of a language.
type cellCase struct {
	name  string
	setup []string // cells run first; they must succeed
	code  string
	// input answers input_request; nil runs the cell without stdin.
	input func(t *testing.T) func(context.Context, kernel.InputRequest) (string, error)
	needs string // a Python module the interpreter must have, else skip
	check func(t *testing.T, r *kernel.ExecuteReply, events []kernel.Event)
	// anyOrder compares the shape's outputs as a set: ipykernel
	// forwards a subprocess's output asynchronously, after the result.
	anyOrder bool
}

var pythonCases = []cellCase{
	{
		name: "last expression echoed",
		code: "1+1",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "2" || r.Status != "ok" {
				t.Errorf("result %q, reply %+v", got, r)
			}
			if n := ofType(ev, kernel.EventExecuteResult)[0].ExecutionCount; n != r.ExecutionCount || n < 1 {
				t.Errorf("execute_result count %d, reply count %d", n, r.ExecutionCount)
			}
		},
	},
	{
		name:  "state persists",
		setup: []string{"x = 41"},
		code:  "x + 1",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "42" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name: "only the last expression",
		code: "1\n2",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "2" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "semicolon and None are silent",
		setup: []string{"3;"},
		code:  "None",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if len(ev) != 0 || r.Status != "ok" {
				t.Errorf("events %s, reply %+v", describe(ev), r)
			}
		},
	},
	{
		name:  "underscore",
		setup: []string{"6 * 7"},
		code:  "_",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "42" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name: "print streams",
		code: "import sys\nprint('hello')\nprint('oops', file=sys.stderr)",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "hello\n" {
				t.Errorf("stdout %q", got)
			}
			if got := streamText(ev, "stderr"); got != "oops\n" {
				t.Errorf("stderr %q", got)
			}
		},
	},
	{
		name: "output before result",
		code: "print('a')\n'b'",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := describe(ev); got != `stream:stdout:"a\n" execute_result[text/plain]` {
				t.Errorf("events %s", got)
			}
		},
	},
	{
		name: "exception",
		code: "1/0",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "ZeroDivisionError", "division by zero", "division by zero")
		},
	},
	{
		name:  "traceback through a function",
		setup: []string{"def boom():\n    raise ValueError('bad value')"},
		code:  "boom()",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "ValueError", "bad value", "boom")
		},
	},
	{
		name: "syntax error",
		code: "def f(:",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "SyntaxError", "", "def f(:")
		},
	},
	{
		name:  "display of _repr_html_",
		setup: []string{"class H:\n    def _repr_html_(self):\n        return '<b>hi</b>'"},
		code:  "display(H())",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			ds := ofType(ev, kernel.EventDisplayData)
			if len(ds) != 1 {
				t.Fatalf("events %s", describe(ev))
			}
			html, _ := ds[0].TextData("text/html")
			plain, _ := ds[0].TextData("text/plain")
			if html != "<b>hi</b>" || !strings.Contains(plain, "__main__.H") {
				t.Errorf("html %q plain %q", html, plain)
			}
		},
	},
	{
		name: "rich execute_result",
		code: "H()",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			rs := ofType(ev, kernel.EventExecuteResult)
			if len(rs) != 1 {
				t.Fatalf("events %s", describe(ev))
			}
			if html, _ := rs[0].TextData("text/html"); html != "<b>hi</b>" {
				t.Errorf("html %q", html)
			}
		},
	},
	{
		name: "display_id update",
		code: "h = display('a', display_id=True)\nh.update('b')",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if len(ev) != 2 || ev[0].Type != kernel.EventDisplayData || ev[1].Type != kernel.EventUpdateDisplayData {
				t.Fatalf("events %s", describe(ev))
			}
			if ev[0].DisplayID == "" || ev[0].DisplayID != ev[1].DisplayID {
				t.Errorf("display ids %q %q", ev[0].DisplayID, ev[1].DisplayID)
			}
			if s, _ := ev[1].TextData("text/plain"); s != "'b'" {
				t.Errorf("update %q", s)
			}
		},
	},
	{
		name:  "input",
		code:  "a = input('one')\nb = input('two')\nprint(a, b)",
		input: func(*testing.T) func(context.Context, kernel.InputRequest) (string, error) { return answerInput },
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "berth-one berth-two\n" {
				t.Errorf("stdout %q", got)
			}
		},
	},
	{
		name: "input without stdin",
		code: "input('x')",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "StdinNotImplementedError", "", "")
		},
	},
	{
		name:  "tool returns the result",
		code:  "r = tool('add', {'x': 1})\nprint(r['n'])",
		input: toolHandler,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "2\n" {
				t.Errorf("stdout %q; events %s", got, describe(ev))
			}
		},
	},
	{
		name:  "tool error raises ToolError",
		code:  "tool('read', {'path': 'nope'})",
		input: toolHandler,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "ToolError", "no such file: nope", "no such file: nope")
		},
	},
	{
		name:  "tool error is catchable",
		code:  "try:\n    tool('read', path='nope')\nexcept ToolError as e:\n    print('caught', e.tool, e)",
		input: toolHandler,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "caught read no such file: nope\n" {
				t.Errorf("stdout %q; events %s", got, describe(ev))
			}
		},
	},
	{
		name: "tool without stdin",
		code: "tool('read', {})",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "ToolError", "stdin", "")
		},
	},
	{
		name: "top-level await",
		code: "import asyncio\nawait asyncio.sleep(0)\n'awaited'",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "'awaited'" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:     "subprocess output",
		code:     "import subprocess\nsubprocess.run(['echo', 'from-child']).returncode",
		anyOrder: true,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "from-child\n" {
				t.Errorf("stdout %q", got)
			}
			if got := resultText(t, ev); got != "0" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "pyplot figure shown at the end of the cell",
		needs: "matplotlib",
		code:  "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]);",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantPNG(t, ev, 1)
		},
	},
	{
		name:  "plt.show displays at once",
		needs: "matplotlib",
		code:  "import matplotlib.pyplot as plt\nplt.figure()\nplt.plot([3, 1]);\nplt.show()\nprint('after')",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantPNG(t, ev, 1)
			if len(ev) != 2 || ev[1].Type != kernel.EventStream {
				t.Errorf("events %s, want the figure then the print", describe(ev))
			}
		},
	},
	{
		name:  "display of a Figure",
		needs: "matplotlib",
		code:  "from matplotlib.figure import Figure\nfig = Figure()\nfig.add_subplot().plot([3, 1, 2])\ndisplay(fig)",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantPNG(t, ev, 1)
		},
	},
	{
		name:  "pandas DataFrame renders a table",
		needs: "pandas",
		code:  "import pandas as pd\npd.DataFrame({'a': [1, 2]})",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			rs := ofType(ev, kernel.EventExecuteResult)
			if len(rs) != 1 {
				t.Fatalf("events %s", describe(ev))
			}
			if html, _ := rs[0].TextData("text/html"); !strings.Contains(html, "<table") {
				t.Errorf("html %q", html)
			}
		},
	},
}

// wantPNG checks that there are n display_data events with a decodable
// image/png and a text/plain.
func wantPNG(t *testing.T, events []kernel.Event, n int) {
	t.Helper()
	ds := ofType(events, kernel.EventDisplayData)
	if len(ds) != n {
		t.Fatalf("%d display_data, want %d: %s", len(ds), n, describe(events))
	}
	for _, d := range ds {
		b64, ok := d.TextData("image/png")
		if !ok {
			t.Fatalf("no image/png in %v", mimeKeys(d))
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatalf("image/png is not base64: %v", err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(raw))
		if err != nil || cfg.Width < 10 || cfg.Height < 10 {
			t.Errorf("image/png: %+v, %v", cfg, err)
		}
		if plain, _ := d.TextData("text/plain"); !strings.HasPrefix(plain, "<Figure") {
			t.Errorf("text/plain %q", plain)
		}
	}
}

// TestPythonKernels runs the same cells against ipykernel (the
// reference, when installed) and the bundled kernel on every Python
// found, checks each result, and compares the message shapes with
// ipykernel's.
func TestPythonKernels(t *testing.T) {
	var runners []runner
	ref, err := ipykernelRunner()
	if err == nil {
		runners = append(runners, ref)
	} else if os.Getenv("CI") == "true" {
		t.Fatal(err)
	} else {
		t.Logf("no reference kernel: %v", err)
	}
	runners = append(runners, pythonRunners(t)...)
	shapes := map[string]string{}
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			k := start(t, r)
			c := connect(t, k)
			if r.ipykernel {
				rep, _ := run(t, c, IPythonToolShim(), kernel.ExecuteOptions{Silent: true})
				if rep.Status != "ok" {
					t.Fatalf("tool shim: %+v %+v", rep, rep.Error)
				}
			}
			runCases(t, r, c, pythonCases, shapes)
			testKernelInfo(t, r, c)
			testStreaming(t, c, "print('first')\nimport time\ntime.sleep(2)\nprint('second')")
			testExecutionCount(t, c)
			testStopOnError(t, c, "import time\nprint('running', flush=True)\ntime.sleep(1.5)\n1/0")
			testKernelVerifies(t, k, c, "tampered = 'MARKER-AAAA'", "'tampered' in globals()", "False")
			testHeartbeatWhileBusy(t, c, pythonBusyCell(t, c))
			pid := k.cmd.Process.Pid
			testInterrupt(t, c, pid, "interrupt_request stops time.sleep", "import time\nprint('started', flush=True)\ntime.sleep(30)", nil)
			testInterrupt(t, c, pid, "interrupt_request stops input", "print('started', flush=True)\ninput('never answered')", nil)
			testInterrupt(t, c, pid, "SIGINT stops time.sleep", "import time\nprint('started', flush=True)\ntime.sleep(30)", func() error {
				return k.cmd.Process.Signal(syscall.SIGINT)
			})
			t.Run("SIGINT between cells is ignored", func(t *testing.T) {
				if err := k.cmd.Process.Signal(syscall.SIGINT); err != nil {
					t.Fatal(err)
				}
				awaitDelivered(t, k.cmd.Process.Pid, syscall.SIGINT)
				if rep, ev := run(t, c, "'alive'", kernel.ExecuteOptions{}); rep.Status != "ok" || resultText(t, ev) != "'alive'" {
					t.Errorf("after SIGINT: %+v %s", rep, describe(ev))
				}
			})
			testShutdown(t, k, c)
		})
	}
}

func runCases(t *testing.T, r runner, c *kernel.Client, cases []cellCase, shapes map[string]string) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needs != "" {
				if err := exec.Command(r.interpreter, "-c", "import "+tc.needs).Run(); err != nil {
					if r.interpreter == systemPython && os.Getenv("CI") == "true" {
						t.Fatalf("%s cannot import %s; tests/run installs python3-%s", r.interpreter, tc.needs, tc.needs)
					}
					t.Skipf("%s cannot import %s", r.interpreter, tc.needs)
				}
			}
			for _, s := range tc.setup {
				if rep, ev := run(t, c, s, kernel.ExecuteOptions{}); rep.Status != "ok" {
					t.Fatalf("setup %q: %+v %s", s, rep.Error, describe(ev))
				}
			}
			var opts kernel.ExecuteOptions
			if tc.input != nil {
				opts.OnInput = tc.input(t)
			}
			rep, ev := run(t, c, tc.code, opts)
			tc.check(t, rep, ev)
			got := shape(rep, ev)
			if tc.anyOrder {
				parts := strings.Fields(got)
				sort.Strings(parts)
				got = strings.Join(parts, " ")
			}
			if r.ipykernel {
				shapes[tc.name] = got
			} else if want, ok := shapes[tc.name]; ok && got != want {
				t.Errorf("message shape differs from ipykernel's\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

func testKernelInfo(t *testing.T, r runner, c *kernel.Client) {
	t.Run("kernel_info", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
		defer cancel()
		info, err := c.KernelInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status != "ok" || info.ProtocolVersion != kernel.ProtocolVersion {
			t.Errorf("status %q protocol %q", info.Status, info.ProtocolVersion)
		}
		li := info.LanguageInfo
		var want kernel.LanguageInfo
		var version []byte
		if r.lang == Python {
			want = kernel.LanguageInfo{Name: "python", MIMEType: "text/x-python", FileExtension: ".py"}
			version, err = exec.Command(r.interpreter, "-c", "import platform; print(platform.python_version())").Output()
		} else {
			want = kernel.LanguageInfo{Name: "javascript", MIMEType: "application/javascript", FileExtension: ".js"}
			version, err = exec.Command(r.interpreter, "-p", "process.versions.node").Output()
		}
		if err != nil {
			t.Fatal(err)
		}
		want.Version = strings.TrimSpace(string(version))
		if li != want {
			t.Errorf("language_info %+v, want %+v", li, want)
		}
		if !r.ipykernel && info.Implementation != "berth" {
			t.Errorf("implementation %q", info.Implementation)
		}
	})
}

// testStreaming checks that output printed at the start of a cell that
// then works for two seconds arrives well before the cell ends.
func testStreaming(t *testing.T, c *kernel.Client, code string) {
	t.Run("output streams while the cell runs", func(t *testing.T) {
		var first time.Time
		var text strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
		defer cancel()
		rep, err := c.Execute(ctx, code, kernel.ExecuteOptions{OnEvent: func(e kernel.Event) {
			if e.Type == kernel.EventStream && first.IsZero() {
				first = time.Now()
			}
			text.WriteString(e.Text)
		}})
		end := time.Now()
		if err != nil || rep.Status != "ok" {
			t.Fatalf("%v %+v", err, rep)
		}
		if text.String() != "first\nsecond\n" {
			t.Errorf("stdout %q", text.String())
		}
		if first.IsZero() || end.Sub(first) < time.Second {
			t.Errorf("first output arrived %s before the end of a 2s cell; want at least 1s", end.Sub(first))
		}
	})
}

func testExecutionCount(t *testing.T, c *kernel.Client) {
	t.Run("execution_count increments", func(t *testing.T) {
		a, _ := run(t, c, "0", kernel.ExecuteOptions{})
		b, _ := run(t, c, "0", kernel.ExecuteOptions{})
		s, ev := run(t, c, "0", kernel.ExecuteOptions{Silent: true})
		d, _ := run(t, c, "0", kernel.ExecuteOptions{})
		if b.ExecutionCount != a.ExecutionCount+1 || d.ExecutionCount != b.ExecutionCount+1 {
			t.Errorf("counts %d %d (silent %d) %d", a.ExecutionCount, b.ExecutionCount, s.ExecutionCount, d.ExecutionCount)
		}
		if len(ev) != 0 {
			t.Errorf("silent cell published %s", describe(ev))
		}
	})
}

// testKernelVerifies sends a request whose bytes are changed on the way
// (so its signature no longer matches) and checks that the kernel drops
// it: no reply, no effect, and the kernel keeps serving.
func testKernelVerifies(t *testing.T, k *testKernel, c *kernel.Client, tampered, probe, want string) {
	t.Run("kernel drops badly signed requests", func(t *testing.T) {
		_, shellAddr, err := k.info.Endpoint(kernel.Shell)
		if err != nil {
			t.Fatal(err)
		}
		dial := func(ctx context.Context, network, address string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, address)
			if err != nil || address != shellAddr {
				return conn, err
			}
			return &tamperWrites{Conn: conn, from: []byte("MARKER-AAAA"), to: []byte("MARKER-BBBB")}, nil
		}
		c2 := connectWith(t, k, dial)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if _, err := c2.Execute(ctx, tampered, kernel.ExecuteOptions{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("tampered request: %v, want no reply (DeadlineExceeded)", err)
		}
		c2.Close()
		if _, ev := run(t, c, probe, kernel.ExecuteOptions{}); resultText(t, ev) != want {
			t.Errorf("%s = %s, want %s: the tampered cell ran", probe, describe(ev), want)
		}
	})
}

// tamperWrites replaces from with to (same length) in what it writes,
// which keeps ZMTP framing intact but breaks the message's HMAC.
type tamperWrites struct {
	net.Conn
	from, to []byte
}

func (c *tamperWrites) Write(p []byte) (int, error) {
	return c.Conn.Write(bytes.ReplaceAll(p, c.from, c.to))
}

// pythonBusyCell returns a cell that holds the GIL in one C call for
// about five seconds (calibrated on this machine).
func pythonBusyCell(t *testing.T, c *kernel.Client) string {
	t.Helper()
	_, ev := run(t, c, "import time\n_t0 = time.perf_counter()\nsum(range(10**7))\ntime.perf_counter() - _t0", kernel.ExecuteOptions{})
	d, err := strconv.ParseFloat(resultText(t, ev), 64)
	if err != nil || d <= 0 {
		t.Fatalf("calibration: %v", err)
	}
	return fmt.Sprintf("sum(range(%d))", int(1e7*5/d))
}

// testHeartbeatWhileBusy runs a cell that keeps the interpreter busy for
// longer than kernel.DefaultTimeToDead and checks the client still sees
// the kernel alive.
func testHeartbeatWhileBusy(t *testing.T, c *kernel.Client, code string) {
	t.Run("heartbeat answers while a cell is busy", func(t *testing.T) {
		begin := time.Now()
		rep, ev := run(t, c, code, kernel.ExecuteOptions{})
		took := time.Since(begin)
		if rep.Status != "ok" {
			t.Fatalf("%+v %s", rep.Error, describe(ev))
		}
		if err := c.Err(); err != nil {
			t.Fatalf("client reports %v after a busy cell", err)
		}
		if took < kernel.DefaultTimeToDead {
			t.Logf("the busy cell took only %s; it proves little", took)
		}
	})
}

// testInterrupt starts code, waits for its first output and, with a pid,
// for the kernel process to block in the wait that follows it (a
// JavaScript kernel, pid 0, is interruptible all through), interrupts it
// (Client.Interrupt when signal is nil) and checks that the cell ends
// with KeyboardInterrupt and the kernel still answers.
func testInterrupt(t *testing.T, c *kernel.Client, pid int, name, code string, signal func() error) {
	t.Run(name, func(t *testing.T) {
		started := make(chan struct{})
		var once sync.Once
		type result struct {
			r   *kernel.ExecuteReply
			err error
		}
		res := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
			defer cancel()
			r, err := c.Execute(ctx, code, kernel.ExecuteOptions{
				OnEvent: func(kernel.Event) { once.Do(func() { close(started) }) },
				OnInput: func(ctx context.Context, _ kernel.InputRequest) (string, error) {
					<-ctx.Done()
					return "", ctx.Err()
				},
			})
			res <- result{r, err}
		}()
		select {
		case <-started:
		case got := <-res:
			t.Fatalf("the cell ended before it was interrupted: %+v %v", got.r, got.err)
		}
		// A SIGINT that lands between the print and the sleep's system call
		// only sets CPython's flag, which a C call does not check: the cell
		// would sleep on. Interrupt once the main thread is blocked.
		if pid != 0 {
			awaitWaiting(t, pid)
		}
		begin := time.Now()
		if signal != nil {
			if err := signal(); err != nil {
				t.Fatal(err)
			}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c.Interrupt(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := <-res
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.r.Status != "error" || got.r.Error.Name != "KeyboardInterrupt" {
			t.Errorf("reply %+v %+v, want KeyboardInterrupt", got.r, got.r.Error)
		}
		if took := time.Since(begin); took > 10*time.Second {
			t.Errorf("the interrupt took %s", took)
		}
		if r, ev := run(t, c, "1+1", kernel.ExecuteOptions{}); r.Status != "ok" || resultText(t, ev) != "2" {
			t.Errorf("after the interrupt: %+v %s", r, describe(ev))
		}
	})
}

// testStopOnError queues a cell behind a failing one run with
// StopOnError and checks that the queued cell is aborted. failing prints
// a line first, which says it is running, and fails a while later.
func testStopOnError(t *testing.T, c *kernel.Client, failing string) {
	t.Run("stop_on_error aborts queued cells", func(t *testing.T) {
		first := make(chan *kernel.ExecuteReply, 1)
		running := make(chan struct{})
		var once sync.Once
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
			defer cancel()
			r, err := c.Execute(ctx, failing, kernel.ExecuteOptions{
				StopOnError: true,
				OnEvent:     func(kernel.Event) { once.Do(func() { close(running) }) },
			})
			if err != nil {
				t.Error(err)
			}
			first <- r
		}()
		select {
		case <-running:
		case r := <-first:
			t.Fatalf("the failing cell ended before it printed: %+v", r)
		}
		r2, ev := run(t, c, "'queued'", kernel.ExecuteOptions{})
		r1 := <-first
		if r1 == nil || r1.Status != "error" {
			t.Fatalf("failing cell: %+v", r1)
		}
		if r2.Status != "aborted" || len(ev) != 0 {
			t.Errorf("queued cell: %+v %s, want aborted", r2, describe(ev))
		}
		// ipykernel keeps aborting what arrives within a short window after
		// the error (its stop_on_error_timeout), which a loaded machine can
		// stretch: a cell aborted then is retried, a cell that never runs
		// again is the failure.
		var r3 *kernel.ExecuteReply
		var ev3 []kernel.Event
		for try := 0; try < 10; try++ {
			if r3, ev3 = run(t, c, "'next'", kernel.ExecuteOptions{}); r3.Status != "aborted" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if r3.Status != "ok" || resultText(t, ev3) != "'next'" {
			t.Errorf("after the abort: %+v %s", r3, describe(ev3))
		}
	})
}

// awaitDelivered waits until no thread of process pid has sig pending:
// the kernel has delivered it, and the process's handler ran (for a
// Python kernel, its C part, whose Python part runs on the main thread's
// next bytecode or interrupted wait, long before another cell can arrive).
func awaitDelivered(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	bit := uint64(1) << (sig - 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending, err := pendingSignals(pid)
		if err != nil {
			t.Fatal(err)
		}
		if pending&bit == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still has %v pending after 10 s", pid, sig)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitWaiting waits until the main thread of process pid is blocked in
// a system call (state S in its stat): a signal then interrupts the call
// and CPython runs its handler at once, whatever the call is (a sleep, a
// poll, a lock of the input wait, a pipe write).
func awaitWaiting(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name's closing parenthesis.
		stat := string(b)
		if i := strings.LastIndexByte(stat, ')'); i >= 0 && strings.HasPrefix(stat[i+1:], " S") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kernel's main thread (pid %d) is not waiting after 10 s: %s", pid, stat)
		}
		time.Sleep(time.Millisecond)
	}
}

// pendingSignals returns the signals pending for process pid or any of its
// threads, as a mask with bit n-1 for signal n (/proc's SigPnd and ShdPnd).
func pendingSignals(pid int) (uint64, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("threads of process %d: %v", pid, err)
	}
	var mask uint64
	for _, f := range append(files, fmt.Sprintf("/proc/%d/status", pid)) {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // a thread that ended
		}
		if err != nil {
			return 0, err
		}
		for line := range strings.Lines(string(b)) {
			name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || name != "SigPnd" && name != "ShdPnd" {
				continue
			}
			m, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %v", f, name, err)
			}
			mask |= m
		}
	}
	return mask, nil
}

func testShutdown(t *testing.T, k *testKernel, c *kernel.Client) {
	t.Run("shutdown", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx, false); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(c.Err(), kernel.ErrDead) {
			t.Errorf("Err after shutdown = %v", c.Err())
		}
		select {
		case <-k.done:
			if k.err != nil {
				t.Errorf("kernel exit: %v", k.err)
			}
		case <-ctx.Done():
			t.Fatal("kernel did not exit after shutdown_reply")
		}
	})
}

// TestKilledKernelIsDead kills each kernel's process (only the main one:
// the Python kernel's heartbeat child must notice and stop) while a cell
// runs, and checks that the heartbeat reports it dead.
func TestKilledKernelIsDead(t *testing.T) {
	runners := append(pythonRunners(t), nodeRunners(t)...)
	cells := map[string]string{
		Python:     "import time\nprint('started', flush=True)\ntime.sleep(60)",
		JavaScript: "console.log('started')\nawait new Promise(r => setTimeout(r, 60000))",
	}
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) {
			k := start(t, r)
			c := connect(t, k)
			started := make(chan struct{})
			var once sync.Once
			errc := make(chan error, 1)
			go func() {
				_, err := c.Execute(context.Background(), cells[r.lang], kernel.ExecuteOptions{
					OnEvent: func(kernel.Event) { once.Do(func() { close(started) }) },
				})
				errc <- err
			}()
			<-started
			if err := k.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-c.Dead():
			case <-time.After(deadTimeout):
				t.Fatal("the heartbeat did not report the killed kernel dead")
			}
			if !errors.Is(c.Err(), kernel.ErrDead) {
				t.Errorf("Err = %v, want ErrDead", c.Err())
			}
			if err := <-errc; !errors.Is(err, kernel.ErrDead) {
				t.Errorf("pending Execute = %v, want ErrDead", err)
			}
		})
	}
}

// TestIPC runs each bundled kernel on Unix sockets (transport ipc).
func TestIPC(t *testing.T) {
	for _, r := range []runner{pythonRunners(t)[0], nodeRunners(t)[0]} {
		t.Run(r.name, func(t *testing.T) {
			k := startWith(t, r, kernel.ConnectionConfig{Transport: "ipc", KernelName: r.lang})
			c := connect(t, k)
			if rep, ev := run(t, c, "6*7", kernel.ExecuteOptions{}); rep.Status != "ok" || resultText(t, ev) != "42" {
				t.Errorf("6*7: %+v %s", rep, describe(ev))
			}
			testShutdown(t, k, c)
			for _, ch := range []kernel.Channel{kernel.Shell, kernel.IOPub, kernel.Stdin, kernel.Control, kernel.Heartbeat} {
				_, path, _ := k.info.Endpoint(ch)
				if _, err := os.Stat(path); err == nil {
					t.Errorf("%s socket %s left behind", ch, path)
				}
			}
		})
	}
}

var javaScriptCases = []cellCase{
	{
		name: "last expression echoed",
		code: "1+1",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "2" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "let persists",
		setup: []string{"let x = 41"},
		code:  "x + 1",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "42" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "a cell can be re-run",
		setup: []string{"const y = 1", "const y = 2"},
		code:  "let y = 3; y",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "3" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "classes, functions and destructuring persist",
		setup: []string{"class P { m() { return 'm' } }\nfunction f() { return 'f' }\nconst {a, b: [c, d = 'd']} = {a: 'a', b: ['c']}"},
		code:  "new P().m() + f() + a + c + d",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "'mfacd'" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "top-level await and its declarations persist",
		setup: []string{"const z = await Promise.resolve(20)\nasync function g() { return 1 }"},
		code:  "z + await g()",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "21" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name: "import statement",
		code: "import path from 'path'\nimport { basename as bn } from 'node:path'\npath.sep + bn('/a/b.txt')",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "'/b.txt'" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name: "require",
		code: "require('os').EOL === '\\n'",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "true" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name: "object literal cell",
		code: "{a: 1}",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "{ a: 1 }" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "declarations and undefined are silent",
		setup: []string{"let q = 1"},
		code:  "undefined",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if len(ev) != 0 || r.Status != "ok" {
				t.Errorf("events %s, reply %+v", describe(ev), r)
			}
		},
	},
	{
		name: "console streams",
		code: "console.log('hello'); console.error('oops'); process.stdout.write('raw\\n')",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "hello\nraw\n" {
				t.Errorf("stdout %q", got)
			}
			if got := streamText(ev, "stderr"); got != "oops\n" {
				t.Errorf("stderr %q", got)
			}
		},
	},
	{
		name: "exception",
		code: "null.foo",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "TypeError", "null", "<cell-")
		},
	},
	{
		name:  "exception in an async cell",
		setup: []string{"async function fail() { await null; throw new RangeError('too far') }"},
		code:  "await fail()",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "RangeError", "too far", "fail")
		},
	},
	{
		name: "syntax error",
		code: "let = ;",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "SyntaxError", "", "let = ;")
		},
	},
	{
		name: "display of _repr_html_",
		code: "display({ _repr_html_() { return '<b>hi</b>' } })",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			ds := ofType(ev, kernel.EventDisplayData)
			if len(ds) != 1 {
				t.Fatalf("events %s", describe(ev))
			}
			html, _ := ds[0].TextData("text/html")
			_, plain := ds[0].TextData("text/plain")
			if html != "<b>hi</b>" || !plain {
				t.Errorf("html %q, text/plain %t", html, plain)
			}
		},
	},
	{
		name: "display helpers",
		code: "display.html('<i>x</i>'); display.png(" + strconv.Quote(tinyPNG()) + ")",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			ds := ofType(ev, kernel.EventDisplayData)
			if len(ds) != 2 {
				t.Fatalf("events %s", describe(ev))
			}
			if html, _ := ds[0].TextData("text/html"); html != "<i>x</i>" {
				t.Errorf("html %q", html)
			}
			b64, _ := ds[1].TextData("image/png")
			raw, _ := base64.StdEncoding.DecodeString(b64)
			if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
				t.Errorf("image/png: %v", err)
			}
		},
	},
	{
		name:  "input",
		code:  "const a1 = await input('one')\nconst b1 = await input('two')\nconsole.log(a1, b1)",
		input: func(*testing.T) func(context.Context, kernel.InputRequest) (string, error) { return answerInput },
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "berth-one berth-two\n" {
				t.Errorf("stdout %q; events %s", got, describe(ev))
			}
		},
	},
	{
		name: "input without stdin",
		code: "await input('x')",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "StdinNotImplementedError", "", "")
		},
	},
	{
		name:  "tool returns the result",
		code:  "const res = await tool('add', {x: 1})\nres.n",
		input: toolHandler,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "2" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "concurrent tool calls",
		code:  "const [t1, t2] = await Promise.all([tool('add', {x: 1}), tool('add', {x: 10})]);\n[t1.n, t2.n]",
		input: toolHandler,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := resultText(t, ev); got != "[ 2, 11 ]" {
				t.Errorf("result %q", got)
			}
		},
	},
	{
		name:  "tool error raises ToolError",
		code:  "await tool('read', {path: 'nope'})",
		input: toolHandler,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "ToolError", "no such file: nope", "no such file: nope")
		},
	},
	{
		name:  "tool error is catchable",
		code:  "try { await tool('read', {path: 'nope'}) } catch (e) { console.log('caught', e.name, e.tool, e.message) }",
		input: toolHandler,
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stdout"); got != "caught ToolError read no such file: nope\n" {
				t.Errorf("stdout %q; events %s", got, describe(ev))
			}
		},
	},
	{
		name: "tool without stdin",
		code: "await tool('read', {})",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			wantError(t, r, ev, "ToolError", "stdin", "")
		},
	},
	{
		name: "a stray async error does not kill the kernel",
		code: "setTimeout(() => { throw new Error('later') }, 10)\nawait new Promise(r => setTimeout(r, 300))\n'survived'",
		check: func(t *testing.T, r *kernel.ExecuteReply, ev []kernel.Event) {
			if got := streamText(ev, "stderr"); !strings.Contains(got, "later") {
				t.Errorf("stderr %q", got)
			}
			if got := resultText(t, ev); got != "'survived'" {
				t.Errorf("result %q", got)
			}
		},
	},
}

func tinyPNG() string {
	img := image.NewRGBA(image.Rect(0, 0, 2, 2))
	img.Set(0, 0, color.RGBA{255, 0, 0, 255})
	var b bytes.Buffer
	png.Encode(&b, img)
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func TestJavaScriptKernel(t *testing.T) {
	for _, r := range nodeRunners(t) {
		t.Run(r.name, func(t *testing.T) {
			k := start(t, r)
			c := connect(t, k)
			runCases(t, r, c, javaScriptCases, nil)
			testKernelInfo(t, r, c)
			testStreaming(t, c, "console.log('first')\nconst end = Date.now() + 2000\nwhile (Date.now() < end) {}\nconsole.log('second')")
			testExecutionCount(t, c)
			testStopOnError(t, c, "console.log('running')\nawait new Promise(r => setTimeout(r, 1500))\nnull.x")
			testKernelVerifies(t, k, c, "globalThis.tampered = 'MARKER-AAAA'", "typeof tampered", "'undefined'")
			testHeartbeatWhileBusy(t, c, "const until = Date.now() + 5000\nwhile (Date.now() < until) {}")
			testInterrupt(t, c, 0, "interrupt_request stops a synchronous loop", "console.log('started')\nwhile (true) {}", nil)
			testInterrupt(t, c, 0, "interrupt_request stops an await", "console.log('started')\nawait new Promise(r => setTimeout(r, 30000))", nil)
			testInterrupt(t, c, 0, "interrupt_request stops input", "console.log('started')\nawait input('never answered')", nil)
			testInterrupt(t, c, 0, "SIGINT stops a synchronous loop", "console.log('started')\nwhile (true) {}", func() error {
				return k.cmd.Process.Signal(syscall.SIGINT)
			})
			testShutdown(t, k, c)
		})
	}
}

// TestRefusesUnsigned checks that a kernel will not run with an empty key.
func TestRefusesUnsigned(t *testing.T) {
	for _, r := range []runner{pythonRunners(t)[0], nodeRunners(t)[0]} {
		t.Run(r.name, func(t *testing.T) {
			dir := t.TempDir()
			info, err := kernel.NewConnectionInfo(kernel.ConnectionConfig{})
			if err != nil {
				t.Fatal(err)
			}
			info.Key = ""
			file, _ := json.Marshal(info)
			connPath := filepath.Join(dir, "conn.json")
			k, _ := Lookup(r.lang)
			script := filepath.Join(dir, k.File)
			if err := os.WriteFile(connPath, file, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(script, []byte(k.Source), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			argv := k.Argv(r.interpreter, script, connPath)
			out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !strings.Contains(string(out), "no key") {
				t.Errorf("kernel with an empty key: %v, output %q; want a refusal", err, out)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		in, lang, file, interp string
	}{
		{"python", Python, "berth_kernel.py", "python3"},
		{"Python3", Python, "berth_kernel.py", "python3"},
		{"javascript", JavaScript, "berth_kernel.js", "node"},
		{"js", JavaScript, "berth_kernel.js", "node"},
	} {
		k, err := Lookup(tc.in)
		if err != nil || k.Language != tc.lang || k.File != tc.file || k.Interpreter != tc.interp || len(k.Source) < 1000 {
			t.Errorf("Lookup(%q) = %+v (source %d bytes), %v", tc.in, k.Language, len(k.Source), err)
		}
		src, err := Source(tc.in)
		if err != nil || string(src) != k.Source {
			t.Errorf("Source(%q) differs from Lookup: %v", tc.in, err)
		}
	}
	if _, err := Lookup("ruby"); !errors.Is(err, ErrUnknownLanguage) {
		t.Errorf("Lookup(ruby) = %v, want ErrUnknownLanguage", err)
	}
	k, _ := Lookup("python")
	got := strings.Join(k.Argv("", "/w/berth_kernel.py", "/w/conn.json"), " ")
	if got != "python3 /w/berth_kernel.py -f /w/conn.json" {
		t.Errorf("Argv = %q", got)
	}
}

func TestToolEnvelope(t *testing.T) {
	for _, tc := range []struct {
		prompt string
		ok     bool
		tool   string
		args   string
	}{
		{`{"berth_tool": "read", "args": {"path": "a.go"}}`, true, "read", `{"path": "a.go"}`},
		{`{"berth_tool":"ls","args":{}}`, true, "ls", `{}`},
		{`{"berth_tool": "ls"}`, true, "ls", `{}`},
		{`Your name? `, false, "", ""},
		{`{"berth_tool": ""}`, false, "", ""},
		{`{"other": 1}`, false, "", ""},
		{`{"berth_tool": "x", `, false, "", ""},
	} {
		req, ok := ParseToolRequest(tc.prompt)
		if ok != tc.ok || req.Tool != tc.tool || (ok && string(req.Args) != tc.args) {
			t.Errorf("ParseToolRequest(%q) = %+v (args %s), %t", tc.prompt, req, req.Args, ok)
		}
	}
	v, err := ReplyOK(map[string]int{"n": 2})
	if err != nil || v != `{"ok":true,"result":{"n":2}}` {
		t.Errorf("ReplyOK = %s, %v", v, err)
	}
	if v, _ := ReplyOK(nil); v != `{"ok":true,"result":null}` {
		t.Errorf("ReplyOK(nil) = %s", v)
	}
	if v := ReplyError("denied"); v != `{"ok":false,"error":"denied"}` {
		t.Errorf("ReplyError = %s", v)
	}
	if _, err := ReplyOK(make(chan int)); err == nil {
		t.Error("ReplyOK accepted a channel")
	}
}

// TestSuspendedKernelIsNotDead freezes a kernel with its whole process
// group, as a docker pause freezes a container. While Suspended says its
// sandbox is paused, the silent heartbeat does not declare it dead,
// however many times time-to-dead passes, and once thawed it runs cells
// with its state intact. The same freeze without that is death.
func TestSuspendedKernelIsNotDead(t *testing.T) {
	r := pythonRunners(t)[0]
	k := start(t, r)
	var paused atomic.Bool
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	c, err := kernel.Connect(ctx, kernel.Config{
		Conn: k.info, HeartbeatInterval: 100 * time.Millisecond, TimeToDead: 300 * time.Millisecond,
		Suspended: func(context.Context) bool { return paused.Load() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if rep, ev := run(t, c, "x = 41", kernel.ExecuteOptions{}); rep.Status != "ok" {
		t.Fatalf("%+v %s", rep, describe(ev))
	}
	group := -k.cmd.Process.Pid
	paused.Store(true)
	if err := syscall.Kill(group, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Nothing is to happen here; wait many times time-to-dead for it.
	select {
	case <-c.Dead():
		syscall.Kill(group, syscall.SIGCONT)
		t.Fatalf("a kernel of a paused sandbox was declared dead: %v", c.Err())
	case <-time.After(2 * time.Second):
	}
	syscall.Kill(group, syscall.SIGCONT)
	paused.Store(false)
	if rep, ev := run(t, c, "x + 1", kernel.ExecuteOptions{}); rep.Status != "ok" || resultText(t, ev) != "42" {
		t.Fatalf("after the pause: %+v %s", rep, describe(ev))
	}
	if err := syscall.Kill(group, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(group, syscall.SIGCONT)
	select {
	case <-c.Dead():
	case <-time.After(deadTimeout):
		t.Fatal("a frozen kernel whose sandbox answers was not declared dead")
	}
}
