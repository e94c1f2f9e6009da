// Package debug is the debug tool (docs/tools.md §7): one exec-level, serial tool
// that drives a Debug Adapter Protocol session (debugpy, delve, lldb-dap,
// the Dart adapter) inside the run's sandbox.
//
// A [Supervisor] holds at most one session per run, and with
// [Options.Claim] at most one per conversation (DBG-3). Adapters are
// discovered at call time inside the sandbox — a root marker and a binary,
// and for debugpy a python that can import it, the project's venv first
// (DBG-4). Adapters speaking stdio run through [sandbox.Pipe]; delve, which
// only listens on TCP, listens on a loopback port inside the sandbox that is
// reached with [sandbox.Sandbox.Dial], never from outside. A session ends
// with terminate, its TTL, or the run's close; ending it disconnects and
// kills the adapter's process group, which takes the debuggee with it.
package debug

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sync"
	"time"

	"berth.dev/berth/dap"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
)

// Defaults.
const (
	// DefaultTTL is a session's hard lifetime (DBG-3).
	DefaultTTL = 30 * time.Minute
	// DefaultWait bounds how long launch, continue, step and pause wait for
	// the program to stop before answering "still running".
	DefaultWait = 30 * time.Second
	// MaxOutputChars bounds the output one call shows.
	MaxOutputChars = 16_000
	// MaxStopLocals bounds the top frame's locals a stop report shows;
	// variables pages through the rest.
	MaxStopLocals = 10
	// endOutputChars bounds the output shown with the program's end and
	// with terminate.
	endOutputChars = 4000
	// stopTimeout bounds ending a session: disconnect, closing the stream,
	// and the adapter's exit (TERM and KILL included).
	stopTimeout = 15 * time.Second
	// listenTimeout bounds waiting for delve's "listening at" line.
	listenTimeout = 30 * time.Second
	// graceExit is how long an adapter may take to exit by itself after
	// disconnect before it is killed.
	graceExit = 3 * time.Second
	// stderrKeep is how much of an adapter's stderr is kept for messages.
	stderrKeep = 4096
)

// Options configure a [Supervisor].
type Options struct {
	// TTL is a session's hard lifetime (default DefaultTTL).
	TTL time.Duration
	// Wait bounds waiting for a stop after launch, continue, step or pause
	// (default DefaultWait).
	Wait time.Duration
	// Host says the sandbox is the host (also implied by a sandbox whose
	// Ref is "host"): no program of the workspace runs, not even to probe
	// it — a venv's python only when it resolves to an interpreter outside
	// the workspace, which the adapters list then names — and adapters
	// run with GOTOOLCHAIN=local.
	Host bool
	// Claim, when set, takes the conversation's one debug session for this
	// run (DBG-3). It is called when launch or attach starts a session,
	// before the adapter starts; an error refuses the session, and its text
	// (which names the run holding the session) is shown to the model.
	// release is called once the session ends: terminate, its TTL, a dead
	// adapter, a failed start, or the run's close. A session whose program
	// has ended keeps its claim until it is terminated or replaced.
	Claim func() (release func(), err error)
}

// Supervisor owns the debug session of one run.
type Supervisor struct {
	sb     sandbox.Sandbox
	ws     sandbox.FS
	root   string // the workspace's absolute path, cleaned
	runCtx context.Context
	opts   Options

	mu     sync.Mutex // guards the fields below; never held across I/O
	cur    *session
	nextID int
	notes  []string                    // what happened since the last call (TTL expiry), shown once
	bps    map[string][]dap.Breakpoint // absolute path → wanted breakpoints, kept across sessions
	closed bool
}

// New returns a supervisor for a run: sb is its sandbox, ws the workspace FS,
// runCtx lives as long as the run. Call [Supervisor.Close] when the run
// closes.
func New(sb sandbox.Sandbox, ws sandbox.FS, runCtx context.Context, opts Options) *Supervisor {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if sb.Ref() == "host" {
		opts.Host = true
	}
	return &Supervisor{sb: sb, ws: ws, root: path.Clean(ws.Root()), runCtx: runCtx, opts: opts, bps: map[string][]dap.Breakpoint{}}
}

// Tool is the debug tool as a registry lists it, described for
// DefaultTTL; [Register] describes the supervisor's own TTL.
var Tool = tools.Tool{Name: "debug", Level: tools.LevelExec, Serial: true, Description: description(DefaultTTL)}

// Register adds the debug tool to r, bound to a new supervisor, and returns
// the supervisor; the caller closes it when the run closes.
func Register(r *tools.Registry, sb sandbox.Sandbox, ws sandbox.FS, runCtx context.Context, opts Options) *Supervisor {
	s := New(sb, ws, runCtx, opts)
	t := Tool
	t.Description = description(s.opts.TTL)
	tools.Register(r, t, s.call, schemaOptions()...)
	return s
}

// Close ends the current session, killing the adapter and the debuggee,
// and refuses later calls.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	s.closed = true
	cur := s.cur
	s.cur = nil
	s.mu.Unlock()
	if cur == nil {
		return nil
	}
	return cur.stop(context.Background())
}

// session is one adapter process and its DAP session.
type session struct {
	id       int
	adapter  string
	command  string // "launch" or "attach"
	program  string // workspace-relative program, or "port N"
	root     string // workspace-relative project root
	started  time.Time
	deadline time.Time

	ds     *dap.Session
	cancel context.CancelFunc // ends the adapter process's context
	exited <-chan struct{}    // closed when the adapter process has exited
	status func() (sandbox.ExitStatus, error)
	pid    int
	stderr *proc.Tail
	timer  *time.Timer
	// release gives back the conversation's claim (Options.Claim) once the
	// adapter is gone.
	release func()
	// scratch is a directory the session made in the sandbox (delve's
	// build output), removed once the adapter is gone; sb removes it.
	scratch string
	sb      sandbox.Sandbox

	mu         sync.Mutex
	outShown   int64 // output offset shown by the output operation
	stopOnce   sync.Once
	stopErr    error
	stoppedFor string // why the session was ended, once it was
}

// stop disconnects (terminating a launched debuggee), closes the stream,
// kills the adapter's process group and then releases the session's
// claim. It is idempotent.
func (ss *session) stop(ctx context.Context) error {
	ss.stopOnce.Do(func() {
		defer ss.release()
		if ss.timer != nil {
			ss.timer.Stop()
		}
		ctx, cancel := context.WithTimeout(ctx, stopTimeout)
		defer cancel()
		err := ss.ds.Close(ctx, ss.command == "launch")
		if errors.Is(err, dap.ErrClosed) || errors.Is(err, dap.ErrAdapterExited) {
			err = nil
		}
		if ss.exited != nil {
			// An adapter that exits by itself after disconnect (dlv does)
			// is reaped by the agent; give it a moment before killing.
			t := time.NewTimer(graceExit)
			select {
			case <-ss.exited:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		ss.cancel() // the sandbox sends TERM, then KILL, to the adapter's group
		if ss.exited == nil {
			ss.stopErr = err // attached over a port: no adapter process of ours
			return
		}
		select {
		case <-ss.exited:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("debug: the debug adapter (pid %d) did not exit after it was killed: %w", ss.pid, ctx.Err()))
		}
		ss.stopErr = err
		ss.removeScratch(ctx)
	})
	return ss.stopErr
}

// removeScratch removes the session's scratch directory in the sandbox,
// bounded by ctx; what cannot be removed is left to the sandbox's owner.
func (ss *session) removeScratch(ctx context.Context) {
	if ss.scratch == "" || ss.sb == nil {
		return
	}
	p, err := ss.sb.Start(ctx, &sandbox.Cmd{Args: []string{"rm", "-rf", "--", ss.scratch}})
	if err == nil {
		p.Wait()
	}
}

// watch stops the session once its adapter is gone, so the adapter's
// process group and the conversation's claim go with it at once; the
// next call still reports why ([Supervisor.current]).
func (ss *session) watch() {
	select {
	case <-ss.ds.Done():
	case <-ss.exited: // nil after attach by port: the stream's end is the end
	}
	ss.stop(context.Background())
}

// gone reports why the session can no longer be used: the adapter exited
// or its stream ended. It returns "" while the session is alive.
func (ss *session) gone() string {
	select {
	case <-ss.ds.Done():
	case <-ss.exited:
	default:
		return ""
	}
	st := ss.ds.State()
	how := "its stream ended"
	select {
	case <-ss.exited:
		if es, err := ss.status(); err == nil {
			how = es.String()
		}
	default:
	}
	if st.Terminated || st.Exited {
		return fmt.Sprintf("the debug session of %s ended and the %s adapter exited (%s)", ss.program, ss.adapter, how)
	}
	msg := fmt.Sprintf("the %s debug adapter (pid %d) exited unexpectedly (%s) while debugging %s; the session is over, launch again", ss.adapter, ss.pid, how, ss.program)
	if t := ss.stderr.String(); t != "" {
		msg += "; its last stderr: " + proc.Clip(t, 600)
	}
	return msg
}

// current returns the live session, clearing one whose adapter is gone; the
// notes say what happened since the last call.
func (s *Supervisor) current() (*session, []string) {
	s.mu.Lock()
	cur := s.cur
	notes := s.notes
	s.notes = nil
	s.mu.Unlock()
	if cur == nil {
		return nil, notes
	}
	if why := cur.gone(); why != "" {
		cur.stop(context.Background()) // also waits for a TTL expiry or Close ending it now
		s.mu.Lock()
		if s.cur == cur {
			s.cur = nil
			notes = append(notes, why)
		} else {
			notes = append(notes, s.notes...)
			s.notes = nil
		}
		s.mu.Unlock()
		return nil, notes
	}
	return cur, notes
}

// expire ends a session whose TTL has passed.
func (s *Supervisor) expire(ss *session) {
	s.mu.Lock()
	if s.cur != ss {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	err := ss.stop(context.Background())
	note := fmt.Sprintf("the debug session of %s was terminated after its time limit of %v (started %s); launch again to continue debugging",
		ss.program, s.opts.TTL, ss.started.Format(time.TimeOnly))
	if err != nil {
		note += " (ending it: " + err.Error() + ")"
	}
	s.mu.Lock()
	if s.cur == ss {
		s.cur = nil
		s.notes = append(s.notes, note)
	}
	s.mu.Unlock()
}

// adapterProc is a started adapter: the stream to it and its process.
type adapterProc struct {
	stream io.ReadWriteCloser
	cancel context.CancelFunc
	exited <-chan struct{}
	status func() (sandbox.ExitStatus, error)
	pid    int
	stderr *proc.Tail
}

// startAdapter starts the adapter for av in the sandbox. Its process lives
// until the returned cancel is called or the run ends.
func (s *Supervisor) startAdapter(ctx context.Context, av Availability) (*adapterProc, error) {
	pctx, cancel := context.WithCancel(s.runCtx)
	stderr := proc.NewTail(stderrKeep)
	var env []string
	if s.opts.Host {
		env = append(env, proc.HostEnv) // dlv builds with go: no toolchain switch on the host
	}
	switch av.Adapter {
	case AdapterDelve:
		return s.startDelve(ctx, pctx, cancel, av, env, stderr)
	case AdapterDebugpy:
		env = append(env, "PYDEVD_DISABLE_FILE_VALIDATION=1")
		return s.startPipe(pctx, cancel, &sandbox.Cmd{Args: []string{av.Binary, "-m", "debugpy.adapter"}, Env: env, Dir: av.absRoot, Stderr: stderr}, stderr)
	case AdapterDart:
		return s.startPipe(pctx, cancel, &sandbox.Cmd{Args: []string{av.Binary, "debug_adapter"}, Env: env, Dir: av.absRoot, Stderr: stderr}, stderr)
	default:
		return s.startPipe(pctx, cancel, &sandbox.Cmd{Args: []string{av.Binary}, Env: env, Dir: av.absRoot, Stderr: stderr}, stderr)
	}
}

func (s *Supervisor) startPipe(pctx context.Context, cancel context.CancelFunc, cmd *sandbox.Cmd, stderr *proc.Tail) (*adapterProc, error) {
	ps, err := sandbox.Pipe(pctx, s.sb, cmd)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("debug: cannot start %s in the sandbox: %w", cmd.Args[0], err)
	}
	return &adapterProc{stream: ps, cancel: cancel, exited: ps.Done(), status: ps.ExitStatus, pid: ps.Process().Pid(), stderr: stderr}, nil
}

var listenLine = regexp.MustCompile(`DAP server listening at: (\S+)`)

// startDelve starts `dlv dap --listen 127.0.0.1:0` and connects to the port
// it prints through the sandbox's Dial: the port is never reachable from
// outside the sandbox. dlv serves one client and exits after it.
func (s *Supervisor) startDelve(ctx, pctx context.Context, cancel context.CancelFunc, av Availability, env []string, stderr *proc.Tail) (*adapterProc, error) {
	outR, outW := io.Pipe()
	p, err := s.sb.Start(pctx, &sandbox.Cmd{
		Args:   []string{av.Binary, "dap", "--listen", "127.0.0.1:0"},
		Env:    env,
		Dir:    av.absRoot,
		Stdout: outW,
		Stderr: stderr,
	})
	if err != nil {
		cancel()
		outR.Close()
		return nil, fmt.Errorf("debug: cannot start dlv in the sandbox: %w", err)
	}
	exited := make(chan struct{})
	var status sandbox.ExitStatus
	var waitErr error
	go func() { // owned by the process: ends when it exits
		status, waitErr = p.Wait()
		outW.Close()
		close(exited)
	}()
	addr := make(chan string, 1)
	go func() { // drains dlv's stdout until it closes, after the process exits
		sc := bufio.NewScanner(outR)
		sent := false
		for sc.Scan() {
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil && !sent {
				addr <- m[1]
				sent = true
			} else {
				stderr.Write([]byte(sc.Text() + "\n"))
			}
		}
		io.Copy(io.Discard, outR)
		outR.Close()
	}()
	fail := func(err error) (*adapterProc, error) {
		cancel()
		<-exited
		return nil, err
	}
	wctx, wcancel := context.WithTimeout(ctx, listenTimeout)
	defer wcancel()
	var a string
	select {
	case a = <-addr:
	case <-exited:
		cancel()
		return nil, fmt.Errorf("debug: dlv exited before it listened (%v): %s", status, proc.Clip(stderr.String(), 600))
	case <-wctx.Done():
		return fail(fmt.Errorf("debug: dlv did not say where it listens within %v: %w; its output: %s", listenTimeout, wctx.Err(), proc.Clip(stderr.String(), 600)))
	}
	conn, err := s.sb.Dial(ctx, "tcp", a)
	if err != nil {
		return fail(fmt.Errorf("debug: cannot connect to dlv at %s inside the sandbox: %w", a, err))
	}
	return &adapterProc{stream: conn, cancel: cancel, exited: exited, status: func() (sandbox.ExitStatus, error) {
		<-exited
		return status, waitErr
	}, pid: p.Pid(), stderr: stderr}, nil
}

// Resources reports the run's debug session, if any, for the operator
// console: adapter, program and pid.
func (s *Supervisor) Resources() []tools.Resource {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return nil
	}
	state := "live"
	if why := cur.gone(); why != "" {
		state = "ended: " + why
	}
	return []tools.Resource{{Kind: "debug session", Name: fmt.Sprintf("%s %s (%s)", cur.command, cur.program, cur.adapter), State: state,
		Detail: fmt.Sprintf("adapter pid %d, started %s", cur.pid, cur.started.Format(time.TimeOnly))}}
}
