// Package projectcheck is the project check behind the lsp tool's
// diagnostics "*" (docs/tools.md §2): instead of asking a language server about
// one file, it runs the project's own checker inside the run's sandbox —
// go vet, cargo check, tsc, pyright or mypy or pyflakes, dart analyze — and
// parses what it prints into one [Diagnostic] shape.
//
// A checker applies when its root marker is in the project root AND its
// program resolves (LSP-1's intersection); [Find] learns both with one
// probe exec in the sandbox and says, for every language that does not
// apply, which of the two is missing. [Run] runs one applicable checker,
// bounded by [CheckTimeout] and the caller's context.
//
// Programs come from the sandbox's PATH, outside the workspace, or — in a
// container, where the sandbox is the boundary — from the project's own
// tool directories (node_modules/.bin, .venv/bin); no other program inside
// the workspace is ever started, not even by the probe.
//
// On the host ([Options].Host) nothing from the workspace runs: no
// project-local program, no PATH program that resolves into the workspace,
// and the project's .venv/bin/python only when it resolves (symbolic links
// followed, nothing executed) to an interpreter outside the workspace, which
// the result then names. go runs with GOTOOLCHAIN=local, and every
// toolchain manager found (rustup, pyenv, nodenv) with the toolchain it
// chooses from "/" (proc.HostToolchain), so that no rust-toolchain.toml or
// .python-version of the workspace chooses what runs. A check that
// executes the project's own code there (cargo check's build scripts and
// proc macros, mypy plugins, dart analyzer plugins, a venv python whose
// site-packages run code at startup — .pth import lines, sitecustomize) is
// an exec-level step:
// [Run] asks the call's permission gate first ([tools.ApproveStep]).
package projectcheck

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
)

// Bounds.
const (
	// MaxDiagnostics is how many diagnostics a [Result] keeps; errors are
	// kept before warnings. Result.Total counts all of them.
	MaxDiagnostics = 200
	// CheckTimeout bounds one checker's run; the caller's context may end it
	// sooner.
	CheckTimeout = 5 * time.Minute
	// MaxOutput is how many bytes of each of a checker's stdout and stderr
	// are kept and parsed; the rest is read and dropped.
	MaxOutput = 8 << 20
	// MaxUnparsed bounds Result.Unparsed: its last lines, at most this many
	// bytes.
	MaxUnparsed = 4 << 10
	// maxUnparsedLines bounds Result.Unparsed in lines.
	maxUnparsedLines = 40
	// probeTimeout bounds the discovery probe.
	probeTimeout = 20 * time.Second
)

// Severities of a [Diagnostic].
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
	SeverityInfo    = "info"
	SeverityHint    = "hint"
)

// Diagnostic is one finding of a checker.
type Diagnostic struct {
	// File is the absolute path in the sandbox, or "" for a finding about
	// the project as a whole (tsc's "no inputs were found").
	File string `json:"file,omitempty"`
	// Line, Column, EndLine and EndColumn are 1-based; 0 when unknown.
	// Columns count what the checker counts (bytes for go, characters for
	// the others).
	Line      int `json:"line,omitempty"`
	Column    int `json:"column,omitempty"`
	EndLine   int `json:"end_line,omitempty"`
	EndColumn int `json:"end_column,omitempty"`
	// Severity is one of SeverityError, SeverityWarning, SeverityInfo,
	// SeverityHint.
	Severity string `json:"severity"`
	// Code is the checker's code for the finding: a vet analyzer
	// ("printf"), a rustc code or lint ("E0308", "unused_imports"), "TS2322",
	// a pyright rule, a mypy error code, a dart diagnostic code.
	Code string `json:"code,omitempty"`
	// Message may span several lines (tsc's and go's elaborations, mypy's
	// notes about the same position).
	Message string `json:"message"`
	// Source is the checker's id, as in [Applicable].Checker.
	Source string `json:"source"`
}

// Checker describes one language of the table, for status output.
type Checker struct {
	Language string
	// Markers are the root markers; any one of them in the project root
	// makes the language a candidate.
	Markers []string
	// Commands are the checks in order of preference; the first whose
	// program resolves runs.
	Commands []string
}

// Checkers returns the table: one entry per language.
func Checkers() []Checker {
	out := make([]Checker, 0, len(table))
	for _, l := range table {
		c := Checker{Language: l.lang, Markers: slices.Clone(l.markers)}
		for _, t := range l.tools {
			c.Commands = append(c.Commands, t.display)
		}
		out = append(out, c)
	}
	return out
}

// Applicable is a checker that can run for a root, as [Find] resolved it.
// Pass it to [Run] unchanged.
type Applicable struct {
	Language string `json:"language"`
	// Checker is the checker's id: "go vet", "cargo check", "tsc",
	// "pyright", "mypy", "pyflakes", "dart analyze".
	Checker string `json:"checker"`
	// Root is the directory it runs in, absolute in the sandbox.
	Root string `json:"root"`
	// Marker is the root marker found in Root.
	Marker string `json:"marker"`
	// Binary is the program as the sandbox sees it (for "python3 -m mypy",
	// the python).
	Binary string `json:"binary"`
	// Command is what runs, as a person would write it.
	Command string `json:"command"`
	// Interpreter names the project's venv python and what it resolves to
	// (".venv/bin/python → /usr/bin/python3.11") when the check uses it
	// on the host.
	Interpreter string `json:"interpreter,omitempty"`
	// Skipped says which programs of the workspace were passed over on the
	// host, and how to get one from outside it.
	Skipped []string `json:"skipped,omitempty"`
	// ExecWhy is set on the host when the check executes the project's own
	// code; [Run] then runs it only as an approved exec-level step.
	ExecWhy string `json:"exec_why,omitempty"`

	args  []string
	env   []string
	base  string // the directory relative paths in the output are relative to
	parse parser
}

// Missing is a language whose check cannot run, and why.
type Missing struct {
	Language string `json:"language"`
	// Reason starts with "marker missing:" or "binary missing:" and says
	// what would fix it.
	Reason string `json:"reason"`
	// Skipped are the workspace's own programs passed over on the host
	// (the reason says so too).
	Skipped []string `json:"skipped,omitempty"`
}

// Result is what one checker's run found.
type Result struct {
	Language string `json:"language"`
	Checker  string `json:"checker"`
	Root     string `json:"root"`
	Command  string `json:"command"`
	// Interpreter and Skipped are the Applicable's.
	Interpreter string   `json:"interpreter,omitempty"`
	Skipped     []string `json:"skipped,omitempty"`
	// Status is how the checker exited. Most checkers exit non-zero when
	// they find errors; that is data, not a failure of the check.
	Status sandbox.ExitStatus `json:"status"`
	// TimedOut is set when CheckTimeout ended the run; Diagnostics then
	// hold what was printed until then.
	TimedOut bool `json:"timed_out,omitempty"`
	// Diagnostics are the findings, errors first, at most MaxDiagnostics.
	Diagnostics []Diagnostic `json:"diagnostics"`
	// Total counts the findings before the cap.
	Total int `json:"total"`
	// Truncated is set when the output exceeded MaxOutput; findings past it
	// are neither kept nor counted.
	Truncated bool `json:"truncated,omitempty"`
	// Unparsed is the tail of the output lines that were not findings nor
	// known progress noise (build failures, "go.mod requires go >= …",
	// crashes), at most MaxUnparsed bytes. Show it when the check failed
	// with no diagnostics: it is then the only explanation.
	Unparsed string `json:"unparsed,omitempty"`
}

// Options configure [Find].
type Options struct {
	// Host says the sandbox is the host berth runs on: no program from the
	// workspace is chosen (see the package doc).
	Host bool
}

// Find reports which checkers apply to root, an absolute directory in the
// sandbox inside workspace (also absolute): those whose marker is in root
// and whose program resolves, at most one per language. Every other
// language is in the Missing list with the reason. Programs under
// workspace are used only from root's node_modules/.bin and .venv/bin, and
// never on the host.
//
// Find runs one short probe in the sandbox (on the host, two: the pythons
// are asked for their modules only once they are known to come from
// outside the workspace), bounded by ctx and 20 seconds. An error means the
// probe itself failed.
func Find(ctx context.Context, sb sandbox.Sandbox, workspace, root string, opts Options) ([]Applicable, []Missing, error) {
	if !path.IsAbs(workspace) || !path.IsAbs(root) {
		return nil, nil, fmt.Errorf("projectcheck: workspace %q and root %q must be absolute paths in the sandbox", workspace, root)
	}
	workspace, root = path.Clean(workspace), path.Clean(root)
	if !within(workspace, root) {
		return nil, nil, fmt.Errorf("projectcheck: root %s is outside the workspace %s; check a directory of the workspace", root, workspace)
	}
	pr, err := runProbe(ctx, sb, workspace, root, opts.Host)
	if err != nil {
		return nil, nil, err
	}
	if pr.noRoot {
		return nil, nil, fmt.Errorf("projectcheck: %s is not a directory in the sandbox; give an existing project directory", root)
	}
	app, miss := plan(pr, workspace, root)
	return app, miss, nil
}

// StepTool is the tool named on the permission card of a check that needs
// approval.
const StepTool = "lsp"

// Run runs one checker from [Find] in its root and parses its output.
// The run is bounded by ctx and CheckTimeout; when CheckTimeout ends it,
// the result has TimedOut set. An error means the checker could not be
// started, was not approved (an error wrapping tools.ErrStepRefused, for a
// check with ExecWhy set that ctx's permission gate refused), or ctx
// ended; a checker that ran and failed is a Result.
func Run(ctx context.Context, sb sandbox.Sandbox, a Applicable) (*Result, error) {
	if a.parse == nil || len(a.args) == 0 {
		return nil, fmt.Errorf("projectcheck: run needs a checker that Find returned, got %q", a.Checker)
	}
	if a.ExecWhy != "" {
		if err := tools.ApproveStep(ctx, tools.Step{Tool: StepTool, Level: tools.LevelExec, Command: a.CommandLine(), Why: a.ExecWhy}); err != nil {
			return nil, fmt.Errorf("projectcheck: %s was not run: %w", a.Checker, err)
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, CheckTimeout)
	defer cancel()
	stdout, stderr := &capBuffer{max: MaxOutput}, &capBuffer{max: MaxOutput}
	p, err := sb.Start(runCtx, &sandbox.Cmd{Args: a.args, Dir: a.Root, Env: a.env, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return nil, fmt.Errorf("projectcheck: cannot start %s in %s: %w", a.Command, a.Root, err)
	}
	st, waitErr := p.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("projectcheck: %s in %s was stopped before it finished: %w", a.Command, a.Root, err)
	}
	if waitErr != nil {
		return nil, fmt.Errorf("projectcheck: %s in %s: its exit status is unknown (the sandbox may be gone): %w", a.Command, a.Root, waitErr)
	}
	out, errOut := stdout.bytes(), stderr.bytes()
	diags, unparsed := a.parse(parseInput{root: a.Root, base: a.base, source: a.Checker, stdout: out, stderr: errOut})
	diags = tidy(diags)
	res := &Result{
		Language:    a.Language,
		Checker:     a.Checker,
		Root:        a.Root,
		Command:     a.Command,
		Interpreter: a.Interpreter,
		Skipped:     a.Skipped,
		Status:      st,
		TimedOut:    runCtx.Err() != nil,
		Total:       len(diags),
		Truncated:   stdout.dropped() || stderr.dropped(),
		Unparsed:    tail(unparsed),
	}
	if len(diags) > MaxDiagnostics {
		diags = diags[:MaxDiagnostics]
	}
	res.Diagnostics = diags
	return res, nil
}

// CommandLine is exactly what Run starts, as a shell would read it: the
// directory, the environment added, the program and its arguments.
func (a Applicable) CommandLine() string {
	parts := []string{"cd", shellQuote(a.Root), "&&"}
	for _, kv := range a.env {
		parts = append(parts, shellQuote(kv))
	}
	for _, arg := range a.args {
		parts = append(parts, shellQuote(arg))
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=:,+@%-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// within reports whether p is dir or below it.
func within(dir, p string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// abs makes a path from a checker's output absolute: relative paths are
// relative to base.
func abs(base, p string) string {
	if p == "" || path.IsAbs(p) {
		return p
	}
	return path.Join(base, p)
}
