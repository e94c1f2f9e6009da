package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// TestCgroupV2Mechanics drives the cgroup v2 code on the machine's v2
// hierarchy even where that one has no pids or memory controller (a
// hybrid machine's /sys/fs/cgroup/unified): the agent joins the group,
// every descendant is in it, and Close kills them (cgroup.kill) and removes
// it. The limits themselves are TestForkBombCgroup and TestMemoryMax.
func TestCgroupV2Mechanics(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("control groups need root")
	}
	var root string
	for _, r := range []string{CgroupRoot, filepath.Join(CgroupRoot, "unified")} {
		var st syscall.Statfs_t
		if syscall.Statfs(r, &st) == nil && st.Type == cgroup2Magic {
			root = r
			break
		}
	}
	if root == "" {
		t.Skip("no cgroup v2 hierarchy mounted")
	}
	cg, err := newCgroup2(root, "run-test-"+strconv.Itoa(os.Getpid()), 0, 0)
	if err != nil {
		t.Skipf("cannot create a cgroup v2 group here: %v", err)
	}
	dir := cg.dirs[0]
	sb := &Sandbox{
		Sandbox: shim.New(&transport{env: BaseEnv(nil)}, shim.Options{Name: "host", RunFlags: []string{"--cgroup=" + dir}}),
		cg:      cg,
	}
	defer sb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	p, err := sb.Start(ctx, &sandbox.Cmd{Args: []string{"/bin/sh", "-c", "sleep 120 & sleep 120 & echo started; wait"}, Dir: "/", Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	var ps []int
	for len(ps) < 4 { // agent, sh, two sleeps
		if ps, err = procs(dir); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("group %s holds %v, want the agent, the shell and two sleeps", dir, ps)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !containsInt(ps, p.Pid()) {
		t.Errorf("the program %d is not in %s (%v)", p.Pid(), dir, ps)
	}
	// What Close's group kill must end even when the agent cannot: kill
	// the agent first, then close.
	for _, pid := range ps {
		if pid != p.Pid() && isAgent(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range ps {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
			t.Errorf("process %d of the group still runs after Close", pid)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after Close: %v", dir, err)
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// isAgent reports whether pid runs berth-shim.
func isAgent(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte(shim.BinaryName))
}

// TestRemoveStale: an empty group of a berth that is gone is removed, one
// of a live berth is kept.
func TestRemoveStale(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("control groups need root")
	}
	cg, err := newCgroup(1, 0)
	if err != nil {
		t.Skipf("no control group here: %v", err)
	}
	defer cg.close()
	parent := filepath.Dir(cg.dirs[0])
	stale := filepath.Join(parent, "run-999999999-test") // above the kernel's pid_max
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(stale)
	removeStale(CgroupRoot)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale group %s kept: %v", stale, err)
	}
	if _, err := os.Stat(cg.dirs[0]); err != nil {
		t.Errorf("live group %s removed: %v", cg.dirs[0], err)
	}
}
