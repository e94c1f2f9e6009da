package docker

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

// TestPipe runs sandbox.Pipe streams through the agent in a container:
// stdin frames go straight from Write to the exec connection, and Read
// demultiplexes that connection itself (see demux).
func TestPipe(t *testing.T) {
	cli := needDocker(t)
	id := startContainer(t, cli, containerSpec{image: testImage(t, cli)})
	sb := open(t, newProvider(t), id)
	ctx := context.Background()
	const hang = 60 * time.Second

	t.Run("large echo", func(t *testing.T) {
		p, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"cat"}})
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 3<<20+5)
		rand.Read(data)
		werr := make(chan error, 1)
		go func() {
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
	})

	t.Run("stdin backpressure spares signals and stdout", func(t *testing.T) {
		p, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{
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
		time.Sleep(300 * time.Millisecond)
		sctx, cancel := context.WithTimeout(ctx, hang)
		defer cancel()
		if err := p.Process().Signal(sctx, syscall.SIGUSR1); err != nil {
			t.Fatalf("Signal while stdin is full: %v", err)
		}
		line := make(chan string, 1)
		go func() { l, _ := r.ReadString('\n'); line <- l }()
		select {
		case l := <-line:
			if l != "got-usr1\n" {
				t.Fatalf("read %q after the signal", l)
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
		if _, err := p.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("Write after Close: %v, want io.ErrClosedPipe", err)
		}
	})

	t.Run("exit arrives unread", func(t *testing.T) {
		p, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"sh", "-c", "exit 3"}})
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
		if n, err := p.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Errorf("Read after the end = %d, %v; want io.EOF", n, err)
		}
	})
}
