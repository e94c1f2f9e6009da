package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// process is a program started by the agent's "run" mode with
// --direct-stdout: the program writes its stdout straight into the stream
// (Stream.Stdout), so that output never waits for the agent, and the
// agent's frames (started, stderr, stdin acknowledgements, exit) come on
// the stream's stderr.
type process struct {
	s      *Sandbox
	stream Stream
	cmd    *sandbox.Cmd
	delay  time.Duration
	pid    int
	frames *agent.Reader // the agent's frames, on the stream's stderr
	out    io.Reader     // the program's stdout
	errOut io.Writer     // Cmd.Stderr, or io.Discard; used by the control loop
	// keepStdin: a nil Cmd.Stdin leaves the program's stdin open (an
	// Attach to a resident's process) instead of closing it.
	keepStdin bool

	wmu sync.Mutex // serialises frames to the agent
	in  io.WriteCloser

	// imu serialises stdin: the frames of one write stay together and the
	// EOF frame comes after the last of them.
	imu  sync.Mutex
	ibuf []byte // a stdin frame being built; guarded by imu

	cmu         sync.Mutex // guards inflight and stdinClosed
	cond        *sync.Cond
	inflight    int  // stdin bytes sent and not yet acknowledged
	stdinClosed bool // the direct stdin writer was closed

	// The process ends when both its frames and its stdout ended.
	emu     sync.Mutex
	ctlEnd  bool  // the exit frame came, or the frames broke
	ctlErr  error // why the frames broke; nil after the exit frame
	outEnd  bool  // stdout reached its end (or broke)
	endOnce sync.Once

	finOnce sync.Once
	werr    error // the transport's Wait result, after finish

	done   chan struct{} // closed when status and err are final
	status sandbox.ExitStatus
	err    error
}

// Start starts cmd under the agent. It returns once the agent reported the
// program started or failed to start; ctx bounds that and, afterwards, the
// process lifetime (SIGTERM, then SIGKILL after the wait delay).
func (s *Sandbox) Start(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("shim: start: cmd.Args is empty; give the program and its arguments")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("shim: start %q: %w", cmd.Args[0], err)
	}
	delay := cmd.WaitDelay
	if delay <= 0 {
		delay = sandbox.DefaultWaitDelay
	}
	args := append([]string{"run", "--wait-delay=" + delay.String(), "--direct-stdout", "--ping-timeout=" + agent.ProcessPingTimeout.String()}, s.opts.RunFlags...)
	args = append(args, removeFlags(cmd.Remove)...)
	args = append(append(args, "--"), cmd.Args...)
	st, err := s.exec(ctx, ExecSpec{Env: cmd.Env, Dir: cmd.Dir, User: cmd.User}, args...)
	if err != nil {
		return nil, err
	}
	p := &process{
		s: s, stream: st, cmd: cmd, delay: delay,
		frames: agent.NewReader(st.Stderr()),
		out:    st.Stdout(),
		in:     st.Stdin(),
		errOut: cmd.Stderr,
		done:   make(chan struct{}),
	}
	if p.errOut == nil {
		p.errOut = io.Discard
	}
	p.cond = sync.NewCond(&p.cmu)

	// The first frame says whether the program started.
	first := make(chan error, 1)
	go func() { first <- p.readStart() }()
	select {
	case err = <-first:
	case <-ctx.Done():
		st.Close()
		<-first
		err = ctx.Err()
	}
	if err != nil {
		p.finish()
		return nil, fmt.Errorf("shim: start %q in %s: %w", cmd.Args[0], s.opts.Name, err)
	}
	if err := track(s, s.procs, p); err != nil {
		p.finish()
		return nil, err
	}
	p.serve(ctx)
	return p, nil
}

// serve starts the goroutines that run a started process: its control
// frames, output, stdin, and the watch on ctx.
func (p *process) serve(ctx context.Context) {
	cmd := p.cmd
	go p.control()
	if d, ok := cmd.Stdout.(sandbox.DirectStdout); ok {
		// The caller reads stdout itself (sandbox.Pipe).
		d.SetStdout(newPipeOut(p))
	} else {
		go p.copyOutput()
	}
	if d, ok := cmd.Stdin.(sandbox.DirectStdin); ok {
		// The caller writes stdin frames itself (sandbox.Pipe).
		d.SetStdin(stdinWriter{p})
	} else {
		go p.copyStdin()
	}
	go p.watch(ctx)
	go p.ping()
}

// ping tells the agent every agent.ProcessPing that berth is still there,
// until the process ended: the agent counts a berth that sent nothing for
// agent.ProcessPingTimeout as gone even when the engine keeps its stream
// open (containerd), and ends the program.
func (p *process) ping() {
	t := time.NewTicker(agent.ProcessPing)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		if p.send(agent.TypePing, nil) != nil {
			return
		}
	}
}

// readStart reads the started or start-failure frame.
func (p *process) readStart() error {
	typ, payload, err := p.frames.Next()
	if err != nil {
		err = p.streamError(err)
		if strings.Contains(err.Error(), "unknown flag") {
			return fmt.Errorf("%w; the agent is older than berth (which speaks %s): rebuild it, or point $%s at a current berth-shim", err, agent.Version, EnvBinary)
		}
		return err
	}
	switch typ {
	case agent.TypeStarted:
		v, err := agent.Uint32s(payload, 1)
		if err != nil {
			return err
		}
		p.pid = int(v[0])
		return nil
	case agent.TypeStartFail:
		return errors.New(string(payload))
	default:
		return fmt.Errorf("unexpected first frame %q from the agent", typ)
	}
}

// streamError explains frames that ended before the exit status, with what
// the agent wrote instead of a frame (a usage error, a crash) when it wrote
// anything.
func (p *process) streamError(readErr error) error {
	msg := diagnostic(p.frames.Rest(tailMax))
	p.finish()
	werr := p.werr
	if werr != nil && (errors.Is(werr, sandbox.ErrGone) || errors.Is(werr, sandbox.ErrDetached)) {
		return werr
	}
	if msg != "" {
		return fmt.Errorf("agent stream ended (%v): %s", readErr, msg)
	}
	if werr != nil {
		return fmt.Errorf("agent stream ended (%v): %w", readErr, werr)
	}
	return fmt.Errorf("agent stream ended before the exit status: %w", readErr)
}

// diagnostic is the readable text in b: the agent's message when it wrote
// one instead of frames.
func diagnostic(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || (r >= ' ' && r != 0x7f && r != utf8.RuneError) {
			return r
		}
		return -1
	}, string(b))
	return strings.TrimSpace(s)
}

// finish closes the agent's input and the stream and waits for the agent,
// once.
func (p *process) finish() {
	p.finOnce.Do(func() {
		p.stream.Close()
		p.wmu.Lock()
		p.in.Close()
		p.wmu.Unlock()
		_, p.werr = p.stream.Wait()
	})
}

// control applies the agent's frames until the exit frame or the end of
// the stream: stderr goes to Cmd.Stderr, acknowledgements open the stdin
// window, the exit frame sets the status.
func (p *process) control() {
	for {
		typ, payload, err := p.frames.Next()
		if err != nil {
			p.endControl(fmt.Errorf("shim: process %d in %s: %w", p.pid, p.s.opts.Name, p.streamError(err)))
			return
		}
		switch typ {
		case agent.TypeStderr:
			if _, werr := p.errOut.Write(payload); werr != nil {
				p.errOut = io.Discard
			}
		case agent.TypeStdinAck:
			if v, aerr := agent.Uint32s(payload, 1); aerr == nil {
				p.cmu.Lock()
				p.inflight -= int(v[0])
				p.cond.Broadcast()
				p.cmu.Unlock()
			}
		case agent.TypeExit:
			v, xerr := agent.Uint32s(payload, 2)
			if xerr != nil {
				p.endControl(fmt.Errorf("shim: process %d: bad exit frame: %w", p.pid, xerr))
				return
			}
			p.status = sandbox.ExitStatus{Code: int(int32(v[0])), Signal: syscall.Signal(v[1])}
			p.endControl(nil)
			return
		default:
			p.endControl(fmt.Errorf("shim: process %d: unexpected frame %q from the agent", p.pid, typ))
			return
		}
	}
}

// endControl records the end of the frames: err is nil after the exit
// frame. Without an exit status the output has no end worth waiting for:
// the stream is torn down and the process ends at once, also when nobody
// reads the rest of its stdout.
func (p *process) endControl(err error) {
	if err != nil {
		p.finish()
	}
	p.emu.Lock()
	p.ctlEnd, p.ctlErr = true, err
	both := p.outEnd
	p.emu.Unlock()
	switch {
	case both:
		p.end()
	case err != nil:
		p.endOutput()
	}
}

// endOutput records the end of the program's stdout. After the exit frame
// it comes once every process holding stdout is gone: the agent waits for
// them, and kills them after the wait delay, before it reports the exit.
func (p *process) endOutput() {
	p.emu.Lock()
	if p.outEnd {
		p.emu.Unlock()
		return
	}
	p.outEnd = true
	both := p.ctlEnd
	p.emu.Unlock()
	if both {
		p.end()
	}
}

// end finishes the process once its frames and its stdout ended.
func (p *process) end() {
	p.endOnce.Do(func() {
		p.finish()
		p.err = p.ctlErr
		p.cmu.Lock()
		close(p.done)
		p.cond.Broadcast()
		p.cmu.Unlock()
		untrack(p.s, p.s.procs, p)
	})
}

// outputChunk is the most stdout a reader takes from the stream at once.
const outputChunk = 32 << 10

// copyOutput delivers stdout to Cmd.Stdout until it ends.
func (p *process) copyOutput() {
	stdout := p.cmd.Stdout
	if stdout == nil {
		stdout = io.Discard
	}
	buf := make([]byte, outputChunk)
	for {
		n, err := p.out.Read(buf)
		// A failing writer does not stop the process; its output is
		// dropped, as with os/exec when a copy fails.
		if n > 0 {
			if _, werr := stdout.Write(buf[:n]); werr != nil {
				stdout = io.Discard
			}
		}
		if err != nil {
			p.endOutput()
			return
		}
	}
}

// copyStdin sends Cmd.Stdin to the agent within the acknowledged window.
func (p *process) copyStdin() {
	if p.cmd.Stdin == nil {
		if !p.keepStdin {
			p.send(agent.TypeStdinEOF, nil)
		}
		return
	}
	buf := make([]byte, agent.HeaderSize+agent.MaxStdinFrame)
	for {
		n, err := p.cmd.Stdin.Read(buf[agent.HeaderSize:])
		if n > 0 && p.sendStdin(buf[:agent.HeaderSize+n]) != nil {
			return
		}
		if err != nil {
			p.send(agent.TypeStdinEOF, nil)
			return
		}
	}
}

// sendStdin sends frame, a stdin frame whose payload is in place after the
// header, once the window has room for it. It fails with io.ErrClosedPipe
// once the process exited or the direct writer was closed.
func (p *process) sendStdin(frame []byte) error {
	n := len(frame) - agent.HeaderSize
	p.cmu.Lock()
	for p.inflight+n > agent.StdinWindow && !p.exited() && !p.stdinClosed {
		p.cond.Wait()
	}
	if p.exited() || p.stdinClosed {
		p.cmu.Unlock()
		return io.ErrClosedPipe
	}
	p.inflight += n
	p.cmu.Unlock()
	agent.PutHeader(frame, agent.TypeStdin, n)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if _, err := p.in.Write(frame); err != nil {
		return fmt.Errorf("shim: write stdin of process %d in %s: %w", p.pid, p.s.opts.Name, err)
	}
	return nil
}

// stdinWriter is the writer a [sandbox.DirectStdin] gets: each Write is
// sent as stdin frames from the caller's goroutine.
type stdinWriter struct{ p *process }

// Write sends b as stdin frames, waiting while the agent's window is
// full. It fails with io.ErrClosedPipe once the process exited or the
// writer was closed.
func (w stdinWriter) Write(b []byte) (int, error) {
	p := w.p
	p.imu.Lock()
	defer p.imu.Unlock()
	if p.ibuf == nil {
		p.ibuf = make([]byte, agent.HeaderSize+agent.MaxStdinFrame)
	}
	done := 0
	for done < len(b) {
		n := copy(p.ibuf[agent.HeaderSize:], b[done:])
		if err := p.sendStdin(p.ibuf[:agent.HeaderSize+n]); err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// Close closes the process's stdin after the data of every Write that
// returned. It does not block: a Write waiting for the window fails, and
// the EOF frame is sent by a goroutine of its own once no Write is busy.
func (w stdinWriter) Close() error {
	p := w.p
	p.cmu.Lock()
	closed := p.stdinClosed
	p.stdinClosed = true
	p.cond.Broadcast()
	p.cmu.Unlock()
	if !closed {
		go func() {
			p.imu.Lock()
			defer p.imu.Unlock()
			if !p.exited() {
				p.send(agent.TypeStdinEOF, nil)
			}
		}()
	}
	return nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// send writes one frame to the agent.
func (p *process) send(typ byte, payload []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return agent.WriteFrame(p.in, typ, payload)
}

// watch ends the process when ctx is done: SIGTERM, SIGKILL after the wait
// delay, and when even then no exit arrives, it tears the stream down.
func (p *process) watch(ctx context.Context) {
	select {
	case <-p.done:
		return
	case <-ctx.Done():
	}
	steps := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, 0}
	for _, sig := range steps {
		if sig == 0 || p.send(agent.TypeSignal, agent.PutUint32s(uint32(sig))) != nil {
			p.stream.Close()
			return
		}
		t := time.NewTimer(p.delay)
		if sig == syscall.SIGKILL {
			// After SIGKILL the agent still collects output for one
			// delay before it reports the exit.
			t.Reset(2*p.delay + time.Second)
		}
		select {
		case <-p.done:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// kill sends SIGKILL to the process group, ignoring a dead stream.
func (p *process) kill() {
	if !p.exited() {
		p.send(agent.TypeSignal, agent.PutUint32s(uint32(syscall.SIGKILL)))
	}
}

// Pid returns the process id inside the sandbox.
func (p *process) Pid() int { return p.pid }

// Wait waits for the exit status and the last output write.
func (p *process) Wait() (sandbox.ExitStatus, error) {
	<-p.done
	return p.status, p.err
}

// Signal sends sig to the process group through the agent.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	errc := make(chan error, 1)
	go func() { errc <- p.send(agent.TypeSignal, agent.PutUint32s(uint32(sig))) }()
	select {
	case err := <-errc:
		if err != nil && !p.exited() {
			return fmt.Errorf("shim: signal %v to process %d in %s: %w", sig, p.pid, p.s.opts.Name, err)
		}
		return nil
	case <-ctx.Done():
		p.stream.Close()
		return fmt.Errorf("shim: signal %v to process %d in %s: %w", sig, p.pid, p.s.opts.Name, ctx.Err())
	}
}
