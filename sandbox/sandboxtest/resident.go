package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// RunResident runs the [sandbox.Residence] checks: a resident supervisor
// keeps its processes, their stdin and their output across berth's going
// away, ends everything after its grace or its Close, and lets nobody else
// in. newSandbox opens a new sandbox object on the same container (or
// machine) each time it is called, as a restarted berth does; the suite
// closes it. Each subtest skips when the backend's sandbox is no
// Residence.
func RunResident(t *testing.T, newSandbox func(t *testing.T) (sandbox.Sandbox, Config)) {
	tests := []subtest{
		{"ReattachAfterRestart", testResidentReattach},
		{"OverflowNote", testResidentOverflow},
		{"ExitedWhileDetached", testResidentExitedDetached},
		{"Pipe", testResidentPipe},
		{"AttachTakesOver", testResidentTakeover},
		{"ContextBoundsAttached", testResidentContext},
		{"StdinOutlivesBerth", testResidentStdin},
		{"GraceExpiry", testResidentGrace},
		{"Close", testResidentClose},
		{"Refusals", testResidentRefusals},
		{"SecretNowhere", testResidentSecretNowhere},
		{"UnprivilegedLockedOut", testResidentUnprivileged},
		{"SameUserLockedOut", testResidentSameUser},
		{"ResidentKilled", testResidentKilled},
		{"NotFound", testResidentNotFound},
	}
	runTests(t, newSandbox, tests)
}

// residentOf returns sb as a Residence, skipping the test when it is none.
func residentOf(t *testing.T, sb sandbox.Sandbox) sandbox.Residence {
	t.Helper()
	r, ok := sb.(sandbox.Residence)
	if !ok {
		t.Skipf("%T keeps no resident supervisor (sandbox.Residence)", sb)
	}
	return r
}

// residentSpec is a new resident's directory (below this subtest's) and a
// printable secret, so that a search for it in /proc can be written.
func (e *env) residentSpec(t *testing.T, grace time.Duration) sandbox.ResidentSpec {
	var b [24]byte
	rand.Read(b[:])
	return sandbox.ResidentSpec{
		Dir:    path.Join(e.dir, "res-"+hex.EncodeToString(b[:4])),
		Secret: []byte(hex.EncodeToString(b[:]) + "-berth-secret"),
		Grace:  grace,
	}
}

// startResident makes this subtest's directory and starts a resident,
// closed at cleanup.
func (e *env) startResident(t *testing.T, grace time.Duration) (sandbox.Resident, sandbox.ResidentSpec) {
	t.Helper()
	rs := residentOf(t, e.sb)
	e.mkdir(t)
	spec := e.residentSpec(t, grace)
	res, err := rs.Resident(ctxT(t), spec)
	if err != nil {
		t.Fatalf("Resident(%s): %v", spec.Dir, err)
	}
	t.Cleanup(func() { res.Close() })
	return res, spec
}

// adopt opens a new sandbox object (a restarted berth) and adopts the
// resident of spec there.
func (e *env) adopt(t *testing.T, spec sandbox.ResidentSpec) (sandbox.Sandbox, sandbox.Resident) {
	t.Helper()
	sb, _ := e.newSandbox(t)
	t.Cleanup(func() { sb.Close() })
	spec.Adopt = true
	res, err := residentOf(t, sb).Resident(ctxT(t), spec)
	if err != nil {
		t.Fatalf("adopt the resident at %s from a new sandbox: %v", spec.Dir, err)
	}
	t.Cleanup(func() { res.Close() })
	return sb, res
}

// exists reports whether p exists in sb.
func exists(t *testing.T, sb sandbox.Sandbox, p string) bool {
	t.Helper()
	return run(t, sb, &sandbox.Cmd{Args: []string{"test", "-e", p}}).status.Success()
}

// awaitFile waits (bounded) until p exists in sb.
func awaitFile(t *testing.T, sb sandbox.Sandbox, p string) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !exists(t, sb, p) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v", p, hang)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startTalker starts script under res as name with a stdin pipe (closed
// at cleanup), writes line to it and waits until stdout shows marker.
func startTalker(t *testing.T, res sandbox.Resident, name, script, line, marker string) sandbox.Process {
	t.Helper()
	inR, inW := io.Pipe()
	t.Cleanup(func() { inW.Close() })
	out := newMarker(marker)
	p, err := res.Start(context.Background(), name, &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdin: inR, Stdout: out})
	if err != nil {
		t.Fatalf("Start %s: %v", name, err)
	}
	io.WriteString(inW, line)
	out.await(t)
	return p
}

// attachTalker attaches to res's process name with a stdin pipe (closed
// at cleanup) and a stdout that reports marker.
func attachTalker(t *testing.T, res sandbox.Resident, name, marker string) (sandbox.Process, io.WriteCloser, *syncBuffer) {
	t.Helper()
	inR, inW := io.Pipe()
	t.Cleanup(func() { inW.Close() })
	out := newMarker(marker)
	p, err := res.Attach(ctxT(t), name, &sandbox.Cmd{Stdin: inR, Stdout: out})
	if err != nil {
		t.Fatalf("Attach %s: %v", name, err)
	}
	return p, inW, out
}

// pidsLine is what a program under a resident prints to name its
// supervisor, the resident and the resident's keeper.
const pidsLine = `s=$PPID; r=$(cut -d' ' -f4 /proc/$s/stat); k=$(cut -d' ' -f4 /proc/$r/stat); echo "pids $s $r $k"`

// residentPids reads pidsLine's output from out.
func residentPids(t *testing.T, out string) (sup, res, keeper int) {
	t.Helper()
	i := strings.Index(out, "pids ")
	if i < 0 {
		t.Fatalf("no pids line in %q", out)
	}
	if _, err := fmt.Sscanf(out[i:], "pids %d %d %d", &sup, &res, &keeper); err != nil {
		t.Fatalf("pids line in %q: %v", out, err)
	}
	return sup, res, keeper
}

// testResidentReattach detaches from a running process, lets it write,
// and attaches to it from a new sandbox object with the secret: the pid is
// the same, what it wrote meanwhile comes first, and its stdin works on.
func testResidentReattach(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	f := e.dir
	script := fmt.Sprintf(`echo ready; read x; echo "got $x"
while [ ! -e %[1]s/go ]; do sleep 0.05; done
echo while-detached; touch %[1]s/wrote
read y; echo "then $y"; exit 7`, f)
	p := startTalker(t, res, "prog", script, "one\n", "got one")
	if err := res.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if _, err := waitT(t, p); !errors.Is(err, sandbox.ErrDetached) {
		t.Fatalf("Wait after Detach = %v, want an error wrapping sandbox.ErrDetached", err)
	}
	e.sb.Close() // berth went away
	other, _ := e.newSandbox(t)
	t.Cleanup(func() { other.Close() })
	run(t, other, sh("touch "+f+"/go"))
	awaitFile(t, other, f+"/wrote")

	_, res2 := e.adopt(t, spec)
	procs, err := res2.Processes(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].Name != "prog" || procs[0].Pid != p.Pid() || procs[0].Exited {
		t.Fatalf("Processes = %+v, want prog with pid %d, running", procs, p.Pid())
	}
	p2, inW2, out2 := attachTalker(t, res2, "prog", "then two")
	if p2.Pid() != p.Pid() {
		t.Errorf("attached pid %d, started %d", p2.Pid(), p.Pid())
	}
	io.WriteString(inW2, "two\n")
	st, err := waitT(t, p2)
	if err != nil || st.Code != 7 {
		t.Fatalf("Wait after Attach = %v, %v; want exit 7", st, err)
	}
	if got, want := out2.String(), "while-detached\nthen two\n"; got != want {
		t.Errorf("attached stdout %q, want %q (what was written while detached first)", got, want)
	}
	procs, err = res2.Processes(ctxT(t))
	if err != nil || len(procs) != 0 {
		t.Errorf("Processes after the exit was collected = %+v, %v; want none", procs, err)
	}
	if _, err := res2.Attach(ctxT(t), "prog", &sandbox.Cmd{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to a collected process = %v, want ErrNotFound", err)
	}
}

// testResidentExitedDetached: a process that ends while no berth is
// attached keeps its output and exit status until an Attach collects them.
func testResidentExitedDetached(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	f := e.dir
	script := fmt.Sprintf(`while [ ! -e %[1]s/go ]; do sleep 0.05; done; echo bye; echo err >&2; exit 9`, f)
	if _, err := res.Start(context.Background(), "short", &sandbox.Cmd{Args: []string{"sh", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	res.Detach()
	_, res2 := e.adopt(t, spec)
	run(t, e.sb, sh("touch "+f+"/go"))
	deadline := time.Now().Add(hang)
	for {
		procs, err := res2.Processes(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) == 1 && procs[0].Exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Processes = %+v, want short, exited", procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out, errb syncBuffer
	p, err := res2.Attach(ctxT(t), "short", &sandbox.Cmd{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := waitT(t, p); err != nil || st.Code != 9 || out.String() != "bye\n" || errb.String() != "err\n" {
		t.Errorf("attached to an ended process: %v, %v, stdout %q, stderr %q; want exit 9, bye, err", st, err, out.String(), errb.String())
	}
}

// residentStarts is a sandbox whose Start starts each process under a
// resident, under a name of its own, so that sandbox.Pipe runs over a
// resident's process.
type residentStarts struct {
	sandbox.Sandbox
	res sandbox.Resident
	n   atomic.Int32
}

func (s *residentStarts) Start(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	return s.res.Start(ctx, fmt.Sprintf("pipe-%d", s.n.Add(1)), cmd)
}

// testResidentPipe runs the sandbox.Pipe checks on processes started
// under a resident (a debug adapter or language server spoken to over
// stdio).
func testResidentPipe(t *testing.T, e *env) {
	res, _ := e.startResident(t, time.Minute)
	testPipe(t, &env{sb: &residentStarts{Sandbox: e.sb, res: res}, cfg: e.cfg, dir: e.dir, newSandbox: e.newSandbox})
}

// testResidentTakeover: an Attach from another berth while the first is
// still attached takes the process over; the first one's Wait reports a
// broken connection (not a detach), and the process runs on.
func testResidentTakeover(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	script := `while read l; do echo "line $l"; done`
	p := startTalker(t, res, "cat", script, "a\n", "line a")
	_, res2 := e.adopt(t, spec)
	p2, inW2, out2 := attachTalker(t, res2, "cat", "line b")
	if _, err := waitT(t, p); err == nil || errors.Is(err, sandbox.ErrDetached) {
		t.Errorf("Wait of the taken-over process = %v, want a broken connection", err)
	}
	io.WriteString(inW2, "b\n")
	out2.await(t)
	inW2.Close()
	if st, err := waitT(t, p2); err != nil || !st.Success() {
		t.Fatalf("Wait = %v, %v", st, err)
	}
}

// testResidentContext: while attached, the process's context bounds it as
// with Sandbox.Start: SIGTERM when it is done.
func testResidentContext(t *testing.T, e *env) {
	res, _ := e.startResident(t, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newMarker("ready")
	p, err := res.Start(ctx, "sleeper", &sandbox.Cmd{Args: []string{"sh", "-c", "trap 'exit 5' TERM; echo ready; while :; do sleep 0.1; done"}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	cancel()
	if st, err := waitT(t, p); err != nil || st.Code != 5 {
		t.Errorf("Wait after the context ended = %v, %v; want exit 5 from the TERM trap", st, err)
	}
}

// testResidentOverflow: a detached process writes more than
// ResidentBuffer; the attach delivers the newest ResidentBuffer bytes and
// one line on stderr says how many were dropped.
func testResidentOverflow(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	const total = 3_000_000
	f := e.dir
	script := fmt.Sprintf(`while [ ! -e %[1]s/go ]; do sleep 0.05; done
head -c %[2]d /dev/zero | tr '\0' a; touch %[1]s/wrote; read x; echo end >&2`, f, total)
	inR, inW := io.Pipe()
	defer inW.Close()
	if _, err := res.Start(context.Background(), "big", &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdin: inR}); err != nil {
		t.Fatal(err)
	}
	if err := res.Detach(); err != nil {
		t.Fatal(err)
	}
	other, _ := e.newSandbox(t)
	t.Cleanup(func() { other.Close() })
	run(t, other, sh("touch "+f+"/go"))
	awaitFile(t, other, f+"/wrote")
	_, res2 := e.adopt(t, spec)
	var out, errb syncBuffer
	inR2, inW2 := io.Pipe()
	defer inW2.Close()
	p, err := res2.Attach(ctxT(t), "big", &sandbox.Cmd{Stdin: inR2, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(inW2, "x\n")
	if st, err := waitT(t, p); err != nil || !st.Success() {
		t.Fatalf("Wait = %v, %v", st, err)
	}
	var dropped int
	if _, err := fmt.Sscanf(errb.String(), "berth: %d bytes of output were dropped while no berth was attached\nend\n", &dropped); err != nil {
		t.Fatalf("stderr %q: want the dropped-output note, then end: %v", errb.String(), err)
	}
	if n := len(out.Bytes()); dropped <= 0 || n+dropped != total || n > sandbox.ResidentBuffer {
		t.Errorf("delivered %d bytes and dropped %d, want at most %d delivered and %d in all", n, dropped, sandbox.ResidentBuffer, total)
	}
}

// testResidentStdin: berth's going away (the sandbox's Close, which
// detaches its residents) does not close a resident process's stdin.
func testResidentStdin(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	f := e.dir
	script := fmt.Sprintf(`while read l; do echo "line $l"; done; touch %s/eof`, f)
	p := startTalker(t, res, "cat", script, "a\n", "line a")
	// The sandbox's Close detaches the resident it holds, ending nothing.
	e.sb.Close()
	if _, err := waitT(t, p); !errors.Is(err, sandbox.ErrDetached) {
		t.Errorf("Wait after the sandbox's Close = %v, want an error wrapping sandbox.ErrDetached", err)
	}
	if _, err := res.Processes(ctxT(t)); !errors.Is(err, sandbox.ErrDetached) {
		t.Errorf("Processes after the sandbox's Close = %v, want an error wrapping sandbox.ErrDetached", err)
	}
	other, res2 := e.adopt(t, spec)
	p2, inW2, out2 := attachTalker(t, res2, "cat", "line b")
	if exists(t, other, f+"/eof") || !alive(t, other, p.Pid()) {
		t.Fatal("the program saw EOF on stdin, or ended, when berth went away")
	}
	io.WriteString(inW2, "b\n")
	out2.await(t)
	inW2.Close() // now EOF, by berth's choice
	if st, err := waitT(t, p2); err != nil || !st.Success() {
		t.Fatalf("Wait = %v, %v", st, err)
	}
	if !exists(t, other, f+"/eof") {
		t.Error("closing the attached stdin did not reach the program")
	}
}

// testResidentGrace: with no berth attached for its grace, the resident
// ends its processes and itself, leaves no process (not even a zombie)
// and removes its directory; connections with a wrong secret meanwhile
// do not keep it alive.
func testResidentGrace(t *testing.T, e *env) {
	const grace = 2 * time.Second
	res, spec := e.startResident(t, grace)
	name, bin := e.namedSleep(t)
	out := newMarker("pids ")
	script := fmt.Sprintf(`%s 100 & %s; exec %s 100`, bin, pidsLine, bin)
	if _, err := res.Start(context.Background(), "sleeper", &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: out, WaitDelay: 500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	out.await(t)
	sup, rpid, keeper := residentPids(t, out.String())
	res.Detach()
	e.sb.Close()
	other, _ := e.newSandbox(t)
	t.Cleanup(func() { other.Close() })
	wrong := spec
	wrong.Adopt = true
	wrong.Secret = []byte(strings.Repeat("x", sandbox.MinResidentSecret))
	deadline := time.Now().Add(hang)
	for exists(t, other, spec.Dir) {
		if time.Now().After(deadline) {
			t.Fatalf("the resident's directory %s is still there %v after its grace of %v", spec.Dir, hang, grace)
		}
		if _, err := residentOf(t, other).Resident(ctxT(t), wrong); err == nil {
			t.Fatal("a wrong secret was accepted")
		}
		time.Sleep(200 * time.Millisecond)
	}
	noneLeft(t, other, name, "processes outlived their resident's grace")
	for _, pid := range []int{sup, rpid, keeper} {
		if awaitGone(t, other, pid) {
			t.Errorf("process %d (supervisor %d, resident %d, keeper %d) is still there after the grace (a zombie?)", pid, sup, rpid, keeper)
		}
	}
	if _, err := residentOf(t, other).Resident(ctxT(t), sandbox.ResidentSpec{Dir: spec.Dir, Secret: spec.Secret, Adopt: true}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("adopt after the grace = %v, want ErrNotFound", err)
	}
}

// awaitGone waits (bounded) until pid is gone and reports whether it is
// still there.
func awaitGone(t *testing.T, sb sandbox.Sandbox, pid int) bool {
	for range 50 {
		if !alive(t, sb, pid) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// testResidentClose: Close ends the processes, the resident and its
// keeper, and removes the directory; the process's Wait reports its end.
func testResidentClose(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	name, bin := e.namedSleep(t)
	out := newMarker("pids ")
	script := fmt.Sprintf(`trap 'echo term; exit 3' TERM; %s 100 & %s; while :; do sleep 0.1; done`, bin, pidsLine)
	p, err := res.Start(context.Background(), "sleeper", &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: out, WaitDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	sup, rpid, keeper := residentPids(t, out.String())
	if err := res.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if st, err := waitT(t, p); err != nil || st.Code != 3 {
		t.Errorf("Wait after Close = %v, %v; want exit 3 after SIGTERM", st, err)
	}
	noneLeft(t, e.sb, name, "processes outlived their resident's Close")
	for _, pid := range []int{sup, rpid, keeper} {
		if awaitGone(t, e.sb, pid) {
			t.Errorf("process %d (supervisor %d, resident %d, keeper %d) is still there after Close", pid, sup, rpid, keeper)
		}
	}
	if exists(t, e.sb, spec.Dir) {
		t.Errorf("the resident's directory %s is still there after Close", spec.Dir)
	}
	if err := res.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// testResidentRefusals: a wrong secret is refused with fs.ErrPermission
// and changes nothing; a second resident on the same directory is
// refused; an unknown name is ErrNotFound.
func testResidentRefusals(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	if _, err := res.Start(ctxT(t), "one", &sandbox.Cmd{Args: []string{"sleep", "100"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Start(ctxT(t), "one", &sandbox.Cmd{Args: []string{"true"}}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Start with a name in use = %v, want fs.ErrExist", err)
	}
	other, _ := e.newSandbox(t)
	t.Cleanup(func() { other.Close() })
	wrong := spec
	wrong.Adopt = true
	wrong.Secret = append([]byte("X"), spec.Secret[1:]...)
	if r, err := residentOf(t, other).Resident(ctxT(t), wrong); !errors.Is(err, fs.ErrPermission) {
		if err == nil {
			r.Detach()
		}
		t.Errorf("adopt with a wrong secret = %v, want fs.ErrPermission", err)
	}
	second := spec
	second.Secret = []byte(strings.Repeat("y", sandbox.MinResidentSecret))
	if r, err := residentOf(t, other).Resident(ctxT(t), second); !errors.Is(err, fs.ErrExist) {
		if err == nil {
			r.Close()
		}
		t.Errorf("a second resident on %s = %v, want fs.ErrExist", spec.Dir, err)
	}
	procs, err := res.Processes(ctxT(t))
	if err != nil || len(procs) != 1 || procs[0].Name != "one" || procs[0].Exited {
		t.Errorf("Processes after the refusals = %+v, %v; want one, running", procs, err)
	}
	if _, err := res.Attach(ctxT(t), "nobody-such", &sandbox.Cmd{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to an unknown name = %v, want ErrNotFound", err)
	}
}

// testResidentSecretNowhere: the secret is in no process's command line
// or environment in the sandbox while the resident runs a process.
func testResidentSecretNowhere(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	if _, err := res.Start(ctxT(t), "s", &sandbox.Cmd{Args: []string{"sleep", "100"}}); err != nil {
		t.Fatal(err)
	}
	half := len(spec.Secret) / 2
	needle := path.Join(e.dir, "needle")
	// The needle is put together in a file, so that it is in no command
	// line or environment of the search itself.
	r := run(t, e.sb, &sandbox.Cmd{
		Args: []string{"sh", "-c", `printf %s "$A$B" > "$N"; n=0
for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
	if grep -q -F -f "$N" "$f" 2>/dev/null; then pid=${f#/proc/}; echo "found in $f: $(tr '\0' ' ' < /proc/${pid%%/*}/cmdline 2>/dev/null)"; n=$((n+1)); fi
done
echo "checked"`},
		Env: []string{"A=" + string(spec.Secret[:half]), "B=" + string(spec.Secret[half:]), "N=" + needle},
	})
	if !strings.Contains(r.stdout, "checked") {
		t.Fatalf("search: %v %s %s", r.status, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "found") {
		t.Errorf("the secret is in a command line or environment:\n%s", r.stdout)
	}
}

// testResidentUnprivileged: a process started under the resident as an
// unprivileged user can neither reach the resident's socket nor read its
// memory or environment.
func testResidentUnprivileged(t *testing.T, e *env) {
	if id := strings.TrimSpace(run(t, e.sb, sh("id -u")).stdout); id != "0" {
		t.Skipf("the sandbox runs as uid %s, not root: no other user to start a process as", id)
	}
	res, spec := e.startResident(t, time.Minute)
	script := `s=$PPID; r=$(cut -d' ' -f4 /proc/$s/stat); echo "uid $(id -u)"
cat "$D/sock" 2>&1 | grep -q "ermission denied" && echo sock-denied || echo "sock-REACHED"
cat /proc/$r/environ >/dev/null 2>&1 && echo environ-READ || echo environ-denied
(exec 3</proc/$r/mem) 2>/dev/null && echo mem-OPENED || echo mem-denied`
	var out syncBuffer
	p, err := res.Start(ctxT(t), "nobody", &sandbox.Cmd{Args: []string{"sh", "-c", script}, Env: []string{"D=" + spec.Dir}, User: "65534", Stdout: &out})
	if err != nil {
		t.Fatalf("Start as uid 65534: %v", err)
	}
	if st, err := waitT(t, p); err != nil || !st.Success() {
		t.Fatalf("Wait = %v, %v (%s)", st, err, out.String())
	}
	want := "uid 65534\nsock-denied\nenviron-denied\nmem-denied\n"
	if out.String() != want {
		t.Errorf("an unprivileged process under the resident reports %q, want %q", out.String(), want)
	}
}

// testResidentSameUser: a process under the resident running as the
// resident's own user, without CAP_SYS_PTRACE (a container's root by
// default), cannot read the resident's memory or environment either: the
// resident is not dumpable.
func testResidentSameUser(t *testing.T, e *env) {
	res, _ := e.startResident(t, time.Minute)
	script := `s=$PPID; r=$(cut -d' ' -f4 /proc/$s/stat)
[ "$(stat -c %u /proc/$r)" = "$(id -u)" ] || echo "other-user"
cap=$(grep CapEff /proc/self/status | cut -f2)
[ $(( 0x$cap >> 19 & 1 )) = 1 ] && echo ptrace-capable
cat /proc/$r/environ >/dev/null 2>&1 && echo environ-READ || echo environ-denied
(exec 3</proc/$r/mem) 2>/dev/null && echo mem-OPENED || echo mem-denied`
	var out syncBuffer
	p, err := res.Start(ctxT(t), "same", &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := waitT(t, p); err != nil || !st.Success() {
		t.Fatalf("Wait = %v, %v (%s)", st, err, out.String())
	}
	if strings.Contains(out.String(), "ptrace-capable") || strings.Contains(out.String(), "other-user") {
		t.Skipf("the process may trace any process of its user (CAP_SYS_PTRACE), or runs as another user: %q", out.String())
	}
	if want := "environ-denied\nmem-denied\n"; out.String() != want {
		t.Errorf("a process of the resident's own user reports %q, want %q: the resident is dumpable", out.String(), want)
	}
}

// testResidentKilled: kill -9 of the resident leaves nothing of its
// processes, not even zombies; the resident is then not found, and a new
// one may take its stale directory.
func testResidentKilled(t *testing.T, e *env) {
	res, spec := e.startResident(t, time.Minute)
	name, bin := e.namedSleep(t)
	out := newMarker("pids ")
	script := fmt.Sprintf(`%s 100 & %s; exec %s 100`, bin, pidsLine, bin)
	p, err := res.Start(context.Background(), "sleeper", &sandbox.Cmd{Args: []string{"sh", "-c", script}, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	out.await(t)
	sup, rpid, keeper := residentPids(t, out.String())
	if r := run(t, e.sb, &sandbox.Cmd{Args: []string{"kill", "-9", strconv.Itoa(rpid)}}); !r.status.Success() {
		t.Fatalf("kill -9 %d: %v %s", rpid, r.status, r.stderr)
	}
	if _, err := waitT(t, p); err == nil {
		t.Error("Wait after the resident was killed returned no error")
	}
	noneLeft(t, e.sb, name, "processes outlived their killed resident")
	for _, pid := range []int{sup, rpid, keeper} {
		if awaitGone(t, e.sb, pid) {
			t.Errorf("process %d (supervisor %d, resident %d, keeper %d) is still there after the resident was killed", pid, sup, rpid, keeper)
		}
	}
	res.Detach()
	adopt := spec
	adopt.Adopt = true
	if _, err := residentOf(t, e.sb).Resident(ctxT(t), adopt); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("adopt a killed resident = %v, want ErrNotFound", err)
	}
	again, err := residentOf(t, e.sb).Resident(ctxT(t), spec)
	if err != nil {
		t.Fatalf("a new resident on the stale directory: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}

// testResidentNotFound: adopting where no resident runs is ErrNotFound.
func testResidentNotFound(t *testing.T, e *env) {
	rs := residentOf(t, e.sb)
	e.mkdir(t)
	spec := e.residentSpec(t, 0)
	spec.Adopt = true
	if _, err := rs.Resident(ctxT(t), spec); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("adopt where no resident runs = %v, want ErrNotFound", err)
	}
	if exists(t, e.sb, spec.Dir) {
		t.Errorf("a failed adopt made %s", spec.Dir)
	}
}
