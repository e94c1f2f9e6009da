// Package host is the sandbox backend for the machine berth runs on. Its
// processes run under the same agent (berth-shim) as in containers, so they
// get their own process group and die when berth goes away; its files are
// served by [berth.dev/berth/sandbox/dirfs] directly (with Options.User, by
// the agent running as that user). Processes start with a minimal
// environment (BaseEnv), never berth's, and each sandbox's processes are
// limited (Options.PidsMax, MemoryMax) where the machine allows it.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/dirfs"
	"berth.dev/berth/sandbox/shim"
	"berth.dev/berth/sandbox/shim/agent"
)

// Options configure the host sandbox.
type Options struct {
	// Env is added to the base environment of every process (BaseEnv:
	// PATH, HOME, LANG), KEY=VALUE, a later entry overriding an earlier
	// one; a command's own Cmd.Env comes after it. Nothing of berth's
	// environment is inherited beyond BaseEnv: nil means BaseEnv alone.
	Env []string
	// User, when set, runs every process as that unprivileged user (see
	// LookupUser) while the agent supervising it stays berth's user, so
	// that the process can neither signal nor trace its supervisor. FS is
	// then served by the agent running as User: the kernel checks each
	// read and write as User's, files written get User as owner, and the
	// workspace must be readable and writable by User. Nil runs
	// processes as berth's user and serves files from berth's process.
	User *User
	// PidsMax bounds the processes of each sandbox: pids.max of a control
	// group of its own where berth may create one (root, a writable cgroup
	// v2 with the pids and memory controllers, or cgroup v1 pids and memory
	// hierarchies), else, with User, RLIMIT_NPROC, which counts every
	// process of User on the machine. Zero means DefaultPidsMax, negative
	// means no limit.
	PidsMax int
	// MemoryMax bounds the memory of each sandbox's processes together, in
	// bytes (memory.max, or memory.limit_in_bytes on cgroup v1); only with
	// a control group. Zero means DefaultMemoryMax, negative no limit.
	MemoryMax int64
	// Logger, when set, is told when a sandbox's limits could not be
	// applied as configured.
	Logger *slog.Logger
	// Binary is the agent; nil means shim.Locate.
	Binary *shim.Binary
	// FSReplyTimeout bounds how long the agent's file server (with User)
	// may send nothing before a call gives it up; zero means
	// shim.DefaultFSReplyTimeout.
	FSReplyTimeout time.Duration
}

// limits are the pids and memory limits of o, zero for none.
func (o Options) limits() (pids int, mem int64) {
	pids, mem = o.PidsMax, o.MemoryMax
	if pids == 0 {
		pids = DefaultPidsMax
	}
	if mem == 0 {
		mem = DefaultMemoryMax
	}
	return max(pids, 0), max(mem, 0)
}

// Limits says in one line which limits a sandbox opened with o gets on
// this machine, and which could not be applied and why, for a log line at
// start, and whether all of them apply (see Sandbox.FullyLimited). It
// creates and removes a control group to find out.
func (o Options) Limits() (string, bool) {
	o.Logger = nil
	s := New(o)
	defer s.Close()
	return s.Limits(), s.FullyLimited()
}

// Sandbox is the host. It is safe for concurrent use.
type Sandbox struct {
	*shim.Sandbox

	user    *User
	limits  string // what Limits says
	limited bool   // every configured limit applies

	mu     sync.Mutex
	closed bool
	fss    []io.Closer
	cg     *cgroup // nil without a control group, or once closed
}

// New returns the host sandbox. Its processes go into a control group of
// its own when the machine allows it (see Options.PidsMax); Limits says
// what applies.
func New(opts Options) *Sandbox { return newSandbox(opts, true) }

// newSandbox is New; without useCgroup it applies only the limits
// possible without a control group.
func newSandbox(opts Options, useCgroup bool) *Sandbox {
	env := append(BaseEnv(opts.User), opts.Env...)
	t := &transport{env: env}
	so := shim.Options{Name: "host", Binary: opts.Binary, FSReplyTimeout: opts.FSReplyTimeout}
	who := "berth's own user"
	if opts.User != nil {
		so.RunFlags = append(so.RunFlags, opts.User.credentialFlag())
		so.FSFlags = append(so.FSFlags, opts.User.credentialFlag())
		who = fmt.Sprintf("%s (uid %d)", opts.User.Name, opts.User.Uid)
	}
	pids, mem := opts.limits()
	var cg *cgroup
	var limits string
	if pids > 0 || mem > 0 {
		err := errors.New("not used")
		if useCgroup {
			cg, err = newCgroup(pids, mem)
		}
		switch {
		case err == nil:
			for _, d := range cg.dirs {
				so.RunFlags = append(so.RunFlags, "--cgroup="+d)
			}
			limits = fmt.Sprintf("host processes run as %s, each sandbox in a control group of its own (%s): %s", who, strings.Join(cg.dirs, " and "), limitWords(pids, mem))
		case opts.User != nil && pids > 0:
			so.RunFlags = append(so.RunFlags, fmt.Sprintf("--nproc=%d", pids))
			limits = fmt.Sprintf("host processes run as %s with at most %d processes of that user in all (RLIMIT_NPROC) and no memory limit: no control group (%v)", who, pids, err)
		default:
			limits = fmt.Sprintf("host processes run as %s with no process or memory limit: no control group (%v), and RLIMIT_NPROC only applies with a host user", who, err)
		}
		if cg == nil && opts.Logger != nil {
			opts.Logger.Warn("host sandbox limits not fully applied", "limits", limits)
		}
	} else {
		limits = fmt.Sprintf("host processes run as %s with no process or memory limit (PidsMax and MemoryMax negative)", who)
	}
	return &Sandbox{
		Sandbox: shim.New(t, so),
		user:    opts.User,
		cg:      cg,
		limits:  limits,
		limited: cg != nil || (pids == 0 && mem == 0),
	}
}

// limitWords describes pids.max and the memory limit.
func limitWords(pids int, mem int64) string {
	p, m := "no process limit", "no memory limit"
	if pids > 0 {
		p = fmt.Sprintf("at most %d processes", pids)
	}
	if mem > 0 {
		m = fmt.Sprintf("at most %d MiB of memory", mem>>20)
	}
	return p + ", " + m
}

// Limits says which limits the sandbox's processes run with, and which
// could not be applied and why.
func (s *Sandbox) Limits() string { return s.limits }

// FullyLimited reports whether every configured limit applies (a control
// group holds the sandbox's processes, or no limit was asked for).
func (s *Sandbox) FullyLimited() bool { return s.limited }

// Ref returns "host".
func (s *Sandbox) Ref() string { return "host" }

// Check reports nil: the host is always there.
func (s *Sandbox) Check(ctx context.Context) error { return nil }

// Start starts cmd under the agent. cmd.User must be empty or the user
// processes run as: Options.User, else the user berth runs as.
func (s *Sandbox) Start(ctx context.Context, cmd *sandbox.Cmd) (sandbox.Process, error) {
	if err := checkUser(cmd.User, s.user); err != nil {
		return nil, err
	}
	c := *cmd
	c.User = ""
	return s.Sandbox.Start(ctx, &c)
}

// checkUser accepts only the user processes run as (hu, else the current
// user), by name, uid or uid:gid.
func checkUser(u string, hu *User) error {
	if u == "" {
		return nil
	}
	if hu != nil {
		uid, gid := fmt.Sprint(hu.Uid), fmt.Sprint(hu.Gid)
		switch u {
		case hu.Name, uid, uid + ":" + gid:
			return nil
		}
		return fmt.Errorf("host: cannot run as user %q: this host sandbox runs processes only as its host user %q (uid %s); leave Cmd.User empty: %w", u, hu.Name, uid, sandbox.ErrUnsupported)
	}
	cur, err := user.Current()
	if err != nil {
		return fmt.Errorf("host: cannot run as user %q: look up the current user: %w", u, err)
	}
	switch u {
	case cur.Username, cur.Uid, cur.Uid + ":" + cur.Gid:
		return nil
	}
	return fmt.Errorf("host: cannot run as user %q: the host backend runs processes only as berth's own user %q (uid %s); leave Cmd.User empty: %w", u, cur.Username, cur.Uid, sandbox.ErrUnsupported)
}

// FS returns the host directory root, which must be absolute. Without a
// host user berth serves it itself (dirfs), and watches it through the
// agent; with one, the agent's file server does, running as that user, so that the kernel checks every
// read and write as the host user's and new files are the host user's.
func (s *Sandbox) FS(ctx context.Context, root string) (sandbox.FS, error) {
	if s.user != nil {
		return s.Sandbox.FS(ctx, root)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("host: sandbox is closed; open it again")
	}
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("host: fs %q: the root must be an absolute path", root)
	}
	d, err := dirfs.New(root)
	if err != nil {
		return nil, err
	}
	f := &localFS{FS: d, s: s}
	s.fss = append(s.fss, f)
	return f, nil
}

// Dial connects to a loopback tcp address or a unix socket on the host.
// ctx bounds only the dial.
func (s *Sandbox) Dial(ctx context.Context, network, address string) (sandbox.Conn, error) {
	if err := shim.CheckDialAddress(network, address); err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("host: dial %s %s: %w", network, address, err)
	}
	sc, ok := c.(sandbox.Conn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("host: dial %s %s: connection cannot half-close: %w", network, address, sandbox.ErrUnsupported)
	}
	return sc, nil
}

// Close kills every process started through s that still runs.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	s.closed = true
	fss := s.fss
	s.fss = nil
	cg := s.cg
	s.cg = nil
	s.mu.Unlock()
	err := s.Sandbox.Close()
	for _, c := range fss {
		c.Close()
	}
	switch {
	case cg != nil && s.Sandbox.KeptResidents():
		// A resident supervisor let go of, not closed, runs its programs
		// in this group for the next berth: the group stays with them (it
		// is left empty once the resident ends them).
	case cg != nil:
		// The agents killed their trees; the group's own kill catches what
		// escaped them.
		err = errors.Join(err, cg.close())
	}
	return err
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Provider serves the "host" reference.
type Provider struct {
	// Options configure the sandbox Open returns.
	Options Options
}

// Scheme returns "host".
func (p *Provider) Scheme() string { return "host" }

// Open returns a new host sandbox for ref "" (or "host"); the caller closes
// it.
func (p *Provider) Open(ctx context.Context, ref string) (sandbox.Sandbox, error) {
	if ref != "" && ref != "host" {
		return nil, fmt.Errorf("host: open %q: the host sandbox has no name; use the reference \"host\": %w", ref, sandbox.ErrNotFound)
	}
	return New(p.Options), nil
}

// Locate always fails: conversations have no host sandbox of their own.
func (p *Provider) Locate(ctx context.Context, owner sandbox.Owner) (string, error) {
	return "", fmt.Errorf("host: locate conversation %q: the host is not labelled per conversation: %w", owner.Conversation, sandbox.ErrNotFound)
}

var _ sandbox.Provider = (*Provider)(nil)

// transport runs the agent on this machine with os/exec.
type transport struct {
	env []string // the agent's whole environment, before ExecSpec.Env
}

// Arch is berth's own architecture: the agent runs on this machine.
func (t *transport) Arch(ctx context.Context) (string, error) { return runtime.GOARCH, nil }

var _ shim.Archer = (*transport)(nil)

func (t *transport) Place(ctx context.Context, bin *shim.Binary) (string, error) {
	return bin.Path, nil
}

func (t *transport) Exec(ctx context.Context, spec shim.ExecSpec) (shim.Stream, error) {
	if spec.User != "" {
		// Sandbox.Start clears Cmd.User; the host user goes to the
		// agent as --user.
		return nil, fmt.Errorf("host: exec as user %q: the host transport runs the agent as berth's user; set Options.User instead: %w", spec.User, sandbox.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := exec.Command(spec.Args[0], spec.Args[1:]...)
	cmd.Env = append(append([]string(nil), t.env...), spec.Env...)
	cmd.Dir = spec.Dir
	// Its own process group: a terminal's Ctrl-C reaches berth, which then
	// closes the agent's stdin, and the agent ends its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("host: exec: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("host: exec: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("host: exec: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		if spec.Dir != "" {
			if _, serr := os.Stat(spec.Dir); serr != nil {
				return nil, fmt.Errorf("host: working directory %s: %w", spec.Dir, serr)
			}
		}
		return nil, fmt.Errorf("host: exec %s: %w", spec.Args[0], err)
	}
	st := &stream{cmd: cmd, in: inW, out: outR, err: errR}
	// os.Pipe's ends are non-blocking: the agent's stdin and stdout take
	// raw system calls (see agent.RawFile).
	if raw := agent.NewRawFile(inW, "agent stdin"); raw != nil {
		st.stdin = rawStdin{raw, inW}
	} else {
		st.stdin = inW
	}
	if raw := agent.NewRawFile(outR, "agent stdout"); raw != nil {
		st.stdout = raw
	} else {
		st.stdout = outR
	}
	return st, nil
}

// stream is the agent's stdio on this machine.
type stream struct {
	cmd       *exec.Cmd
	in        *os.File
	out, err  *os.File
	stdin     io.WriteCloser
	stdout    io.Reader
	closeOnce sync.Once
}

func (s *stream) Stdin() io.WriteCloser { return s.stdin }
func (s *stream) Stdout() io.Reader     { return s.stdout }
func (s *stream) Stderr() io.Reader     { return s.err }

// rawStdin writes with raw system calls and closes the file.
type rawStdin struct {
	*agent.RawFile
	f *os.File
}

func (w rawStdin) Close() error { return w.f.Close() }

func (s *stream) Wait() (int, error) {
	err := s.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, fmt.Errorf("host: agent: %w", err)
	}
	return 0, nil
}

// Kill kills the agent at once, also a stopped one.
func (s *stream) Kill() error { return s.cmd.Process.Kill() }

func (s *stream) Close() error {
	s.closeOnce.Do(func() {
		s.in.Close()
		s.out.Close()
		s.err.Close()
	})
	return nil
}
