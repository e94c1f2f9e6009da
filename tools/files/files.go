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
	wspath "berth.dev/berth/tools/workspace"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"syscall"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
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
	// binarySniff is how many leading bytes are searched for a NUL byte to
	// tell a binary file from text, as git does.
	binarySniff = 8000
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
	var we *wspath.Error
	if errors.As(err, &we) {
		return &toolError{msg: we.Msg}
	}
	return err
}

// isBinary reports whether data looks like a binary file.
func isBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0
}

// hardLinks returns the link count of fi, or 1 when the FS cannot tell.
func hardLinks(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// singleLink refuses a file with more than one hard link: another name for
// it may lie outside the workspace, where the tools must not reach. not
// says what the tool does not do with it ("changed in place", "read").
func singleLink(name string, fi fs.FileInfo, not string) error {
	if n := hardLinks(fi); n > 1 {
		return errorf("%s has %d hard links, which may reach outside the workspace, so it is not %s: copy it first (cp %s %s.tmp && mv %s.tmp %s) and retry", name, n, not, name, name, name, name)
	}
	return nil
}

// readText reads the regular text file name for a tool that changes it:
// missing files, symbolic links, non-regular files, binary files and files
// with more than one hard link (which may reach outside the workspace) are
// refused.
func (w *workspace) readText(ctx context.Context, name string) ([]byte, fs.FileInfo, error) {
	if name == "." {
		return nil, nil, errorf("%s is the workspace directory, not a file: give a file path", w.root)
	}
	fi, err := w.fs.Lstat(ctx, name)
	if err != nil {
		return nil, nil, w.fsError(name, err)
	}
	if err := w.changeable(ctx, name, fi); err != nil {
		return nil, nil, err
	}
	if err := singleLink(name, fi, "changed in place"); err != nil {
		return nil, nil, err
	}
	data, err := w.fs.ReadFile(ctx, name)
	if err != nil {
		return nil, nil, w.fsError(name, err)
	}
	if isBinary(data) {
		return nil, nil, errorf("%s is a binary file: this tool changes text files only", name)
	}
	return data, fi, nil
}

// changeable refuses to replace anything but a regular file: a directory,
// a device, or a symbolic link (writing would replace the link itself, not
// the file it points to).
func (w *workspace) changeable(ctx context.Context, name string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return errorf("%s is a directory, not a file: give a file path (read %s lists it)", name, name)
	case fi.Mode()&fs.ModeSymlink != 0:
		_, err := w.fs.Stat(ctx, name)
		if errors.Is(err, sandbox.ErrEscape) {
			return w.fsError(name, err)
		}
		return errorf("%s is a symbolic link: change the file it points to instead (readlink -f %s names it), or delete the link first", name, name)
	case !fi.Mode().IsRegular():
		return errorf("%s is not a regular file (%s): only regular files can be changed", name, fi.Mode().Type())
	}
	return nil
}

// mkdirParents creates the missing parent directories of name and returns
// those it created, deepest last.
func (w *workspace) mkdirParents(ctx context.Context, name string) ([]string, error) {
	var missing []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		fi, err := w.fs.Stat(ctx, dir)
		if err == nil {
			if !fi.IsDir() {
				return nil, errorf("cannot create %s: %s is a file, not a directory", name, dir)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, w.fsError(dir, err)
		}
		missing = append(missing, dir)
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if err := w.fs.MkdirAll(ctx, missing[0], 0o755); err != nil {
		return nil, w.fsError(missing[0], err)
	}
	// Reverse: shallowest first, so removing in reverse order empties
	// the deepest directory first.
	for i, j := 0, len(missing)-1; i < j; i, j = i+1, j-1 {
		missing[i], missing[j] = missing[j], missing[i]
	}
	return missing, nil
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
