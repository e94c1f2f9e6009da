// Package workspace holds what every tool that touches a run's workspace
// FS shares, so that they behave the same: it maps the paths a model gives
// to names of the FS, explains FS errors as instructions, reads a file the
// way a tool that changes it must ([ReadText]), and writes an edit that
// spans files all or nothing ([Commit], [Write]): apply_patch, lsp_rename
// and resolve use it.
package workspace

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"strings"
	"syscall"
	"unicode/utf8"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Name maps p — relative to the workspace, or absolute under root — to a
// name of the workspace FS ("." for the root). A path that leaves the
// workspace, starts with "~", is empty, holds a NUL byte or is not UTF-8 is
// a *tools.Error. Symbolic links are the FS's to refuse (sandbox.ErrEscape).
func Name(root, p string) (string, error) {
	root = path.Clean(root)
	if p == "" {
		return "", tools.Fail("path is empty: give a path relative to the workspace %s", root)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", tools.Fail("path %q contains a NUL byte: give a plain path inside the workspace %s", p, root)
	}
	if !utf8.ValidString(p) {
		return "", tools.Fail("path %q is not valid UTF-8: give the path as text", p)
	}
	switch {
	case path.IsAbs(p):
		c := path.Clean(p)
		switch {
		case c == root:
			return ".", nil
		case root == "/":
			return strings.TrimPrefix(c, "/"), nil
		case strings.HasPrefix(c, root+"/"):
			return strings.TrimPrefix(c, root+"/"), nil
		}
		return "", outside(root, p)
	case p == "~" || strings.HasPrefix(p, "~/"):
		return "", outside(root, p)
	}
	name := path.Clean(p)
	if name == ".." || strings.HasPrefix(name, "../") {
		return "", outside(root, p)
	}
	return name, nil
}

func outside(root, p string) error {
	return tools.Fail("path %q is outside the workspace %s: use a path inside it, relative to the workspace (src/main.go) or absolute under it (%s)",
		p, root, path.Join(root, "src/main.go"))
}

// Show is how a workspace name is written in results.
func Show(name string) string {
	if name == "." {
		return ". (the workspace root)"
	}
	return name
}

// Explain turns an error of the workspace FS for name into a *tools.Error that
// tells the model what to do. nil stays nil; a *tools.Error and a context's
// error are returned unchanged.
func Explain(root, name string, err error) error {
	if err == nil {
		return nil
	}
	var we *tools.Error
	if errors.As(err, &we) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	switch {
	case errors.Is(err, sandbox.ErrEscape):
		return tools.Fail("path %q leads outside the workspace %s (through a symbolic link): use a path inside it", name, root)
	case errors.Is(err, fs.ErrNotExist):
		return tools.Fail("%s does not exist: list its parent directory %s with read to see what is there", Show(name), Show(path.Dir(name)))
	case errors.Is(err, fs.ErrPermission):
		return tools.Fail("permission denied for %s: the sandbox user may not do this; choose another path or fix the permissions with a shell command", Show(name))
	case errors.Is(err, sandbox.ErrTooLarge):
		return tools.Fail("%s is larger than %d MiB, too large for this tool: inspect it with a shell command (head, sed -n, grep)", Show(name), sandbox.MaxFileSize>>20)
	case errors.Is(err, sandbox.ErrUnavailable): // wraps ErrGone too: asked first
		return tools.Fail("the sandbox is unavailable for now (%v): it is paused or its engine does not answer; the run and its files are kept, so retry in a few seconds", err)
	case errors.Is(err, sandbox.ErrGone):
		return tools.Fail("the sandbox is gone (%v): the run cannot use its files any more", err)
	case errors.Is(err, syscall.ENOTDIR):
		return tools.Fail("a parent of %s is not a directory: check the path", Show(name))
	}
	return tools.Fail("%s: %v", Show(name), err)
}
