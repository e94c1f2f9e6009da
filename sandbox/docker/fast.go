package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
)

// procRoot is a container's init process as this machine sees it: its pid
// and its start time, which together name one process even after the pid
// is reused, and a pidfd of it when the kernel gives one.
type procRoot struct {
	pid   int
	start string // field 22 of /proc/PID/stat
	// pidfd refers to the process itself (pidfd_open), nil when the
	// kernel offers none. alive asks it with one poll, about 1 µs, instead
	// of reading /proc/PID/stat, about 20 µs: fastFS asks before every
	// direct read, and a language-server query makes several.
	pidfd *os.File
}

// findProcRoot returns the init process pid of container id when this
// machine shows it (berth runs beside the engine, in its PID namespace) and
// its root file system can be opened; nil otherwise. The process must name
// the container in its cgroup or mount table: from another PID namespace
// the same pid is some other process.
func findProcRoot(pid int, id string) *procRoot {
	// The pidfd is opened first: the checks below then prove it names
	// the container's process, unless that process ended meanwhile, which
	// the last alive says.
	pidfd := openPidfd(pid)
	start, err := startTime(pid)
	if err != nil || !mentions(pid, id) {
		closePidfd(pidfd)
		return nil
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		closePidfd(pidfd)
		return nil
	}
	f.Close()
	p := &procRoot{pid: pid, start: start, pidfd: pidfd}
	if !p.alive() {
		p.close()
		return nil
	}
	return p
}

// openPidfd returns a pidfd of process pid, or nil when the kernel has
// none (before Linux 5.3) or the process is gone.
func openPidfd(pid int) *os.File {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid))
}

func closePidfd(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// close releases the pidfd; alive reads /proc/PID/stat afterwards.
func (p *procRoot) close() { closePidfd(p.pidfd) }

// mentions reports whether process pid's cgroup or mount table names the
// container id (/docker/<id>, /var/lib/docker/containers/<id>/hostname).
func mentions(pid int, id string) bool {
	for _, f := range []string{"cgroup", "mountinfo"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
		if err == nil && bytes.Contains(b, []byte(id)) {
			return true
		}
	}
	return false
}

// startTime reads the start time of process pid, in clock ticks since boot.
func startTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name, in parentheses, may hold spaces; fields after it
	// start with the state (field 3).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("docker: unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("docker: unexpected /proc/%d/stat", pid)
	}
	return fields[19], nil
}

// openInRoot opens name, an absolute path inside the container, as an
// O_PATH descriptor (with extra flags), resolved by the kernel as if the
// container's root were "/" (RESOLVE_IN_ROOT, no magic links): a symbolic
// link anywhere on it is followed inside the container, never to the
// host's files.
func (p *procRoot) openInRoot(name string, flags int) (int, error) {
	top, err := unix.Open(fmt.Sprintf("/proc/%d/root", p.pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the container's root /proc/%d/root: %w", p.pid, err)
	}
	defer unix.Close(top)
	rel := strings.TrimPrefix(path.Clean(name), "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(top, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC | uint64(flags),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// alive reports whether the recorded process still runs. Through the
// pidfd, a process that exited counts as gone even before it is reaped
// (its /proc entry and start time stay until then).
func (p *procRoot) alive() bool {
	if p.pidfd != nil {
		if exited, ok := pidfdExited(p.pidfd); ok {
			return !exited
		}
	}
	start, err := startTime(p.pid)
	return err == nil && start == p.start
}

// pidfdExited polls a pidfd, which is readable once its process exited;
// ok is false when it could not be asked (closed).
func pidfdExited(f *os.File) (exited, ok bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, false
	}
	var n int
	var perr error
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, perr = unix.Poll(fds, 0)
			if perr != unix.EINTR {
				break
			}
		}
		if perr == nil && n > 0 && fds[0].Revents&unix.POLLNVAL != 0 {
			perr = unix.EBADF
		}
	})
	if err != nil || perr != nil {
		return false, false
	}
	return n > 0, true
}

// openLocal opens root, a directory inside the container, through the
// container's /proc/PID/root. The path is resolved by the kernel as if the
// container's root were "/" (RESOLVE_IN_ROOT): a symbolic link anywhere on
// it is followed inside the container, never to the host's files, just as
// the agent's realpath inside the container resolves it. Afterwards the
// container is inspected again to prove the pid was still its init.
func (s *Sandbox) openLocal(ctx context.Context, root string) (sandbox.FS, error) {
	fd, err := s.init.openInRoot(root, unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("docker: open %s in container %s from the host: %w", root, short(s.id), err)
	}
	defer unix.Close(fd)
	local, err := dirfs.NewAt(fmt.Sprintf("/proc/self/fd/%d", fd), root)
	if err != nil {
		return nil, err
	}
	if err := s.verifyInit(ctx); err != nil {
		if c, ok := local.(io.Closer); ok {
			c.Close()
		}
		return nil, err
	}
	return local, nil
}

// verifyInit inspects the container and fails unless it still runs with
// the recorded init process, so that files opened through /proc/PID/root
// are the container's.
func (s *Sandbox) verifyInit(ctx context.Context) error {
	ins, err := s.cli.ContainerInspect(ctx, s.id, client.ContainerInspectOptions{})
	if err != nil {
		return s.tr.explain(ctx, "inspect", err)
	}
	c := ins.Container
	if err := stateError(describe(c.Name, c.ID), c.State); err != nil {
		return err
	}
	if c.State.Pid != s.init.pid || !s.init.alive() {
		return fmt.Errorf("docker: container %s restarted while berth opened its files; open it again: %w", describe(s.name, s.id), sandbox.ErrGone)
	}
	return nil
}

// fastFS serves reads from the container's root file system seen from the
// host and sends writes to the agent's file server (the embedded FS), which
// runs as the container's user.
type fastFS struct {
	sandbox.FS            // the agent: Root and every write
	local      sandbox.FS // dirfs over /proc/PID/root/<root>
	s          *Sandbox
}

// gone returns a *fs.PathError wrapping sandbox.ErrGone when the container's
// init process is no longer the one recorded, and nil while it is.
func (f *fastFS) gone(ctx context.Context, op, name string) error {
	if f.s.init.alive() {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: f.s.goneError(ctx)}
}

func (f *fastFS) ReadFile(ctx context.Context, name string) ([]byte, error) {
	if err := f.gone(ctx, "readfile", name); err != nil {
		return nil, err
	}
	b, err := f.local.ReadFile(ctx, name)
	if err != nil {
		if g := f.gone(ctx, "readfile", name); g != nil {
			return nil, g
		}
	}
	return b, err
}

func (f *fastFS) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	if err := f.gone(ctx, "stat", name); err != nil {
		return nil, err
	}
	fi, err := f.local.Stat(ctx, name)
	if err != nil {
		if g := f.gone(ctx, "stat", name); g != nil {
			return nil, g
		}
	}
	return fi, err
}

func (f *fastFS) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	if err := f.gone(ctx, "lstat", name); err != nil {
		return nil, err
	}
	fi, err := f.local.Lstat(ctx, name)
	if err != nil {
		if g := f.gone(ctx, "lstat", name); g != nil {
			return nil, g
		}
	}
	return fi, err
}

func (f *fastFS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	if err := f.gone(ctx, "readdir", name); err != nil {
		return nil, err
	}
	des, err := f.local.ReadDir(ctx, name)
	if err != nil {
		if g := f.gone(ctx, "readdir", name); g != nil {
			return nil, g
		}
	}
	return des, err
}

func (f *fastFS) Walk(ctx context.Context, dir string, opts sandbox.WalkOptions, fn sandbox.WalkFunc) error {
	if err := f.gone(ctx, "walk", dir); err != nil {
		return err
	}
	err := f.local.Walk(ctx, dir, opts, fn)
	if err != nil {
		if g := f.gone(ctx, "walk", dir); g != nil {
			return g
		}
	}
	return err
}
