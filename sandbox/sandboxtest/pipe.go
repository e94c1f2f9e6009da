package sandboxtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// testPipe runs the [sandbox.Pipe] checks, one sandbox for all of them:
// the stream's echo, flow control and end, whichever of
// [sandbox.DirectStdin] and [sandbox.DirectStdout] the backend takes.
func testPipe(t *testing.T, e *env) {
	tests := []struct {
		name string
		fn   func(t *testing.T, sb sandbox.Sandbox)
	}{
		{"Echo", pipeEcho},
		{"RefusesCallerStreams", pipeRefusesCallerStreams},
		{"EscalatesToKILL", pipeEscalates},
		{"LargeEcho", pipeLargeEcho},
		{"StdinBackpressureSparesSignalsAndStdout", pipeBackpressure},
		{"ExitAndStderrArriveUnread", pipeExitUnread},
		{"OutputWaitsForReader", pipeOutputWaits},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, e.sb) })
	}
}

// pipeEcho: a line goes through cat, and Close after stdin's EOF is a
// clean exit.
func pipeEcho(t *testing.T, sb sandbox.Sandbox) {
	p, err := sandbox.Pipe(context.Background(), sb, &sandbox.Cmd{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(p).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st, err := p.ExitStatus()
	if err != nil || !st.Success() {
		t.Errorf("cat after stdin EOF: %v, %v; want exit 0", st, err)
	}
}

func pipeRefusesCallerStreams(t *testing.T, sb sandbox.Sandbox) {
	if _, err := sandbox.Pipe(context.Background(), sb, &sandbox.Cmd{Args: []string{"cat"}, Stdout: new(bufio.Writer)}); err == nil {
		t.Error("Pipe with a caller Stdout: no error")
	}
}

// pipeEscalates: Close ends a child that ignores stdin's EOF and SIGTERM
// with SIGKILL.
func pipeEscalates(t *testing.T, sb sandbox.Sandbox) {
	p, err := sandbox.Pipe(context.Background(), sb, &sandbox.Cmd{
		Args:      []string{"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`},
		WaitDelay: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(p).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatal("Close did not return: the escalation to SIGKILL is broken")
	}
	st, _ := p.ExitStatus()
	if st.Signal != syscall.SIGKILL {
		t.Errorf("exit status %v, want killed by SIGKILL", st)
	}
}

// pipeLargeEcho sends several stdin windows through cat while reading.
func pipeLargeEcho(t *testing.T, sb sandbox.Sandbox) {
	p, err := sandbox.Pipe(context.Background(), sb, &sandbox.Cmd{Args: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 5<<20+7)
	rand.Read(data)
	werr := make(chan error, 1)
	go func() {
		// Uneven writes: some below, some above a frame.
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := min(len(rest), 1+i*7919%200000)
			if _, err := p.Write(rest[:n]); err != nil {
				werr <- err
				return
			}
			rest = rest[n:]
		}
		werr <- nil
	}()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(p, got); err != nil {
		t.Fatalf("read back: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("cat echoed different bytes")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := p.ExitStatus(); err != nil || !st.Success() {
		t.Fatalf("exit %v, %v", st, err)
	}
}

// pipeBackpressure: a child that never reads stdin fills the window; the
// writer blocks, but signals and stdout still get through, and Close ends
// it all.
func pipeBackpressure(t *testing.T, sb sandbox.Sandbox) {
	p, err := sandbox.Pipe(context.Background(), sb, &sandbox.Cmd{
		Args:      []string{"sh", "-c", `trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.05; done`},
		WaitDelay: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(p)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	werr := make(chan error, 1)
	go func() {
		_, err := p.Write(make([]byte, 8<<20))
		werr <- err
	}()
	// Only a window of time can show that the write blocks.
	select {
	case err := <-werr:
		t.Fatalf("an 8 MiB write to a child that does not read returned: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := p.Process().Signal(ctxT(t), syscall.SIGUSR1); err != nil {
		t.Fatalf("Signal while stdin is full: %v", err)
	}
	line := make(chan string, 1)
	go func() { l, _ := r.ReadString('\n'); line <- l }()
	select {
	case l := <-line:
		if l != "got-usr1\n" {
			t.Fatalf("read %q after the signal, want %q", l, "got-usr1\n")
		}
	case <-time.After(hang):
		t.Fatal("the signal or its output did not get through a full stdin")
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	for _, c := range []chan error{werr, closed} {
		select {
		case <-c:
		case <-time.After(hang):
			t.Fatal("Close or the blocked Write did not return")
		}
	}
	if st, _ := p.ExitStatus(); st.Success() {
		t.Errorf("exit %v, want killed", st)
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write after Close: %v, want io.ErrClosedPipe", err)
	}
}

// pipeExitUnread: with nobody reading, the exit status and stderr still
// arrive, and reading afterwards gives EOF.
func pipeExitUnread(t *testing.T, sb sandbox.Sandbox) {
	var stderr syncBuffer
	p, err := sandbox.Pipe(context.Background(), sb, &sandbox.Cmd{
		Args:   []string{"sh", "-c", "echo oops >&2; exit 3"},
		Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(hang):
		t.Fatal("Done did not close for a process nobody reads")
	}
	if st, err := p.ExitStatus(); err != nil || st.Code != 3 {
		t.Fatalf("exit %v, %v; want exit status 3", st, err)
	}
	if s := stderr.String(); s != "oops\n" {
		t.Errorf("stderr %q, want %q", s, "oops\n")
	}
	if n, err := p.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("Read after the end = %d, %v; want io.EOF", n, err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// pipeOutputWaits: output nobody reads yet is kept, and the end comes
// after it.
func pipeOutputWaits(t *testing.T, sb sandbox.Sandbox) {
	p, err := sandbox.Pipe(context.Background(), sb, &sandbox.Cmd{Args: []string{"sh", "-c", "echo out; exit 0"}})
	if err != nil {
		t.Fatal(err)
	}
	// Give the child time to write and exit before anyone reads.
	time.Sleep(200 * time.Millisecond)
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p); got <- b }()
	select {
	case b := <-got:
		if string(b) != "out\n" {
			t.Fatalf("read %q, want %q", b, "out\n")
		}
	case <-time.After(hang):
		t.Fatal("reading to the end did not return")
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done is not closed after Read returned EOF")
	}
	if st, err := p.ExitStatus(); err != nil || !st.Success() {
		t.Fatalf("exit %v, %v", st, err)
	}
}
