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
	"fmt"
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
	tools.Register(r, tools.Tool{Name: "read", Level: tools.LevelRead, Description: readDescription, Hints: tools.Hints{Idempotent: true, Confined: true}}, w.read)
	tools.Register(r, tools.Tool{Name: "write", Level: tools.LevelWrite, Description: writeDescription, Hints: tools.Hints{Idempotent: true, Confined: true}}, w.write)
	tools.Register(r, tools.Tool{Name: "edit", Level: tools.LevelWrite, Description: editDescription, Hints: tools.Hints{Confined: true}}, w.edit)
	tools.Register(r, tools.Tool{Name: "apply_patch", Level: tools.LevelWrite, Description: patchDescription, Hints: tools.Hints{Confined: true}}, w.applyPatch)
}

// workspace is one run's workspace as the tools see it.
type workspace struct {
	fs   sandbox.FS
	root string // absolute, cleaned
}

// rel maps a path given by the model to a name of the workspace FS.
func (w *workspace) rel(p string) (string, error) {
	return wspath.Name(w.root, p)
}

// fsError explains an error of the workspace FS for name to the model.
func (w *workspace) fsError(name string, err error) error {
	return wspath.Explain(w.root, name, err)
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
