package host

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMemoryMax is the memory limit of a host sandbox's processes when
// Options.MemoryMax is zero.
const DefaultMemoryMax = 4 << 30

// CgroupRoot is where the control group file system is mounted.
const CgroupRoot = "/sys/fs/cgroup"

// CgroupParent is the group, under the root of each hierarchy, holding one
// group per host sandbox ("run-PID-RANDOM"). It never holds a process
// itself, as cgroup v2 requires of a group whose controllers are enabled
// for its children.
const CgroupParent = "berth.slice"

// cgroupKillWait bounds how long closing a sandbox waits for the
// processes left in its group to die before it gives up removing it.
const cgroupKillWait = 5 * time.Second

// File system magic numbers (statfs f_type).
const (
	cgroup2Magic = 0x63677270
	cgroup1Magic = 0x27e0eb
)

// cgroup is the control group of one host sandbox: one directory on cgroup
// v2, one per controller hierarchy on v1.
type cgroup struct {
	dirs []string
	v2   bool
}

// newCgroup creates the group of a new sandbox with pids.max pidsMax and
// the memory limit memMax (bytes), each only when positive. It needs root
// and a writable cgroup file system with the pids and memory controllers.
func newCgroup(pidsMax int, memMax int64) (*cgroup, error) {
	if euid := os.Geteuid(); euid != 0 {
		return nil, fmt.Errorf("berth runs as uid %d, not root, and may not create control groups", euid)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(CgroupRoot, &st); err != nil {
		return nil, fmt.Errorf("no control group file system at %s: %w", CgroupRoot, err)
	}
	staleOnce.Do(func() { removeStale(CgroupRoot) })
	b := make([]byte, 6)
	rand.Read(b)
	name := fmt.Sprintf("run-%d-%s", os.Getpid(), hex.EncodeToString(b))
	if st.Type == cgroup2Magic {
		return newCgroup2(CgroupRoot, name, pidsMax, memMax)
	}
	return newCgroup1(CgroupRoot, name, pidsMax, memMax)
}

// limitFiles are the controller, limit file and value of each limit to set.
type limitFile struct{ controller, file, value string }

func limitFiles(v2 bool, pidsMax int, memMax int64) []limitFile {
	var out []limitFile
	if pidsMax > 0 {
		out = append(out, limitFile{"pids", "pids.max", strconv.Itoa(pidsMax)})
	}
	if memMax > 0 {
		f := "memory.limit_in_bytes"
		if v2 {
			f = "memory.max"
		}
		out = append(out, limitFile{"memory", f, strconv.FormatInt(memMax, 10)})
	}
	return out
}

// newCgroup2 creates root/CgroupParent/name on the cgroup v2 file system
// mounted at root.
func newCgroup2(root, name string, pidsMax int, memMax int64) (*cgroup, error) {
	limits := limitFiles(true, pidsMax, memMax)
	avail, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("read the cgroup v2 controllers: %w", err)
	}
	var enable []string
	for _, l := range limits {
		if !containsField(string(avail), l.controller) {
			return nil, fmt.Errorf("cgroup v2 at %s has no %s controller (it has %q)", root, l.controller, strings.TrimSpace(string(avail)))
		}
		enable = append(enable, "+"+l.controller)
	}
	parent := filepath.Join(root, CgroupParent)
	for _, dir := range []string{root, parent} {
		if dir == parent {
			if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("create %s: %w", parent, err)
			}
		}
		if len(enable) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0); err != nil {
			return nil, fmt.Errorf("enable %s for the groups below %s: %w", strings.Join(enable, " "), dir, err)
		}
	}
	c := &cgroup{v2: true}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	c.dirs = []string{dir}
	for _, l := range limits {
		if err := os.WriteFile(filepath.Join(dir, l.file), []byte(l.value), 0); err != nil {
			c.close()
			return nil, fmt.Errorf("set %s to %s in %s: %w", l.file, l.value, dir, err)
		}
	}
	return c, nil
}

// newCgroup1 creates CgroupParent/name in the cgroup v1 hierarchy of each
// controller mounted below root.
func newCgroup1(root, name string, pidsMax int, memMax int64) (*cgroup, error) {
	c := &cgroup{}
	for _, l := range limitFiles(false, pidsMax, memMax) {
		hier := filepath.Join(root, l.controller)
		var st syscall.Statfs_t
		if err := syscall.Statfs(hier, &st); err != nil || st.Type != cgroup1Magic {
			c.close()
			return nil, fmt.Errorf("neither cgroup v2 at %s nor a cgroup v1 %s hierarchy at %s", root, l.controller, hier)
		}
		parent := filepath.Join(hier, CgroupParent)
		if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			c.close()
			return nil, fmt.Errorf("create %s: %w", parent, err)
		}
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			c.close()
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
		c.dirs = append(c.dirs, dir)
		if err := os.WriteFile(filepath.Join(dir, l.file), []byte(l.value), 0); err != nil {
			c.close()
			return nil, fmt.Errorf("set %s to %s in %s: %w", l.file, l.value, dir, err)
		}
	}
	return c, nil
}

// staleOnce removes, once per process, the groups that berth processes
// no longer running left behind (killed before they could close their
// sandboxes; the agents ended with them, so the groups are empty).
var staleOnce sync.Once

// removeStale removes the empty run-PID-* groups below CgroupParent, on
// v2 at root and in each v1 hierarchy below it, whose berth (PID) is gone.
// A group that still holds a process is not removed (rmdir refuses it).
func removeStale(root string) {
	parents := []string{filepath.Join(root, CgroupParent)}
	if more, err := filepath.Glob(filepath.Join(root, "*", CgroupParent)); err == nil {
		parents = append(parents, more...)
	}
	for _, parent := range parents {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), "run-")
			if !e.IsDir() || !ok {
				continue
			}
			pid, _, _ := strings.Cut(rest, "-")
			n, err := strconv.Atoi(pid)
			if err != nil || n <= 0 {
				continue
			}
			if _, err := os.Stat("/proc/" + pid); err == nil {
				continue // that berth still runs
			}
			os.Remove(filepath.Join(parent, e.Name()))
		}
	}
}

func containsField(s, f string) bool {
	for _, x := range strings.Fields(s) {
		if x == f {
			return true
		}
	}
	return false
}

// procs lists the processes in the group at dir.
func procs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// close kills every process still in the group and removes it.
func (c *cgroup) close() error {
	deadline := time.Now().Add(cgroupKillWait)
	var errs []error
	for _, dir := range c.dirs {
		if c.v2 {
			// cgroup.kill (Linux 5.14) kills the whole group at once, also
			// what forks meanwhile.
			os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		}
		for {
			ps, err := procs(dir)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if len(ps) == 0 {
				err := os.Remove(dir)
				if err == nil || errors.Is(err, fs.ErrNotExist) {
					break
				}
				if time.Now().After(deadline) {
					errs = append(errs, fmt.Errorf("host: remove the control group %s: %w; remove it by hand (rmdir) once it is empty", dir, err))
					break
				}
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("host: the control group %s still holds processes %v %s after it was killed; kill them and rmdir it by hand", dir, ps, cgroupKillWait))
				break
			}
			// Only processes of this sandbox's own group.
			for _, p := range ps {
				syscall.Kill(p, syscall.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}
