package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"berth.dev/berth/sandbox"
)

// Change is one file of a multi-file write applied by [Commit].
type Change struct {
	// Path is the file's workspace name (slash-separated, relative).
	Path string
	// Old is the content the file must still have when the change is
	// applied; nil for a file to create, which must not exist.
	Old []byte
	// New is the content afterwards; nil deletes the file.
	New []byte
	// MoveTo renames the file (to a name that must not exist) before New
	// is written; empty keeps it where it is.
	MoveTo string
}

// Commit writes changes all-or-nothing, the way apply_patch does: every file
// is checked first (an existing file must still hold Old, a new one must not
// exist), then each is written atomically; when one write fails, every file
// already written is restored, newest first. Other tools with a multi-file
// edit (lsp_rename) use it so that their writes behave like the file tools'.
// The error reads as an instruction to a model.
func Commit(ctx context.Context, ws sandbox.FS, changes []Change) error {
	w := &workspace{fs: ws, root: ws.Root()}
	var cs []*change
	seen := map[string]bool{}
	for _, ch := range changes {
		c := &change{name: ch.Path, dest: ch.Path, new: ch.New}
		op := &fileOp{path: ch.Path}
		switch {
		case ch.Old == nil && ch.New == nil:
			return fmt.Errorf("files: internal error: change of %s neither creates nor keeps content", ch.Path)
		case ch.Old == nil:
			op.kind = opAdd
		case ch.New == nil:
			op.kind = opDelete
		default:
			op.kind = opUpdate
			if ch.MoveTo != "" {
				c.dest, op.moveTo = ch.MoveTo, ch.MoveTo
			}
		}
		c.op = op
		for _, n := range []string{c.name, c.dest} {
			if seen[n] {
				return fmt.Errorf("files: internal error: %s is changed twice in one commit", n)
			}
		}
		seen[c.name], seen[c.dest] = true, true
		if ch.Old != nil {
			data, fi, err := w.readText(ctx, c.name)
			if err != nil {
				return unwrapTool(err)
			}
			if !bytes.Equal(data, ch.Old) {
				return fmt.Errorf("%s changed on disk since the edit was computed: read it again and retry. No file was changed", c.name)
			}
			c.old, c.oldInfo = data, fi
		}
		cs = append(cs, c)
	}
	if err := w.verify(ctx, cs); err != nil {
		return unwrapTool(err)
	}
	return unwrapTool(w.commit(ctx, cs))
}

// unwrapTool turns this package's tool error into a plain error with the
// same message, for callers outside the package.
func unwrapTool(err error) error {
	var te *toolError
	if errors.As(err, &te) {
		return errors.New(te.msg)
	}
	return err
}
