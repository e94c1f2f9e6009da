package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// residentCallTimeout bounds a request to a resident (dial, hello and its
// answer) when the caller's context has no deadline of its own.
const residentCallTimeout = 30 * time.Second

// residentCloseTimeout bounds Resident.Close: the resident ends each
// process (SIGTERM, SIGKILL after its wait delay, its supervisor's sweep)
// before it answers.
const residentCloseTimeout = 2 * time.Minute

// residentProbeTimeout bounds the look at a resident after a process's
// connection to it broke.
const residentProbeTimeout = 10 * time.Second

// maxSocketPath is the size of sun_path in a Linux sockaddr_un: a
// socket's path must be shorter.
const maxSocketPath = 108

// residentExecWait bounds how long Close waits for the exec that started
// the resident to end.
const residentExecWait = 10 * time.Second

// Resident starts the run's resident supervisor ("berth-shim resident") at
// spec.Dir, or with spec.Adopt reconnects to the one running there. See
// [sandbox.Residence]. The secret reaches the agent in a frame on its
// stdin and on each connection, never in arguments or the environment.
func (s *Sandbox) Resident(ctx context.Context, spec sandbox.ResidentSpec) (sandbox.Resident, error) {
	if !path.IsAbs(spec.Dir) || path.Clean(spec.Dir) == "/" {
		return nil, fmt.Errorf("shim: resident dir %q: want an absolute directory of its own, such as /tmp/berth-run-ID", spec.Dir)
	}
	if len(spec.Secret) < sandbox.MinResidentSecret {
		return nil, fmt.Errorf("shim: resident secret of %d bytes: want at least %d random bytes", len(spec.Secret), sandbox.MinResidentSecret)
	}
	grace := spec.Grace
	if grace <= 0 {
		grace = sandbox.DefaultResidentGrace
	}
	r := &resident{
		s:      s,
		dir:    path.Clean(spec.Dir),
		secret: append([]byte(nil), spec.Secret...),
		procs:  make(map[*process]struct{}),
	}
	r.sock = path.Join(r.dir, agent.ResidentSocket)
	if len(r.sock) >= maxSocketPath {
		return nil, fmt.Errorf("shim: resident dir %q is too long: its socket path must stay below %d bytes; choose a shorter directory such as /tmp/berth-run-ID", spec.Dir, maxSocketPath)
	}
	if !spec.Adopt {
		if err := r.launch(ctx, grace); err != nil {
			return nil, err
		}
	}
	hold, _, _, err := r.call(ctx, agent.ResidentRequest{Op: agent.ResidentHold})
	if err != nil {
		if r.execDone != nil {
			// Started here and unreachable: end it rather than leave it
			// for its grace.
			r.Close()
		}
		return nil, err
	}
	r.hold = hold
	stop := make(chan struct{})
	r.mu.Lock()
	r.stopPing, r.pingDone = stop, make(chan struct{})
	r.mu.Unlock()
	go r.ping(hold, stop, r.pingDone) // ends with letGo
	if err := track(s, s.residents, r); err != nil {
		r.letGo()
		return nil, err
	}
	return r, nil
}

// ping sends a sign of life on the hold connection every
// agent.ResidentPing until letGo: the resident counts a silent berth as
// gone, also where the engine never ends a dead berth's streams.
func (r *resident) ping(hold sandbox.Conn, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(agent.ResidentPing)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		hold.SetWriteDeadline(time.Now().Add(agent.ResidentPing))
		if err := agent.WriteFrame(hold, agent.TypePing, nil); err != nil {
			// The hold broke (its dial relay killed, the engine's
			// connections cut): make it again, or the resident would
			// count berth gone and end everything after its grace while
			// berth still uses it.
			hold.Close()
			if hold = r.rehold(stop); hold == nil {
				return // stopped, or the resident is gone: Wait and calls say so
			}
		}
	}
}

// rehold makes the hold connection again, every agent.ResidentPing until
// it succeeds, the resident is found gone, or stop.
func (r *resident) rehold(stop <-chan struct{}) sandbox.Conn {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		c, _, _, err := r.call(ctx, agent.ResidentRequest{Op: agent.ResidentHold})
		if err == nil {
			r.mu.Lock()
			r.hold = c
			r.mu.Unlock()
			return c
		}
		if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, errClosed) {
			return nil
		}
		t := time.NewTimer(agent.ResidentPing)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// resident is a sandbox.Resident reached through the agent's dial relay.
type resident struct {
	s      *Sandbox
	dir    string
	sock   string
	secret []byte

	// execDone is closed when the exec that started the resident ended
	// (with the resident, on backends whose exec lives as long as it);
	// nil for an adopted resident.
	execDone chan struct{}

	// stopPing ends the hold connection's pinger, which closes pingDone.
	stopPing chan struct{}
	pingDone chan struct{}

	mu       sync.Mutex
	hold     sandbox.Conn
	procs    map[*process]struct{} // attached processes
	detached bool
	closed   bool
}

// launch runs "berth-shim resident", hands it the secret and waits until
// it listens.
func (r *resident) launch(ctx context.Context, grace time.Duration) error {
	st, err := r.s.exec(ctx, ExecSpec{}, "resident", "--grace="+grace.String(), r.dir)
	if err != nil {
		return err
	}
	var diag tailBuffer
	errEOF := make(chan struct{})
	go drain(st.Stderr(), &diag, errEOF)
	stop := context.AfterFunc(ctx, func() { st.Close() })
	werr := agent.WriteFrame(st.Stdin(), agent.TypeHello, r.secret)
	out := agent.NewReader(st.Stdout())
	typ, payload, rerr := out.Next()
	var resp agent.ResidentResponse
	if rerr == nil && typ == agent.TypeResponse {
		rerr = json.Unmarshal(payload, &resp)
	} else if rerr == nil {
		rerr = fmt.Errorf("unexpected frame %q", typ)
	}
	stopped := stop()
	st.Stdin().Close()
	if werr != nil || rerr != nil || !stopped || resp.Err != nil {
		st.Close()
		<-errEOF
		_, xerr := st.Wait()
		switch {
		case !stopped || ctx.Err() != nil:
			err = ctx.Err()
		case resp.Err != nil:
			err = residentError(resp.Err)
		case xerr != nil && errors.Is(xerr, sandbox.ErrGone):
			err = xerr
		case diagnostic([]byte(diag.String())) != "":
			err = errors.New(diagnostic([]byte(diag.String())))
			if strings.Contains(err.Error(), "unknown mode") {
				err = fmt.Errorf("%w; the agent is older than berth (which speaks %s): rebuild it, or point $%s at a current berth-shim", err, agent.Version, EnvBinary)
			}
		default:
			err = errors.Join(werr, rerr)
		}
		return fmt.Errorf("shim: start the resident at %s in %s: %w", r.dir, r.s.opts.Name, err)
	}
	// The resident let go of the exec's stdio, so the stream's output
	// ends now; the exec itself lives as long as the resident. A local
	// process (the host's) is waited for, so that berth reaps it when the
	// resident ends. An engine's exec is neither waited for nor closed:
	// the engine's shim reaps it, closing the stream may kill it
	// (containerd), and waiting may outlast the sandbox's client (docker).
	r.execDone = make(chan struct{})
	go func() { // ends with the stream's output, or the local exec
		io.Copy(io.Discard, st.Stdout())
		<-errEOF
		if _, ok := st.(Killer); ok {
			st.Wait()
		}
		close(r.execDone)
	}()
	return nil
}

// residentError converts a resident's error into one wrapping the
// matching class.
func residentError(e *agent.Error) error {
	msg := e.Msg
	switch e.Kind {
	case agent.KindPermission:
		return fmt.Errorf("%s: %w", msg, fs.ErrPermission)
	case agent.KindNotExist:
		return fmt.Errorf("%s: %w", msg, sandbox.ErrNotFound)
	case agent.KindExist:
		return fmt.Errorf("%s: %w", msg, fs.ErrExist)
	default:
		return errors.New(msg)
	}
}

// call connects to the resident, authenticates and sends req; it returns
// the connection (for start and attach, carrying the process from then
// on), its frame reader and the answer.
func (r *resident) call(ctx context.Context, req agent.ResidentRequest) (sandbox.Conn, *agent.Reader, agent.ResidentResponse, error) {
	var resp agent.ResidentResponse
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, residentCallTimeout)
		defer cancel()
	}
	c, err := r.s.Dial(ctx, "unix", r.sock)
	if err != nil {
		if errors.Is(err, errClosed) {
			return nil, nil, resp, err
		}
		switch {
		case errors.Is(err, sandbox.ErrGone):
			return nil, nil, resp, fmt.Errorf("shim: no resident answers at %s: %w: %w", r.dir, sandbox.ErrNotFound, err)
		case errors.Is(err, errNoListener):
			return nil, nil, resp, fmt.Errorf("shim: no resident answers at %s in %s: it is gone (the container restarted, or it outlived its grace with no berth attached) (%v): %w", r.dir, r.s.opts.Name, err, sandbox.ErrNotFound)
		default:
			// Cut short, or the way to it failed (the engine's exec, the
			// agent): the resident may well live on, so this is not
			// ErrNotFound, which would have its run forgotten.
			return nil, nil, resp, fmt.Errorf("shim: could not reach the resident at %s in %s, which may still run: %w; try again", r.dir, r.s.opts.Name, err)
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		c.Close()
		return nil, nil, resp, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	fr := agent.NewReader(c)
	err = agent.WriteFrame(c, agent.TypeHello, r.secret)
	if err == nil {
		err = agent.WriteFrame(c, agent.TypeRequest, body)
	}
	var typ byte
	var payload []byte
	if err == nil {
		typ, payload, err = fr.Next()
	}
	if err == nil && typ != agent.TypeResponse {
		err = fmt.Errorf("unexpected frame %q from the resident", typ)
	}
	if err == nil {
		err = json.Unmarshal(payload, &resp)
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, resp, fmt.Errorf("shim: %s at the resident %s in %s: %w", req.Op, r.dir, r.s.opts.Name, err)
	}
	if resp.Err != nil {
		c.Close()
		what := req.Op
		if req.Name != "" {
			what += " " + req.Name
		}
		return nil, nil, resp, fmt.Errorf("shim: %s at the resident %s in %s: %w", what, r.dir, r.s.opts.Name, residentError(resp.Err))
	}
	return c, fr, resp, nil
}

// Dir returns the resident's directory inside the sandbox.
func (r *resident) Dir() string { return r.dir }

func (r *resident) checkAttached() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.detached || r.closed {
		return fmt.Errorf("shim: resident %s: berth let go of it; adopt it again: %w", r.dir, sandbox.ErrDetached)
	}
	return nil
}

// Start starts cmd under the resident as name. See [sandbox.Resident].
func (r *resident) Start(ctx context.Context, name string, cmd *sandbox.Cmd) (sandbox.Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("shim: resident start: cmd.Args is empty; give the program and its arguments")
	}
	delay := cmd.WaitDelay
	if delay <= 0 {
		delay = sandbox.DefaultWaitDelay
	}
	req := agent.ResidentRequest{
		Op: agent.ResidentStart, Name: name,
		Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, User: cmd.User,
		Flags: append(append([]string{"--wait-delay=" + delay.String()}, r.s.opts.RunFlags...), removeFlags(cmd.Remove)...),
	}
	return r.open(ctx, req, cmd, delay)
}

// removeFlags are the "run" flags that have the supervisor remove paths
// (sandbox.Cmd.Remove) when its program ended.
func removeFlags(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		out = append(out, "--remove="+p)
	}
	return out
}

// Attach reconnects to the resident's process name. See
// [sandbox.Resident].
func (r *resident) Attach(ctx context.Context, name string, cmd *sandbox.Cmd) (sandbox.Process, error) {
	delay := cmd.WaitDelay
	if delay <= 0 {
		delay = sandbox.DefaultWaitDelay
	}
	return r.open(ctx, agent.ResidentRequest{Op: agent.ResidentAttach, Name: name}, cmd, delay)
}

// open sends a start or attach request and runs the process over its
// connection.
func (r *resident) open(ctx context.Context, req agent.ResidentRequest, cmd *sandbox.Cmd, delay time.Duration) (sandbox.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("shim: resident %s %s: %w", req.Op, req.Name, err)
	}
	if err := r.checkAttached(); err != nil {
		return nil, err
	}
	c, fr, resp, err := r.call(ctx, req)
	if err != nil {
		return nil, err
	}
	cs := &connStream{r: r, c: c, fr: fr, done: make(chan struct{})}
	cs.outR, cs.outW = io.Pipe()
	cs.errR, cs.errW = io.Pipe()
	p := &process{
		s: r.s, stream: cs, cmd: cmd, delay: delay, pid: resp.Pid,
		frames:    agent.NewReader(cs.errR),
		out:       cs.outR,
		in:        connStdin{c},
		errOut:    cmd.Stderr,
		keepStdin: req.Op == agent.ResidentAttach,
		inflight:  resp.Inflight,
		done:      make(chan struct{}),
	}
	if p.errOut == nil {
		p.errOut = io.Discard
	}
	p.cond = sync.NewCond(&p.cmu)
	r.mu.Lock()
	if r.detached || r.closed {
		r.mu.Unlock()
		c.Close()
		return nil, r.checkAttached()
	}
	r.procs[p] = struct{}{}
	r.mu.Unlock()
	go cs.demux() // ends with the connection
	p.serve(ctx)
	go func() { // ends with the process
		<-p.done
		r.mu.Lock()
		delete(r.procs, p)
		r.mu.Unlock()
	}()
	return p, nil
}

// Processes lists the resident's processes.
func (r *resident) Processes(ctx context.Context) ([]sandbox.ResidentProcess, error) {
	if err := r.checkAttached(); err != nil {
		return nil, err
	}
	c, _, resp, err := r.call(ctx, agent.ResidentRequest{Op: agent.ResidentList})
	if err != nil {
		return nil, err
	}
	c.Close()
	out := make([]sandbox.ResidentProcess, 0, len(resp.Procs))
	for _, p := range resp.Procs {
		out = append(out, sandbox.ResidentProcess{Name: p.Name, Pid: p.Pid, Args: p.Args, Exited: p.Exited})
	}
	return out, nil
}

// mark sets flag (detached or closed) and returns the attached processes
// and whether it was unset before.
func (r *resident) mark(flag *bool) ([]*process, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if *flag {
		return nil, false
	}
	*flag = true
	return keys(r.procs), true
}

// letGo closes the hold connection and forgets the resident in its
// sandbox.
func (r *resident) letGo() {
	r.mu.Lock()
	hold := r.hold
	stop, done := r.stopPing, r.pingDone
	r.stopPing = nil
	r.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	if hold != nil {
		hold.Close()
	}
	untrack(r.s, r.s.residents, r)
}

// Detach closes every connection to the resident without ending anything.
func (r *resident) Detach() error {
	procs, first := r.mark(&r.detached)
	if !first {
		return nil
	}
	r.s.mu.Lock()
	r.s.kept = true // its processes run on (KeptResidents)
	r.s.mu.Unlock()
	r.letGo()
	for _, p := range procs {
		p.stream.Close()
	}
	for _, p := range procs {
		<-p.done
	}
	return nil
}

// Close ends the resident and everything it owns, and waits (bounded) for
// its end.
func (r *resident) Close() error {
	procs, first := r.mark(&r.closed)
	if !first {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), residentCloseTimeout)
	defer cancel()
	c, _, _, err := r.call(ctx, agent.ResidentRequest{Op: agent.ResidentClose})
	switch {
	case err == nil:
		c.Close()
	case errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrGone):
		err = nil // it ended already
	}
	// The resident sent the attached processes their exits; the rest
	// ends with their connections.
	wait := time.NewTimer(residentExecWait)
	defer wait.Stop()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-wait.C:
			p.stream.Close()
			<-p.done
		}
	}
	r.mark(&r.detached)
	r.letGo()
	if r.execDone != nil && err == nil {
		select {
		case <-r.execDone:
		case <-wait.C:
		}
	}
	return err
}

// lost explains why a process's connection ended without its exit.
func (r *resident) lost(cause error) error {
	r.mu.Lock()
	detached := r.detached
	r.mu.Unlock()
	if detached {
		return fmt.Errorf("shim: resident %s: %w", r.dir, sandbox.ErrDetached)
	}
	ctx, cancel := context.WithTimeout(context.Background(), residentProbeTimeout)
	defer cancel()
	c, err := r.s.Dial(ctx, "unix", r.sock)
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("shim: the connection to the process broke (%v), another berth may have attached to it; its resident %s still runs: Attach again", cause, r.dir)
	case errors.Is(err, sandbox.ErrGone):
		return fmt.Errorf("shim: the connection to the process's resident %s broke: %w", r.dir, err)
	case errors.Is(err, errClosed):
		return fmt.Errorf("shim: resident %s: the sandbox was closed: %w", r.dir, sandbox.ErrDetached)
	default:
		return fmt.Errorf("shim: the process's resident %s in %s is gone (killed, or the container restarted): its connection broke (%v) and nothing answers at its socket (%v)", r.dir, r.s.opts.Name, cause, err)
	}
}

// connStream is a [Stream] over a resident process's connection: stdout
// frames become Stdout, every other frame goes to Stderr as a frame, as
// the agent's "run" mode with --direct-stdout has them.
type connStream struct {
	r  *resident
	c  sandbox.Conn
	fr *agent.Reader

	outR, errR *io.PipeReader
	outW, errW *io.PipeWriter

	done chan struct{} // closed when demux ended; err is final then
	err  error
}

// demux splits the connection's frames until it ends.
func (cs *connStream) demux() {
	defer close(cs.done)
	var cause error
	exited := false
	for {
		typ, payload, err := cs.fr.Next()
		if err != nil {
			cause = err
			break
		}
		if typ == agent.TypeStdout {
			if _, err := cs.outW.Write(payload); err != nil {
				cause = err
				break
			}
			continue
		}
		exited = exited || typ == agent.TypeExit
		if err := agent.WriteFrame(cs.errW, typ, payload); err != nil {
			cause = err
			break
		}
	}
	cs.c.Close()
	if exited {
		cs.outW.Close()
		cs.errW.Close()
		return
	}
	cs.err = cs.r.lost(cause)
	cs.outW.CloseWithError(cs.err)
	cs.errW.CloseWithError(cs.err)
}

func (cs *connStream) Stdin() io.WriteCloser { return connStdin{cs.c} }
func (cs *connStream) Stdout() io.Reader     { return cs.outR }
func (cs *connStream) Stderr() io.Reader     { return cs.errR }

// Wait returns once the connection ended: nil after the process's exit,
// else why it ended.
func (cs *connStream) Wait() (int, error) {
	<-cs.done
	return 0, cs.err
}

// Close drops the connection; the process runs on under the resident.
func (cs *connStream) Close() error {
	cs.c.Close()
	cs.outR.CloseWithError(io.ErrClosedPipe)
	cs.errR.CloseWithError(io.ErrClosedPipe)
	return nil
}

// connStdin writes a process's frames to its connection. Closing it does
// nothing: the program's stdin closes only with an EOF frame, never
// because berth let go.
type connStdin struct{ c sandbox.Conn }

func (w connStdin) Write(b []byte) (int, error) { return w.c.Write(b) }
func (w connStdin) Close() error                { return nil }

var (
	_ sandbox.Residence = (*Sandbox)(nil)
	_ sandbox.Resident  = (*resident)(nil)
)
