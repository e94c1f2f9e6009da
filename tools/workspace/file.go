package workspace

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"path"
	"syscall"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// binarySniff is how many leading bytes [IsBinary] searches for a NUL byte
// to tell a binary file from text, as git does.
const binarySniff = 8000

// IsBinary reports whether data looks like a binary file.
func IsBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0
}

// HardLinks returns the link count of fi, or 1 when the FS cannot tell.
func HardLinks(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// SingleLink refuses a file with more than one hard link: another name for
// it may lie outside the workspace, where the tools must not reach. not
// says what the tool does not do with it ("changed in place", "read").
func SingleLink(name string, fi fs.FileInfo, not string) error {
	if n := HardLinks(fi); n > 1 {
		return tools.Fail("%s has %d hard links, which may reach outside the workspace, so it is not %s: copy it first (cp %s %s.tmp && mv %s.tmp %s) and retry", name, n, not, name, name, name, name)
	}
	return nil
}

// ReadText reads the regular text file name of fsys for a tool that
// changes it: missing files, symbolic links, non-regular files, binary
// files and files with more than one hard link (which may reach outside the
// workspace) are refused with a *tools.Error.
func ReadText(ctx context.Context, fsys sandbox.FS, name string) ([]byte, fs.FileInfo, error) {
	root := path.Clean(fsys.Root())
	if name == "." {
		return nil, nil, tools.Fail("%s is the workspace directory, not a file: give a file path", root)
	}
	fi, err := fsys.Lstat(ctx, name)
	if err != nil {
		return nil, nil, Explain(root, name, err)
	}
	if err := Changeable(ctx, fsys, name, fi); err != nil {
		return nil, nil, err
	}
	if err := SingleLink(name, fi, "changed in place"); err != nil {
		return nil, nil, err
	}
	data, err := fsys.ReadFile(ctx, name)
	if err != nil {
		return nil, nil, Explain(root, name, err)
	}
	if IsBinary(data) {
		return nil, nil, tools.Fail("%s is a binary file: this tool changes text files only", name)
	}
	return data, fi, nil
}

// Changeable refuses to replace anything but a regular file: a directory,
// a device, or a symbolic link (writing would replace the link itself, not
// the file it points to). fi is name's Lstat.
func Changeable(ctx context.Context, fsys sandbox.FS, name string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return tools.Fail("%s is a directory, not a file: give a file path (read %s lists it)", name, name)
	case fi.Mode()&fs.ModeSymlink != 0:
		_, err := fsys.Stat(ctx, name)
		if errors.Is(err, sandbox.ErrEscape) {
			return Explain(path.Clean(fsys.Root()), name, err)
		}
		return tools.Fail("%s is a symbolic link: change the file it points to instead (readlink -f %s names it), or delete the link first", name, name)
	case !fi.Mode().IsRegular():
		return tools.Fail("%s is not a regular file (%s): only regular files can be changed", name, fi.Mode().Type())
	}
	return nil
}

// MustNotExist fails when name exists (as anything, a dangling link too),
// for a file about to be created. where prefixes the message ("patch line
// 3: ", or ""); instead names what to use for an existing file.
func MustNotExist(ctx context.Context, fsys sandbox.FS, name, where, instead string) error {
	fi, err := fsys.Lstat(ctx, name)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if _, serr := fsys.Stat(ctx, name); errors.Is(serr, sandbox.ErrEscape) {
			err = serr
		}
	}
	switch {
	case err == nil:
		return tools.Fail("%s%s already exists: use %s for it, or delete it first. No file was changed.", where, name, instead)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		var we *tools.Error
		if errors.As(Explain(path.Clean(fsys.Root()), name, err), &we) {
			return tools.Fail("%s%s. No file was changed.", where, we.Msg)
		}
		return err
	}
}

// MkdirParents creates the missing parent directories of name and returns
// those it created, deepest last.
func MkdirParents(ctx context.Context, fsys sandbox.FS, name string) ([]string, error) {
	root := path.Clean(fsys.Root())
	var missing []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		fi, err := fsys.Stat(ctx, dir)
		if err == nil {
			if !fi.IsDir() {
				return nil, tools.Fail("cannot create %s: %s is a file, not a directory", name, dir)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, Explain(root, dir, err)
		}
		missing = append(missing, dir)
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if err := fsys.MkdirAll(ctx, missing[0], 0o755); err != nil {
		return nil, Explain(root, missing[0], err)
	}
	// Reverse: shallowest first, so removing in reverse order empties
	// the deepest directory first.
	for i, j := 0, len(missing)-1; i < j; i, j = i+1, j-1 {
		missing[i], missing[j] = missing[j], missing[i]
	}
	return missing, nil
}
