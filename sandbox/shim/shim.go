package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/sandbox"
)

// Options configure a [Sandbox].
type Options struct {
	// Name labels error messages, for example "docker://3f2a…"; empty
	// means "sandbox".
	Name string
	// Binary is the agent executable to place; nil means [Locate].
	Binary *Binary
	// FSUser runs the file server of [Sandbox.FS] as this user, so written
	// files get that user as owner; empty means the sandbox's default user.
	FSUser string
	// MaxFSSessions bounds how many file-server processes run at once for
	// one FS; zero means 4.
	MaxFSSessions int
	// FSReplyTimeout bounds how long a file server may send nothing while
	// berth waits for it: between two frames of a reply (so a large read
	// that keeps coming never times out), and for each frame of a request
	// to be taken. A server silent for longer is given up: the call fails
	// with an error wrapping [ErrNoReply] that says to retry, the server
	// is killed in the background, and the next call starts a new one.
	// Zero (or negative) means [DefaultFSReplyTimeout].
	FSReplyTimeout time.Duration
	// RunFlags are added to the agent's "run" mode for every process, for
	// example "--user=UID:GID" and "--nproc=N" (see package agent).
	RunFlags []string
	// FSFlags are added to the agent's "fs" mode, for example
	// "--user=UID:GID" for a file server that drops to that user.
	FSFlags []string
}

// Sandbox runs processes, serves files and relays Dial streams inside a
// sandbox through the agent (berth-shim), using only a [Transport]. Backends
// embed it and add Ref, Check and their own Close. It is safe for
// concurrent use.
type Sandbox struct {
	t    Transport
	opts Options

	placeMu sync.Mutex
	placed  string // agent path inside the sandbox, once placed

	mu     sync.Mutex
	closed bool
	procs  map[*process]struct{}
	fss    map[*fsys]struct{}
	conns  map[*conn]struct{}
	// residents are held residents, detached (not closed) by Close.
	residents map[*resident]struct{}
	// kept is set when a resident was detached (by its Detach or by
	// Close) rather than closed: its processes run on.
	kept bool
}

// New returns a Sandbox that reaches its sandbox through t. The agent is
// placed on first use.
func New(t Transport, opts Options) *Sandbox {
	if opts.Name == "" {
		opts.Name = "sandbox"
	}
	if opts.MaxFSSessions <= 0 {
		opts.MaxFSSessions = 4
	}
	if opts.FSReplyTimeout <= 0 {
		opts.FSReplyTimeout = DefaultFSReplyTimeout
	}
	return &Sandbox{
		t:     t,
		opts:  opts,
		procs: make(map[*process]struct{}),
		fss:   make(map[*fsys]struct{}),
		conns: make(map[*conn]struct{}),

		residents: make(map[*resident]struct{}),
	}
}

// DefaultFSReplyTimeout is the FSReplyTimeout of [Options] left zero: long
// enough for a slow disk or a large directory walk between two frames, short
// enough that a stopped or hung file server does not hold a tool call for
// good.
const DefaultFSReplyTimeout = 30 * time.Second

// errClosed is returned by calls on a closed Sandbox.
var errClosed = errors.New("shim: sandbox is closed; open it again")

// AgentPath places the agent in the sandbox when it is not there yet and
// returns its path inside the sandbox. ctx bounds locating and placing.
func (s *Sandbox) AgentPath(ctx context.Context) (string, error) {
	s.placeMu.Lock()
	defer s.placeMu.Unlock()
	if s.placed != "" {
		return s.placed, nil
	}
	bin := s.opts.Binary
	if bin == nil {
		arch, err := s.arch(ctx)
		if err != nil {
			return "", err
		}
		if bin, err = Locate(ctx, arch); err != nil {
			return "", err
		}
	}
	p, err := s.t.Place(ctx, bin)
	if err != nil {
		return "", fmt.Errorf("shim: place the agent in %s: %w", s.opts.Name, err)
	}
	s.placed = p
	return p, nil
}

// archTimeout bounds asking a sandbox for its architecture.
const archTimeout = 30 * time.Second

// arch returns the sandbox's architecture (a GOARCH name): from the
// transport when it is an [Archer], else from `uname -m` run through it,
// else (no uname in the sandbox) berth's own.
func (s *Sandbox) arch(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, archTimeout)
	defer cancel()
	if a, ok := s.t.(Archer); ok {
		arch, err := a.Arch(ctx)
		if err != nil {
			return "", fmt.Errorf("shim: learn the architecture of %s to choose its agent: %w", s.opts.Name, err)
		}
		return arch, nil
	}
	out, _, code, err := RunExec(ctx, s.t, ExecSpec{Args: []string{"uname", "-m"}}, nil)
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("shim: learn the architecture of %s (uname -m) to choose its agent: %w", s.opts.Name, err)
	}
	if err != nil || code != 0 {
		return runtime.GOARCH, nil
	}
	return UnameArch(out), nil
}

// UnameArch maps the output of `uname -m` to a GOARCH name ("x86_64" →
// "amd64", "aarch64" → "arm64"); other machines come back as they are,
// which [Locate] refuses with the architectures berth supports.
func UnameArch(machine string) string {
	switch m := strings.TrimSpace(machine); m {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	default:
		return m
	}
}

// exec places the agent and runs it with args through the transport.
func (s *Sandbox) exec(ctx context.Context, spec ExecSpec, args ...string) (Stream, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	p, err := s.AgentPath(ctx)
	if err != nil {
		return nil, err
	}
	spec.Args = append([]string{p}, args...)
	st, err := s.t.Exec(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("shim: exec the agent in %s: %w", s.opts.Name, err)
	}
	return st, nil
}

func (s *Sandbox) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	return nil
}

// track registers a resource for Close; it fails once the sandbox closed.
func track[T comparable](s *Sandbox, m map[T]struct{}, v T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	m[v] = struct{}{}
	return nil
}

func untrack[T comparable](s *Sandbox, m map[T]struct{}, v T) {
	s.mu.Lock()
	delete(m, v)
	s.mu.Unlock()
}

// closeSlack is what Close allows a killed process beyond its wait delay:
// after SIGKILL the agent collects the group's output for at most one wait
// delay before it reports the exit.
const closeSlack = time.Second

// Close kills every process started through s that is still running,
// closes every FS session and Dial stream, detaches every resident it
// holds (their processes run on, for a later berth to adopt; a run's own
// close calls Resident.Close), and makes later calls fail. It
// does not stop or remove the sandbox. It waits for the killed processes
// at most as long as the slowest of them may take (its wait delay and
// closeSlack), and not at all when none runs.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	procs := keys(s.procs)
	fss := keys(s.fss)
	conns := keys(s.conns)
	residents := keys(s.residents)
	s.mu.Unlock()

	for _, r := range residents {
		r.Detach()
	}

	var grace time.Duration
	for _, p := range procs {
		p.kill()
		grace = max(grace, p.delay+closeSlack)
	}
	// One deadline for all of them; once passed, it stays passed.
	wait, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-wait.Done():
		}
		// The agent kills the group and its descendants when its input
		// ends, so closing the stream finishes what SIGKILL began.
		p.stream.Close()
		<-p.done
	}
	for _, f := range fss {
		f.closeAll()
	}
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// KeptResidents reports whether a resident was let go of, not closed, and
// still runs,
// so that a backend keeps what their processes need (the host's control
// group) instead of ending it with the sandbox.
func (s *Sandbox) KeptResidents() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept
}

func keys[T comparable](m map[T]struct{}) []T {
	out := make([]T, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// tailBuffer keeps the last bytes written to it, for agent diagnostics.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 4 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailMax {
		b.buf = b.buf[len(b.buf)-tailMax:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// drain copies r into a tailBuffer until EOF and closes done.
func drain(r io.Reader, b *tailBuffer, done chan<- struct{}) {
	io.Copy(b, r)
	close(done)
}

var _ interface {
	Start(context.Context, *sandbox.Cmd) (sandbox.Process, error)
	FS(context.Context, string) (sandbox.FS, error)
	Dial(context.Context, string, string) (sandbox.Conn, error)
	Close() error
} = (*Sandbox)(nil)
