// Package host is the sandbox backend for the machine berth runs on. Its
// processes run under the same agent (berth-shim) as in containers, so they
// get their own process group and die when berth goes away; its files are
// served by [berth.dev/berth/sandbox/dirfs] directly.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sync"
	"syscall"

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
	// PidsMax bounds the processes of User: RLIMIT_NPROC, which counts
	// every process of that user on the machine. Zero means
	// DefaultPidsMax, negative means no limit. Without User no process
	// limit is applied (RLIMIT_NPROC of berth's own user would count
	// berth and everything else that user runs).
	PidsMax int
	// Binary is the agent; nil means shim.Locate.
	Binary *shim.Binary
}

// pidsMax is the RLIMIT_NPROC o applies, zero for none.
func (o Options) pidsMax() int {
	switch {
	case o.User == nil || o.PidsMax < 0:
		return 0
	case o.PidsMax == 0:
		return DefaultPidsMax
	}
	return o.PidsMax
}

// Limits says in one line which limits processes started with o get, and
// which could not be applied, for a log line at start.
func (o Options) Limits() string {
	mem := "memory is not limited (berth sets no memory limit on host processes)"
	if n := o.pidsMax(); n > 0 {
		return fmt.Sprintf("host processes run as %s (uid %d), at most %d processes of that user in all (RLIMIT_NPROC); %s", o.User.Name, o.User.Uid, n, mem)
	}
	if o.User != nil {
		return fmt.Sprintf("host processes run as %s (uid %d) with no process limit (PidsMax < 0); %s", o.User.Name, o.User.Uid, mem)
	}
	return "host processes run as berth's own user with no process limit (set a host user to limit them); " + mem
}

// Sandbox is the host. It is safe for concurrent use.
type Sandbox struct {
	*shim.Sandbox

	user   *User
	mu     sync.Mutex
	closed bool
	fss    []io.Closer
}

// New returns the host sandbox.
func New(opts Options) *Sandbox {
	env := append(BaseEnv(opts.User), opts.Env...)
	t := &transport{env: env}
	so := shim.Options{Name: "host", Binary: opts.Binary}
	if opts.User != nil {
		so.RunFlags = append(so.RunFlags, opts.User.credentialFlag())
		so.FSFlags = append(so.FSFlags, opts.User.credentialFlag())
	}
	if n := opts.pidsMax(); n > 0 {
		so.RunFlags = append(so.RunFlags, fmt.Sprintf("--nproc=%d", n))
	}
	return &Sandbox{
		Sandbox: shim.New(t, so),
		user:    opts.User,
	}
}

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
// host user berth serves it itself (dirfs); with one, the agent's file
// server does, running as that user, so that the kernel checks every
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
	f, err := dirfs.New(root)
	if err != nil {
		return nil, err
	}
	if c, ok := f.(io.Closer); ok {
		s.fss = append(s.fss, c)
	}
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
	s.mu.Unlock()
	err := s.Sandbox.Close()
	for _, c := range fss {
		c.Close()
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
func (p *Provider) Locate(ctx context.Context, conversationID string) (string, error) {
	return "", fmt.Errorf("host: locate conversation %q: the host is not labelled per conversation: %w", conversationID, sandbox.ErrNotFound)
}

var _ sandbox.Provider = (*Provider)(nil)

// transport runs the agent on this machine with os/exec.
type transport struct {
	env []string // the agent's whole environment, before ExecSpec.Env
}

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

func (s *stream) Close() error {
	s.closeOnce.Do(func() {
		s.in.Close()
		s.out.Close()
		s.err.Close()
	})
	return nil
}
