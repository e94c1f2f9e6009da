package shim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
)

// Transport is the one capability a container backend must provide: run a
// program inside the sandbox with raw stdio streams (docker exec, containerd
// task.Exec, pod exec). Everything else — process groups, signals, exact exit
// status, files, Dial — is done by the agent (berth-shim) through it.
type Transport interface {
	// Exec starts spec.Args inside the sandbox and returns its raw streams.
	// ctx bounds only the start. Errors wrap sandbox.ErrGone when the
	// sandbox stopped or vanished.
	Exec(ctx context.Context, spec ExecSpec) (Stream, error)

	// Place makes the agent binary available inside the sandbox (copying it
	// in when it is not there yet) and returns its absolute path there.
	// Errors wrap sandbox.ErrGone when the sandbox stopped or vanished, and
	// sandbox.ErrUnsupported when no writable location exists.
	Place(ctx context.Context, bin *Binary) (string, error)
}

// ExecSpec is a program to run through a [Transport].
type ExecSpec struct {
	Args []string // Args[0] is an absolute path or looked up in PATH
	Env  []string // KEY=VALUE added to the sandbox's environment
	Dir  string   // working directory; empty for the sandbox's default
	User string   // user; empty for the sandbox's default
}

// Stream is a running program's raw stdio. The caller must drain Stdout and
// Stderr concurrently; Wait returns after both reached EOF. Stderr must be
// readable before anything reads Stdout (the agent greets on stderr).
type Stream interface {
	// Stdin is the program's standard input. Close half-closes it: the
	// program reads EOF.
	Stdin() io.WriteCloser
	// Stdout and Stderr are the program's outputs, EOF when it ended.
	Stdout() io.Reader
	Stderr() io.Reader
	// Wait waits for the program to end and returns its exit code. Errors
	// wrap sandbox.ErrGone when the sandbox went away.
	Wait() (int, error)
	// Close tears the stream down at once, unblocking readers and writers.
	// It does not wait for the program.
	Close() error
}

// Killer is a [Stream] that can kill its program at once, also a stopped
// one (the host transport's, a local process). A file server that stopped
// answering is killed through it when the stream has it, and through the
// agent's kill-fs mode in the sandbox otherwise.
type Killer interface {
	Kill() error
}

// Binary is the agent executable for the sandbox's platform, found or built
// on this machine by [Locate].
type Binary struct {
	Path string // absolute path on the machine berth runs on
	Hash string // hex SHA-256 of the file; names the copy placed in a sandbox
	Arch string // GOARCH it runs on ("amd64", "arm64"), from its ELF header
}

// Archer is a [Transport] that knows its sandbox's architecture without
// running anything in it (Docker: the container's image; the host: berth's
// own). [Sandbox] asks it to choose the agent; a transport without it is
// asked with `uname -m` through Exec.
type Archer interface {
	// Arch returns the sandbox's architecture as a GOARCH name ("amd64",
	// "arm64"). ctx bounds the lookup.
	Arch(ctx context.Context) (string, error)
}

// Verified reads the binary and checks it against Hash, for a transport's
// Place: a file that changed after Locate is refused. It returns the
// content and its SHA-256.
func (b *Binary) Verified() ([]byte, [sha256.Size]byte, error) {
	data, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("read %s: %w", b.Path, err)
	}
	sum := sha256.Sum256(data)
	if !strings.EqualFold(hex.EncodeToString(sum[:]), b.Hash) {
		return nil, sum, fmt.Errorf("%s does not match its hash %s; it changed after shim.Locate, locate it again", b.Path, b.Hash)
	}
	return data, sum, nil
}
