package controller

import (
	"context"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/files"
)

// DefaultTools returns the binders every run gets when Config.Tools is nil:
// the workspace file tools (read, write, edit, apply_patch).
func DefaultTools() []Binder {
	return []Binder{FileTools}
}

// FileTools registers read, write, edit and apply_patch over the run's
// workspace.
func FileTools(ctx context.Context, r *tools.Registry, env *Env) error {
	files.Register(r, env.Workspace)
	return nil
}
