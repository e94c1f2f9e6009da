package debug

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"berth.dev/berth/sandbox"
)

// residentStream is the stdio of an adapter that runs under the run's
// resident supervisor ([sandbox.Resident]), as one stream: what
// [sandbox.Pipe] is for a plain process, except that it can let go of the
// adapter without ending it ([residentStream.detach]).
type residentStream struct {
	proc sandbox.Process
	in   io.WriteCloser // the backend's direct stdin writer, or the io.Pipe to Cmd.Stdin
	out  io.ReadCloser  // the backend's direct stdout reader, or the io.Pipe from Cmd.Stdout
	// delay is the process's wait delay: how long Close waits for it to
	// exit before each signal.
	delay time.Duration
	done  chan struct{}

	status sandbox.ExitStatus // set before done is closed
	err    error

	mu       sync.Mutex
	detached bool
}

// directIn and directOut are the Cmd.Stdin and Cmd.Stdout of a resident
// adapter: a backend that implements [sandbox.DirectStdin] and
// [sandbox.DirectStdout] hands over the process's stdin and stdout, so
// that no goroutine of the backend reads or writes berth's side. That
// matters for detaching: a backend reading Cmd.Stdin itself would close
// the adapter's stdin at the end of it.
type directIn struct {
	*io.PipeReader
	direct io.WriteCloser
}

func (in *directIn) SetStdin(w io.WriteCloser) { in.direct = w }

type directOut struct {
	*io.PipeWriter
	direct io.ReadCloser
}

func (out *directOut) SetStdout(r io.ReadCloser) { out.direct = r }

var (
	_ sandbox.DirectStdin  = (*directIn)(nil)
	_ sandbox.DirectStdout = (*directOut)(nil)
)

// startResident starts cmd under res as name, or with attach reattaches to
// the process name (cmd's Args are then ignored). cmd.Stdin and
// cmd.Stdout must be nil. ctx bounds the process's lifetime while berth is
// attached, as for [sandbox.Resident.Start].
func startResident(ctx context.Context, res sandbox.Resident, name string, attach bool, cmd *sandbox.Cmd) (*residentStream, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	in := &directIn{PipeReader: inR}
	out := &directOut{PipeWriter: outW}
	c := *cmd
	c.Stdin, c.Stdout = in, out
	var p sandbox.Process
	var err error
	if attach {
		p, err = res.Attach(ctx, name, &c)
	} else {
		p, err = res.Start(ctx, name, &c)
	}
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	rs := &residentStream{proc: p, in: inW, out: outR, delay: c.WaitDelay, done: make(chan struct{})}
	if rs.delay <= 0 {
		rs.delay = sandbox.DefaultWaitDelay
	}
	if in.direct != nil {
		rs.in = in.direct
	}
	if out.direct != nil {
		rs.out = out.direct
	}
	go func() { // owned by the process: ends when it exits or berth detaches
		rs.status, rs.err = p.Wait()
		outW.Close()
		inR.Close()
		close(rs.done)
	}()
	return rs, nil
}

// Read reads the adapter's stdout; io.EOF once it exited and its output
// was read.
func (rs *residentStream) Read(p []byte) (int, error) {
	n, err := rs.out.Read(p)
	if err == io.EOF {
		<-rs.done
	}
	return n, err
}

// Write writes to the adapter's stdin.
func (rs *residentStream) Write(p []byte) (int, error) { return rs.in.Write(p) }

// Close ends the adapter, as [sandbox.PipeStream.Close] does: it closes
// its stdin, which ends a stdio adapter, waits up to the wait delay for it
// to exit, then sends SIGTERM and, after another delay, SIGKILL. The
// process's own connection must stay open meanwhile (closing berth's side
// of its stdout closes it, which for a resident process means letting go
// of it, not ending it), so stdout is closed only then. After detach,
// Close only lets go: the adapter runs on under the resident.
func (rs *residentStream) Close() error {
	rs.mu.Lock()
	detached := rs.detached
	rs.mu.Unlock()
	if detached {
		return rs.out.Close()
	}
	rs.in.Close()
	escalate := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for {
		t := time.NewTimer(rs.delay)
		select {
		case <-rs.done:
			t.Stop()
			rs.out.Close()
			return nil
		case <-t.C:
		}
		if len(escalate) == 0 {
			rs.out.Close()
			return fmt.Errorf("debug: the debug adapter (pid %d) did not exit after SIGKILL; the sandbox stopped answering: %w", rs.proc.Pid(), sandbox.ErrGone)
		}
		ctx, cancel := context.WithTimeout(context.Background(), rs.delay)
		rs.proc.Signal(ctx, escalate[0])
		cancel()
		escalate = escalate[1:]
	}
}

// detach makes Close leave the adapter's stdin open: the adapter runs on
// under the resident, which keeps its output for the next berth.
func (rs *residentStream) detach() {
	rs.mu.Lock()
	rs.detached = true
	rs.mu.Unlock()
}

// exitStatus returns the process's status once done is closed.
func (rs *residentStream) exitStatus() (sandbox.ExitStatus, error) {
	<-rs.done
	return rs.status, rs.err
}
