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

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// process is a program started by the agent's "run" mode.
type process struct {
	s      *Sandbox
	stream Stream
	cmd    *sandbox.Cmd
	delay  time.Duration
	pid    int
	frames *agent.Reader
	stderr tailBuffer    // the agent's own diagnostics
	errEOF chan struct{} // closed when the agent's stderr reached EOF

	wmu sync.Mutex // serialises frames to the agent
	in  io.WriteCloser

	cmu      sync.Mutex // guards inflight
	cond     *sync.Cond
	inflight int // stdin bytes sent and not yet acknowledged

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
	args := append([]string{"run", "--wait-delay=" + delay.String(), "--"}, cmd.Args...)
	st, err := s.exec(ctx, ExecSpec{Env: cmd.Env, Dir: cmd.Dir, User: cmd.User}, args...)
	if err != nil {
		return nil, err
	}
	p := &process{
		s: s, stream: st, cmd: cmd, delay: delay,
		frames: agent.NewReader(st.Stdout()),
		errEOF: make(chan struct{}),
		in:     st.Stdin(),
		done:   make(chan struct{}),
	}
	p.cond = sync.NewCond(&p.cmu)
	go drain(st.Stderr(), &p.stderr, p.errEOF)

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
	go p.readLoop()
	go p.copyStdin()
	go p.watch(ctx)
	return p, nil
}

// readStart reads the started or start-failure frame.
func (p *process) readStart() error {
	typ, payload, err := p.frames.Next()
	if err != nil {
		return p.streamError(err)
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

// streamError explains a stream that ended before the exit status.
func (p *process) streamError(readErr error) error {
	p.finish()
	werr := p.werr
	if werr != nil && errors.Is(werr, sandbox.ErrGone) {
		return werr
	}
	msg := strings.TrimSpace(p.stderr.String())
	if msg != "" {
		return fmt.Errorf("agent stream ended (%v): %s", readErr, msg)
	}
	if werr != nil {
		return fmt.Errorf("agent stream ended (%v): %w", readErr, werr)
	}
	return fmt.Errorf("agent stream ended before the exit status: %w", readErr)
}

// finish closes the agent's input and the stream and waits for the agent,
// once.
func (p *process) finish() {
	p.finOnce.Do(func() {
		p.stream.Close()
		p.wmu.Lock()
		p.in.Close()
		p.wmu.Unlock()
		<-p.errEOF
		_, p.werr = p.stream.Wait()
	})
}

// readLoop delivers output until the exit frame, then finishes the process.
func (p *process) readLoop() {
	stdout, stderr := p.cmd.Stdout, p.cmd.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var err error
	for {
		var typ byte
		var payload []byte
		typ, payload, err = p.frames.Next()
		if err != nil {
			err = fmt.Errorf("shim: process %d in %s: %w", p.pid, p.s.opts.Name, p.streamError(err))
			break
		}
		switch typ {
		case agent.TypeStdout:
			// A failing writer does not stop the process; its output is
			// dropped, as with os/exec when a copy fails.
			if _, werr := stdout.Write(payload); werr != nil {
				stdout = io.Discard
			}
		case agent.TypeStderr:
			if _, werr := stderr.Write(payload); werr != nil {
				stderr = io.Discard
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
				err = fmt.Errorf("shim: process %d: bad exit frame: %w", p.pid, xerr)
				break
			}
			p.status = sandbox.ExitStatus{Code: int(int32(v[0])), Signal: syscall.Signal(v[1])}
		default:
			err = fmt.Errorf("shim: process %d: unexpected frame %q from the agent", p.pid, typ)
		}
		if typ == agent.TypeExit || err != nil {
			break
		}
	}
	p.finish()
	p.err = err
	p.cmu.Lock()
	close(p.done)
	p.cond.Broadcast()
	p.cmu.Unlock()
	untrack(p.s, p.s.procs, p)
}

// copyStdin sends Cmd.Stdin to the agent within the acknowledged window.
func (p *process) copyStdin() {
	if p.cmd.Stdin == nil {
		p.send(agent.TypeStdinEOF, nil)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := p.cmd.Stdin.Read(buf)
		if n > 0 {
			p.cmu.Lock()
			for p.inflight+n > agent.StdinWindow && !p.exited() {
				p.cond.Wait()
			}
			if p.exited() {
				p.cmu.Unlock()
				return
			}
			p.inflight += n
			p.cmu.Unlock()
			if p.send(agent.TypeStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			p.send(agent.TypeStdinEOF, nil)
			return
		}
	}
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
