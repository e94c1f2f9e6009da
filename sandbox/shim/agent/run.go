package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// rlimitNproc is RLIMIT_NPROC on Linux, which package syscall does not
// name.
const rlimitNproc = 6

// termGrace is how long the agent waits between SIGTERM and SIGKILL when
// berth went away.
const termGrace = time.Second

// supervisor is the state of "run" mode.
type supervisor struct {
	delay time.Duration
	pid   int // the child, also its process group id

	wmu    sync.Mutex // serialises frames on stdout
	out    io.Writer
	closed bool // the exit frame was sent or stdout failed; guarded by wmu

	// direct: the child writes berth's stdout itself; outDev and outIno
	// identify that pipe.
	direct         bool
	outDev, outIno uint64

	input       io.Reader     // berth's frames (the agent's stdin)
	pingTimeout time.Duration // runOptions.pingTimeout
	stdin       *pollFile     // the child's stdin, written by the stdin goroutines
	fail        chan struct{}
	once        sync.Once
}

// send writes one frame; a failed write means berth is gone.
func (s *supervisor) send(typ byte, payload []byte) bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return false
	}
	if err := WriteFrame(s.out, typ, payload); err != nil {
		s.closed = true
		s.lost()
		return false
	}
	return true
}

// sendFrame writes one frame built by the caller (header and payload).
func (s *supervisor) sendFrame(frame []byte) bool {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed {
		return false
	}
	if _, err := s.out.Write(frame); err != nil {
		s.closed = true
		s.lost()
		return false
	}
	return true
}

// lost records that berth went away.
func (s *supervisor) lost() { s.once.Do(func() { close(s.fail) }) }

// run supervises args. With direct, the child writes its stdout straight
// to the agent's stdout and the frames go to the agent's stderr; otherwise
// the agent relays stdout in frames on its stdout, as agents before
// berth-shim/2 did.
func run(args []string, o runOptions) int {
	delay, direct := o.delay, o.direct
	// The agent only relays: one P lets the goroutine that the poller wakes
	// for a frame or for the child's output do the whole relay on the
	// thread that woke, instead of waking further threads to steal it.
	// Measured on two CPUs: it cut the agent's share of a 100-byte echo's
	// round trip by about half.
	runtime.GOMAXPROCS(1)
	// The child's parent-death signal is tied to the thread that starts
	// it: this one, kept for the supervisor's whole life.
	runtime.LockOSThread()
	s := &supervisor{delay: delay, direct: direct, input: pollable(os.Stdin), fail: make(chan struct{}), pingTimeout: o.pingTimeout}
	if direct {
		s.out = pollable(os.Stderr)
	} else {
		s.out = pollable(os.Stdout)
	}
	// A subreaper adopts orphaned descendants, so the wait loop reaps them
	// and the /proc walk below finds them.
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	// Termination signals to the agent end the child's group first.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)

	prog, err := exec.LookPath(args[0])
	if err != nil {
		s.send(TypeStartFail, []byte(startError(args[0], err)))
		return 0
	}
	inR, inW, err1 := os.Pipe()
	errR, errW, err2 := os.Pipe()
	outR, childOut := (*os.File)(nil), os.Stdout
	var err3 error
	if !direct {
		outR, childOut, err3 = os.Pipe()
	}
	if err := errors.Join(err1, err2, err3); err != nil {
		s.send(TypeStartFail, []byte("create pipes: "+err.Error()))
		return 0
	}
	// os.Pipe's ends are non-blocking and in the poller already.
	var stdout, stderr *pollFile
	var err4, err5, err6 error
	s.stdin, err4 = newPollFile(inW)
	stderr, err5 = newPollFile(errR)
	if !direct {
		stdout, err6 = newPollFile(outR)
	}
	if err := errors.Join(err4, err5, err6); err != nil {
		s.send(TypeStartFail, []byte("wrap pipes: "+err.Error()))
		return 0
	}
	if direct {
		// The child's stdout is berth's: remember which pipe it is, to tell
		// when nobody holds it any more.
		var st syscall.Stat_t
		if err := syscall.Fstat(1, &st); err != nil {
			s.send(TypeStartFail, []byte("stat stdout: "+err.Error()))
			return 0
		}
		s.outDev, s.outIno = st.Dev, st.Ino
	}
	for _, dir := range o.cgroups {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			s.send(TypeStartFail, []byte(fmt.Sprintf("join the control group %s: %v", dir, err)))
			return 0
		}
	}
	if o.nproc > 0 {
		// Rlimits are inherited: the agent's own limit becomes the
		// child's. The agent is not held to it when it runs as root.
		lim := syscall.Rlimit{Cur: o.nproc, Max: o.nproc}
		if err := syscall.Setrlimit(rlimitNproc, &lim); err != nil {
			s.send(TypeStartFail, []byte(fmt.Sprintf("set RLIMIT_NPROC to %d: %v", o.nproc, err)))
			return 0
		}
	}
	attr := &os.ProcAttr{
		Files: []*os.File{inR, childOut, errW},
		// Empty Groups with a Credential drops the agent's supplementary
		// groups: the child has exactly the ones it was given.
		// Pdeathsig: a supervisor that dies (kill -9) takes the child
		// with it; its keeper kills and reaps the rest (keeper.go).
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: o.cred, Pdeathsig: syscall.SIGKILL},
	}
	proc, err := os.StartProcess(prog, args, attr)
	if o.cred != nil && err != nil && errors.Is(err, fs.ErrPermission) && !strings.Contains(args[0], "/") {
		// LookPath judged by the agent's user; like execvp, go on along
		// PATH past what the child's user may not execute.
		for _, next := range pathCandidates(args[0], prog) {
			if proc, err = os.StartProcess(next, args, attr); err == nil || !errors.Is(err, fs.ErrPermission) {
				break
			}
		}
	}
	inR.Close()
	errW.Close()
	if !direct {
		childOut.Close()
	}
	if err != nil {
		s.send(TypeStartFail, []byte(startError(args[0], err)))
		return 0
	}
	s.pid = proc.Pid
	if direct {
		// Let go of berth's stdout, so that it ends with the child's tree.
		releaseStdout()
	}
	if !s.send(TypeStarted, PutUint32s(uint32(s.pid))) {
		s.terminate()
		return 1
	}

	exited := make(chan syscall.WaitStatus, 1)
	go s.reap(exited)
	go s.readInput()

	var outputs sync.WaitGroup
	outputs.Add(1)
	go s.copyOutput(&outputs, stderr, TypeStderr)
	if !direct {
		outputs.Add(1)
		go s.copyOutput(&outputs, stdout, TypeStdout)
	}
	outputDone := make(chan struct{})
	go func() { outputs.Wait(); close(outputDone) }()

	var ws syscall.WaitStatus
	select {
	case ws = <-exited:
	case <-s.fail:
		s.terminate()
		return 1
	case <-sigs:
		s.terminate()
		return 1
	}
	// The child exited; descendants may still hold its output open.
	s.awaitOutput(outputDone, true)
	s.killAll(syscall.SIGKILL)
	// Killed holders close their ends; take what they wrote, briefly.
	s.awaitOutput(outputDone, false)

	code, sig := ws.ExitStatus(), 0
	if ws.Signaled() {
		code, sig = -1, int(ws.Signal())
	}
	s.wmu.Lock()
	if !s.closed {
		WriteFrame(s.out, TypeExit, PutUint32s(uint32(int32(code)), uint32(sig)))
		s.closed = true
	}
	s.wmu.Unlock()
	return 0
}

// outputPoll is how often the agent looks for processes still holding
// berth's stdout after the child exited (direct mode).
const outputPoll = 5 * time.Millisecond

// awaitOutput waits, at most the wait delay, until the child's output
// ended: every pipe the agent relays reached EOF and, in direct mode, no
// process holds berth's stdout any more. With untilLost it also stops when
// berth went away. In direct mode berth takes the end of its stdout as
// part of the process's end, so a holder that even SIGKILL cannot end (one
// running as another user) keeps berth waiting until its own deadline.
func (s *supervisor) awaitOutput(outputDone <-chan struct{}, untilLost bool) {
	var lost <-chan struct{}
	if untilLost {
		lost = s.fail
	}
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-outputDone:
	case <-t.C:
		return
	case <-lost:
		return
	}
	for s.direct && s.stdoutHeld() {
		select {
		case <-time.After(outputPoll):
		case <-t.C:
			return
		case <-lost:
			return
		}
	}
}

// stdoutHeld reports whether a live descendant has berth's stdout open.
// A descendant whose descriptors cannot be read counts as holding it.
func (s *supervisor) stdoutHeld() bool {
	for _, pid := range descendants() {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // it just ended
			}
			return true
		}
		for _, e := range ents {
			var st syscall.Stat_t
			if syscall.Stat(dir+"/"+e.Name(), &st) == nil && st.Dev == s.outDev && st.Ino == s.outIno {
				return true
			}
		}
	}
	return false
}

// releaseStdout points the agent's own descriptor 1 at /dev/null.
func releaseStdout() {
	null, err := syscall.Open("/dev/null", syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Close(1)
		return
	}
	syscall.Dup3(null, 1, 0)
	syscall.Close(null)
}

// pathCandidates lists the executables named name in $PATH that come after
// first, the one exec.LookPath found.
func pathCandidates(name, first string) []string {
	var out []string
	seen := false
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if !seen {
			seen = p == first
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			out = append(out, p)
		}
	}
	return out
}

// startError phrases why a program could not start.
func startError(name string, err error) string {
	var ee *exec.Error
	if errors.As(err, &ee) {
		if errors.Is(ee.Err, exec.ErrNotFound) {
			return fmt.Sprintf("%q: executable file not found in $PATH", name)
		}
		return fmt.Sprintf("%q: %v", name, ee.Err)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%q: %v", name, pe.Err)
	}
	return fmt.Sprintf("%q: %v", name, err)
}

// reap waits for every child of the agent; the child's status goes to
// exited. Orphans adopted later are reaped too. It waits for SIGCHLD and
// then collects without blocking, so that no thread sits in wait4: with
// one P, a thread blocked in a system call holds the P until the runtime
// takes it back.
func (s *supervisor) reap(exited chan<- syscall.WaitStatus) {
	reapLoop(func(pid int, ws syscall.WaitStatus) {
		if pid == s.pid && (ws.Exited() || ws.Signaled()) {
			exited <- ws
		}
	})
}

// reapLoop collects every child that ends, for good, passing each to
// reaped: on each SIGCHLD it collects without blocking.
func reapLoop(reaped func(pid int, ws syscall.WaitStatus)) {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	for {
		// A SIGCHLD that arrives during this loop stays in the channel.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || pid <= 0 {
				break
			}
			reaped(pid, ws)
		}
		<-sigchld
	}
}

// stdinFeed moves stdin data from the frame reader to the child. The
// reader writes to the child's stdin itself when nothing is queued, without
// ever blocking: whatever the pipe does not take at once is queued for the
// writer goroutine, so a child that does not read stdin never stops the
// reader (and with it signals). The writer goroutine also sends the
// acknowledgements, so the reader never waits on berth either.
type stdinFeed struct {
	s *supervisor

	mu      sync.Mutex
	cond    *sync.Cond // signalled when chunks, eof or unacked change
	chunks  [][]byte   // queued data, in order
	bytes   int        // queued bytes
	busy    bool       // the writer is writing a chunk it took off the queue
	eof     bool       // no more data comes
	broken  bool       // the child closed its stdin; data is dropped
	unacked int        // bytes taken (written or dropped), not yet acknowledged
}

// put takes one stdin payload from berth. It returns false when berth
// ignored flow control. It never blocks on the child or on berth.
func (f *stdinFeed) put(p []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.eof || len(p) == 0 {
		return true
	}
	if f.bytes == 0 && !f.busy {
		n := f.tryWriteLocked(p)
		f.tookLocked(n)
		if p = p[n:]; len(p) == 0 {
			return true
		}
	}
	if f.bytes+len(p) > 2*StdinWindow {
		return false
	}
	f.chunks = append(f.chunks, append([]byte(nil), p...))
	f.bytes += len(p)
	f.cond.Signal()
	return true
}

// tryWriteLocked writes what the child's stdin pipe takes at once and
// returns how many bytes of p are done with (written, or dropped when the
// child closed its stdin).
func (f *stdinFeed) tryWriteLocked(p []byte) int {
	if f.broken {
		return len(p)
	}
	n, err := f.s.stdin.TryWrite(p)
	if err == ErrWouldBlock {
		return 0
	}
	if err != nil {
		f.broken = true
		return len(p)
	}
	return n
}

// tookLocked counts n taken bytes and wakes the writer to acknowledge
// them once a batch is full.
func (f *stdinFeed) tookLocked(n int) {
	f.unacked += n
	if f.unacked >= StdinAckBatch {
		f.cond.Signal()
	}
}

// close marks the end of stdin; the writer closes the child's stdin once
// the queue is empty.
func (f *stdinFeed) close() {
	f.mu.Lock()
	f.eof = true
	f.cond.Signal()
	f.mu.Unlock()
}

// readInput handles frames from berth until its stream ends.
func (s *supervisor) readInput() {
	f := &stdinFeed{s: s}
	f.cond = sync.NewCond(&f.mu)
	go s.writeStdin(f)
	fr := NewReader(s.input)
	var silent *time.Timer
	if s.pingTimeout > 0 {
		// berth pings every ProcessPing; this long without a frame, it
		// is gone even if its stream was not closed.
		silent = time.AfterFunc(s.pingTimeout, func() {
			f.close()
			s.lost()
		})
	}
	for {
		typ, payload, err := fr.Next()
		if silent != nil {
			silent.Reset(s.pingTimeout)
		}
		if err != nil {
			// berth went away without waiting for the exit frame.
			f.close()
			s.lost()
			return
		}
		switch typ {
		case TypeStdin:
			if !f.put(payload) {
				// berth ignored flow control; the child gets EOF.
				f.close()
			}
		case TypeStdinEOF:
			f.close()
		case TypeSignal:
			if v, err := Uint32s(payload, 1); err == nil {
				syscall.Kill(-s.pid, syscall.Signal(v[0]))
			}
		}
	}
}

// writeStdin writes queued stdin data to the child, blocking as long as the
// child does not read, sends the acknowledgements, and closes the child's
// stdin at the end.
func (s *supervisor) writeStdin(f *stdinFeed) {
	f.mu.Lock()
	for {
		for len(f.chunks) == 0 && !f.eof && f.unacked < StdinAckBatch {
			f.cond.Wait()
		}
		if n := f.unacked; n >= StdinAckBatch {
			f.unacked = 0
			f.mu.Unlock()
			s.send(TypeStdinAck, PutUint32s(uint32(n)))
			f.mu.Lock()
			continue
		}
		if len(f.chunks) == 0 {
			break // eof
		}
		p := f.chunks[0]
		f.chunks[0] = nil
		f.chunks = f.chunks[1:]
		f.bytes -= len(p)
		f.busy = true
		broken := f.broken
		f.mu.Unlock()
		if !broken {
			if _, err := s.stdin.Write(p); err != nil {
				// The child closed its stdin; keep acknowledging so berth
				// does not stall.
				broken = true
			}
		}
		f.mu.Lock()
		f.busy = false
		f.broken = f.broken || broken
		f.tookLocked(len(p))
	}
	f.mu.Unlock()
	s.stdin.Close()
}

// outputChunk is the most child output the agent relays in one frame.
const outputChunk = 32 << 10

// copyOutput relays one of the child's outputs as frames, each built in
// one buffer and written with one call.
func (s *supervisor) copyOutput(wg *sync.WaitGroup, r *pollFile, typ byte) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, HeaderSize+outputChunk)
	for {
		n, err := r.Read(buf[HeaderSize:])
		if n > 0 {
			PutHeader(buf, typ, n)
			if !s.sendFrame(buf[:HeaderSize+n]) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// signalAll sends sig to the child's process group and to every other
// descendant of the agent.
func (s *supervisor) signalAll(sig syscall.Signal) {
	syscall.Kill(-s.pid, sig)
	for _, pid := range descendants() {
		syscall.Kill(pid, sig)
	}
}

// killAll kills the group and descendants until none is left, bounded,
// then waits (bounded) until the reaper has collected every child: a child
// left unreaped when the agent exits becomes a zombie of the container's
// PID 1, which often never reaps (sleep infinity).
func (s *supervisor) killAll(sig syscall.Signal) {
	for range 10 {
		s.signalAll(sig)
		if len(descendants()) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 100 {
		// The reaper goroutine may not run yet (berth went away right after
		// the start), so reap here too; whichever waits first collects.
		for {
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		if children() == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// terminate ends everything when berth went away: SIGTERM, then SIGKILL.
func (s *supervisor) terminate() {
	s.signalAll(syscall.SIGTERM)
	deadline := time.Now().Add(termGrace)
	for time.Now().Before(deadline) && len(descendants()) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	s.killAll(syscall.SIGKILL)
}

// procTable reads every process's parent and whether it is a zombie from
// /proc.
func procTable() (parent map[int]int, zombie map[int]bool) {
	parent = make(map[int]int)
	zombie = make(map[int]bool)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return parent, zombie
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The command name is in parentheses and may contain spaces.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
		zombie[pid] = f[0] == "Z" || f[0] == "X"
	}
	return parent, zombie
}

// descendants lists the live (not zombie) processes below the agent.
func descendants() []int {
	self := os.Getpid()
	parent, zombie := procTable()
	var out []int
	for pid := range parent {
		if pid == self || zombie[pid] {
			continue
		}
		for p, n := parent[pid], 0; p > 1 && n < 1024; p, n = parent[p], n+1 {
			if p == self {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// children counts the agent's direct children, zombies included.
func children() int {
	self := os.Getpid()
	parent, _ := procTable()
	n := 0
	for pid, ppid := range parent {
		if ppid == self && pid != self {
			n++
		}
	}
	return n
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from linux/prctl.h.
const prSetChildSubreaper = 36

// removeOwned removes the paths a program owned ("run --remove"), once it
// ended: its private directory, a file holding its key. A path that is a
// symbolic link, or owned by neither the program's user (cred) nor the
// agent's, is left alone: the program cannot point the removal elsewhere.
// RemoveAll does not follow symbolic links below the path.
func removeOwned(paths []string, cred *syscall.Credential) {
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		if int(st.Uid) != os.Geteuid() && (cred == nil || st.Uid != cred.Uid) {
			continue
		}
		os.RemoveAll(p)
	}
}
