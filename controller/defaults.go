package controller

import (
	"context"

	"berth.dev/berth/tools"
	"berth.dev/berth/tools/ask"
	"berth.dev/berth/tools/debug"
	"berth.dev/berth/tools/eval"
	"berth.dev/berth/tools/files"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/structural"
)

// DefaultTools returns the binders every run gets when Config.Tools is nil:
// the workspace file tools (read, write, edit, apply_patch), the
// structural tools (ast_grep, ast_edit, resolve), the language-server tools
// (lsp, lsp_rename, diagnostics on write), debug for runs with a
// conversation id, eval, and ask_user for runs with a question port.
func DefaultTools() []Binder {
	return []Binder{FileTools, StructuralTools, LSPTools, DebugTools, EvalTools, AskTools}
}

// AskTools registers ask_user (TOOLS.md §9) when the run has a question
// port, which is its target surface: the cards go out on the run's event
// stream (GET /v1/runs/{id}/events) and come back through POST
// /v1/runs/{id}/cards/{n} (ASK-3). A run opened with Config.NoQuestions
// does not get it.
func AskTools(ctx context.Context, r *tools.Registry, env *Env) error {
	return AskToolsWith(ask.Options{})(ctx, r, env)
}

// AskToolsWith is AskTools with a question timeout other than
// ask.DefaultTimeout.
func AskToolsWith(opts ask.Options) Binder {
	return func(ctx context.Context, r *tools.Registry, env *Env) error {
		if env.Questions == nil {
			return nil
		}
		ask.Register(r, env.Questions, opts)
		return nil
	}
}

// EvalTools registers eval (TOOLS.md §8) with one kernel supervisor per
// run: kernels start on the first cell inside the run's sandbox, and the
// run's close shuts them down. Its tool() bridge calls back into the run's
// registry.
func EvalTools(ctx context.Context, r *tools.Registry, env *Env) error {
	return EvalToolsWith(eval.Options{})(ctx, r, env)
}

// EvalToolsWith is EvalTools with operator settings (the cell budget, a
// wall limit).
func EvalToolsWith(opts eval.Options) Binder {
	return func(ctx context.Context, r *tools.Registry, env *Env) error {
		sup := eval.Register(r, env.Sandbox, env.Workspace, env.Context, opts)
		env.OnClose(sup.Close)
		return nil
	}
}

// LSPTools registers lsp and lsp_rename (TOOLS.md §2–3) with one
// language-server supervisor per run, and wraps the write tools with
// diagnostics on write. Servers start lazily inside the run's sandbox; the
// run's close stops them all.
func LSPTools(ctx context.Context, r *tools.Registry, env *Env) error {
	sup := lsp.Register(r, env.Sandbox, env.Workspace, env.Context, lsp.Options{Host: env.Sandbox.Ref() == "host"})
	env.OnClose(sup.Close)
	return nil
}

// FileTools registers read, write, edit and apply_patch over the run's
// workspace.
func FileTools(ctx context.Context, r *tools.Registry, env *Env) error {
	files.Register(r, env.Workspace)
	return nil
}

// StructuralTools registers ast_grep, ast_edit and resolve over the run's
// workspace, with one structural engine (parse cache and staged edits) per
// run. The engine holds only memory; it goes with the run.
func StructuralTools(ctx context.Context, r *tools.Registry, env *Env) error {
	structural.Register(r, env.Workspace, structural.NewEngine(structural.Options{}))
	return nil
}

// DebugTools registers the debug tool (TOOLS.md §7) when the run has a
// conversation id (DBG-1), with one session supervisor per run; the run's
// close ends its session, killing the adapter and the debuggee.
func DebugTools(ctx context.Context, r *tools.Registry, env *Env) error {
	if env.Spec.ConversationID == "" {
		return nil
	}
	sup := debug.Register(r, env.Sandbox, env.Workspace, env.Context, debug.Options{})
	env.OnClose(sup.Close)
	return nil
}
