// Package files provides the workspace file tools: read (read level), and
// write, edit and apply_patch (write level). [Register] binds them to one
// run's workspace, a [sandbox.FS] rooted at the workspace directory.
//
// Paths from the model may be relative to the workspace or absolute under
// it; anything that leaves the workspace — an absolute path elsewhere, "..",
// a symbolic link pointing out — is a tool error and nothing is written.
// Every write-level result lists the files it changed in [tools.Result]'s
// Touched field.
package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

// Caps on what the tools return and accept.
const (
	// DefaultReadLines is how many lines read returns when no limit is given.
	DefaultReadLines = 2000
	// MaxReadChars bounds the text of one read result.
	MaxReadChars = 100_000
	// MaxLineChars bounds one line of a read result; longer lines are cut.
	MaxLineChars = 2000
	// MaxListEntries bounds the entries read lists for a directory.
	MaxListEntries = 1000
)

// Register adds read, write, edit and apply_patch to r, bound to the
// workspace ws; ws.Root() is the workspace's absolute path in the sandbox.
func Register(r *tools.Registry, ws sandbox.FS) {
	w := &workspace{fs: ws, root: path.Clean(ws.Root())}
	tools.Register(r, tools.Tool{Name: "read", Level: tools.LevelRead, Description: readDescription}, w.read)
	tools.Register(r, tools.Tool{Name: "write", Level: tools.LevelWrite, Description: writeDescription}, w.write)
	tools.Register(r, tools.Tool{Name: "edit", Level: tools.LevelWrite, Description: editDescription}, w.edit)
	tools.Register(r, tools.Tool{Name: "apply_patch", Level: tools.LevelWrite, Description: patchDescription}, w.applyPatch)
}

// workspace is one run's workspace as the tools see it.
type workspace struct {
	fs   sandbox.FS
	root string // absolute, cleaned
}

// toolError is a failure the model should act on; handlers turn it into a
// Result with IsError.
type toolError struct{ msg string }

func (e *toolError) Error() string { return e.msg }

func errorf(format string, args ...any) error { return &toolError{msg: fmt.Sprintf(format, args...)} }

// finish turns a handler's error into its return values: ctx's error stays a
// call error, everything else becomes a tool error for the model.
func finish(ctx context.Context, res *tools.Result, err error) (*tools.Result, error) {
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return nil, ctx.Err()
	}
	var te *toolError
	if errors.As(err, &te) {
		return tools.Errorf("%s", te.msg), nil
	}
	return tools.Errorf("%v", err), nil
}

// rel maps a path given by the model to a name of the workspace FS.
func (w *workspace) rel(p string) (string, error) {
	name, err := wspath.Name(w.root, p)
	return name, local(err)
}

// show is how a workspace name is written in results.
func show(name string) string { return wspath.Show(name) }

// fsError explains an error of the workspace FS for name to the model.
func (w *workspace) fsError(name string, err error) error {
	return local(wspath.Explain(w.root, name, err))
}

// local makes a workspace path error one of this package's tool errors.
func local(err error) error {
	var we *tools.Error
	if errors.As(err, &we) {
		return &toolError{msg: we.Msg}
	}
	return err
}

// isBinary reports whether data looks like a binary file.
func isBinary(data []byte) bool { return wspath.IsBinary(data) }

// singleLink refuses a file with more than one hard link (see
// [wspath.SingleLink]).
func singleLink(name string, fi fs.FileInfo, not string) error {
	return local(wspath.SingleLink(name, fi, not))
}

// readText reads the regular text file name for a tool that changes it
// (see [wspath.ReadText]).
func (w *workspace) readText(ctx context.Context, name string) ([]byte, fs.FileInfo, error) {
	data, fi, err := wspath.ReadText(ctx, w.fs, name)
	return data, fi, local(err)
}

// changeable refuses to replace anything but a regular file (see
// [wspath.Changeable]).
func (w *workspace) changeable(ctx context.Context, name string, fi fs.FileInfo) error {
	return local(wspath.Changeable(ctx, w.fs, name, fi))
}

// mkdirParents creates the missing parent directories of name and returns
// those it created, deepest last.
func (w *workspace) mkdirParents(ctx context.Context, name string) ([]string, error) {
	dirs, err := wspath.MkdirParents(ctx, w.fs, name)
	return dirs, local(err)
}

// plural returns "n word" or "n words".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	if strings.HasSuffix(word, "y") {
		return fmt.Sprintf("%d %sies", n, word[:len(word)-1])
	}
	return fmt.Sprintf("%d %ss", n, word)
}
