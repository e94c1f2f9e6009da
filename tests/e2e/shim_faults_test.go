package e2e

import (
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
)

// The bounds the fault tests wait for, none of them a speed claim: each is
// berth's own deadline plus room for a loaded machine.
const (
	// reapWithin bounds how long a killed supervisor's tree may take to
	// be gone (the keeper's sweep, or berth's on the next call).
	reapWithin = 15 * time.Second
	// lspStuckTimeout is the --lsp-request-timeout of the stopped-server
	// test, and lspStuckSlack what a call may take beyond it (the
	// diagnostics wait of a write is 10 s).
	lspStuckTimeout = 3 * time.Second
	lspStuckSlack   = 10 * time.Second
)

// newAPIConfig is newAPI with more of the controller's configuration set
// by mod (the default tools, the test's providers and label key).
func newAPIConfig(t *testing.T, mod func(*controller.Config)) *api {
	t.Helper()
	cfg := controller.Config{
		Providers:       providers(t),
		LabelKey:        labelKey,
		Registerer:      prometheus.NewRegistry(),
		AllowUnlabelled: backend() == backendContainerd,
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(c, httpapi.Options{Token: token}))
	t.Cleanup(func() {
		srv.Close()
		if err := c.Close(); err != nil {
			t.Logf("controller close: %v", err)
		}
	})
	return &api{t: t, url: srv.URL, c: c}
}

// proc is one process of the container, from its /proc/PID/stat.
type proc struct {
	pid, ppid int
	state     string // R, S, D, T, Z, …
	comm      string
	args      string // the command line, NULs as spaces; empty for a zombie
}

func (p proc) String() string {
	return fmt.Sprintf("%d<%d %s %s [%s]", p.pid, p.ppid, p.state, p.comm, p.args)
}

// procTable lists the container's processes from /proc, seen by the
// test's own exec (whose shell and its children are left out).
func (c *container) procTable(t *testing.T) []proc {
	t.Helper()
	out := c.sh(t, `me=$$; for p in /proc/[0-9]*; do s=$(cat $p/stat 2>/dev/null) || continue; `+
		`a=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); echo "$s|$a"; done; echo "self $me"`)
	var procs []proc
	self := -1
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if s, ok := strings.CutPrefix(l, "self "); ok {
			self, _ = strconv.Atoi(s)
			continue
		}
		stat, args, _ := strings.Cut(l, "|")
		open, close := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(stat[close+1:])
		if len(f) < 2 {
			continue
		}
		var p proc
		p.pid, _ = strconv.Atoi(strings.TrimSpace(stat[:open]))
		p.comm = stat[open+1 : close]
		p.state = f[0]
		p.ppid, _ = strconv.Atoi(f[1])
		p.args = strings.TrimSpace(args)
		procs = append(procs, p)
	}
	var mine []proc
	for _, p := range procs {
		if p.pid != self && p.ppid != self {
			mine = append(mine, p)
		}
	}
	return mine
}

// inState lists the processes in any of the states ("Z", "T").
func inState(procs []proc, states ...string) []proc {
	var out []proc
	for _, p := range procs {
		for _, s := range states {
			if p.state == s {
				out = append(out, p)
			}
		}
	}
	return out
}

// tree returns root and its descendants.
func tree(procs []proc, root int) []proc {
	in := map[int]bool{root: true}
	for grew := true; grew; {
		grew = false
		for _, p := range procs {
			if in[p.ppid] && !in[p.pid] {
				in[p.pid], grew = true, true
			}
		}
	}
	var out []proc
	for _, p := range procs {
		if in[p.pid] {
			out = append(out, p)
		}
	}
	return out
}

// supervisorOf finds the agent process supervising the program whose
// command line contains word: for a supervised program the nearest
// "berth-shim run-supervised" above it, and the keeper above that; for the
// file server ("berth-shim fs") the server itself. It returns the
// process to kill and the whole tree that must go with it.
func supervisorOf(t *testing.T, procs []proc, word string) (proc, []proc) {
	t.Helper()
	byPID := map[int]proc{}
	for _, p := range procs {
		byPID[p.pid] = p
	}
	for _, p := range procs {
		if !strings.Contains(p.args, word) || strings.Contains(p.args, "berth-shim run") {
			continue
		}
		if word == "berth-shim fs" {
			return p, tree(procs, p.pid)
		}
		for q, ok := byPID[p.ppid]; ok; q, ok = byPID[q.ppid] {
			if strings.Contains(q.args, "berth-shim run-supervised") {
				root := q.pid
				if k, ok := byPID[q.ppid]; ok && strings.Contains(k.args, "berth-shim run") {
					root = k.pid // the keeper goes too
				}
				return q, tree(procs, root)
			}
		}
	}
	t.Fatalf("no agent process supervises %q in the container: %v", word, procs)
	return proc{}, nil
}

// awaitTreeGone waits until no process of the tree (same pid and command
// line) exists and no process of the container is a zombie.
func awaitTreeGone(t *testing.T, ctr *container, gone []proc) {
	t.Helper()
	var left []proc
	deadline := time.Now().Add(reapWithin)
	for {
		procs := ctr.procTable(t)
		left = inState(procs, "Z")
		for _, p := range procs {
			for _, g := range gone {
				if p.pid == g.pid && p.args == g.args && p.state != "Z" {
					left = append(left, p)
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%v after the supervisor was killed: left of its tree or zombies: %v\nall: %v", reapWithin, left, procs)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// noticeWithin bounds how long after a killed tree is gone berth may
// still take the program for alive (its exec stream's end travels through
// the engine).
const noticeWithin = 5 * time.Second

// pyModule is the module the language-server tests hover in.
const pyModule = "def hello(name):\n    \"\"\"Greet name.\"\"\"\n    return 'hi ' + name\n\n\nhello('x')\n"

// TestShimKilled: with a kernel, a language server, a debug adapter
// stopped at a breakpoint and a file server live in one run, kill -9 the
// agent process that supervises each, one at a
// time (as the OOM killer would): within reapWithin nothing of its tree is
// left, not even a zombie, in a container whose PID 1 (sleep infinity)
// never reaps; and the next call of that tool works — eval on a new kernel
// that says the old one's state was lost.
func TestShimKilled(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	ctr.put(t, "main.py", pyModule)
	a := newAPI(t)
	run, _ := a.open(ctr.conv)

	hover := func(t *testing.T) toolReply {
		t.Helper()
		return a.callTool(t, run, "lsp", map[string]any{"action": "hover", "file": "main.py", "line": 1, "symbol": "hello"})
	}
	if r := a.callTool(t, run, "eval", map[string]any{"code": "x = 41", "description": "set x in the kernel before its supervisor dies"}); r.IsError {
		t.Fatalf("eval: %s", r.texts())
	}
	if r := hover(t); r.IsError || !strings.Contains(r.texts(), "Greet name") {
		t.Fatalf("hover: %s", r.texts())
	}
	if r := a.callTool(t, run, "write", map[string]any{"path": "w.txt", "content": "one\n"}); r.IsError {
		t.Fatalf("write: %s", r.texts())
	}

	debug := func(t *testing.T, args map[string]any) toolReply {
		t.Helper()
		return a.callTool(t, run, "debug", args)
	}
	stopAtBreakpoint := func(t *testing.T) {
		t.Helper()
		ctr.put(t, "prog.py", "total = 0\nfor i in range(3):\n    total += i\nprint(total)\n")
		if r := debug(t, map[string]any{"op": "breakpoints", "file": "prog.py", "lines": []int{3}}); r.IsError {
			t.Fatalf("breakpoints: %s", r.texts())
		}
		if r := debug(t, map[string]any{"op": "launch", "program": "prog.py"}); r.IsError || !strings.Contains(r.texts(), "prog.py:3") {
			t.Fatalf("launch: %s; want a stop at prog.py:3", r.texts())
		}
	}

	tests := []struct {
		name  string
		word  string             // in the supervised program's command line
		setup func(t *testing.T) // starts the program, when the run has none yet
		after func(t *testing.T)
	}{
		{"kernel", "ipykernel", nil, func(t *testing.T) {
			r := a.callTool(t, run, "eval", map[string]any{"code": "y = 21\nprint(y * 2)", "description": "compute on the new kernel after the supervisor died"})
			if r.IsError || !strings.Contains(r.texts(), "42") {
				t.Errorf("eval after its supervisor was killed: %s; want 42 from a new kernel (a new cell wrongly blamed for the old kernel's death is a known kernel/tools/eval bug)", r.texts())
			}
			t.Logf("eval after the kill: %s", r.texts())
			if k := matching(ctr.procTable(t), "ipykernel"); len(k) > 1 {
				t.Errorf("more than one kernel in the container (the old one survived its supervisor?): %v", k)
			}
		}},
		{"language server", "pylsp", nil, func(t *testing.T) {
			if r := hover(t); r.IsError || !strings.Contains(r.texts(), "Greet name") {
				t.Errorf("hover after its supervisor was killed: %s", r.texts())
			}
		}},
		{"debug adapter", "debugpy.adapter", stopAtBreakpoint, func(t *testing.T) {
			// berth learns of the adapter's end from its exec stream, a
			// moment after the process table shows it gone.
			var r toolReply
			for deadline := time.Now().Add(noticeWithin); ; time.Sleep(100 * time.Millisecond) {
				r = debug(t, map[string]any{"op": "status"})
				if strings.Contains(r.texts(), "no debug session") {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("status %v after the adapter's supervisor was killed still shows the session as live: %s", noticeWithin, r.texts())
					break
				}
			}
			t.Logf("debug status after the kill: %s", r.texts())
			// The session's end gave the conversation's claim back: a new
			// launch stops again, with a new adapter.
			stopAtBreakpoint(t)
			if r := debug(t, map[string]any{"op": "terminate"}); r.IsError {
				t.Errorf("terminate: %s", r.texts())
			}
			if d := matching(ctr.procTable(t), "debugpy"); len(d) != 0 {
				t.Errorf("debugpy processes left after terminate: %v", d)
			}
		}},
		{"file server", "berth-shim fs", nil, func(t *testing.T) {
			if r := a.callTool(t, run, "write", map[string]any{"path": "w.txt", "content": "two\n"}); r.IsError {
				t.Errorf("write after the file server was killed: %s (\"unexpected EOF\" is a known sandbox/shim bug: an idle file server retired)", r.texts())
			}
			if r := a.callTool(t, run, "read", map[string]any{"path": "w.txt"}); r.IsError || !strings.Contains(r.texts(), "two") {
				t.Errorf("read after the file server was killed: %s", r.texts())
			}
			if got := ctr.cat(t, workspace+"/w.txt"); got != "two\n" {
				t.Errorf("w.txt in the container: %q", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup(t)
			}
			procs := ctr.procTable(t)
			victim, group := supervisorOf(t, procs, tt.word)
			t.Logf("killing %v; its tree: %v", victim, group)
			ctr.sh(t, fmt.Sprintf("kill -9 %d", victim.pid))
			awaitTreeGone(t, ctr, group)
			tt.after(t)
			if z := inState(ctr.procTable(t), "Z"); len(z) != 0 {
				t.Errorf("zombies after the next call: %v", z)
			}
		})
	}
}

// matching lists the live processes whose command line contains word and
// that are not an agent process.
func matching(procs []proc, word string) []proc {
	var out []proc
	for _, p := range procs {
		if strings.Contains(p.args, word) && !strings.Contains(p.args, "berth-shim") && p.state != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// TestLanguageServerStopped: a language server that stops answering
// (SIGSTOP: stuck, not dead) costs one call its request deadline
// (--lsp-request-timeout), not the run: hover fails within the deadline
// naming the server and lsp reload; a read during the stuck call answers
// without waiting for it; a write is applied and answers within the
// bound; after lsp reload hover works and nothing is left stopped or a
// zombie.
func TestLanguageServerStopped(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	ctr.put(t, "main.py", pyModule)
	a := newAPIConfig(t, func(c *controller.Config) { c.LSPRequestTimeout = lspStuckTimeout })
	run, _ := a.open(ctr.conv)
	hoverArgs := map[string]any{"action": "hover", "file": "main.py", "line": 1, "symbol": "hello"}
	// pylsp's first answer (its start, jedi's first inference) may take
	// longer than the short deadline on a loaded machine: ask until it
	// answers.
	for deadline := time.Now().Add(time.Minute); ; {
		r := a.callTool(t, run, "lsp", hoverArgs)
		if !r.IsError && strings.Contains(r.texts(), "Greet name") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hover before: %s", r.texts())
		}
	}
	// The server only, not the agent processes supervising it.
	ctr.sh(t, "pkill -STOP -x pylsp")
	stopped := inState(ctr.procTable(t), "T")
	if len(stopped) != 1 || stopped[0].comm != "pylsp" {
		t.Fatalf("want pylsp alone stopped, got %v", stopped)
	}
	t.Cleanup(func() { dockerCLI(t.Context(), "exec", ctr.id, "pkill", "-CONT", "-x", "pylsp") })

	type answer struct {
		r    toolReply
		took time.Duration
	}
	hovered := make(chan answer, 1)
	start := time.Now()
	go func() {
		r := a.do("POST", "/v1/runs/"+run+"/tools/lsp", token, `{"args":{"action":"hover","file":"main.py","line":1,"symbol":"hello"}}`)
		var res toolReply
		if r.status == 200 {
			r.decode(t, &res)
		} else {
			res.IsError = true
			res.Content = append(res.Content, struct{ Type, Text, MimeType, Data string }{Type: "text", Text: r.String()})
		}
		hovered <- answer{res, time.Since(start)}
	}()

	// A read while the hover is stuck is not held by it.
	time.Sleep(500 * time.Millisecond)
	if r := a.callTool(t, run, "read", map[string]any{"path": "hello.txt"}); r.IsError || !strings.Contains(r.texts(), "hello") {
		t.Errorf("read during the stuck hover: %s", r.texts())
	}
	select {
	case h := <-hovered:
		t.Fatalf("the hover answered before the read came back (%v): %s; the server was not stuck", h.took, h.r.texts())
	default:
	}
	// A write is applied, and answers within the bound even though its
	// diagnostics come from the stuck server.
	wstart := time.Now()
	w := a.callTool(t, run, "write", map[string]any{"path": "main.py", "content": pyModule + "\nhello('y')\n"})
	if took := time.Since(wstart); took > lspStuckTimeout+lspStuckSlack {
		t.Errorf("write with a stuck server answered after %v, want within %v", took, lspStuckTimeout+lspStuckSlack)
	}
	if w.IsError {
		t.Errorf("write with a stuck server: %s", w.texts())
	}
	t.Logf("write with a stuck server: %s", w.texts())
	if got := ctr.cat(t, workspace+"/main.py"); !strings.HasSuffix(got, "hello('y')\n") {
		t.Errorf("main.py after the write: %q", got)
	}

	h := <-hovered
	if h.took > lspStuckTimeout+lspStuckSlack {
		t.Errorf("hover on a stopped server answered after %v, want within %v", h.took, lspStuckTimeout+lspStuckSlack)
	}
	if text := h.r.texts(); !h.r.IsError || !strings.Contains(text, "pylsp") || !strings.Contains(text, "reload") {
		t.Errorf("hover on a stopped server (%v): %s; want an error naming pylsp and lsp reload", h.took, text)
	}
	t.Logf("hover on a stopped server, after %v: %s", h.took, h.r.texts())

	if r := a.callTool(t, run, "lsp", map[string]any{"action": "reload", "file": "main.py"}); r.IsError {
		t.Fatalf("lsp reload: %s", r.texts())
	}
	if r := a.callTool(t, run, "lsp", hoverArgs); r.IsError || !strings.Contains(r.texts(), "Greet name") {
		t.Errorf("hover after reload: %s", r.texts())
	}
	var left []proc
	for deadline := time.Now().Add(reapWithin); ; time.Sleep(200 * time.Millisecond) {
		if left = inState(ctr.procTable(t), "T", "Z"); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) != 0 {
		t.Errorf("after lsp reload, processes stopped or zombies: %v", left)
	}
	if n := len(matching(ctr.procTable(t), "pylsp")); n != 1 {
		t.Errorf("%d pylsp processes after reload, want 1", n)
	}
}
