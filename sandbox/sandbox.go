// Package sandbox is the contract between berth's tools and the places where
// processes run and files live: the host, a Docker container, a containerd
// task or a Kubernetes pod. It holds interfaces and error classes only; each
// backend lives in its own package (sandbox/host, sandbox/docker, …) and
// sandbox/sandboxtest is the conformance suite every backend passes.
//
// The shape follows os/exec and io/fs: a [Cmd] with caller-supplied streams,
// a [Process] whose Wait means "exited and every byte of output delivered",
// and an [FS] confined to one directory of the sandbox.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"syscall"
	"time"
)

// Sandbox is one conversation's execution environment. It is safe for
// concurrent use. A Sandbox never creates, starts, restarts or removes a
// container: it only uses one that exists.
type Sandbox interface {
	// Ref is the resolved reference of this sandbox: "host",
	// "docker://<full id>", "containerd://NS/ID", "kube://NS/POD/CONTAINER".
	Ref() string

	// Start starts cmd and returns at once. ctx bounds the process lifetime:
	// when ctx is done the process group gets SIGTERM, then SIGKILL after
	// cmd.WaitDelay (DefaultWaitDelay when zero). Every process runs in its own
	// process group under the sandbox's supervisor, so when the process ends,
	// is killed, or berth itself goes away, nothing it started survives.
	Start(ctx context.Context, cmd *Cmd) (Process, error)

	// FS returns the file system rooted at root, an absolute directory path
	// inside the sandbox (for example the workspace). No name given to the
	// returned FS can reach outside root, through "..", an absolute path or a
	// symbolic link. The FS stays usable until the Sandbox is closed.
	FS(ctx context.Context, root string) (FS, error)

	// Dial opens a byte stream to an address inside the sandbox: network
	// "tcp" with a loopback host:port, or "unix" with a socket path. The
	// stream is tunnelled through the sandbox's supervisor, so nothing needs
	// to listen where another container could reach it. The caller closes
	// the returned Conn. ctx bounds only the dial, not the stream.
	Dial(ctx context.Context, network, address string) (Conn, error)

	// Check reports whether the sandbox is still usable. It returns an error
	// wrapping [ErrGone] when the container stopped or vanished.
	Check(ctx context.Context) error

	// Close releases the clients and streams berth holds for this sandbox
	// and kills every process it started that is still running. It does not
	// stop or remove the container.
	Close() error
}

// DefaultWaitDelay is the time between SIGTERM and SIGKILL when a process's
// context is done, and how long Wait keeps collecting output of a process
// whose descendants still hold its stdout or stderr after it exited.
const DefaultWaitDelay = 2 * time.Second

// Cmd describes a process to start in a sandbox.
type Cmd struct {
	// Args is the program and its arguments. Args[0] is looked up in the
	// sandbox's PATH when it contains no slash.
	Args []string
	// Env holds KEY=VALUE entries added to the sandbox's base environment
	// (the container's configured environment, or the host backend's).
	Env []string
	// Dir is the working directory inside the sandbox; empty means the
	// sandbox's default (the container's working directory).
	Dir string
	// User runs the process as this user ("name", "uid" or "uid:gid") where
	// the backend supports it; empty means the sandbox's default user.
	User string

	// Stdin, Stdout and Stderr are owned by the caller, as in os/exec. A nil
	// Stdin is an empty input; EOF on Stdin closes the process's stdin. A nil
	// Stdout or Stderr discards that stream. Stdout and Stderr are never
	// written to after Wait returns.
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// WaitDelay overrides DefaultWaitDelay for this process.
	WaitDelay time.Duration

	// Remove lists absolute paths in the sandbox (a private directory,
	// files holding a key) that go when the process ends, whoever ends
	// it: removed by the process's supervisor in the sandbox also when
	// berth is not there (a resident's grace, a killed resident). Only a
	// path owned by the user the process runs as (or the supervisor's),
	// and not a symbolic link, is removed. Sandboxes that run processes
	// under berth-shim honour it; others leave the paths to the caller.
	Remove []string
}

// Process is a started process.
type Process interface {
	// Pid is the process id as the sandbox sees it (inside the container's
	// PID namespace), or 0 when the backend cannot tell.
	Pid() int

	// Wait waits until the process exited and all of its output was written
	// to Cmd.Stdout and Cmd.Stderr. A non-zero exit is an ExitStatus, not an
	// error; err is set only when the status cannot be known (the sandbox
	// went away, the stream broke). Wait may be called from several
	// goroutines and always returns the same result.
	Wait() (ExitStatus, error)

	// Signal sends sig to the process group. ctx bounds the delivery.
	// Signalling a process that already exited is not an error.
	Signal(ctx context.Context, sig syscall.Signal) error
}

// ExitStatus is how a process ended: with a code, or killed by a signal.
type ExitStatus struct {
	Code   int            // exit code; -1 when killed by a signal
	Signal syscall.Signal // the signal that killed it, or 0
}

// Success reports whether the process exited with code 0.
func (s ExitStatus) Success() bool { return s.Code == 0 && s.Signal == 0 }

func (s ExitStatus) String() string {
	if s.Signal != 0 {
		return "killed by signal " + s.Signal.String()
	}
	return fmt.Sprintf("exit status %d", s.Code)
}

// Conn is a byte stream into the sandbox, as returned by [Sandbox.Dial].
// CloseWrite half-closes the stream: the peer reads EOF while the caller can
// still read the rest of the peer's output.
type Conn interface {
	net.Conn
	CloseWrite() error
}

// FS is a file system confined to one directory of a sandbox. Names are
// slash-separated paths relative to that directory and must satisfy
// [fs.ValidPath] ("." is the root itself); anything else fails with
// [ErrEscape]. Errors are *fs.PathError wrapping [fs.ErrNotExist],
// [fs.ErrPermission], [fs.ErrExist], [ErrEscape], [ErrTooLarge] or [ErrGone].
// Every method may block on the sandbox; ctx bounds it.
//
// An FS of the backends is also an [io.Closer]: Close releases what serves
// it (a file-server process in a container, a directory handle) at once,
// for an owner done with it before the sandbox closes (a kernel's private
// directory); calls after Close fail. The sandbox's Close closes every FS
// still open.
type FS interface {
	// Root is the absolute path of the FS's directory inside the sandbox.
	Root() string

	// ReadFile returns the contents of a regular file. Files larger than
	// MaxFileSize fail with ErrTooLarge.
	ReadFile(ctx context.Context, name string) ([]byte, error)

	// Stat returns the file's information, following a final symbolic link
	// only when its target stays inside the root.
	Stat(ctx context.Context, name string) (fs.FileInfo, error)

	// Lstat returns the file's information without following a final
	// symbolic link.
	Lstat(ctx context.Context, name string) (fs.FileInfo, error)

	// ReadDir lists a directory, sorted by name.
	ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error)

	// Walk calls fn for dir and every file and directory below it, in lexical
	// order, with names relative to the FS root. Symbolic links are reported,
	// not followed. Directories whose base name is in opts.SkipDirs are
	// reported but not entered; fn returning fs.SkipDir skips a directory,
	// fs.SkipAll ends the walk, any other error ends it with that error.
	Walk(ctx context.Context, dir string, opts WalkOptions, fn WalkFunc) error

	// WriteFile replaces or creates a regular file atomically: the data goes
	// to a temporary file in the same directory, which is renamed over the
	// target. An existing file keeps its mode and owner; a new file gets
	// perm (before the sandbox's umask) and the writing user as owner. A
	// final symbolic link is replaced, never followed.
	WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error

	// MkdirAll creates a directory and any missing parents.
	MkdirAll(ctx context.Context, name string, perm fs.FileMode) error

	// Remove removes a file or an empty directory. A symbolic link is
	// removed itself, not its target.
	Remove(ctx context.Context, name string) error

	// Rename moves oldname to newname, replacing newname if it is a file.
	Rename(ctx context.Context, oldname, newname string) error
}

// BufferReader is implemented by an FS that can read a file into memory the
// caller reuses, such as a search that reads thousands of files and keeps
// none of them.
type BufferReader interface {
	// ReadFileBuffer is ReadFile reading into buf's storage when the file
	// fits in cap(buf); the result is only valid until buf is reused.
	ReadFileBuffer(ctx context.Context, name string, buf []byte) ([]byte, error)
}

// WalkOptions tune [FS.Walk].
type WalkOptions struct {
	// SkipDirs are base names of directories that are reported but not
	// entered, such as ".git" or "node_modules".
	SkipDirs []string
}

// WalkFunc is called by [FS.Walk] for each entry. info describes the entry
// itself (a symbolic link is not followed).
type WalkFunc func(name string, info fs.FileInfo) error

// WatchOptions configure Watcher.Watch.
type WatchOptions struct {
	// SkipDirs are directory base names not watched (nor reported), as WalkOptions.SkipDirs.
	SkipDirs []string
}

// WatchEvent is one batch of what changed under a watched directory.
type WatchEvent struct {
	// Paths changed, were created, deleted or moved (either end), relative to the FS root, slash-separated, each once per batch, sorted.
	Paths []string
	// Overflow: changes were lost (the kernel's queue or the agent's bound overflowed); the consumer must rescan (walk) everything it cares about. Paths may be empty.
	Overflow bool
	// Synced, when non-zero, is the mark of a Sync (see Watch.Sync): every change made before that Sync was called was delivered in this event or an earlier one. An event may carry Paths, Overflow and Synced together; Paths and Overflow then belong before the mark. Several Syncs answered while the consumer was busy come as one event with the highest mark.
	Synced uint64
}

// Watch is a running watch. Events delivers batches until the watch ends; the channel is then closed and Err says why (nil after Close).
type Watch interface {
	Events() <-chan WatchEvent
	Err() error
	Close() error
	// Sync is a barrier: it asks for every change made before the call and returns a mark; Events delivers an event with Synced >= mark after (or with) every such change. Marks increase (1, 2, 3, ...) per watch. Sync returns at once (one request written; ctx bounds only that write), not when the mark is delivered: the consumer reads Events until Synced >= mark. It returns an error when the watch ended (Close, or Err is set). A consumer that must see every change made before a query (a shell command that just returned) calls Sync and reads Events up to the mark before answering.
	Sync(ctx context.Context) (uint64, error)
}

// Watcher is an FS that can watch its files change. Watch returns once every directory under dir is watched (so a change made after it returns is reported), or an error wrapping ErrUnsupported when watching is not possible here (no inotify, the watch limit reached): the caller then walks.
type Watcher interface {
	Watch(ctx context.Context, dir string, opts WatchOptions) (Watch, error)
}

// MaxFileSize is the largest file [FS.ReadFile] returns.
const MaxFileSize = 64 << 20

// Error classes. Test them with errors.Is.
var (
	// ErrGone means the sandbox's container stopped, was paused or removed, or
	// its engine cannot be reached. Calls fail fast with it; nothing retries.
	ErrGone = errors.New("sandbox is gone")
	// ErrUnavailable marks an ErrGone that may pass: the container is
	// paused, or its engine does not answer. Such errors wrap both, so that
	// whatever is under way stops at once as for a gone sandbox, while the
	// owner of the sandbox keeps it and asks Check again later: a Check
	// that passes means the sandbox, and what still runs in it, can be
	// used as before. A container that stopped, restarted or was removed
	// is ErrGone alone.
	ErrUnavailable = errors.New("sandbox is unavailable for now")
	// ErrNotFound means no sandbox matches a reference or a conversation id.
	ErrNotFound = errors.New("sandbox not found")
	// ErrEscape means a name leaves the FS root: "..", an absolute path, or a
	// symbolic link whose target lies outside.
	ErrEscape = errors.New("path escapes the root")
	// ErrTooLarge means a file exceeds MaxFileSize.
	ErrTooLarge = errors.New("file too large")
	// ErrUnsupported means the backend cannot do this at all.
	ErrUnsupported = errors.ErrUnsupported
)

// Provider opens sandboxes of one backend ("host", "docker", …). Only cmd/
// constructs providers; the controller sees this interface.
type Provider interface {
	// Scheme is the reference scheme this provider serves: "docker" for
	// "docker://…", "host" for "host".
	Scheme() string

	// Open opens the sandbox named by ref, the part after "scheme://" (empty
	// for the host). It fails with ErrNotFound when no such sandbox exists
	// and ErrGone when it exists but is not running.
	Open(ctx context.Context, ref string) (Sandbox, error)

	// Locate finds the one running sandbox labelled with owner (its
	// conversation, and its tenant when owner.Tenant is set; see [Owner])
	// and returns its ref (the part after "scheme://"). A sandbox that
	// carries the conversation but not the tenant is not a candidate. It
	// fails with ErrNotFound when none matches, and with an error naming
	// all candidates when several do.
	Locate(ctx context.Context, owner Owner) (string, error)
}

// Pipe starts cmd with its stdin and stdout connected to the returned
// stream, for protocols spoken over a process's stdio (LSP, DAP). cmd.Stdin
// and cmd.Stdout must be nil; cmd.Stderr is left as given. Close closes the
// process's stdin, waits up to the process's WaitDelay for it to exit, then
// sends SIGTERM and, after another WaitDelay, SIGKILL.
func Pipe(ctx context.Context, sb Sandbox, cmd *Cmd) (*PipeStream, error) {
	if cmd.Stdin != nil || cmd.Stdout != nil {
		return nil, errors.New("sandbox: Pipe: cmd.Stdin and cmd.Stdout must be nil")
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	in := &pipeInput{PipeReader: inR}
	out := &pipeOutput{PipeWriter: outW}
	c := *cmd
	c.Stdin, c.Stdout = in, out
	p, err := sb.Start(ctx, &c)
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	ps := &PipeStream{proc: p, in: inW, out: outR, delay: c.WaitDelay, done: make(chan struct{})}
	if in.direct != nil {
		ps.in = in.direct
	}
	if out.direct != nil {
		ps.out = out.direct
	}
	if ps.delay <= 0 {
		ps.delay = DefaultWaitDelay
	}
	go func() {
		ps.status, ps.err = p.Wait()
		outW.Close()
		inR.Close()
		close(ps.done)
	}()
	return ps, nil
}

// DirectStdin is implemented by the Cmd.Stdin that [Pipe] passes to
// [Sandbox.Start]. A backend that can write a process's stdin from the
// writer's own goroutine may call SetStdin, before Start returns, with a
// writer for that stdin, and then must not read Stdin: [PipeStream.Write]
// then writes to w directly, saving a goroutine handoff on every write.
// w's Write must honour the backend's flow control and fail with
// [io.ErrClosedPipe] once the process exited or w was closed; w's Close
// closes the process's stdin (after the data of every returned Write) and
// must not block. Backends that do not call SetStdin read Stdin as for any
// Cmd.
type DirectStdin interface {
	io.Reader
	SetStdin(w io.WriteCloser)
}

// DirectStdout is implemented by the Cmd.Stdout that [Pipe] passes to
// [Sandbox.Start]. A backend that can deliver a process's stdout to the
// reader's own goroutine may call SetStdout, before Start returns, with a
// reader of that stdout, and then must not write to Stdout:
// [PipeStream.Read] then reads from r directly, saving a goroutine handoff
// on every read. r's Read returns io.EOF after the last output, once the
// process ended and Process.Wait returns; the backend must deliver the
// exit status (and Cmd.Stderr) also while nobody reads, except that, as
// with a pipe, output nobody reads may hold back what comes after it. r's
// Close makes Reads fail with [io.ErrClosedPipe], drops further output,
// and unblocks a Read waiting on a sandbox that stopped answering.
type DirectStdout interface {
	io.Writer
	SetStdout(r io.ReadCloser)
}

// pipeInput is the Cmd.Stdin of a Pipe.
type pipeInput struct {
	*io.PipeReader
	direct io.WriteCloser // set by the backend in Start
}

func (in *pipeInput) SetStdin(w io.WriteCloser) { in.direct = w }

// pipeOutput is the Cmd.Stdout of a Pipe.
type pipeOutput struct {
	*io.PipeWriter
	direct io.ReadCloser // set by the backend in Start
}

func (out *pipeOutput) SetStdout(r io.ReadCloser) { out.direct = r }

var (
	_ DirectStdin  = (*pipeInput)(nil)
	_ DirectStdout = (*pipeOutput)(nil)
)

// PipeStream is a process's stdio as one stream; see [Pipe].
type PipeStream struct {
	proc   Process
	in     io.WriteCloser // the io.Pipe to Cmd.Stdin, or the backend's DirectStdin writer
	out    io.ReadCloser  // the io.Pipe from Cmd.Stdout, or the backend's DirectStdout reader
	delay  time.Duration
	done   chan struct{}
	status ExitStatus
	err    error
}

// Read reads the process's stdout. It returns io.EOF once the process
// exited and its output was read; Done is closed by then.
func (s *PipeStream) Read(p []byte) (int, error) {
	n, err := s.out.Read(p)
	if err == io.EOF {
		<-s.done
	}
	return n, err
}

// Write writes to the process's stdin. It blocks while the process does
// not read, and fails with io.ErrClosedPipe after Close or once the
// process exited.
func (s *PipeStream) Write(p []byte) (int, error) { return s.in.Write(p) }

// Process returns the underlying process.
func (s *PipeStream) Process() Process { return s.proc }

// Done is closed when the process has exited and its output was delivered.
func (s *PipeStream) Done() <-chan struct{} { return s.done }

// Close ends the process as described at [Pipe] and returns its exit status.
func (s *PipeStream) Close() error {
	s.in.Close()
	escalate := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for {
		select {
		case <-s.done:
			s.out.Close()
			return s.err
		case <-time.After(s.delay):
		}
		if len(escalate) == 0 {
			// SIGKILL was sent and the process still has not been reported
			// as exited: the sandbox stopped answering.
			s.out.Close()
			return fmt.Errorf("sandbox: process %d did not exit after SIGKILL: %w", s.proc.Pid(), ErrGone)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.delay)
		s.proc.Signal(ctx, escalate[0])
		cancel()
		escalate = escalate[1:]
	}
}

// ExitStatus returns the status once [PipeStream.Done] is closed.
func (s *PipeStream) ExitStatus() (ExitStatus, error) {
	<-s.done
	return s.status, s.err
}
