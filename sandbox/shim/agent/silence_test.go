package agent

import (
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// startSilent starts the agent with args and keeps its stdin open without
// writing (as containerd's shim keeps a dead berth's FIFO open), sending
// a TypePing every pingEvery when it is not zero. It returns the agent and
// a channel closed when it exited.
func startSilent(t *testing.T, pingEvery time.Duration, args ...string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() // ends with the agent, which cleanup kills
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		in.Close()
	})
	if pingEvery > 0 {
		go func() { // ends with the agent
			for {
				select {
				case <-exited:
					return
				case <-time.After(pingEvery):
				}
				WriteFrame(in, TypePing, nil)
			}
		}()
	}
	return cmd, exited
}

// TestSilentBerthIsGone: a program run with --ping-timeout ends, and the
// agent with it, once berth sends nothing for that long; a berth that
// pings keeps it; a file server with --idle-exit exits when no request
// comes, and stays while requests do.
func TestSilentBerthIsGone(t *testing.T) {
	const timeout = 600 * time.Millisecond
	for _, tc := range []struct {
		name  string
		ping  time.Duration
		args  []string
		gone  bool
		grace time.Duration // how long after timeout it must be gone
	}{
		{"run, silent berth", 0, []string{"run", "--wait-delay=200ms", "--ping-timeout=" + timeout.String(), "--", "sleep", "30"}, true, 5 * time.Second},
		{"run, pinging berth", timeout / 4, []string{"run", "--ping-timeout=" + timeout.String(), "--", "sleep", "30"}, false, 0},
		{"run without --ping-timeout", 0, []string{"run", "--", "sleep", "30"}, false, 0},
		{"fs, idle", 0, []string{"fs", "--idle-exit=" + timeout.String(), os.TempDir()}, true, 5 * time.Second},
		{"fs without --idle-exit", 0, []string{"fs", os.TempDir()}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, exited := startSilent(t, tc.ping, tc.args...)
			select {
			case <-exited:
				if !tc.gone {
					t.Fatalf("the agent exited (%v); want it kept", cmd.ProcessState)
				}
			case <-time.After(timeout + tc.grace + 3*timeout):
				if tc.gone {
					t.Fatalf("the agent still runs %v after berth went silent", timeout+tc.grace+3*timeout)
				}
			}
		})
	}
}
