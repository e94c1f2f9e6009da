package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// fileServers returns the pids of this process's children that are file
// servers for root ("berth-shim fs ROOT"), zombies included.
func fileServers(t *testing.T, root string) []int {
	t.Helper()
	self := os.Getpid()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(self) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(st), "cmdline"))
		args := strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")
		// A zombie has no command line left; its name says what it was.
		if f[0] == "Z" && strings.Contains(string(b), "(berth-shim)") || len(args) >= 3 && args[1] == "fs" && args[len(args)-1] == root {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// oneFileServer waits for exactly one file server for root and returns it.
func oneFileServer(t *testing.T, root string) int {
	t.Helper()
	var pids []int
	for range 100 {
		if pids = fileServers(t, root); len(pids) == 1 {
			return pids[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("file servers for %s: %v, want exactly one", root, pids)
	return 0
}

// TestFSReplyDeadline stops the file server (SIGSTOP, as a hung one): a
// read fails within the reply timeout, saying which server sent nothing
// for how long and to retry, the next read gets a new server, and once
// the FS is closed no server is left, not even a zombie. Before the reply
// timeout the read hung until its context ended.
func TestFSReplyDeadline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const reply = 300 * time.Millisecond
	sb := shim.New(&transport{env: BaseEnv(nil)}, shim.Options{Name: "host", FSReplyTimeout: reply})
	defer sb.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsys, err := sb.FS(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.ReadFile(ctx, "a.txt"); err != nil {
		t.Fatal(err)
	}
	stopped := oneFileServer(t, dir)
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(stopped, syscall.SIGCONT)

	start := time.Now()
	_, err = fsys.ReadFile(ctx, "a.txt")
	took := time.Since(start)
	if err == nil {
		t.Fatal("a read from a stopped file server succeeded")
	}
	if !errors.Is(err, shim.ErrNoReply) {
		t.Fatalf("read from a stopped file server: %v, want shim.ErrNoReply", err)
	}
	for _, want := range []string{fmt.Sprintf("pid %d", stopped), "sent nothing for " + reply.String(), "retry"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Its deadline and slack, far below the default and the context.
	if took > reply+5*time.Second {
		t.Errorf("the read failed after %v, want about its reply timeout %v", took, reply)
	}

	if b, err := fsys.ReadFile(ctx, "a.txt"); err != nil || string(b) != "a\n" {
		t.Fatalf("the read after a silent server: %q, %v", b, err)
	}
	if now := oneFileServer(t, dir); now == stopped {
		t.Fatalf("the next read went to the stopped server %d", stopped)
	}

	syscall.Kill(stopped, syscall.SIGCONT)
	if err := fsys.(interface{ Close() error }).Close(); err != nil {
		t.Fatal(err)
	}
	if left := fileServers(t, dir); len(left) > 0 {
		t.Fatalf("file servers (or their zombies) left after Close: %v", left)
	}
}

// TestFSReplyDeadlineNeverEnds: a server stopped for good (never
// continued) still lets Close return, within its graces: it is killed, and
// no goroutine is left waiting for it.
func TestFSReplyDeadlineNeverEnds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	sb := shim.New(&transport{env: BaseEnv(nil)}, shim.Options{Name: "host", FSReplyTimeout: 300 * time.Millisecond})
	defer sb.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsys, err := sb.FS(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	stopped := oneFileServer(t, dir)
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Larger than a pipe holds: the write itself blocks on the server.
	if err := fsys.WriteFile(ctx, "b.txt", make([]byte, 4<<20), 0o644); !errors.Is(err, shim.ErrNoReply) {
		t.Fatalf("write to a stopped server: %v, want shim.ErrNoReply", err)
	}
	done := make(chan struct{})
	go func() { sb.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		syscall.Kill(stopped, syscall.SIGCONT)
		t.Fatal("Close waited for a stopped file server")
	}
	if left := fileServers(t, dir); len(left) > 0 {
		syscall.Kill(stopped, syscall.SIGCONT)
		t.Fatalf("file servers left after Close: %v", left)
	}
}

// TestFSServerKilledIsReplaced kills the idle file server (kill -9, as the
// OOM killer would) between two calls: the second call succeeds, on a new
// server. Before, it reused the dead session and failed with "unexpected
// EOF" or a broken pipe.
func TestFSServerKilledIsReplaced(t *testing.T) {
	sb := shim.New(&transport{env: BaseEnv(nil)}, shim.Options{Name: "host"})
	defer sb.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsys, err := sb.FS(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		pid := oneFileServer(t, dir)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("w%d.txt", i)
		if err := fsys.WriteFile(ctx, name, []byte("w"), 0o644); err != nil {
			t.Fatalf("write after the file server %d was killed: %v", pid, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "w" {
			t.Fatalf("%s holds %q, %v", name, b, err)
		}
	}
	var _ sandbox.FS = fsys
}
