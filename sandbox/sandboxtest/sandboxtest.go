// Package sandboxtest is the conformance suite every sandbox backend
// passes. A backend's test calls [Run] with a constructor; each subtest
// opens its own sandbox, so subtests are independent.
//
// The suite needs only POSIX sh tools found in a Debian-based image (sh,
// cat, head, printf, sleep, ln, chmod and the shell's kill builtin);
// the Dial subtests need python3 in the sandbox and are skipped, saying so,
// without it.
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// Config describes the sandbox under test.
type Config struct {
	// Scratch is an existing, writable, absolute directory inside the
	// sandbox. Each subtest works in its own directory below it.
	Scratch string
	// WithFSReplyTimeout, when set, opens another sandbox on the same
	// container (or machine) whose file servers may send nothing for at
	// most reply (shim.Options.FSReplyTimeout), for the FSReplyDeadline
	// subtest, which closes it; nil skips that subtest. Only that
	// subtest's sandbox has the short timeout, so that a busy machine does
	// not fail the suite's other calls.
	WithFSReplyTimeout func(t *testing.T, reply time.Duration) sandbox.Sandbox
}

// hang bounds every wait in the suite, only so that a broken backend fails
// instead of hanging; nothing asserts that anything is fast.
const hang = 30 * time.Second

// shortFSReply is the reply timeout of the FSReplyDeadline subtest's
// sandbox.
const shortFSReply = time.Second

// Run runs the suite. newSandbox opens a sandbox for one subtest; the suite
// closes it.
func Run(t *testing.T, newSandbox func(t *testing.T) (sandbox.Sandbox, Config)) {
	tests := []subtest{
		{"ExitCode", testExitCode},
		{"StdoutStderrApart", testStdoutStderr},
		{"StdinEOF", testStdinEOF},
		{"LargeOutput", testLargeOutput},
		{"LargeStdin", testLargeStdin},
		{"LastOutputKept", testLastOutput},
		{"Signal", testSignal},
		{"CancelKills", testCancelKills},
		{"CancelKillsIgnoringTERM", testCancelIgnoringTERM},
		{"GrandchildHoldingStdout", testGrandchild},
		{"Parallel", testParallel},
		{"MissingProgram", testMissingProgram},
		{"EnvAndDir", testEnvDir},
		{"Pipe", testPipe},
		{"FSRoundTrip", testFSRoundTrip},
		{"FSModeKept", testFSModeKept},
		{"FSNotExist", testFSNotExist},
		{"FSHardLinks", testFSHardLinks},
		{"FSEscape", testFSEscape},
		{"FSClose", testFSClose},
		{"FSReplyDeadline", testFSReplyDeadline},
		{"FSServerKilled", testFSServerKilled},
		{"FSWatch", testFSWatch},
		{"DialTCP", func(t *testing.T, e *env) { testDial(t, e, "tcp") }},
		{"DialUnix", func(t *testing.T, e *env) { testDial(t, e, "unix") }},
		{"CloseKills", testCloseKills},
		{"NoZombiesLeft", testNoZombies},
		{"SupervisorKilled", testSupervisorKilled},
	}
	runTests(t, newSandbox, tests)
}

// subtest is one check of the suite, run on a sandbox of its own.
type subtest struct {
	name string
	fn   func(t *testing.T, e *env)
}

// runTests runs each test on a sandbox newSandbox opens for it, closed
// at its end.
func runTests(t *testing.T, newSandbox func(t *testing.T) (sandbox.Sandbox, Config), tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb, cfg := newSandbox(t)
			t.Cleanup(func() { sb.Close() })
			e := &env{sb: sb, cfg: cfg, newSandbox: newSandbox}
			e.dir = path.Join(cfg.Scratch, safeName(t.Name()))
			tc.fn(t, e)
		})
	}
}

type env struct {
	sb         sandbox.Sandbox
	cfg        Config
	dir        string // this subtest's directory inside the sandbox, made by mkdir
	newSandbox func(t *testing.T) (sandbox.Sandbox, Config)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	t.Cleanup(cancel)
	return ctx
}

// result is a finished command.
type result struct {
	status         sandbox.ExitStatus
	stdout, stderr string
}

// run runs args with stdin and waits.
func run(t *testing.T, sb sandbox.Sandbox, cmd *sandbox.Cmd) result {
	t.Helper()
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	p, err := sb.Start(ctxT(t), cmd)
	if err != nil {
		t.Fatalf("Start(%q): %v", cmd.Args, err)
	}
	st, err := waitT(t, p)
	if err != nil {
		t.Fatalf("Wait(%q): %v (stdout %q, stderr %q)", cmd.Args, err, out.String(), errb.String())
	}
	return result{st, out.String(), errb.String()}
}

func sh(script string) *sandbox.Cmd { return &sandbox.Cmd{Args: []string{"sh", "-c", script}} }

// waitT waits for p, failing the test instead of hanging.
func waitT(t *testing.T, p sandbox.Process) (sandbox.ExitStatus, error) {
	t.Helper()
	type res struct {
		st  sandbox.ExitStatus
		err error
	}
	c := make(chan res, 1)
	go func() { st, err := p.Wait(); c <- res{st, err} }()
	select {
	case r := <-c:
		return r.st, r.err
	case <-time.After(hang):
		t.Fatalf("Wait did not return within %v", hang)
		return sandbox.ExitStatus{}, nil
	}
}

// mkdir makes this subtest's directory and returns it.
func (e *env) mkdir(t *testing.T) string {
	t.Helper()
	r := run(t, e.sb, &sandbox.Cmd{Args: []string{"mkdir", "-p", e.dir}})
	if !r.status.Success() {
		t.Fatalf("mkdir -p %s: %v: %s", e.dir, r.status, r.stderr)
	}
	return e.dir
}

// syncBuffer is a bytes.Buffer safe for concurrent use, which can report
// when a marker was written.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if b.seen != nil && strings.Contains(b.buf.String(), b.marker) {
		select {
		case <-b.seen:
		default:
			close(b.seen)
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func newMarker(m string) *syncBuffer { return &syncBuffer{marker: m, seen: make(chan struct{})} }

func (b *syncBuffer) await(t *testing.T) {
	t.Helper()
	select {
	case <-b.seen:
	case <-time.After(hang):
		t.Fatalf("output %q never appeared; got %q", b.marker, b.String())
	}
}

func testExitCode(t *testing.T, e *env) {
	r := run(t, e.sb, sh("exit 43"))
	if r.status.Code != 43 || r.status.Signal != 0 {
		t.Fatalf("status = %v, want exit status 43", r.status)
	}
}

func testStdoutStderr(t *testing.T, e *env) {
	r := run(t, e.sb, sh("echo out; echo err >&2; echo out2"))
	if r.stdout != "out\nout2\n" || r.stderr != "err\n" {
		t.Fatalf("stdout %q stderr %q, want %q and %q", r.stdout, r.stderr, "out\nout2\n", "err\n")
	}
	if !r.status.Success() {
		t.Fatalf("status = %v", r.status)
	}
}

func testStdinEOF(t *testing.T, e *env) {
	cmd := &sandbox.Cmd{Args: []string{"cat"}, Stdin: strings.NewReader("hello\nworld\n")}
	r := run(t, e.sb, cmd)
	if r.stdout != "hello\nworld\n" || !r.status.Success() {
		t.Fatalf("cat: %v, stdout %q", r.status, r.stdout)
	}
	// A nil Stdin is empty input.
	r = run(t, e.sb, &sandbox.Cmd{Args: []string{"cat"}})
	if r.stdout != "" || !r.status.Success() {
		t.Fatalf("cat with nil Stdin: %v, stdout %q", r.status, r.stdout)
	}
}

func testLargeOutput(t *testing.T, e *env) {
	const n = 3<<20 + 17
	r := run(t, e.sb, &sandbox.Cmd{Args: []string{"head", "-c", strconv.Itoa(n), "/dev/zero"}})
	if len(r.stdout) != n || strings.Trim(r.stdout, "\x00") != "" {
		t.Fatalf("got %d bytes of output (all zero: %v), want %d zero bytes", len(r.stdout), strings.Trim(r.stdout, "\x00") == "", n)
	}
}

func testLargeStdin(t *testing.T, e *env) {
	data := make([]byte, 2<<20+3)
	rand.Read(data)
	r := run(t, e.sb, &sandbox.Cmd{Args: []string{"cat"}, Stdin: bytes.NewReader(data)})
	if r.stdout != string(data) {
		t.Fatalf("cat echoed %d bytes, not the %d random bytes sent", len(r.stdout), len(data))
	}
}

func testLastOutput(t *testing.T, e *env) {
	for range 5 {
		r := run(t, e.sb, sh("printf x; printf y >&2; exit 3"))
		if r.stdout != "x" || r.stderr != "y" || r.status.Code != 3 {
			t.Fatalf("got %v, stdout %q, stderr %q; want exit 3, %q, %q", r.status, r.stdout, r.stderr, "x", "y")
		}
	}
}

func testSignal(t *testing.T, e *env) {
	out := newMarker("ready")
	p, err := e.sb.Start(ctxT(t), &sandbox.Cmd{Args: []string{"sh", "-c", "echo ready; exec sleep 100"}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	if p.Pid() < 0 {
		t.Errorf("Pid = %d", p.Pid())
	}
	out.await(t)
	if err := p.Signal(ctxT(t), syscall.SIGTERM); err != nil {
		t.Fatalf("Signal: %v", err)
	}
	st, err := waitT(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != syscall.SIGTERM || st.Code != -1 {
		t.Fatalf("status = %+v (%v), want killed by SIGTERM with code -1", st, st)
	}
	// Signalling a finished process is not an error.
	if err := p.Signal(ctxT(t), syscall.SIGTERM); err != nil {
		t.Fatalf("Signal after exit: %v", err)
	}
}

func testCancelKills(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newMarker("ready")
	p, err := e.sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", "echo ready; exec sleep 100"}, Stdout: out, WaitDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	cancel()
	st, err := waitT(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != syscall.SIGTERM {
		t.Fatalf("status = %v, want killed by SIGTERM", st)
	}
}

func testCancelIgnoringTERM(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newMarker("ready")
	script := "trap '' TERM; echo ready; while :; do sleep 1; done"
	p, err := e.sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: out, WaitDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	cancel()
	st, err := waitT(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Signal != syscall.SIGKILL {
		t.Fatalf("status = %v, want killed by SIGKILL", st)
	}
}

// testNoZombies kills process trees twice — by cancelling a process's
// context and by closing the sandbox — and checks that no process of theirs
// is left, not even as a zombie: a container's PID 1 (often "sleep
// infinity") never reaps, so whatever the supervisor fails to reap stays.
func testNoZombies(t *testing.T, e *env) {
	name, bin := e.namedSleep(t)
	script := fmt.Sprintf("%s 100 & echo ready; exec %s 100", bin, bin)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newMarker("ready")
	p, err := e.sb.Start(ctx, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: out, WaitDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	cancel()
	if _, err := waitT(t, p); err != nil {
		t.Fatal(err)
	}

	out = newMarker("ready")
	if _, err := e.sb.Start(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: out}); err != nil {
		t.Fatal(err)
	}
	out.await(t)
	e.sb.Close()

	other, _ := e.newSandbox(t)
	t.Cleanup(func() { other.Close() })
	noneLeft(t, other, name, "processes of killed trees are left (zombies never reaped?)")
}

// namedSleep copies sleep into this subtest's directory under a name of
// its own, to find its processes by, and returns the name and the path.
func (e *env) namedSleep(t *testing.T) (name, bin string) {
	t.Helper()
	var id [4]byte
	rand.Read(id[:])
	name = fmt.Sprintf("bzz%x", id)
	bin = path.Join(e.dir, name)
	if r := run(t, e.sb, sh(fmt.Sprintf(`mkdir -p %s && cp "$(command -v sleep)" %s`, e.dir, bin))); !r.status.Success() {
		t.Fatalf("copy sleep: %v %s", r.status, r.stderr)
	}
	return name, bin
}

// noneLeft waits (bounded: reaping is asynchronous) until no process named
// name exists in sb, not even as a zombie, and fails with what says when
// some stay.
func noneLeft(t *testing.T, sb sandbox.Sandbox, name, what string) {
	t.Helper()
	count := fmt.Sprintf(`n=0; for f in /proc/[0-9]*/stat; do case "$(cat $f 2>/dev/null)" in *"(%s) "*) n=$((n+1));; esac; done; echo $n`, name)
	var left string
	for range 50 {
		left = strings.TrimSpace(run(t, sb, sh(count)).stdout)
		if left == "0" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	ps := run(t, sb, sh(fmt.Sprintf(`grep -h "(%s)" /proc/[0-9]*/stat 2>/dev/null`, name))).stdout
	t.Fatalf("%s %s:\n%s", left, what, ps)
}

// testFSClose closes one FS of the sandbox: what served it goes (no
// process of the agent's file server for its root is left), its calls
// fail, and the sandbox's other file systems, new ones too, work on.
func testFSClose(t *testing.T, e *env) {
	other := e.fsys(t) // at this subtest's directory
	dir := path.Join(e.dir, "closed")
	if r := run(t, e.sb, sh("mkdir -p "+dir)); !r.status.Success() {
		t.Fatalf("mkdir %s: %v %s", dir, r.status, r.stderr)
	}
	fsys, err := e.sb.FS(ctxT(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := fsys.(io.Closer)
	if !ok {
		t.Fatalf("the FS (%T) has no Close", fsys)
	}
	if err := fsys.WriteFile(ctxT(t), "kept.txt", []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if _, err := fsys.ReadFile(ctxT(t), "kept.txt"); err == nil {
		t.Error("ReadFile after Close succeeded")
	}
	// The agent's file server runs as "berth-shim fs [--user=…] ROOT"; the
	// pattern is put together at run time, so that this script's own
	// command line (and its supervisor's) does not match it.
	count := fmt.Sprintf(`m="shim"; m="$m fs"; n=0; for f in /proc/[0-9]*/cmdline; do case "$(tr '\0' ' ' < $f 2>/dev/null)" in *"$m "*"%s "*) n=$((n+1));; esac; done; echo $n`, dir)
	var left string
	for range 50 {
		if left = strings.TrimSpace(run(t, e.sb, sh(count)).stdout); left == "0" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if left != "0" {
		t.Errorf("%s file servers for %s are left after Close", left, dir)
	}
	again, err := e.sb.FS(ctxT(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := again.ReadFile(ctxT(t), "kept.txt"); err != nil || string(b) != "kept\n" {
		t.Errorf("a new FS reads %q, %v", b, err)
	}
	if _, err := other.Stat(ctxT(t), "."); err != nil {
		t.Errorf("another FS after Close: %v", err)
	}
}

// fileServer returns the pid of the one agent file server for dir in the
// sandbox ("berth-shim fs [--user=…] DIR"), skipping the test when the
// backend serves files without one.
func (e *env) fileServer(t *testing.T, dir string) int {
	t.Helper()
	// A file server is a process whose program is the agent (argv[0] ends
	// in "shim"), in mode fs, serving dir: not a wrapper whose arguments
	// name it (kube's exec runs the program under sh -c), nor this
	// script, whose argv[0] is sh.
	list := fmt.Sprintf(`for f in /proc/[0-9]*/cmdline; do set -- $(tr '\0' ' ' < $f 2>/dev/null); [ $# -ge 3 ] || continue; eval "last=\${$#}"; case "$1" in *shim) [ "$2" = fs ] && [ "$last" = '%s' ] && { p=${f#/proc/}; echo ${p%%/cmdline}; };; esac; done`, dir)
	pids := strings.Fields(run(t, e.sb, sh(list)).stdout)
	switch len(pids) {
	case 0:
		t.Skip("no agent file server serves this FS: the backend serves files itself")
	case 1:
	default:
		t.Fatalf("file servers for %s: %v, want one (the FS made one call at a time)", dir, pids)
	}
	pid, err := strconv.Atoi(pids[0])
	if err != nil {
		t.Fatalf("file server pid %q: %v", pids[0], err)
	}
	return pid
}

// testFSReplyDeadline stops the FS's file server (SIGSTOP, as a hung
// server): a write fails within the reply timeout, saying how long the
// server sent nothing and to retry; the next calls get a new server; and
// once the FS is closed the stopped server is gone, not even a zombie.
func testFSReplyDeadline(t *testing.T, e *env) {
	if e.cfg.WithFSReplyTimeout == nil {
		t.Skip("the backend opens no sandbox with a short file-server reply timeout (Config.WithFSReplyTimeout)")
	}
	const reply = shortFSReply
	short := e.cfg.WithFSReplyTimeout(t, reply)
	t.Cleanup(func() { short.Close() })
	f, err := short.FS(ctxT(t), e.mkdir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(ctxT(t), "a.txt", []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := e.fileServer(t, f.Root())
	if r := run(t, e.sb, &sandbox.Cmd{Args: []string{"kill", "-STOP", strconv.Itoa(pid)}}); !r.status.Success() {
		t.Fatalf("kill -STOP %d: %v %s", pid, r.status, r.stderr)
	}
	defer run(t, e.sb, sh(fmt.Sprintf("kill -CONT %d 2>/dev/null; true", pid)))

	start := time.Now()
	err = f.WriteFile(ctxT(t), "b.txt", []byte("b"), 0o644)
	took := time.Since(start)
	if err == nil {
		t.Fatal("a write through a stopped file server succeeded")
	}
	for _, want := range []string{"sent nothing for " + reply.String(), "retry"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if took > reply+hang/3 {
		t.Errorf("the write failed after %v, want about its reply timeout %v", took, reply)
	}
	if err := f.WriteFile(ctxT(t), "b.txt", []byte("b"), 0o644); err != nil {
		t.Fatalf("the write after a silent server: %v", err)
	}
	if b, err := f.ReadFile(ctxT(t), "b.txt"); err != nil || string(b) != "b" {
		t.Fatalf("read back %q, %v", b, err)
	}
	run(t, e.sb, sh(fmt.Sprintf("kill -CONT %d 2>/dev/null; true", pid)))
	if c, ok := f.(io.Closer); ok {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; alive(t, e.sb, pid); i++ {
		if i == 50 {
			t.Fatalf("the stopped file server %d is still there after Close (or a zombie)", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testFSServerKilled kills the FS's idle file server (kill -9, as the OOM
// killer would) between two calls: the second call succeeds on a new
// server instead of failing on the dead one.
func testFSServerKilled(t *testing.T, e *env) {
	f := e.fsys(t)
	if err := f.WriteFile(ctxT(t), "a.txt", []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		pid := e.fileServer(t, f.Root())
		if r := run(t, e.sb, &sandbox.Cmd{Args: []string{"kill", "-9", strconv.Itoa(pid)}}); !r.status.Success() {
			t.Fatalf("kill -9 %d: %v %s", pid, r.status, r.stderr)
		}
		name := fmt.Sprintf("w%d.txt", i)
		if err := f.WriteFile(ctxT(t), name, []byte(name), 0o644); err != nil {
			t.Fatalf("write after the file server %d was killed: %v", pid, err)
		}
		if b, err := f.ReadFile(ctxT(t), name); err != nil || string(b) != name {
			t.Fatalf("read back %q, %v", b, err)
		}
	}
}

// testSupervisorKilled kills the sandbox's supervisor of a running process
// tree (the agent, kill -9: as the OOM killer would) and checks that
// nothing of the tree outlives it, not even as a zombie — in a container
// whose PID 1 never reaps — and that Wait reports the end.
func testSupervisorKilled(t *testing.T, e *env) {
	name, bin := e.namedSleep(t)
	// The program's parent is its supervisor.
	script := fmt.Sprintf(`echo "supervisor $PPID $(tr '\0' ' ' < /proc/$PPID/cmdline)"; %s 100 & exec %s 100`, bin, bin)
	out := newMarker("supervisor ")
	p, err := e.sb.Start(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	var pid int
	var cmdline string
	line, _, _ := strings.Cut(out.String(), "\n")
	if _, err := fmt.Sscanf(line, "supervisor %d", &pid); err != nil {
		t.Fatalf("no supervisor pid in %q", line)
	}
	cmdline = line
	if !strings.Contains(cmdline, "berth-shim") {
		t.Skipf("the program's parent is not berth's agent (%s): this backend places no supervisor of its own", cmdline)
	}
	if r := run(t, e.sb, &sandbox.Cmd{Args: []string{"kill", "-9", fmt.Sprint(pid)}}); !r.status.Success() {
		if strings.Contains(r.stderr, "not permitted") {
			// A supervisor that keeps its own user (host processes under
			// --host-user) cannot be signalled from inside, by design.
			t.Skipf("the sandbox's user may not signal its supervisor: %s", r.stderr)
		}
		t.Fatalf("kill -9 %d: %v %s", pid, r.status, r.stderr)
	}
	if _, err := waitT(t, p); err == nil {
		t.Log("Wait after the supervisor was killed returned no error")
	}
	noneLeft(t, e.sb, name, "processes outlived their killed supervisor (orphans, or zombies of a PID 1 that never reaps)")
	if alive(t, e.sb, pid) {
		t.Errorf("the killed supervisor %d is still there (a zombie?)", pid)
	}
}

// alive reports whether pid exists in the sandbox, asked in a new process.
func alive(t *testing.T, sb sandbox.Sandbox, pid int) bool {
	t.Helper()
	// A zombie still answers kill -0; look at its state where /proc exists.
	script := fmt.Sprintf(`kill -0 %d 2>/dev/null || exit 1
if [ -r /proc/%d/stat ]; then case "$(cat /proc/%d/stat)" in *") Z "*) exit 1;; esac; fi
exit 0`, pid, pid, pid)
	return run(t, sb, sh(script)).status.Success()
}

func testGrandchild(t *testing.T, e *env) {
	var out syncBuffer
	p, err := e.sb.Start(ctxT(t), &sandbox.Cmd{
		Args:      []string{"sh", "-c", "sleep 100 & echo $!; echo hi"},
		Stdout:    &out,
		WaitDelay: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := waitT(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() {
		t.Fatalf("status = %v", st)
	}
	lines := strings.Fields(out.String())
	if len(lines) != 2 || lines[1] != "hi" {
		t.Fatalf("stdout = %q, want the grandchild's pid and hi", out.String())
	}
	pid, err := strconv.Atoi(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	if alive(t, e.sb, pid) {
		t.Fatalf("grandchild %d still runs after Wait returned", pid)
	}
}

func testParallel(t *testing.T, e *env) {
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out syncBuffer
			p, err := e.sb.Start(ctxT(t), &sandbox.Cmd{Args: []string{"sh", "-c", "echo $0; exit $(($0 % 7))", strconv.Itoa(i)}, Stdout: &out})
			if err != nil {
				errs <- err
				return
			}
			st, err := p.Wait()
			switch {
			case err != nil:
				errs <- err
			case st.Code != i%7 || out.String() != fmt.Sprintln(i):
				errs <- fmt.Errorf("exec %d: %v, stdout %q", i, st, out.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testMissingProgram(t *testing.T, e *env) {
	p, err := e.sb.Start(ctxT(t), &sandbox.Cmd{Args: []string{"berth-no-such-program"}})
	if err == nil {
		st, werr := p.Wait()
		t.Fatalf("Start of a missing program succeeded; Wait = %v, %v", st, werr)
	}
	if !strings.Contains(err.Error(), "not found") || !strings.Contains(err.Error(), "berth-no-such-program") {
		t.Fatalf("error %q does not say the program was not found", err)
	}
}

func testEnvDir(t *testing.T, e *env) {
	dir := e.mkdir(t)
	cmd := sh(`echo "$BERTH_TEST_A|$BERTH_TEST_B"; pwd`)
	cmd.Env = []string{"BERTH_TEST_A=one", "BERTH_TEST_B=two words"}
	cmd.Dir = dir
	r := run(t, e.sb, cmd)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || lines[0] != "one|two words" || path.Base(lines[1]) != path.Base(dir) {
		t.Fatalf("stdout = %q, want the two variables and the directory %s", r.stdout, dir)
	}
	// The base environment is there too.
	r = run(t, e.sb, sh(`test -n "$PATH"`))
	if !r.status.Success() {
		t.Fatal("PATH is empty in the sandbox")
	}
}

// fsys opens the FS at this subtest's directory.
func (e *env) fsys(t *testing.T) sandbox.FS {
	t.Helper()
	dir := e.mkdir(t)
	f, err := e.sb.FS(ctxT(t), dir)
	if err != nil {
		t.Fatalf("FS(%s): %v", dir, err)
	}
	if f.Root() != dir {
		t.Errorf("Root() = %q, want %q", f.Root(), dir)
	}
	return f
}

func testFSRoundTrip(t *testing.T, e *env) {
	ctx := ctxT(t)
	f := e.fsys(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.MkdirAll(ctx, "a/b/c", 0o755))
	must(f.MkdirAll(ctx, "node_modules/x", 0o755))
	must(f.WriteFile(ctx, "a/b/file.txt", []byte("hello"), 0o644))
	must(f.WriteFile(ctx, "a/z.txt", nil, 0o644))
	must(f.WriteFile(ctx, "node_modules/x/index.js", []byte("x"), 0o644))
	big := make([]byte, 3<<20+5)
	rand.Read(big)
	must(f.WriteFile(ctx, "big.bin", big, 0o600))

	got, err := f.ReadFile(ctx, "a/b/file.txt")
	must(err)
	if string(got) != "hello" {
		t.Fatalf("ReadFile = %q", got)
	}
	got, err = f.ReadFile(ctx, "big.bin")
	must(err)
	if !bytes.Equal(got, big) {
		t.Fatalf("ReadFile(big.bin) returned %d bytes that differ from the %d written", len(got), len(big))
	}
	got, err = f.ReadFile(ctx, "a/z.txt")
	must(err)
	if len(got) != 0 {
		t.Fatalf("empty file read as %q", got)
	}
	fi, err := f.Stat(ctx, "a/b/file.txt")
	must(err)
	if fi.Name() != "file.txt" || fi.Size() != 5 || !fi.Mode().IsRegular() {
		t.Fatalf("Stat = %s %d %v", fi.Name(), fi.Size(), fi.Mode())
	}
	fi, err = f.Stat(ctx, ".")
	must(err)
	if !fi.IsDir() {
		t.Fatalf("Stat(.) is not a directory: %v", fi.Mode())
	}

	ents, err := f.ReadDir(ctx, ".")
	must(err)
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	if strings.Join(names, ",") != "a,big.bin,node_modules" {
		t.Fatalf("ReadDir(.) = %v", names)
	}
	if !ents[0].IsDir() || ents[1].IsDir() {
		t.Fatalf("ReadDir types wrong: %v %v", ents[0], ents[1])
	}

	var walked []string
	must(f.Walk(ctx, ".", sandbox.WalkOptions{SkipDirs: []string{"node_modules"}}, func(name string, info fs.FileInfo) error {
		walked = append(walked, name)
		if name != "." && info.Name() != path.Base(name) {
			t.Errorf("Walk: info.Name() = %q for %q", info.Name(), name)
		}
		return nil
	}))
	want := ".,a,a/b,a/b/c,a/b/file.txt,a/z.txt,big.bin,node_modules"
	if strings.Join(walked, ",") != want {
		t.Fatalf("Walk = %v, want %s", walked, want)
	}
	walked = nil
	must(f.Walk(ctx, "a", sandbox.WalkOptions{}, func(name string, info fs.FileInfo) error {
		walked = append(walked, name)
		if name == "a/b" {
			return fs.SkipDir
		}
		return nil
	}))
	if strings.Join(walked, ",") != "a,a/b,a/z.txt" {
		t.Fatalf("Walk with SkipDir = %v", walked)
	}
	walked = nil
	must(f.Walk(ctx, ".", sandbox.WalkOptions{}, func(name string, info fs.FileInfo) error {
		walked = append(walked, name)
		if name == "a/b" {
			return fs.SkipAll
		}
		return nil
	}))
	if strings.Join(walked, ",") != ".,a,a/b" {
		t.Fatalf("Walk with SkipAll = %v", walked)
	}
	stop := errors.New("stop")
	if err := f.Walk(ctx, ".", sandbox.WalkOptions{}, func(string, fs.FileInfo) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Walk returned %v, want the WalkFunc's error", err)
	}

	must(f.Rename(ctx, "a/b/file.txt", "a/moved.txt"))
	if _, err := f.Stat(ctx, "a/b/file.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Rename: %v, want fs.ErrNotExist", err)
	}
	got, err = f.ReadFile(ctx, "a/moved.txt")
	must(err)
	if string(got) != "hello" {
		t.Fatalf("renamed file holds %q", got)
	}
	must(f.Remove(ctx, "a/moved.txt"))
	if _, err := f.Stat(ctx, "a/moved.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v, want fs.ErrNotExist", err)
	}
	if err := f.Remove(ctx, "a"); err == nil {
		t.Fatal("Remove of a non-empty directory succeeded")
	}
	// The FS stays usable from many goroutines.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("p%d.txt", i)
			if err := f.WriteFile(ctx, name, []byte(name), 0o644); err != nil {
				t.Error(err)
				return
			}
			if b, err := f.ReadFile(ctx, name); err != nil || string(b) != name {
				t.Errorf("ReadFile(%s) = %q, %v", name, b, err)
			}
		}()
	}
	wg.Wait()
}

func testFSModeKept(t *testing.T, e *env) {
	ctx := ctxT(t)
	f := e.fsys(t)
	if err := f.WriteFile(ctx, "script.sh", []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, e.sb, &sandbox.Cmd{Args: []string{"chmod", "750", path.Join(f.Root(), "script.sh")}})
	if !r.status.Success() {
		t.Fatalf("chmod: %v %s", r.status, r.stderr)
	}
	if err := f.WriteFile(ctx, "script.sh", []byte("#!/bin/sh\necho new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat(ctx, "script.sh")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o750 {
		t.Fatalf("mode after overwrite = %v, want -rwxr-x---", fi.Mode())
	}
	got, _ := f.ReadFile(ctx, "script.sh")
	if string(got) != "#!/bin/sh\necho new\n" {
		t.Fatalf("content = %q", got)
	}
	// No temporary files are left behind.
	ents, err := f.ReadDir(ctx, ".")
	if err != nil || len(ents) != 1 {
		t.Fatalf("ReadDir after writes = %v, %v; want only script.sh", ents, err)
	}
}

// testFSHardLinks: a file's hard-link count reaches the caller as a
// *syscall.Stat_t's Nlink, through Lstat and Stat, so the tools can refuse
// a file whose other name may lie outside the workspace.
func testFSHardLinks(t *testing.T, e *env) {
	ctx := ctxT(t)
	f := e.fsys(t)
	if err := f.WriteFile(ctx, "one.txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(ctx, "single.txt", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, e.sb, &sandbox.Cmd{Args: []string{"ln", path.Join(f.Root(), "one.txt"), path.Join(f.Root(), "two.txt")}})
	if !r.status.Success() {
		t.Fatalf("ln: %v %s", r.status, r.stderr)
	}
	for _, c := range []struct {
		name string
		want uint64
	}{{"one.txt", 2}, {"two.txt", 2}, {"single.txt", 1}} {
		for op, stat := range map[string]func(context.Context, string) (fs.FileInfo, error){"Lstat": f.Lstat, "Stat": f.Stat} {
			fi, err := stat(ctx, c.name)
			if err != nil {
				t.Fatalf("%s(%s): %v", op, c.name, err)
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				t.Fatalf("%s(%s).Sys() = %T, want *syscall.Stat_t", op, c.name, fi.Sys())
			}
			if uint64(st.Nlink) != c.want {
				t.Errorf("%s(%s): Nlink = %d, want %d", op, c.name, st.Nlink, c.want)
			}
		}
	}
}

func testFSNotExist(t *testing.T, e *env) {
	ctx := ctxT(t)
	f := e.fsys(t)
	_, err := f.ReadFile(ctx, "missing.txt")
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
		t.Fatalf("ReadFile(missing) = %v (%T), want *fs.PathError wrapping fs.ErrNotExist", err, err)
	}
	if _, err := f.Stat(ctx, "no/such/dir"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat = %v, want fs.ErrNotExist", err)
	}
	if _, err := f.ReadDir(ctx, "nodir"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadDir = %v, want fs.ErrNotExist", err)
	}
	if err := f.Remove(ctx, "missing.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Remove = %v, want fs.ErrNotExist", err)
	}
	if _, err := e.sb.FS(ctx, path.Join(f.Root(), "does-not-exist")); err == nil {
		t.Fatal("FS on a missing directory succeeded")
	}
}

func testFSEscape(t *testing.T, e *env) {
	ctx := ctxT(t)
	dir := e.mkdir(t)
	// root/ is the FS; outside/ is next to it. Symbolic links in root point out.
	script := `set -e; mkdir -p root outside; echo secret > outside/target
ln -s ../outside root/outdir; ln -s ../outside/target root/outfile; ln -s /etc/passwd root/passwd
echo inside > root/in.txt; ln -s in.txt root/inlink`
	cmd := sh(script)
	cmd.Dir = dir
	if r := run(t, e.sb, cmd); !r.status.Success() {
		t.Fatalf("setting up links: %v %s", r.status, r.stderr)
	}
	f, err := e.sb.FS(ctx, path.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	escape := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, sandbox.ErrEscape) {
			t.Errorf("%s = %v, want sandbox.ErrEscape", what, err)
		}
		var pe *fs.PathError
		if err != nil && !errors.As(err, &pe) {
			t.Errorf("%s error is %T, want *fs.PathError", what, err)
		}
	}
	_, err = f.ReadFile(ctx, "../outside/target")
	escape("ReadFile(../outside/target)", err)
	_, err = f.ReadFile(ctx, "/etc/passwd")
	escape("ReadFile(/etc/passwd)", err)
	_, err = f.ReadFile(ctx, "passwd")
	escape("ReadFile(symlink to /etc/passwd)", err)
	_, err = f.ReadFile(ctx, "outfile")
	escape("ReadFile(symlink out)", err)
	_, err = f.ReadFile(ctx, "outdir/target")
	escape("ReadFile(through a directory link out)", err)
	_, err = f.Stat(ctx, "outfile")
	escape("Stat(symlink out)", err)
	escape("WriteFile(../x)", f.WriteFile(ctx, "../x", []byte("x"), 0o644))
	escape("WriteFile(outdir/new)", f.WriteFile(ctx, "outdir/new", []byte("x"), 0o644))
	escape("MkdirAll(outdir/newdir)", f.MkdirAll(ctx, "outdir/newdir", 0o755))
	escape("Rename(in.txt, ../moved)", f.Rename(ctx, "in.txt", "../moved"))
	escape("Remove(outdir/target)", f.Remove(ctx, "outdir/target"))
	_, err = f.ReadDir(ctx, "outdir")
	escape("ReadDir(outdir)", err)

	// Lstat reports the link itself.
	fi, err := f.Lstat(ctx, "outfile")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat(outfile) = %v, %v; want a symbolic link", fi, err)
	}
	// A link that stays inside is followed by Stat and ReadFile.
	if b, err := f.ReadFile(ctx, "inlink"); err != nil || string(b) != "inside\n" {
		t.Errorf("ReadFile(inlink) = %q, %v", b, err)
	}
	// WriteFile replaces a final link, never writes through it.
	if err := f.WriteFile(ctx, "outfile", []byte("replaced"), 0o644); err != nil {
		t.Errorf("WriteFile over a symbolic link: %v", err)
	} else if fi, err := f.Lstat(ctx, "outfile"); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("after WriteFile, outfile is %v, %v; want a regular file", fi, err)
	}

	// Nothing was written outside the root.
	check := sh(`set -e; test "$(cat outside/target)" = secret; test ! -e x; test ! -e outside/new; test ! -e outside/newdir; test ! -e moved; test "$(ls outside)" = target`)
	check.Dir = dir
	if r := run(t, e.sb, check); !r.status.Success() {
		t.Fatalf("something was written outside the root: %v %s", r.status, r.stderr)
	}
}

// echoServer is a python3 echo server printing its port or "ready".
const echoServer = `
import os, socket, sys
if sys.argv[1] == "tcp":
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    ready = str(s.getsockname()[1])
else:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sys.argv[2])
    ready = "ready"
s.listen(4)
print(ready, flush=True)
while True:
    c, _ = s.accept()
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
`

func testDial(t *testing.T, e *env, network string) {
	if r := run(t, e.sb, sh("command -v python3")); !r.status.Success() {
		t.Skip("python3 is not in the sandbox, so the suite cannot start an echo server for Dial")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := path.Join(e.mkdir(t), "echo.sock")
	out := newMarker("\n")
	p, err := e.sb.Start(ctx, &sandbox.Cmd{Args: []string{"python3", "-c", echoServer, network, sock}, Stdout: out, WaitDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); p.Wait() }()
	out.await(t)
	addr := sock
	if network == "tcp" {
		addr = "127.0.0.1:" + strings.TrimSpace(out.String())
	}

	for i := range 3 {
		c, err := e.sb.Dial(ctxT(t), network, addr)
		if err != nil {
			t.Fatalf("Dial(%s, %s): %v", network, addr, err)
		}
		msg := bytes.Repeat([]byte(fmt.Sprintf("hello %d ", i)), 20000)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Write(msg)
			if err == nil {
				err = c.CloseWrite()
			}
			errc <- err
		}()
		c.SetReadDeadline(time.Now().Add(hang))
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("read echo: %v", err)
		}
		if werr := <-errc; werr != nil {
			t.Fatalf("write: %v", werr)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("echo returned %d bytes, want the %d sent", len(got), len(msg))
		}
		c.Close()
	}

	// Read deadlines work.
	c, err := e.sb.Dial(ctxT(t), network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v, want os.ErrDeadlineExceeded", err)
	}

	// Nothing listens: a clear error.
	bad := path.Join(e.dir, "nobody.sock")
	if network == "tcp" {
		bad = "127.0.0.1:1"
	}
	if c, err := e.sb.Dial(ctxT(t), network, bad); err == nil {
		c.Close()
		t.Fatalf("Dial(%s) with nothing listening succeeded", bad)
	}
	if c, err := e.sb.Dial(ctxT(t), "tcp", "192.0.2.1:80"); err == nil {
		c.Close()
		t.Fatal("Dial to a non-loopback address succeeded")
	}
}

func testCloseKills(t *testing.T, e *env) {
	sb, _ := e.newSandbox(t)
	out := newMarker("ready")
	p, err := sb.Start(context.Background(), &sandbox.Cmd{Args: []string{"sh", "-c", "sleep 100 & echo $!; echo ready; wait"}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	child, err := strconv.Atoi(strings.Fields(out.String())[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Wait returns, whatever it reports.
	waitT(t, p)
	for _, pid := range []int{p.Pid(), child} {
		if pid > 0 && alive(t, e.sb, pid) {
			t.Errorf("process %d still runs after Close", pid)
		}
	}
	if _, err := sb.Start(ctxT(t), sh("true")); err == nil {
		t.Error("Start after Close succeeded")
	}
}
