package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/ask"
	"berth.dev/berth/tools/debug"
	"berth.dev/berth/tools/eval"
	"berth.dev/berth/tools/files"
	"berth.dev/berth/tools/lsp"
	"berth.dev/berth/tools/structural"
	"berth.dev/berth/tools/vibe"
)

// DefaultTools returns the binders every run gets when Config.Tools is nil:
// the workspace file tools (read, write, edit, apply_patch), the
// structural tools (ast_grep, ast_edit, resolve), the language-server tools
// (lsp, lsp_rename, diagnostics on write), debug for runs with a
// conversation id, eval, and ask_user for runs with a question port.
func DefaultTools() []Binder { return defaultTools(lsp.Options{}) }

// defaultTools is DefaultTools with the language servers' options.
func defaultTools(lspOpts lsp.Options) []Binder {
	return []Binder{FileTools, StructuralTools, LSPToolsWith(lspOpts), DebugTools, EvalTools, AskTools}
}

// AskTools registers ask_user (docs/tools.md §9) when the run has a question
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

// EvalTools registers eval (docs/tools.md §8) with one kernel supervisor per
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
		opts.Host = opts.Host || env.Sandbox.Ref() == "host" // no workspace interpreter runs on the host
		opts.Resident = env.Resident
		sup := eval.Register(r, env.Sandbox, env.Workspace, env.Context, opts)
		env.adoptResident(ctx, "eval", sup.Adopt)
		env.Persist("eval", sup)
		env.OnCloseOrDetach(sup.Close, sup.Detach)
		env.AddResources(sup.Resources)
		if kernels, _ := splitPrewarm(env.Spec.Prewarm); len(kernels) > 0 {
			// A kernel's start is what a call of eval does first, so the
			// run's gate decides it as one (at once in local mode; a
			// permission card for the operator in hosted mode).
			sup.Prewarm(kernels, env.approvePrewarm(tools.Tool{Name: "eval", Level: tools.LevelExec}))
		}
		return nil
	}
}

// approvePrewarm returns what decides a prewarm of lang as a call of t by
// the run's permission gate.
func (env *Env) approvePrewarm(t tools.Tool) func(ctx context.Context, lang string) error {
	return func(ctx context.Context, lang string) error {
		args, _ := json.Marshal(map[string]string{"prewarm": lang})
		err := env.Gate.Approve(ctx, env.Spec.Mode, t, args)
		if err == nil || env.Questions == nil || env.Questions.Connected() {
			return err
		}
		// Nobody could be asked yet: the harness and the operator's
		// console connect to the run's events after it opened.
		if !waitConnected(ctx, env.Questions, prewarmApproverWait) {
			return err
		}
		return env.Gate.Approve(ctx, env.Spec.Mode, t, args)
	}
}

// LSPTools registers lsp and lsp_rename (docs/tools.md §2–3) with one
// language-server supervisor per run, and wraps the write tools with
// diagnostics on write. Servers start lazily inside the run's sandbox; the
// run's close stops them all. Servers end with berth, but their
// diagnostics journal persists with the run (Env.Persist), so a restarted
// berth judges writes against what was reported before.
func LSPTools(ctx context.Context, r *tools.Registry, env *Env) error {
	return LSPToolsWith(lsp.Options{})(ctx, r, env)
}

// LSPToolsWith is LSPTools with operator settings, such as the deadline
// of each request to a server (RequestTimeout, default
// lsp.DefaultRequestTimeout).
func LSPToolsWith(opts lsp.Options) Binder {
	return func(ctx context.Context, r *tools.Registry, env *Env) error {
		opts.Host = opts.Host || env.Sandbox.Ref() == "host" // no workspace binary runs on the host
		sup := lsp.Register(r, env.Sandbox, env.Workspace, env.Context, opts)
		if b := env.Adopted("lsp"); b != nil {
			if err := sup.Restore(b); err != nil {
				env.Problem(fmt.Sprintf("run %s: %v", env.RunID, err))
			}
		}
		env.Persist("lsp", sup)
		env.OnClose(sup.Close)
		env.AddResources(sup.Resources)
		if _, servers := splitPrewarm(env.Spec.Prewarm); len(servers) > 0 {
			// A server's start is what a call of lsp does first.
			sup.Prewarm(servers, env.approvePrewarm(tools.Tool{Name: "lsp", Level: tools.LevelRead}))
		}
		return nil
	}
}

// FileTools registers read, write, edit and apply_patch over the run's
// workspace.
func FileTools(ctx context.Context, r *tools.Registry, env *Env) error {
	files.Register(r, env.Workspace)
	return nil
}

// StructuralTools registers ast_grep, ast_edit and resolve over the run's
// workspace, with one structural engine (parse cache and staged edits) per
// run. The engine holds memory only; its staged edits are persisted with
// the run (Env.Persist), so a restarted berth can still accept them.
func StructuralTools(ctx context.Context, r *tools.Registry, env *Env) error {
	eng := structural.NewEngine(structural.Options{})
	if b := env.Adopted("structural"); b != nil {
		if err := eng.Restore(b); err != nil {
			env.Problem(fmt.Sprintf("run %s: staged edits: %v", env.RunID, err))
		}
	}
	env.Persist("structural", eng)
	structural.Register(r, env.Workspace, eng)
	eng.Follow(env.Workspace)
	env.OnClose(eng.Close)
	return nil
}

// DebugTools registers the debug tool (docs/tools.md §7) when the run has a
// conversation id (DBG-1), with one session supervisor per run that takes
// the conversation's claim on "debug" for each session, so the
// conversation's runs hold one session between them (DBG-3); the run's
// close ends its session, killing the adapter and the debuggee. With a
// run store the adapter runs under the run's resident supervisor and the
// session outlives berth (Env.Persist, Supervisor.Adopt).
func DebugTools(ctx context.Context, r *tools.Registry, env *Env) error {
	if env.Spec.ConversationID == "" {
		return nil
	}
	sup := debug.Register(r, env.Sandbox, env.Workspace, env.Context, debug.Options{
		Host:     env.Sandbox.Ref() == "host",
		Claim:    func() (func(), error) { return env.Claim("debug") },
		Resident: env.Resident,
	})
	env.adoptState(ctx, "debug", sup.Adopt) // also without a resident: a lost delve session is reported
	env.Persist("debug", sup)
	env.OnCloseOrDetach(sup.Close, sup.Detach)
	env.AddResources(sup.Resources)
	return nil
}

// VibeConfig says how a run's vibe workers run (docs/tools.md §10). Runner is
// "platform" (the default: berth publishes vibe.spawn, vibe.send and
// vibe.kill on the run's event stream and the hosting platform, which has
// its own agent loop, reports back with POST /v1/runs/{id}/workers/{worker}),
// "command" (Command runs in the sandbox, brief on stdin, result on stdout)
// or "openai" (berth's own agent loop against an OpenAI-compatible endpoint,
// whose tools are a sub-run of the run: the same sandbox, workspace and
// permission gate).
type VibeConfig struct {
	Runner string
	// Command and TierArgs configure the command runner.
	Command  []string
	TierArgs map[string][]string
	// BaseURL, APIKey and Models (tier → model) configure the openai
	// runner. The key is never logged.
	BaseURL string
	APIKey  string
	Models  map[string]string
}

// VibeTools registers the vibe_* tools for runs opened with Vibe set
// (docs/tools.md §10: registered only while vibe mode is on), with the runner of
// cfg. Worker status changes are published on the run's event stream as
// "vibe.worker"; the run's close kills every worker and what it started.
func VibeTools(cfg VibeConfig) Binder {
	return func(ctx context.Context, r *tools.Registry, env *Env) error {
		if !env.Spec.Vibe {
			return nil
		}
		var runner vibe.Runner
		switch cfg.Runner {
		case "", "platform":
			if env.Questions == nil {
				return errors.New("vibe: the platform runner needs the run's event stream, and this run has none; configure a command or openai runner")
			}
			runner = vibe.Platform(publisher{env.Questions})
		case "command":
			if len(cfg.Command) == 0 {
				return errors.New("vibe: the command runner needs a command")
			}
			runner = vibe.Command(vibe.CommandOptions{Sandbox: env.Sandbox, Args: cfg.Command, TierArgs: cfg.TierArgs, Dir: env.Workspace.Root()})
		case "openai":
			runner = vibe.OpenAI(vibe.OpenAIOptions{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Models: cfg.Models, Tools: func() *tools.Registry {
				sub := tools.NewRegistry()
				files.Register(sub, env.Workspace)
				structural.Register(sub, env.Workspace, structural.NewEngine(structural.Options{}))
				sub.Use(env.Gate.Wrap) // the worker's edits pass the run's permission gate
				return sub
			}})
		default:
			return fmt.Errorf("vibe: unknown runner %q: use platform, command or openai", cfg.Runner)
		}
		opts := vibe.Options{Runner: runner}
		if env.Questions != nil {
			opts.Notify = func(w vibe.WorkerInfo) { env.Questions.Publish("vibe.worker", w) }
		}
		sup := vibe.Register(r, env.Context, opts)
		if b := env.Adopted("vibe"); b != nil {
			lost, err := sup.Restore(b)
			if err != nil {
				env.Problem(fmt.Sprintf("run %s: vibe workers: %v", env.RunID, err))
			}
			for _, l := range lost {
				env.Problem(fmt.Sprintf("run %s: %s", env.RunID, l))
			}
		}
		env.Persist("vibe", sup)
		env.Workers = vibeWorkers{sup}
		// A platform's workers go on while berth restarts (Detach).
		env.OnCloseOrDetach(sup.Close, sup.Detach)
		env.AddResources(sup.Resources)
		return nil
	}
}

// vibeWorkers is a vibe [vibe.Supervisor] as the run's [Workers].
type vibeWorkers struct{ *vibe.Supervisor }

var _ Workers = vibeWorkers{}

func (v vibeWorkers) Workers() any { return v.Supervisor.Workers() }

func (v vibeWorkers) Report(workerID, status, result string) error {
	err := v.Supervisor.Report(workerID, status, result)
	if errors.Is(err, vibe.ErrNotFound) {
		return unknownWorker{err}
	}
	return err
}

// unknownWorker is vibe's error for a worker id it does not know, keeping
// its message, as [ErrUnknownWorker].
type unknownWorker struct{ error }

func (e unknownWorker) Is(target error) bool { return target == ErrUnknownWorker }
func (e unknownWorker) Unwrap() error        { return e.error }

// publisher publishes vibe's platform events on a run's event stream. An
// event that cannot be published (the run is closing) is dropped: the
// worker ends with the run anyway.
type publisher struct{ p *questions.Port }

func (p publisher) Publish(eventType string, data any) { p.p.Publish(eventType, data) }

// prewarmApproverWait is how long a prewarm that needs a permission card
// waits for someone to connect to the run's events to draw it for.
const prewarmApproverWait = time.Minute

// waitConnected waits, at most within, until someone follows port's
// events, and says whether someone does.
func waitConnected(ctx context.Context, port *questions.Port, within time.Duration) bool {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(within)
	for !port.Connected() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-t.C:
		}
	}
	return true
}

// MaxPrewarm bounds RunSpec.Prewarm.
const MaxPrewarm = 6

// lspPrefix marks a language server in RunSpec.Prewarm.
const lspPrefix = "lsp:"

// checkPrewarm validates spec.Prewarm and puts its entries in canonical
// form, once each: kernels in eval's names, language servers as "lsp:"
// and a language id of the default server table.
func checkPrewarm(spec *RunSpec) error {
	if len(spec.Prewarm) == 0 {
		return nil
	}
	if len(spec.Prewarm) > MaxPrewarm {
		return fmt.Errorf("controller: prewarm lists %d entries, more than %d: name each kernel (python, javascript) and language server (lsp:go) once: %w", len(spec.Prewarm), MaxPrewarm, ErrBadSpec)
	}
	var out []string
	for _, name := range spec.Prewarm {
		if lang, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(name)), lspPrefix); ok {
			if _, known := lsp.LanguageExt(lsp.DefaultServers(), lang); !known {
				return fmt.Errorf("controller: prewarm %q: no language server handles %q; name one of %s after lsp: %w", name, lang, strings.Join(lsp.Languages(lsp.DefaultServers()), ", "), ErrBadSpec)
			}
			if e := lspPrefix + lang; !slices.Contains(out, e) {
				out = append(out, e)
			}
			continue
		}
		lang, err := eval.ParseLanguage(name)
		if err != nil || name == "" {
			return fmt.Errorf("controller: prewarm %q: a kernel language is python or javascript, a language server lsp: and its language (lsp:go): %w", name, ErrBadSpec)
		}
		if spec.Mode.MaxLevel() < tools.LevelExec {
			return fmt.Errorf("controller: prewarm %q starts a kernel, which is exec level, and a %s run cannot run exec-level tools: open the run without it: %w", name, spec.Mode, ErrBadSpec)
		}
		if !slices.Contains(out, lang) {
			out = append(out, lang)
		}
	}
	spec.Prewarm = out
	return nil
}

// splitPrewarm parts a checked Prewarm list into kernel languages and
// language-server languages.
func splitPrewarm(list []string) (kernels, servers []string) {
	for _, e := range list {
		if lang, ok := strings.CutPrefix(e, lspPrefix); ok {
			servers = append(servers, lang)
		} else {
			kernels = append(kernels, e)
		}
	}
	return kernels, servers
}
