package sandbox_test

import (
	"bufio"
	"context"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
)

func TestPipe(t *testing.T) {
	sb := host.New(host.Options{})
	t.Cleanup(func() { sb.Close() })
	ctx := context.Background()

	t.Run("echo", func(t *testing.T) {
		p, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"cat"}})
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
	})

	t.Run("refuses caller streams", func(t *testing.T) {
		if _, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{Args: []string{"cat"}, Stdout: new(bufio.Writer)}); err == nil {
			t.Error("Pipe with a caller Stdout: no error")
		}
	})

	t.Run("escalates to KILL", func(t *testing.T) {
		// Ignores stdin EOF and SIGTERM: only SIGKILL ends it.
		p, err := sandbox.Pipe(ctx, sb, &sandbox.Cmd{
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
		case <-time.After(30 * time.Second):
			t.Fatal("Close did not return: the escalation to SIGKILL is broken")
		}
		st, _ := p.ExitStatus()
		if st.Signal != syscall.SIGKILL {
			t.Errorf("exit status %v, want killed by SIGKILL", st)
		}
	})
}
