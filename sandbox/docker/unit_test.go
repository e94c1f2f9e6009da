package docker

import (
	"archive/tar"
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"berth.dev/berth/sandbox"
)

func TestStateError(t *testing.T) {
	tests := []struct {
		name  string
		state *container.State
		says  string // empty: usable
	}{
		{"running", &container.State{Status: container.StateRunning, Running: true, Pid: 7}, ""},
		{"paused", &container.State{Status: container.StatePaused, Running: true, Paused: true}, "is paused"},
		{"restarting", &container.State{Status: container.StateRestarting, Running: true, Restarting: true}, "restarting"},
		{"exited", &container.State{Status: container.StateExited, ExitCode: 137, FinishedAt: "2026-01-02T03:04:05Z"}, "is exited (exit code 137, finished at 2026-01-02T03:04:05Z)"},
		{"oom", &container.State{Status: container.StateExited, ExitCode: 137, OOMKilled: true}, "out of memory"},
		{"dead", &container.State{Status: container.StateDead, Dead: true}, "is dead"},
		{"created", &container.State{Status: container.StateCreated}, "never started"},
		{"no state", nil, "no state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := stateError("web (0123456789ab)", tt.state)
			if tt.says == "" {
				if err != nil {
					t.Fatalf("stateError = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), tt.says) || !strings.Contains(err.Error(), "web (0123456789ab)") {
				t.Fatalf("stateError = %v; want ErrGone naming the container and saying %q", err, tt.says)
			}
		})
	}
}

func TestRootUser(t *testing.T) {
	for user, want := range map[string]bool{"": true, "root": true, "0": true, "0:0": true, "root:staff": true, "1000": false, "app": false, "1000:0": false} {
		if got := rootUser(&container.Config{User: user}); got != want {
			t.Errorf("rootUser(%q) = %v, want %v", user, got, want)
		}
	}
}

func TestAgentTar(t *testing.T) {
	b, err := agentTar(".berth/shim-0123456789ab/berth-shim", []byte("agent"))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, h.Name+" "+os.FileMode(h.Mode).String()+" "+string(body))
	}
	want := []string{".berth/ -rwxr-xr-x ", ".berth/shim-0123456789ab/ -rwxr-xr-x ", ".berth/shim-0123456789ab/berth-shim -rwxr-xr-x agent"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("archive holds %q, want %q", got, want)
	}
}

func TestStartTime(t *testing.T) {
	s1, err := startTime(os.Getpid())
	if err != nil || s1 == "" {
		t.Fatalf("startTime(self) = %q, %v", s1, err)
	}
	pr := &procRoot{pid: os.Getpid(), start: s1}
	if !pr.alive() {
		t.Fatal("the running test process is not alive")
	}
	pr.start = "1"
	if pr.alive() {
		t.Fatal("a process with another start time counts as alive")
	}
	if mentions(os.Getpid(), "0123456789abcdef0123456789abcdef") {
		t.Fatal("the test process mentions a made-up container id")
	}
}

// TestProcRootPidfd checks the pidfd liveness check: a process that exited
// counts as gone at once, even while it is an unreaped zombie whose
// /proc/PID/stat (and start time) remain, and after close the check falls
// back to the start time.
func TestProcRootPidfd(t *testing.T) {
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	pid := child.Process.Pid
	start, err := startTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	pr := &procRoot{pid: pid, start: start, pidfd: openPidfd(pid)}
	if pr.pidfd == nil {
		t.Skip("the kernel offers no pidfd_open (Linux 5.3 and later do)")
	}
	defer pr.close()
	if !pr.alive() {
		t.Fatal("a running child counts as gone")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pr.alive() {
		if time.Now().After(deadline) {
			t.Fatal("a killed child still counts as alive after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	// Not reaped yet: the start time alone would call the zombie alive.
	if s, err := startTime(pid); err != nil || s != start {
		t.Fatalf("the unreaped child's stat changed: %q, %v", s, err)
	}
	child.Wait()
	pr.close()
	if pr.alive() {
		t.Fatal("after close, a reaped child counts as alive")
	}
}

// TestNoLifecycleCalls checks that the backend's own code calls no engine
// method that creates, starts, stops, restarts, pauses or removes a
// container: berth only uses containers that exist.
func TestNoLifecycleCalls(t *testing.T) {
	forbidden := map[string]bool{
		"ContainerCreate": true, "ContainerStart": true, "ContainerStop": true, "ContainerRestart": true,
		"ContainerKill": true, "ContainerRemove": true, "ContainerPause": true, "ContainerUnpause": true,
		"ContainerUpdate": true, "ContainerRename": true, "ContainerCommit": true, "ContainersPrune": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && forbidden[sel.Sel.Name] {
				t.Errorf("%s: the backend calls %s", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
