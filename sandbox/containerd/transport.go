package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// stopSettle is how long a program killed by a signal waits for the task
// to report its end, before its end counts as the program's own; see
// [Transport.settle].
const stopSettle = 2 * time.Second

// closeGrace is how long a closed stream's program has to end on its own
// (berth's agent stops its process group, SIGTERM and then SIGKILL, when
// its stdin ends) before the stream kills it and stops reading its output.
const closeGrace = 5 * time.Second

// Transport is a [shim.Transport] over the containerd API for one container
// with a running task: Exec is task.Exec with stdio over FIFOs, Place
// writes the agent through the task's root file system (/proc/PID/root) or,
// when this machine does not show it, pipes it in through an exec. It is
// safe for concurrent use.
type Transport struct {
	cli     *client.Client
	ns      string
	ctr     client.Container
	fifoDir string // where exec FIFOs are made; empty for containerd's default

	once shim.PlaceOnce // Place's serialisation and cache

	mu   sync.Mutex
	proc *specs.Process // the container's process spec, loaded once
}

var _ shim.Transport = (*Transport)(nil)

// NewTransport returns a transport into container ctr of namespace ns. cli
// stays owned by the caller, who closes it after the transport's last use.
func NewTransport(cli *client.Client, ns string, ctr client.Container) *Transport {
	return &Transport{cli: cli, ns: ns, ctr: ctr}
}

// Ref returns "NAMESPACE/ID".
func (t *Transport) Ref() string { return t.ns + "/" + t.ctr.ID() }

func (t *Transport) name() string { return t.ns + "/" + short(t.ctr.ID()) }

func (t *Transport) nsctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, t.ns)
}

// task returns the container's task when it runs, else an error wrapping
// sandbox.ErrGone.
func (t *Transport) task(ctx context.Context) (client.Task, error) {
	ctx = t.nsctx(ctx)
	task, err := t.ctr.Task(ctx, nil)
	if err != nil {
		if errdefs.IsNotFound(err) {
			if _, err := t.cli.ContainerService().Get(ctx, t.ctr.ID()); errdefs.IsNotFound(err) {
				return nil, fmt.Errorf("containerd: container %s was removed; open the conversation's new container: %w", t.name(), sandbox.ErrGone)
			}
			return nil, fmt.Errorf("containerd: container %s has no running task (it stopped); berth does not start containers, so use a running one: %w", t.name(), sandbox.ErrGone)
		}
		return nil, daemonError(t.name(), err)
	}
	st, err := task.Status(ctx)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("containerd: the task of container %s ended: %w", t.name(), sandbox.ErrGone)
		}
		return nil, daemonError(t.name(), err)
	}
	switch st.Status {
	case client.Running:
		return task, nil
	case client.Paused, client.Pausing:
		return nil, fmt.Errorf("containerd: container %s is paused; exec would block until it is resumed: %w: %w", t.name(), sandbox.ErrUnavailable, sandbox.ErrGone)
	case client.Stopped:
		return nil, fmt.Errorf("containerd: container %s stopped (exit code %d); berth does not start containers, so use a running one: %w", t.name(), st.ExitStatus, sandbox.ErrGone)
	}
	return nil, fmt.Errorf("containerd: container %s is %s, not running: %w", t.name(), st.Status, sandbox.ErrGone)
}

// check returns nil when the container's task runs, else an error wrapping
// sandbox.ErrGone. A done ctx is replaced so that the answer still comes.
func (t *Transport) check(ctx context.Context) error {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
		defer cancel()
	}
	_, err := t.task(ctx)
	return err
}

// settle is check for a program that was killed or cut off: the exec may
// end before containerd noticed that the container's init died, so when
// the task still looks alive, settle waits up to stopSettle for it to end.
func (t *Transport) settle(ctx context.Context) error {
	task, err := t.task(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(t.nsctx(ctx), stopSettle)
	defer cancel()
	if ch, err := task.Wait(wctx); err == nil {
		<-ch
	}
	return t.check(ctx)
}

// explain turns the error of a failed call into one wrapping
// sandbox.ErrGone when the container is no longer usable, else err with
// context.
func (t *Transport) explain(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("containerd: %s in container %s: %w", op, t.name(), err)
	}
	if gone := t.check(ctx); gone != nil {
		return fmt.Errorf("%w (%s failed: %v)", gone, op, err)
	}
	return fmt.Errorf("containerd: %s in container %s: %w", op, t.name(), err)
}

// processSpec returns a copy of the container's process spec.
func (t *Transport) processSpec(ctx context.Context) (specs.Process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.proc == nil {
		spec, err := t.ctr.Spec(t.nsctx(ctx))
		if err != nil {
			return specs.Process{}, t.explain(ctx, "read the container's spec", err)
		}
		if spec.Process == nil {
			return specs.Process{}, fmt.Errorf("containerd: container %s has no process in its spec; berth cannot run programs in it: %w", t.name(), sandbox.ErrUnsupported)
		}
		t.proc = spec.Process
	}
	p := *t.proc
	p.Env = slices.Clone(p.Env)
	p.Args = nil
	p.Terminal = false
	p.ConsoleSize = nil
	return p, nil
}

// Exec starts spec.Args in the container's task, without a TTY, with stdin,
// stdout and stderr over FIFOs. ctx bounds only the start; the returned
// stream lives until the program ends or the stream is closed.
func (t *Transport) Exec(ctx context.Context, spec shim.ExecSpec) (shim.Stream, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("containerd: exec: no program given; pass the program and its arguments in Args")
	}
	task, err := t.task(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := t.processSpec(ctx)
	if err != nil {
		return nil, err
	}
	ps.Args = slices.Clone(spec.Args)
	ps.Env = mergeEnv(ps.Env, spec.Env)
	if spec.Dir != "" {
		ps.Cwd = spec.Dir
	}
	if spec.User != "" {
		u, err := resolveUser(task.Pid(), spec.User)
		if err != nil {
			return nil, fmt.Errorf("containerd: exec %s in container %s: %w", spec.Args[0], t.name(), err)
		}
		ps.User = u
	}

	s := newStream(t, spec.Args[0])
	var idb [8]byte
	rand.Read(idb[:])
	execID := "berth-" + hex.EncodeToString(idb[:])
	proc, err := task.Exec(t.nsctx(ctx), execID, &ps, cio.NewCreator(cio.WithStreams(s.stdinR, s.stdoutW, s.stderrW), cio.WithFIFODir(t.fifoDir)))
	if err != nil {
		s.Close()
		return nil, t.explain(ctx, "exec "+spec.Args[0], err)
	}
	s.proc = proc
	// The exit status is awaited for the program's whole life, not only
	// for ctx; wait is cancelled once the stream's owner goroutine is done.
	wctx, cancel := context.WithCancel(t.nsctx(context.WithoutCancel(ctx)))
	exitCh, err := proc.Wait(wctx)
	if err == nil {
		err = t.start(ctx, proc, s)
	}
	if err != nil {
		cancel()
		s.Close()
		s.cleanup()
		return nil, t.explain(ctx, "start "+spec.Args[0], err)
	}
	go s.run(wctx, exitCh, cancel)
	return s, nil
}

// startTimeout bounds how long an exec's start may take before it is
// abandoned.
const startTimeout = 30 * time.Second

// start starts proc, whose stdio is s. A start that fails waits, inside
// containerd's client, for the output copies, which wait for FIFOs the
// runtime shim may keep open, or for room in s's output pipes, which nobody
// reads before Exec returns (a program that wrote an error and exited while
// its start was being cancelled): when ctx ends or the start takes
// startTimeout, the FIFOs and s are closed so that the start returns.
func (t *Transport) start(ctx context.Context, proc client.Process, s *stream) error {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		case <-time.After(startTimeout):
		}
		select {
		case <-done:
		case <-time.After(time.Second):
			proc.IO().Close()
			s.Close()
		}
	}()
	err := proc.Start(t.nsctx(ctx))
	close(done)
	return err
}

// mergeEnv returns base with add's entries replacing those of the same
// name.
func mergeEnv(base, add []string) []string {
	if len(add) == 0 {
		return base
	}
	keep := make(map[string]bool)
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		keep[k] = true
	}
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !keep[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

// stream is one exec's stdio: pipes that cio copies to and from the
// process's FIFOs.
type stream struct {
	t    *Transport
	prog string
	proc client.Process // nil until created

	stdinR, stdoutR, stderrR *io.PipeReader
	stdinW, stdoutW, stderrW *io.PipeWriter
	stdin                    *stdinWriter

	closeOnce sync.Once
	closed    chan struct{} // closed by Close

	done chan struct{} // closed by run when code and err are set
	code int
	err  error
}

func newStream(t *Transport, prog string) *stream {
	s := &stream{t: t, prog: prog, closed: make(chan struct{}), done: make(chan struct{})}
	s.stdinR, s.stdinW = io.Pipe()
	s.stdoutR, s.stdoutW = io.Pipe()
	s.stderrR, s.stderrW = io.Pipe()
	s.stdin = &stdinWriter{s: s}
	return s
}

func (s *stream) Stdin() io.WriteCloser { return s.stdin }
func (s *stream) Stdout() io.Reader     { return s.stdoutR }
func (s *stream) Stderr() io.Reader     { return s.stderrR }

// Close tears the stream down: readers and writers fail with
// io.ErrClosedPipe, and the program, whose stdin closes, is killed.
func (s *stream) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.stdinR.CloseWithError(io.ErrClosedPipe)
		s.stdoutR.CloseWithError(io.ErrClosedPipe)
		s.stderrR.CloseWithError(io.ErrClosedPipe)
	})
	return nil
}

func (s *stream) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Wait waits for the program to end and its output to be delivered.
func (s *stream) Wait() (int, error) {
	<-s.done
	return s.code, s.err
}

// run owns the exec after its start: it waits for the exit (or Close,
// which kills the program), waits for the output copies, ends the output
// pipes, and deletes the process and its FIFOs.
func (s *stream) run(wctx context.Context, exitCh <-chan client.ExitStatus, cancel context.CancelFunc) {
	defer close(s.done)
	defer cancel()
	st, cut := s.waitExit(wctx, exitCh)
	// The program ended: writes to its stdin fail instead of blocking on a
	// FIFO nobody reads.
	s.stdinR.CloseWithError(io.ErrClosedPipe)
	if _, _, err := st.Result(); err != nil || s.isClosed() {
		// Nobody reads the output any more, or the end is unknown and the
		// FIFOs may never see EOF: stop copying.
		s.proc.IO().Cancel()
	}
	if s.isClosed() {
		// A process that escaped the kill may still hold the FIFOs' other
		// ends: stop reading them after a grace period.
		ioDone := make(chan struct{})
		go func() { s.proc.IO().Wait(); close(ioDone) }()
		select {
		case <-ioDone:
		case <-time.After(closeGrace):
			s.proc.IO().Close()
			select {
			case <-ioDone:
			case <-time.After(closeGrace):
				// The copies stay blocked on a FIFO someone else
				// holds; the stream ends without them.
			}
		}
	} else {
		s.proc.IO().Wait()
	}
	s.stdoutW.Close()
	s.stderrW.Close()
	s.cleanup()
	s.code, s.err = s.result(st, cut)
}

// rewaitMin and rewaitMax bound the pause between two attempts to wait
// for a program again while containerd does not answer.
const (
	rewaitMin = 250 * time.Millisecond
	rewaitMax = 2 * time.Second
)

// waitExit waits for the program's exit, or for Close, which ends it; cut
// says berth closed the stream before the program ended. When containerd
// stops answering (it restarts, its socket is unreachable), the wait is
// lost but the program is not: its FIFOs live on in the runtime shim, and
// their copies in berth go on. The program is then waited for again, each
// attempt a new Wait on wctx, until containerd reports its exit.
func (s *stream) waitExit(wctx context.Context, exitCh <-chan client.ExitStatus) (st client.ExitStatus, cut bool) {
	pause := rewaitMin
	for {
		select {
		case st = <-exitCh:
			if !lostWait(st) {
				return st, false
			}
			exitCh = nil // a lost wait's channel is closed: it would answer at once
			t := time.NewTimer(pause)
			select {
			case <-t.C:
				exitCh, _ = s.proc.Wait(wctx) // its error, too, comes on the channel
				pause = min(2*pause, rewaitMax)
			case <-s.closed:
				t.Stop()
			}
		case <-s.closed:
			return s.closeWait(wctx, exitCh), true
		}
	}
}

// lostWait reports whether st is not the program's exit but containerd's
// answer lost on the way: the connection failed.
func lostWait(st client.ExitStatus) bool {
	err := st.Error()
	return err != nil && (errdefs.IsUnavailable(err) || status.Code(err) == codes.Unavailable)
}

// closeWait ends a program whose stream berth closed and waits for its
// exit, each step bounded: berth's agent ends its process group when its
// stdin ends, and only a program that does not gets SIGKILL (a SIGKILL
// first would orphan the group, whose members keep the output FIFOs
// open). exitCh is the pending wait, nil when none is.
func (s *stream) closeWait(wctx context.Context, exitCh <-chan client.ExitStatus) client.ExitStatus {
	ctx, cancel := context.WithTimeout(s.t.nsctx(context.Background()), callTimeout)
	defer cancel()
	if exitCh == nil {
		exitCh, _ = s.proc.Wait(wctx)
	}
	s.proc.CloseIO(ctx, client.WithStdinCloser)
	var st client.ExitStatus
	select {
	case st = <-exitCh:
	case <-time.After(closeGrace):
		s.proc.Kill(ctx, syscall.SIGKILL)
		select {
		case st = <-exitCh:
		case <-time.After(callTimeout):
		}
	}
	return st
}

// cleanup deletes the exited process and its FIFOs. dockerd reaps exec
// processes in its namespace itself, so Delete may find nothing; the FIFOs
// are then removed here.
func (s *stream) cleanup() {
	ctx, cancel := context.WithTimeout(s.t.nsctx(context.Background()), callTimeout)
	defer cancel()
	if s.proc == nil {
		return
	}
	if _, err := s.proc.Delete(ctx); err != nil {
		if io := s.proc.IO(); io != nil {
			io.Cancel()
			io.Close()
		}
	}
}

// result is the program's exit code, or why there is none; cut says berth
// closed the stream before the program ended.
func (s *stream) result(st client.ExitStatus, cut bool) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	code, _, err := st.Result()
	// A program whose stream berth closed before it ended (a failed start,
	// a silent file server, Close) was ended by berth: that is no sign
	// that the container stopped, so the container is checked once and
	// not awaited.
	settle := s.t.settle
	if cut {
		settle = s.t.check
	}
	if err != nil || code == client.UnknownExitStatus {
		if gone := settle(ctx); gone != nil {
			return -1, gone
		}
		if s.isClosed() {
			return -1, fmt.Errorf("containerd: %s in container %s: the stream was closed before the program ended", s.prog, s.t.name())
		}
		return -1, fmt.Errorf("containerd: %s in container %s: waiting for its exit failed: %v", s.prog, s.t.name(), err)
	}
	if code >= 128 {
		// Killed by a signal: possibly because the container stopped, which
		// the caller must learn as ErrGone rather than as an exit status.
		if gone := settle(ctx); gone != nil {
			return -1, gone
		}
	}
	return int(code), nil
}

// stdinWriter writes the program's stdin; Close ends it, so the program
// reads EOF while its output keeps flowing.
type stdinWriter struct {
	s    *stream
	once sync.Once
}

func (w *stdinWriter) Write(p []byte) (int, error) {
	n, err := w.s.stdinW.Write(p)
	if err != nil {
		err = os.ErrClosed
	}
	return n, err
}

func (w *stdinWriter) Close() error {
	var err error
	w.once.Do(func() {
		w.s.stdinW.Close()
		if w.s.proc == nil {
			return
		}
		// cio closes its end of the FIFO once the pipe is drained; the
		// runtime shim holds another end open until CloseIO.
		ctx, cancel := context.WithTimeout(w.s.t.nsctx(context.Background()), callTimeout)
		defer cancel()
		if e := w.s.proc.CloseIO(ctx, client.WithStdinCloser); e != nil && !errdefs.IsNotFound(e) {
			err = fmt.Errorf("containerd: close stdin of %s: %w", w.s.prog, e)
		}
	})
	return err
}

// Place makes the agent available in the container, once per container
// and binary hash, at <dir>/shim-<hash12>/berth-shim for the first
// directory of shim.PlaceDirs that can be written, and returns that path. A
// copy already there with the right content is reused.
func (t *Transport) Place(ctx context.Context, bin *shim.Binary) (string, error) {
	return t.once.Place(ctx, bin, "containerd: place agent in container "+t.name(), t.place)
}

func (t *Transport) place(ctx context.Context, bin *shim.Binary) (string, error) {
	data, sum, err := bin.Verified()
	if err != nil {
		return "", fmt.Errorf("containerd: place agent: %w", err)
	}
	rel := bin.PlaceName()
	task, err := t.task(ctx)
	if err != nil {
		return "", err
	}
	if root, ok := openTaskRoot(task.Pid(), t.ctr.ID()); ok {
		defer root.Close()
		return t.placeLocal(root, rel, data, sum)
	}
	return t.placeExec(ctx, rel, data)
}

// randomSuffix names temporary files.
func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
