package lsp

import (
	"context"
	"fmt"

	"berth.dev/berth/tools/lsp/projectcheck"
)

// linterOnly are the servers whose diagnostics are a linter's, by server
// ID: what checks them, the classes of error it does not see, and the
// language of the project check that would (projectcheck's, "" for none).
// A write they diagnose says so once per run (LSP-3): "no new problems"
// from them is no sign that the callers of a changed function still work.
var linterOnly = map[string]struct{ linter, blind, lang string }{
	"pylsp":                {"pyflakes", "syntax, undefined names and unused imports only: wrong argument counts, types and attributes missing from other modules are not reported", "python"},
	"bash-language-server": {"shellcheck (nothing without it)", "each script alone: wrong arguments, and functions a sourced file does not define, are not reported", ""},
}

// typeCheckers are the project checks that see what a linter does not.
var typeCheckers = map[string]bool{"pyright": true, "mypy": true, "tsc": true}

// uncheckedNote returns, the first time in the run a write is diagnosed
// by a linter-only server, what its checker does not see and which call
// would; "" otherwise.
func (s *Supervisor) uncheckedNote(ctx context.Context, in *instance) string {
	lo, ok := linterOnly[in.spec.ID]
	if !ok || !s.firstTime("linter only: "+in.spec.ID) {
		return ""
	}
	note := fmt.Sprintf("note: %s checks with %s: %s.", in.spec.ID, lo.linter, lo.blind)
	if lo.lang == "" {
		return note + " No project check covers these files; lsp references finds the callers to check."
	}
	apps, _, err := projectcheck.Find(ctx, s.sb, s.root, s.root, projectcheck.Options{Host: s.opts.Host})
	if err == nil {
		for _, a := range apps {
			if a.Language == lo.lang && typeCheckers[a.Checker] {
				return note + fmt.Sprintf(" lsp diagnostics with file \"*\" runs the project's type checker (%s), which does.", a.Checker)
			}
		}
	}
	return note + " No type checker for " + lo.lang + " was found at the workspace root (pyright or mypy, and a marker such as pyproject.toml): lsp references finds the callers to check."
}
