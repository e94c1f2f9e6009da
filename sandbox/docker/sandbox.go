package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim"
)

// Sandbox is a running Docker container used as a [sandbox.Sandbox]:
// processes, files and Dial go through berth's agent over exec streams
// ([shim.Sandbox] over a [Transport]); reads of files and connections to
// unix sockets take a direct path through /proc/PID/root when berth runs as
// root on the engine's machine.
type Sandbox struct {
	*shim.Sandbox

	cli  *client.Client // owned; closed by Close
	tr   *Transport
	id   string
	name string

	// init is the container's init process as this machine sees it, for
	// direct reads; nil when they are off.
	init *procRoot

	// mu guards locals, conns and closed.
	mu     sync.Mutex
	closed bool
	locals []io.Closer             // direct-read roots, closed by Close
	conns  map[*localConn]struct{} // direct Dial connections, closed by Close
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// newSandbox wraps the running container id; ins is its inspection.
func newSandbox(cli *client.Client, c container.InspectResponse, o options) *Sandbox {
	tr := NewTransport(cli, c.ID)
	s := &Sandbox{
		Sandbox: shim.New(tr, shim.Options{Name: Scheme + "://" + c.ID, Binary: o.agent, FSReplyTimeout: o.fsReply}),
		cli:     cli,
		tr:      tr,
		id:      c.ID,
		name:    strings.TrimPrefix(c.Name, "/"),
	}
	if o.directReads && rootUser(c.Config) && c.State != nil && c.State.Pid > 0 {
		s.init = findProcRoot(c.State.Pid, c.ID)
	}
	return s
}

// rootUser reports whether the container's default user is root, so that
// reading its files as root on the host grants no access its own user
// lacks.
func rootUser(cfg *container.Config) bool {
	if cfg == nil {
		return true
	}
	user, _, _ := strings.Cut(cfg.User, ":")
	return user == "" || user == "root" || user == "0"
}

// Ref returns "docker://<full container id>".
func (s *Sandbox) Ref() string { return Scheme + "://" + s.id }

// Check inspects the container: nil while it runs, otherwise an error
// wrapping sandbox.ErrGone that names it and says its state.
func (s *Sandbox) Check(ctx context.Context) error {
	return inspectState(ctx, s.cli, s.id)
}

// FS returns the file system rooted at root inside the container. Writes
// always go through the agent, as the container's user. Reads go straight
// to the container's root file system when berth can see it (see
// [WithDirectReads]); otherwise through the agent too. ctx bounds opening.
func (s *Sandbox) FS(ctx context.Context, root string) (sandbox.FS, error) {
	shimFS, err := s.Sandbox.FS(ctx, root)
	if err != nil {
		return nil, err
	}
	agent := &agentFS{FS: shimFS, s: s}
	if s.init == nil {
		return agent, nil
	}
	local, err := s.openLocal(ctx, agent.Root())
	if err != nil {
		if errors.Is(err, sandbox.ErrGone) {
			return nil, err
		}
		// The direct path is an optimisation: without it the agent serves
		// reads as well.
		return agent, nil
	}
	if c, ok := local.(io.Closer); ok {
		s.mu.Lock()
		s.locals = append(s.locals, c)
		s.mu.Unlock()
	}
	return &fastFS{FS: agent, local: local, s: s}, nil
}

// Close kills the processes started through s that still run, ends its
// file and Dial sessions and releases the engine client. The container
// keeps running.
func (s *Sandbox) Close() error {
	err := s.Sandbox.Close()
	s.mu.Lock()
	s.closed = true
	locals := s.locals
	s.locals = nil
	for c := range s.conns {
		locals = append(locals, c.UnixConn)
	}
	s.conns = nil
	s.mu.Unlock()
	for _, l := range locals {
		l.Close()
	}
	if s.init != nil {
		s.init.close()
	}
	s.cli.Close()
	return err
}

// Close ends the agent's file-server sessions of this FS.
func (a *agentFS) Close() error { return closeFS(a.FS) }

// Close ends this FS: its agent sessions and its direct reads.
func (f *fastFS) Close() error {
	return errors.Join(closeFS(f.FS), closeFS(f.local))
}

// closeFS closes fsys when it can be closed.
func closeFS(fsys sandbox.FS) error {
	if c, ok := fsys.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// agentFS is the agent's file server with failures explained: when a call
// fails for a reason that is not a file error (the session's stream broke),
// the container is inspected once, and a stopped, paused or removed
// container turns the error into one wrapping sandbox.ErrGone.
type agentFS struct {
	sandbox.FS
	s *Sandbox
}

// explain returns err, or a *fs.PathError wrapping sandbox.ErrGone when err
// is a transport failure and the container is gone.
func (f *agentFS) explain(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	for _, class := range []error{fs.ErrNotExist, fs.ErrPermission, fs.ErrExist, sandbox.ErrEscape, sandbox.ErrTooLarge, sandbox.ErrGone, fs.SkipAll, fs.SkipDir} {
		if errors.Is(err, class) {
			return err
		}
	}
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		// A WalkFunc's own error, handed back as it was.
		return err
	}
	gone := f.s.Check(ctx)
	if gone == nil {
		return err
	}
	return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: fmt.Errorf("%w (%v)", gone, pe.Err)}
}

func (f *agentFS) ReadFile(ctx context.Context, name string) ([]byte, error) {
	b, err := f.FS.ReadFile(ctx, name)
	return b, f.explain(ctx, err)
}

func (f *agentFS) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	fi, err := f.FS.Stat(ctx, name)
	return fi, f.explain(ctx, err)
}

func (f *agentFS) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	fi, err := f.FS.Lstat(ctx, name)
	return fi, f.explain(ctx, err)
}

func (f *agentFS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	des, err := f.FS.ReadDir(ctx, name)
	return des, f.explain(ctx, err)
}

func (f *agentFS) Walk(ctx context.Context, dir string, opts sandbox.WalkOptions, fn sandbox.WalkFunc) error {
	return f.explain(ctx, f.FS.Walk(ctx, dir, opts, fn))
}

func (f *agentFS) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	return f.explain(ctx, f.FS.WriteFile(ctx, name, data, perm))
}

func (f *agentFS) MkdirAll(ctx context.Context, name string, perm fs.FileMode) error {
	return f.explain(ctx, f.FS.MkdirAll(ctx, name, perm))
}

func (f *agentFS) Remove(ctx context.Context, name string) error {
	return f.explain(ctx, f.FS.Remove(ctx, name))
}

func (f *agentFS) Rename(ctx context.Context, oldname, newname string) error {
	return f.explain(ctx, f.FS.Rename(ctx, oldname, newname))
}

// Watch watches through the agent (see the shim's FS), as the container's
// user.
func (f *agentFS) Watch(ctx context.Context, dir string, opts sandbox.WatchOptions) (sandbox.Watch, error) {
	return watchFS(ctx, f.FS, dir, opts)
}

// Watch watches through the agent, as [agentFS.Watch]: the kernel reports
// changes in the container whichever way berth reads.
func (f *fastFS) Watch(ctx context.Context, dir string, opts sandbox.WatchOptions) (sandbox.Watch, error) {
	return watchFS(ctx, f.FS, dir, opts)
}

// watchFS watches through fsys, or fails with sandbox.ErrUnsupported
// when it cannot watch.
func watchFS(ctx context.Context, fsys sandbox.FS, dir string, opts sandbox.WatchOptions) (sandbox.Watch, error) {
	w, ok := fsys.(sandbox.Watcher)
	if !ok {
		return nil, fmt.Errorf("docker: watch %s: this file system cannot watch; walk it instead: %w", dir, sandbox.ErrUnsupported)
	}
	return w.Watch(ctx, dir, opts)
}

var (
	_ sandbox.Watcher = (*agentFS)(nil)
	_ sandbox.Watcher = (*fastFS)(nil)
)
