package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

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

	stdin *os.File // the child's stdin, written by the stdin goroutine
	fail  chan struct{}
	once  sync.Once
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

// lost records that berth went away.
func (s *supervisor) lost() { s.once.Do(func() { close(s.fail) }) }

func run(args []string, delay time.Duration) int {
	s := &supervisor{delay: delay, out: os.Stdout, fail: make(chan struct{})}
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
	outR, outW, err2 := os.Pipe()
	errR, errW, err3 := os.Pipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		s.send(TypeStartFail, []byte("create pipes: "+err.Error()))
		return 0
	}
	proc, err := os.StartProcess(prog, args, &os.ProcAttr{
		Files: []*os.File{inR, outW, errW},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		s.send(TypeStartFail, []byte(startError(args[0], err)))
		return 0
	}
	s.pid = proc.Pid
	s.stdin = inW
	if !s.send(TypeStarted, PutUint32s(uint32(s.pid))) {
		s.terminate()
		return 1
	}

	exited := make(chan syscall.WaitStatus, 1)
	go s.reap(exited)
	go s.readInput()

	var outputs sync.WaitGroup
	outputs.Add(2)
	go s.copyOutput(&outputs, outR, TypeStdout)
	go s.copyOutput(&outputs, errR, TypeStderr)
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
	t := time.NewTimer(s.delay)
	select {
	case <-outputDone:
	case <-t.C:
	case <-s.fail:
	}
	t.Stop()
	s.killAll(syscall.SIGKILL)
	// Killed holders close their ends; take what they wrote, briefly.
	t = time.NewTimer(s.delay)
	select {
	case <-outputDone:
	case <-t.C:
	}
	t.Stop()

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
// exited. Orphans adopted later are reaped too.
func (s *supervisor) reap(exited chan<- syscall.WaitStatus) {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil:
			// No children right now; wait for an adopted one.
			<-sigchld
		case pid == s.pid && (ws.Exited() || ws.Signaled()):
			exited <- ws
		}
	}
}

// inputQueue holds stdin data between the frame reader and the writer to
// the child, so the reader never blocks on a child that does not read.
type inputQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks [][]byte
	bytes  int
	eof    bool
}

func (q *inputQueue) push(p []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.eof || len(p) == 0 {
		return true
	}
	if q.bytes+len(p) > 2*StdinWindow {
		return false
	}
	q.chunks = append(q.chunks, append([]byte(nil), p...))
	q.bytes += len(p)
	q.cond.Signal()
	return true
}

func (q *inputQueue) close() {
	q.mu.Lock()
	q.eof = true
	q.cond.Signal()
	q.mu.Unlock()
}

// pop returns the next chunk, or nil at EOF.
func (q *inputQueue) pop() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.chunks) == 0 && !q.eof {
		q.cond.Wait()
	}
	if len(q.chunks) == 0 {
		return nil
	}
	p := q.chunks[0]
	q.chunks = q.chunks[1:]
	q.bytes -= len(p)
	return p
}

// readInput handles frames from berth until its stream ends.
func (s *supervisor) readInput() {
	q := &inputQueue{}
	q.cond = sync.NewCond(&q.mu)
	go s.writeStdin(q)
	fr := NewReader(os.Stdin)
	for {
		typ, payload, err := fr.Next()
		if err != nil {
			// berth went away without waiting for the exit frame.
			q.close()
			s.lost()
			return
		}
		switch typ {
		case TypeStdin:
			if !q.push(payload) {
				// berth ignored flow control; the child gets EOF.
				q.close()
			}
		case TypeStdinEOF:
			q.close()
		case TypeSignal:
			if v, err := Uint32s(payload, 1); err == nil {
				syscall.Kill(-s.pid, syscall.Signal(v[0]))
			}
		}
	}
}

// writeStdin feeds the child's stdin and acknowledges what it took.
func (s *supervisor) writeStdin(q *inputQueue) {
	broken := false
	for p := q.pop(); p != nil; p = q.pop() {
		if !broken {
			if _, err := s.stdin.Write(p); err != nil {
				// The child closed its stdin; keep acknowledging so berth
				// does not stall.
				broken = true
			}
		}
		s.send(TypeStdinAck, PutUint32s(uint32(len(p))))
	}
	s.stdin.Close()
}

// copyOutput relays one of the child's outputs as frames.
func (s *supervisor) copyOutput(wg *sync.WaitGroup, r *os.File, typ byte) {
	defer wg.Done()
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 && !s.send(typ, buf[:n]) {
			return
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
