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
// with terminate, its TTL, the run's close, or the end of its program
// (also a program killed from outside, which the next call notices:
// [Supervisor.checkProgram]);
// ending it disconnects and kills the adapter's process group, which takes
// the debuggee with it. Every DAP request has a deadline
// ([Options.RequestTimeout]): an adapter that does not answer is named in
// the error, which says to terminate.
//
// With [Options.Resident], stdio adapters run under the run's resident
// supervisor instead, and a session outlives berth: [Supervisor.Snapshot]
// records it, [Supervisor.Detach] lets go of it, and a restarted berth
// takes it over with [Supervisor.Adopt], stopped where it was. delve
// (dlv dap serves a single connection) and attach by port end with berth;
// the first call after Adopt says so.
package debug

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	godap "github.com/google/go-dap"

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
	// endGrace is how long, once the program exited, the adapter may take
	// to send the rest of its output and the terminated event before the
	// session is closed.
	endGrace = 2 * time.Second
	// scratchTimeout bounds removing a session's scratch directory.
	scratchTimeout = 10 * time.Second
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
	// RequestTimeout bounds each DAP request to the adapter (stack,
	// variables, evaluate, continue, …), whatever the call's own deadline:
	// an adapter that does not answer in time fails the call with a message
	// naming the adapter, its pid and the wait, and saying to terminate.
	// Zero means dap.RequestTimeout (30 s). Launch and attach have their
	// own bound (dap.LaunchTimeout).
	RequestTimeout time.Duration
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
	// adapter, a failed start, the run's close, or the end of its program
	// (the session is closed then, and the adapter and the program reaped).
	Claim func() (release func(), err error)
	// Resident, when set, returns the run's resident supervisor
	// (sandbox.Residence), starting it on first use: adapters speaking
	// stdio (debugpy, lldb-dap, the Dart adapter) then run under it and
	// outlive berth, so that a restarted berth takes their session over
	// (Adopt), stopped where it was. It returns nil and no error when the
	// run keeps nothing across restarts; adapters then run as any
	// process. delve and attach by port never outlive berth: see Adopt.
	Resident func(ctx context.Context) (sandbox.Resident, error)
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
	last   *ending // the last session whose program ended, until terminate or the next session
	nextID int
	notes  []string                    // what happened since the last call (TTL expiry), shown once
	bps    map[string][]dap.Breakpoint // absolute path → wanted breakpoints, kept across sessions
	closed bool
	// gen and stored are Generation's: the snapshot last seen and its
	// generation.
	gen    uint64
	stored []byte
	// left is the session as Detach let go of it, for Snapshot.
	left *handle
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
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = dap.RequestTimeout
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
	server   string // the adapter's program as messages name it: debugpy, dlv, lldb-dap
	host     bool   // the sandbox is the host: pid is a host pid
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
	// release gives back the conversation's claim (Options.Claim) once the
	// adapter is gone.
	release func()
	// scratch is a directory the session made in the sandbox (delve's
	// build output), removed once the adapter is gone; sb removes it.
	scratch string
	sb      sandbox.Sandbox
	// resident is the adapter's process name under the run's resident
	// supervisor res, and rs its stream; "" and nil for a plain process.
	resident string
	rs       *residentStream
	res      sandbox.Resident

	mu       sync.Mutex // guards the fields below; never held across I/O
	outShown int64      // output offset shown by the output operation
	timer    *time.Timer
	stopping bool // stop has begun: no timer is set any more
	detached bool // berth let go of the session: its adapter runs on under the resident
	// died is how the program ended outside the debugger, as the
	// sandbox's /proc told ([Supervisor.checkProgram]); nil while it
	// lives, or when the adapter reported the end itself.
	died *death
	// lostEnded says the adapter of a session whose stream was lost was
	// ended through a fresh attach (endLost); lostEndErr why it was not.
	lostEnded  bool
	lostEndErr error
	// snap is the last stop report, for status: it answers from it
	// without asking the adapter while the program is still in that stop.
	snap *snapshot
	// stuck says which request the adapter last left unanswered, until a
	// later call gets its answers.
	stuck string
	// frames are the stack frames the adapter gave in the stop counted by
	// framesStops, by thread ([session.stackTrace]).
	framesStops uint64
	frames      map[int][]godap.StackFrame
	// seen are the top frame's locals of the last stop a report described,
	// and before those of the stop before it ([session.changed]).
	seen, before *stopVars

	stopOnce sync.Once
	stopErr  error
	endOnce  sync.Once
	end      *ending // set by endOnce
}

// snapshot is a stop report as it was made.
type snapshot struct {
	stops uint64 // dap.State.Stops of the stop it describes
	loc   Location
}

// remember keeps loc as the report of the stop counted by stops.
func (ss *session) remember(stops uint64, loc Location) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.snap = &snapshot{stops: stops, loc: loc}
}

// snapshotOf returns the stop report of the stop counted by stops, if one
// was made and nothing since (an evaluate) may have changed it.
func (ss *session) snapshotOf(stops uint64) (Location, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.snap == nil || ss.snap.stops != stops {
		return Location{}, false
	}
	return ss.snap.loc, true
}

// forget drops the stop report: an evaluate may have changed the locals.
func (ss *session) forget() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.snap = nil
}

// setStuck records why the adapter is taken for stuck ("" clears it).
func (ss *session) setStuck(why string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.stuck = why
}

func (ss *session) stuckNote() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.stuck
}

// setTimer arms the session's TTL unless it is already being stopped.
func (ss *session) setTimer(ttl time.Duration, f func()) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if !ss.stopping {
		ss.timer = time.AfterFunc(ttl, f)
	}
}

// who names the session's adapter for messages: "the debugpy debug
// adapter (pid 12)", "the delve debug adapter dlv (pid 12)"; after attach
// by port, the debuggee's own DAP server.
func (ss *session) who() string {
	if ss.exited == nil {
		return fmt.Sprintf("the %s DAP server of %s", ss.server, ss.program)
	}
	name := ss.adapter
	if ss.server != "" && ss.server != ss.adapter {
		name += " debug adapter " + ss.server
	} else {
		name += " debug adapter"
	}
	switch {
	case ss.pid > 0 && ss.host:
		return fmt.Sprintf("the %s (pid %d)", name, ss.pid)
	case ss.pid > 0:
		return fmt.Sprintf("the %s (pid %d in the sandbox)", name, ss.pid)
	}
	return "the " + name
}

// stop disconnects (terminating a launched debuggee), closes the stream,
// kills the adapter's process group and then releases the session's
// claim. It is idempotent.
func (ss *session) stop(ctx context.Context) error {
	ss.stopOnce.Do(func() {
		defer ss.release()
		ss.mu.Lock()
		ss.stopping = true
		if ss.timer != nil {
			ss.timer.Stop()
		}
		ss.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, stopTimeout)
		defer cancel()
		err := ss.ds.Close(ctx, ss.command == "launch")
		died := ss.programDied() != nil
		if errors.Is(err, dap.ErrClosed) || errors.Is(err, dap.ErrAdapterExited) || died {
			// A program killed outside the debugger cannot be detached
			// from (dlv refuses): its adapter is killed below, and the
			// program's zombie, orphaned, is reaped with it.
			err = nil
		}
		if ss.exited != nil && err == nil && !died {
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
			if ss.streamLost() {
				// berth's stream to the adapter broke (a `berth-shim dial`
				// relay killed, the engine's connections cut): nothing of the
				// above reached it, and it runs on under the run's resident.
				err = ss.endLost(ctx)
			} else if _, werr := ss.status(); errors.Is(werr, sandbox.ErrDetached) {
				// berth's streams to the resident were cut: nothing reached it.
				err = fmt.Errorf("debug: berth lost its connection to %s, which runs on under the run's resident supervisor until it ends it: %w", ss.who(), werr)
			} else if err != nil {
				// It did not take disconnect, and is gone all the same.
				err = fmt.Errorf("debug: %s did not answer disconnect, so it was killed (%v)", ss.who(), err)
			}
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("debug: %s did not exit after it was killed: %w", ss.who(), ctx.Err()))
		}
		ss.stopErr = errors.Join(err, ss.removeScratch())
	})
	return ss.stopErr
}

// removeScratch removes the session's scratch directory in the sandbox
// (delve's build output), bounded by scratchTimeout of its own: it runs
// after the adapter is gone, however long that took.
func (ss *session) removeScratch() error {
	if ss.scratch == "" || ss.sb == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), scratchTimeout)
	defer cancel()
	var errb strings.Builder
	p, err := ss.sb.Start(ctx, &sandbox.Cmd{Args: []string{"rm", "-rf", "--", ss.scratch}, Stderr: &errb})
	if err == nil {
		var st sandbox.ExitStatus
		if st, err = p.Wait(); err == nil && !st.Success() {
			err = fmt.Errorf("rm: %v: %s", st, proc.Clip(errb.String(), 300))
		}
	}
	if err != nil {
		return fmt.Errorf("debug: the session's build directory %s was not removed from the sandbox: %w", ss.scratch, err)
	}
	return nil
}

// watch ends the session once its program ended ([Supervisor.finish]) or
// its adapter is gone, so the adapter's process group and the
// conversation's claim go with it at once; the next call still reports
// what happened ([Supervisor.current]). It returns when the session has
// stopped.
func (s *Supervisor) watch(ss *session) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if ss.exited != nil { // nil after attach by port: the stream's end is the end
		go func() { // owned by watch: ends when it returns, or with the adapter
			select {
			case <-ss.exited:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	// WaitFor returns at the program's end, when the client ends (the
	// adapter's stream, or stop closing it), or when the adapter exits.
	if st, err := ss.ds.WaitFor(ctx, dap.State.Ended); err == nil && st.Ended() {
		s.finish(ss)
		return
	}
	ss.stop(context.Background())
}

// streamLost reports whether the session's adapter runs under the run's
// resident and its process handle ended without the exit status: the
// stream to it broke, which says nothing of the adapter itself. A session
// berth let go of on purpose (Detach) is not lost.
func (ss *session) streamLost() bool {
	if ss.resident == "" || ss.res == nil || ss.exited == nil {
		return false
	}
	ss.mu.Lock()
	detached := ss.detached
	ss.mu.Unlock()
	if detached {
		return false
	}
	select {
	case <-ss.exited:
		_, err := ss.status()
		return err != nil && !errors.Is(err, sandbox.ErrDetached)
	default:
		return false
	}
}

// endLost ends the adapter of a session whose stream was lost through a
// fresh attach to the run's resident, so that the next launch's adapter
// is the run's only one; once it succeeded, it does nothing.
func (ss *session) endLost(ctx context.Context) error {
	ss.mu.Lock()
	ended := ss.lostEnded
	ss.mu.Unlock()
	if ended {
		return nil
	}
	if err := endResident(ctx, ss.res, ss.resident); err != nil {
		ss.mu.Lock()
		ss.lostEndErr = err
		ss.mu.Unlock()
		return fmt.Errorf("debug: berth lost its connection to %s, which may run on under the run's resident supervisor: ending it through a fresh attach failed: %w; the next launch ends it first", ss.who(), err)
	}
	ss.mu.Lock()
	ss.lostEnded, ss.lostEndErr = true, nil
	ss.mu.Unlock()
	return nil
}

// lostNote says what happened to a session whose stream was lost, ending
// its adapter first when its stop could not (the engine was cut then).
func (ss *session) lostNote() string {
	ss.endLost(context.Background())
	return ss.lostWhy()
}

// lostWhy says what happened to a session whose stream was lost, as far
// as ending its adapter went.
func (ss *session) lostWhy() string {
	_, why := ss.status()
	lost := fmt.Sprintf("debug session %d of %s was lost: berth's connection to %s broke (%v)", ss.id, ss.program, ss.who(), why)
	ss.mu.Lock()
	ended, err := ss.lostEnded, ss.lostEndErr
	ss.mu.Unlock()
	switch {
	case ended:
		return lost + ", so berth ended the adapter and its program under the run's resident supervisor (one adapter per run). The breakpoints are kept: launch again"
	case err != nil:
		return lost + fmt.Sprintf(", and ending the adapter through the run's resident supervisor failed (%v): the next launch ends it first. The breakpoints are kept: launch again", err)
	}
	return lost + "; berth ends the adapter and its program under the run's resident supervisor. The breakpoints are kept: launch again"
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
	if ss.streamLost() {
		return ss.lostWhy()
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
	if cur.ds.State().Ended() {
		// The program ended: close the session now (if watch has not
		// yet); status and the refusals report the ending from s.last.
		// A session that was being ended anyway is reported below.
		if e := s.finish(cur); e != nil {
			return nil, notes
		}
	}
	if why := cur.gone(); why != "" {
		cur.stop(context.Background()) // also waits for a TTL expiry or Close ending it now
		if cur.streamLost() {
			why = cur.lostNote() // after stop: whether its adapter was ended
		}
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
	// resident is the process name under the run's resident supervisor
	// res, and rs its stream; "" and nil for a plain process.
	resident string
	rs       *residentStream
	res      sandbox.Resident
}

// startAdapter starts the adapter for av in the sandbox. Its process lives
// until the returned cancel is called or the run ends. scratch, when not
// empty, is the session's build directory (delve's __debug_bin): it goes
// with the adapter's process, also when berth is not there to remove it.
func (s *Supervisor) startAdapter(ctx context.Context, av Availability, scratch string) (*adapterProc, error) {
	pctx, cancel := context.WithCancel(s.runCtx)
	stderr := proc.NewTail(stderrKeep)
	var env []string
	if s.opts.Host {
		env = append(env, proc.HostEnv) // dlv builds with go: no toolchain switch on the host
	}
	var cmd *sandbox.Cmd
	switch av.Adapter {
	case AdapterDelve:
		// dlv dap serves one client connection and ends the session when
		// it closes: it cannot outlive berth, so it runs as a plain process.
		return s.startDelve(ctx, pctx, cancel, av, env, stderr, scratch)
	case AdapterDebugpy:
		env = append(env, "PYDEVD_DISABLE_FILE_VALIDATION=1")
		py, dir := av.Binary, av.absRoot
		if av.adapter != "" {
			py = av.adapter // the venv's interpreter by its own path: no workspace site-packages
		}
		if s.opts.Host {
			// python -m puts the current directory first on its path: a
			// workspace debugpy/ would be the adapter.
			dir = "/"
		}
		cmd = &sandbox.Cmd{Args: []string{py, "-m", "debugpy.adapter"}, Env: env, Dir: dir, Stderr: stderr}
	case AdapterDart:
		cmd = &sandbox.Cmd{Args: []string{av.Binary, "debug_adapter"}, Env: env, Dir: av.absRoot, Stderr: stderr}
	default:
		cmd = &sandbox.Cmd{Args: []string{av.Binary}, Env: env, Dir: av.absRoot, Stderr: stderr}
	}
	res, err := s.resident(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("debug: the run's resident supervisor, which keeps the debug adapter across berth's restarts, is not available: %w; try again, or close the run and open a new one", err)
	}
	if res != nil {
		return s.startUnder(ctx, pctx, cancel, res, cmd, stderr)
	}
	return s.startPipe(pctx, cancel, cmd, stderr)
}

// resident returns the run's resident supervisor, or nil when adapters
// run as plain processes.
func (s *Supervisor) resident(ctx context.Context) (sandbox.Resident, error) {
	if s.opts.Resident == nil {
		return nil, nil
	}
	return s.opts.Resident(ctx)
}

// startUnder starts a stdio adapter under the run's resident supervisor,
// with a name of its own there.
func (s *Supervisor) startUnder(ctx, pctx context.Context, cancel context.CancelFunc, res sandbox.Resident, cmd *sandbox.Cmd, stderr *proc.Tail) (*adapterProc, error) {
	if err := ctx.Err(); err != nil {
		cancel()
		return nil, err
	}
	// One adapter per run: one whose stream broke, and that its session's
	// end could not reach, goes before another starts.
	s.endStray(res, "")
	name := residentPrefix + randomHex()
	rs, err := startResident(pctx, res, name, false, cmd)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("debug: cannot start %s in the sandbox under the run's resident supervisor: %w", cmd.Args[0], err)
	}
	return &adapterProc{stream: rs, cancel: cancel, exited: rs.done, status: rs.exitStatus, pid: rs.proc.Pid(), stderr: stderr, resident: name, rs: rs, res: res}, nil
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
func (s *Supervisor) startDelve(ctx, pctx context.Context, cancel context.CancelFunc, av Availability, env []string, stderr *proc.Tail, scratch string) (*adapterProc, error) {
	outR, outW := io.Pipe()
	var remove []string
	if scratch != "" {
		remove = []string{scratch}
	}
	p, err := s.sb.Start(pctx, &sandbox.Cmd{
		Remove: remove,
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
