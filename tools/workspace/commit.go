package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Change is one file of a multi-file commit ([Commit], [Write]). Old and
// New say what it does: Old nil creates the file, New nil deletes it, both
// set replace it (moved first when MoveTo is set).
type Change struct {
	// Path is the file's workspace name.
	Path string
	// Old is the content the file holds before the commit; nil for a file
	// to create, which must not exist.
	Old []byte
	// New is the content afterwards; nil deletes the file.
	New []byte
	// MoveTo renames the file (to a name that must not exist) before New
	// is written; empty keeps it where it is. Only for a replaced file.
	MoveTo string
	// Perm is the permission bits New is written with and Old is restored
	// with. [Commit] sets it: those of the file it checks, 0o644 for a new
	// one.
	Perm fs.FileMode
	// Where prefixes [Verify]'s messages about this change ("patch line
	// 3: "); usually empty.
	Where string
}

// dest is where the change leaves the file.
func (c *Change) dest() string {
	if c.MoveTo != "" {
		return c.MoveTo
	}
	return c.Path
}

// Commit writes changes all-or-nothing: every file is checked first (an
// existing file must be a changeable text file, see [ReadText], and still
// hold Old; a new one, or a MoveTo, must not exist), then [Write] writes
// them, restoring every file already written when one write fails. A tool
// whose edit spans files (lsp_rename) uses it so that its writes behave
// like apply_patch's. A check's error is a *tools.Error and nothing is written;
// a write's is a *CommitError.
func Commit(ctx context.Context, fsys sandbox.FS, changes []Change) error {
	cs := make([]Change, len(changes))
	seen := map[string]bool{}
	for i, ch := range changes {
		if ch.Old == nil && ch.New == nil {
			return fmt.Errorf("workspace: internal error: change of %s neither creates nor keeps content", ch.Path)
		}
		if ch.Old == nil || ch.New == nil {
			ch.MoveTo = ""
		}
		for _, n := range []string{ch.Path, ch.dest()} {
			if seen[n] {
				return fmt.Errorf("workspace: internal error: %s is changed twice in one commit", n)
			}
		}
		seen[ch.Path], seen[ch.dest()] = true, true
		if ch.Old != nil {
			data, fi, err := ReadText(ctx, fsys, ch.Path)
			if err != nil {
				return err
			}
			if !bytes.Equal(data, ch.Old) {
				return tools.Fail("%s changed on disk since the edit was computed: read it again and retry. No file was changed", ch.Path)
			}
			ch.Old, ch.Perm = data, fi.Mode().Perm()
		} else {
			ch.Perm = 0o644
		}
		cs[i] = ch
	}
	if err := Verify(ctx, fsys, cs); err != nil {
		return err
	}
	return Write(ctx, fsys, cs, WriteOptions{})
}

// Verify checks, right before a commit, that no file changed on disk since
// its Old was read and that no file to create, or MoveTo, exists. Its
// error is a *tools.Error naming the first file that fails (after the change's
// Where), or the context's.
func Verify(ctx context.Context, fsys sandbox.FS, changes []Change) error {
	root := path.Clean(fsys.Root())
	for _, c := range changes {
		var err error
		if c.Old == nil {
			err = MustNotExist(ctx, fsys, c.Path, c.Where, "*** Update File:")
		} else {
			var now []byte
			now, err = fsys.ReadFile(ctx, c.Path)
			if err == nil && !bytes.Equal(now, c.Old) {
				err = tools.Fail("%s changed on disk while the patch was being applied: read it again and retry. No file was changed.", c.Path)
			} else if err != nil {
				err = Explain(root, c.Path, err)
			}
			if err == nil && c.New != nil && c.dest() != c.Path {
				err = MustNotExist(ctx, fsys, c.MoveTo, c.Where, "another *** Move to: path")
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// WriteOptions are the settings of one [Write].
type WriteOptions struct {
	// Check, when set, runs right before changes[i] is written, to keep the
	// window in which another writer's change could be lost short; its
	// error stops the commit like a failed write (and is kept as it is).
	Check func(ctx context.Context, i int) error
	// KeepOthers restores a replaced file only while it still holds the
	// content this commit wrote: one another writer changed since is
	// theirs, left as it is and reported as an [UndoError] wrapping
	// [ErrChangedSince].
	KeepOthers bool
}

// Write writes changes in order, each file atomically through fsys
// (creating missing parent directories), after the caller checked them
// ([Verify], or Commit's checks). When a step fails, every step already
// done is undone, newest first, even when ctx has ended: a half-written
// commit is worse. Its error is always a *CommitError.
func Write(ctx context.Context, fsys sandbox.FS, changes []Change, o WriteOptions) error {
	root := path.Clean(fsys.Root())
	var undo []func(context.Context) *UndoError
	fail := func(c *Change, err error) error {
		rctx := context.WithoutCancel(ctx)
		ce := &CommitError{Path: c.dest(), Err: err}
		for i := len(undo) - 1; i >= 0; i-- {
			if u := undo[i](rctx); u != nil {
				ce.Undo = append(ce.Undo, u)
			}
		}
		return ce
	}
	for i := range changes {
		c := &changes[i]
		if o.Check != nil {
			if err := o.Check(ctx, i); err != nil {
				return fail(c, err)
			}
		}
		switch {
		case c.Old == nil:
			dirs, err := MkdirParents(ctx, fsys, c.Path)
			if err != nil {
				return fail(c, err)
			}
			undo = append(undo, removeDirs(fsys, dirs))
			if err := fsys.WriteFile(ctx, c.Path, c.New, c.Perm); err != nil {
				return fail(c, Explain(root, c.Path, err))
			}
			undo = append(undo, remove(fsys, c.Path))
		case c.New == nil:
			if err := fsys.Remove(ctx, c.Path); err != nil {
				return fail(c, Explain(root, c.Path, err))
			}
			undo = append(undo, restore(fsys, c, nil))
		default:
			if dest := c.dest(); dest != c.Path {
				dirs, err := MkdirParents(ctx, fsys, dest)
				if err != nil {
					return fail(c, err)
				}
				undo = append(undo, removeDirs(fsys, dirs))
				if err := fsys.Rename(ctx, c.Path, dest); err != nil {
					return fail(c, Explain(root, dest, err))
				}
				undo = append(undo, moveBack(fsys, c))
			}
			if err := fsys.WriteFile(ctx, c.dest(), c.New, c.Perm); err != nil {
				return fail(c, Explain(root, c.dest(), err))
			}
			var written []byte
			if o.KeepOthers {
				written = c.New
			}
			undo = append(undo, restore(fsys, c, written))
		}
	}
	return nil
}

// removeDirs returns an undo step that removes the directories dirs
// created, deepest first.
func removeDirs(fsys sandbox.FS, dirs []string) func(context.Context) *UndoError {
	return func(ctx context.Context) *UndoError {
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := fsys.Remove(ctx, dirs[i]); err != nil {
				return &UndoError{Op: UndoRemoveDir, Path: dirs[i], Err: err}
			}
		}
		return nil
	}
}

// remove returns an undo step that removes the created file name.
func remove(fsys sandbox.FS, name string) func(context.Context) *UndoError {
	return func(ctx context.Context) *UndoError {
		if err := fsys.Remove(ctx, name); err != nil {
			return &UndoError{Op: UndoRemove, Path: name, Err: err}
		}
		return nil
	}
}

// moveBack returns an undo step that moves c's file back from MoveTo.
func moveBack(fsys sandbox.FS, c *Change) func(context.Context) *UndoError {
	return func(ctx context.Context) *UndoError {
		if err := fsys.Rename(ctx, c.MoveTo, c.Path); err != nil {
			return &UndoError{Op: UndoMove, Path: c.MoveTo, To: c.Path, Err: err}
		}
		return nil
	}
}

// restore returns an undo step that puts back c's Old: over the written
// file (which keeps its mode and owner) or, after a delete, as a new file
// with c's permission bits. With written set, only a file that still holds
// written is restored.
func restore(fsys sandbox.FS, c *Change, written []byte) func(context.Context) *UndoError {
	name := c.dest()
	return func(ctx context.Context) *UndoError {
		if written != nil {
			if now, err := fsys.ReadFile(ctx, name); err != nil || !bytes.Equal(now, written) {
				return &UndoError{Op: UndoRestore, Path: name, Err: ErrChangedSince}
			}
		}
		if err := fsys.WriteFile(ctx, name, c.Old, c.Perm); err != nil {
			return &UndoError{Op: UndoRestore, Path: name, Err: err}
		}
		return nil
	}
}

// CommitError is a failed [Write]: which file could not be written, why,
// and what undoing the steps before it could not undo. It does not unwrap
// to Err: the failure is the model's to act on, even when it was the
// context's end.
type CommitError struct {
	// Path is the file whose write failed (its MoveTo when it moves).
	Path string
	// Err is why: an FS error explained as a *tools.Error, or Check's error.
	Err error
	// Undo are the undo steps that failed, newest first; empty when the
	// workspace is as before the commit.
	Undo []*UndoError
}

// Error tells the model what happened, and what to repair when the
// rollback failed too.
func (e *CommitError) Error() string {
	if len(e.Undo) > 0 {
		bad := make([]string, len(e.Undo))
		for i, u := range e.Undo {
			bad[i] = u.Error()
		}
		return fmt.Sprintf("writing %s failed: %s. Rolling back the files already written failed too, so the workspace is partly patched: %s. Read the files named and repair them.",
			e.Path, e.Err, strings.Join(bad, "; "))
	}
	return fmt.Sprintf("writing %s failed: %s. Every file already written was restored: the workspace is as before the patch.", e.Path, e.Err)
}

// UndoOp is the kind of an undo step.
type UndoOp int

// The undo steps of a [Write].
const (
	UndoRestore   UndoOp = iota + 1 // put back a replaced or deleted file's Old
	UndoRemove                      // remove a created file
	UndoRemoveDir                   // remove a directory the commit created
	UndoMove                        // move a moved file back to its Path
)

// UndoError is an undo step of a [Write] that failed.
type UndoError struct {
	Op   UndoOp
	Path string // the file or directory left as it is
	To   string // for UndoMove: the name it was to move back to
	Err  error  // ErrChangedSince, or the FS's error
}

func (e *UndoError) Error() string {
	switch {
	case errors.Is(e.Err, ErrChangedSince):
		return fmt.Sprintf("%s was changed by another writer after it was written and is left as that writer left it", e.Path)
	case e.Op == UndoRemoveDir:
		return fmt.Sprintf("the directory %s it created could not be removed: %v", e.Path, e.Err)
	case e.Op == UndoRemove:
		return fmt.Sprintf("the added file %s could not be removed: %v", e.Path, e.Err)
	case e.Op == UndoMove:
		return fmt.Sprintf("%s could not be moved back to %s: %v", e.Path, e.To, e.Err)
	}
	return fmt.Sprintf("the old content of %s could not be restored: %v", e.Path, e.Err)
}

func (e *UndoError) Unwrap() error { return e.Err }

// ErrChangedSince is the undo failure of a [WriteOptions.KeepOthers] write
// whose file another writer changed after the commit wrote it.
var ErrChangedSince = errors.New("changed by another writer since")
