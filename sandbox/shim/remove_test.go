package shim

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// removeWait bounds waiting for a supervisor to remove its program's
// paths: it does so once the program's tree ended.
const removeWait = time.Minute

// awaitRemoved waits until p no longer exists.
func awaitRemoved(t *testing.T, p, what string) {
	t.Helper()
	for deadline := time.Now().Add(removeWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Lstat(p); os.IsNotExist(err) {
			return
		}
	}
	t.Fatalf("%s: %s is still there", what, p)
}

// ppid reads the parent of pid from /proc.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRemoveWhenProcessEnds: the paths of sandbox.Cmd.Remove go when the
// process ends, also when its resident was killed (kill -9) with nobody
// to clean up, and the killed resident's directory goes with its keeper;
// a symbolic link among them is removed, never followed.
func TestRemoveWhenProcessEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // may build the agent
	defer cancel()
	s := New(localTransport{}, Options{Name: "local"})
	t.Cleanup(func() { s.Close() })
	tmp := func() string {
		d, err := os.MkdirTemp("/tmp", "brm")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	keep := tmp()
	if err := os.WriteFile(filepath.Join(keep, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A plain process that exits.
	dir := tmp()
	if err := os.WriteFile(filepath.Join(dir, "conn.json"), []byte(`{"key":"k"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp(), "link")
	if err := os.Symlink(keep, link); err != nil {
		t.Fatal(err)
	}
	p, err := s.Start(ctx, &sandbox.Cmd{Args: []string{"true"}, Remove: []string{dir, link}})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	awaitRemoved(t, dir, "a process that exited")

	// A process under a resident that is killed.
	resDir := tmp()
	res, err := s.Resident(ctx, sandbox.ResidentSpec{Dir: resDir, Secret: []byte(strings.Repeat("s", sandbox.MinResidentSecret)), Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Close() })
	kdir := tmp()
	if err := os.WriteFile(filepath.Join(kdir, "conn.json"), []byte(`{"key":"k"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	kp, err := res.Start(ctx, "k", &sandbox.Cmd{Args: []string{"sleep", "600"}, Remove: []string{kdir}})
	if err != nil {
		t.Fatal(err)
	}
	serve := ppid(t, ppid(t, kp.Pid())) // program < run-supervised < resident-serve
	if err := syscall.Kill(serve, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	kp.Wait()
	awaitRemoved(t, kdir, "a process whose resident was killed")
	awaitRemoved(t, resDir, "the killed resident's directory")
	if _, err := os.Stat(filepath.Join(keep, "precious")); err != nil {
		t.Errorf("a removal followed a symbolic link: %v", err)
	}
}
