// Package permission is the permission gate (docs/tools.md ASK-2): a
// [tools.Middleware] that decides, per surface and per tool or level,
// whether a call runs ([Allow]), is refused ([Deny]), or waits for a human
// ([Ask]) who answers a permission card drawn through the run's question
// port — the same numbered cards as ask_user.
//
// Because it is registry middleware it applies to every entry into a tool:
// a model's call, the eval tool() bridge (which calls the registry on the
// caller's surface), and a worker's sub-registry that Uses the same [Gate].
//
// Refusals:
//   - a policy Deny is a call error wrapping tools.ErrDenied (HTTP 403),
//     like a tool above the surface's level;
//   - a human's deny, no approver connected (fail-closed), and a card that
//     timed out are tool errors (a Result with IsError) telling the model
//     the call was refused and not to retry it unchanged.
package permission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"berth.dev/berth/questions"
	"berth.dev/berth/tools"
)

// DefaultTimeout is how long a permission card waits for a decision
// before the call is refused.
const DefaultTimeout = 10 * time.Minute

// MaxSummaryBytes bounds the arguments shown on a permission card.
const MaxSummaryBytes = 1 << 10

// Action is what the gate does with a call.
type Action string

const (
	Allow Action = "allow" // run it
	Ask   Action = "ask"   // draw a permission card and wait for a decision
	Deny  Action = "deny"  // refuse it
)

// Mode is how berth is deployed; it picks the default policy.
type Mode string

const (
	// ModeLocal: a developer's own machine. Every level is allowed.
	ModeLocal Mode = "local"
	// ModeHosted: a platform serving others. read is allowed; write and
	// exec ask.
	ModeHosted Mode = "hosted"
)

// ParseMode validates a mode name; empty means ModeLocal.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "":
		return ModeLocal, nil
	case ModeLocal, ModeHosted:
		return Mode(s), nil
	}
	return "", fmt.Errorf("permission: unknown mode %q: use local or hosted", s)
}

// Rule is one line of a [Policy]. Empty Surface, empty Tool and zero
// Level match anything.
type Rule struct {
	Surface tools.Surface
	Tool    string
	Level   tools.Level
	Action  Action
}

func (r Rule) matches(s tools.Surface, t tools.Tool) bool {
	return (r.Surface == "" || r.Surface == s) && (r.Tool == "" || r.Tool == t.Name) && (r.Level == 0 || r.Level == t.Level)
}

// Policy is an ordered list of rules: the first that matches a call
// decides. A call no rule matches is asked about (fail-closed).
type Policy struct {
	Rules []Rule
}

// DefaultPolicy is the policy of a mode: read is always allowed; write and
// exec ask in ModeHosted and are allowed in ModeLocal.
func DefaultPolicy(m Mode) Policy {
	rest := Allow
	if m == ModeHosted {
		rest = Ask
	}
	return Policy{Rules: []Rule{
		{Level: tools.LevelRead, Action: Allow},
		{Level: tools.LevelWrite, Action: rest},
		{Level: tools.LevelExec, Action: rest},
	}}
}

// Decide returns the action for tool t called on surface s.
func (p Policy) Decide(s tools.Surface, t tools.Tool) Action {
	a, _ := p.decision(s, t)
	return a
}

// Options configure [New].
type Options struct {
	// Timeout overrides DefaultTimeout for a permission card.
	Timeout time.Duration
	// Audit, when set, receives the record of every decision.
	Audit func(Audit)
}

// Gate is one run's permission gate. It remembers "allow for this run"
// decisions, so every registry that Uses the same Gate shares them. It is
// safe for concurrent use.
type Gate struct {
	policy  Policy
	port    *questions.Port // nil: nobody can approve, Ask denies
	timeout time.Duration
	audit   func(Audit)

	mu      sync.Mutex
	allowed map[string]bool // tools allowed for the rest of the run
}

// New returns a gate applying policy, drawing permission cards through port
// (nil: no approver, so every Ask is refused).
func New(policy Policy, port *questions.Port, opts Options) *Gate {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Gate{policy: policy, port: port, timeout: opts.Timeout, audit: opts.Audit, allowed: map[string]bool{}}
}

var _ tools.Middleware = (*Gate)(nil).Wrap

// Wrap is the gate as a [tools.Middleware]: reg.Use(g.Wrap).
func (g *Gate) Wrap(t tools.Tool, next tools.Handler) tools.Handler {
	return func(ctx context.Context, args json.RawMessage) (*tools.Result, error) {
		s := tools.SurfaceOf(ctx)
		ctx = tools.WithStepApprover(ctx, func(ctx context.Context, step tools.Step) error { return g.ApproveStep(ctx, s, step) })
		if res, err := g.decide(ctx, s, t, args); res != nil || err != nil {
			return res, err
		}
		return next(ctx, args)
	}
}

// decide is the gate's decision on a call of t with args on surface s:
// nil and nil to run it, else the refusal (a result for the model, or a
// call error).
func (g *Gate) decide(ctx context.Context, s tools.Surface, t tools.Tool, args json.RawMessage) (*tools.Result, error) {
	action, rule := g.policy.decision(s, t)
	rec := &Audit{Tool: t.Name, Level: t.Level.String(), Surface: string(s), Rule: rule}
	if g.audit != nil {
		rec.Call, rec.Summary = Digest(args), Summary(args)
	}
	defer g.record(rec)
	switch action {
	case Allow:
		rec.Outcome = OutcomeAllowed
		return nil, nil
	case Deny:
		rec.Outcome = OutcomeDenied
		return nil, fmt.Errorf("permission: the operator's policy forbids %s on the %s surface: %w; do not call it again in this run, find another way or tell the user", t.Name, s, tools.ErrDenied)
	}
	g.mu.Lock()
	ok := g.allowed[t.Name]
	g.mu.Unlock()
	if ok {
		rec.Outcome = OutcomeAllowedBefore
		return nil, nil
	}
	return g.ask(ctx, s, t, args, rec)
}

// Approve decides a call of t with args on surface s exactly as Wrap
// would, for what berth does on the run's behalf that such a call would
// do (starting a kernel before the run's first eval, asked for as the run
// opened): nil means go ahead; an "allow for this run" answer allows t for
// the rest of the run, as on a call's card. A refusal says why.
func (g *Gate) Approve(ctx context.Context, s tools.Surface, t tools.Tool, args json.RawMessage) error {
	if t.Level > s.MaxLevel() {
		return fmt.Errorf("permission: %s is a %s-level tool and the %s surface allows only %s: %w", t.Name, t.Level, s, s.MaxLevel(), tools.ErrDenied)
	}
	res, err := g.decide(ctx, s, t, args)
	switch {
	case err != nil:
		return err
	case res != nil:
		// The refusal without its advice to a model about retrying.
		why, _, _ := strings.Cut(res.AllText(), ". Do not retry")
		return fmt.Errorf("%s: %w", why, tools.ErrDenied)
	}
	return nil
}

// ask draws a permission card; a nil result and error mean approved.
func (g *Gate) ask(ctx context.Context, s tools.Surface, t tools.Tool, args json.RawMessage, rec *Audit) (*tools.Result, error) {
	rec.Outcome = OutcomeRefused // until a decision says otherwise
	if g.port == nil {
		rec.Reason = "no approver can be reached in this run"
		return refused(t, rec.Reason), nil
	}
	wctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	detail, tooLarge := Detail(t.Name, args)
	card, a, err := g.port.Ask(wctx, questions.Card{
		Kind:     questions.KindPermission,
		Tool:     t.Name,
		Level:    t.Level.String(),
		Surface:  string(s),
		Summary:  Summary(args),
		Detail:   detail,
		TooLarge: tooLarge,
	})
	rec.Card, rec.By = card.N, a.By
	switch {
	case errors.Is(err, questions.ErrNoSubscriber):
		rec.Reason = "no approver is connected to this run"
		return refused(t, rec.Reason), nil
	case err != nil && ctx.Err() != nil:
		rec.Reason = "the call ended while the card was open: " + ctx.Err().Error()
		return nil, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		rec.Reason = fmt.Sprintf("permission card %d got no decision within %v", card.N, g.timeout.Round(time.Second))
		return refused(t, rec.Reason), nil
	case err != nil:
		rec.Reason = err.Error()
		return refused(t, rec.Reason), nil
	}
	switch {
	case tooLarge:
		// The port refuses approve on such a card; never run what was not shown.
		rec.Outcome = OutcomeRejected
		return refused(t, fmt.Sprintf("the call is too large to show whole on a permission card (%d bytes; a card shows at most %d KiB), so the operator could only deny it (permission card %d): split the work into smaller calls", len(args), MaxDetailBytes>>10, card.N)), nil
	case a.Decision == questions.Approve:
		rec.Outcome = OutcomeApproved
		return nil, nil
	case a.Decision == questions.AllowRun:
		rec.Outcome = OutcomeAllowRun
		g.mu.Lock()
		g.allowed[t.Name] = true
		g.mu.Unlock()
		return nil, nil
	}
	rec.Outcome = OutcomeRejected
	return refused(t, fmt.Sprintf("the operator denied it (permission card %d)", card.N)), nil
}

func refused(t tools.Tool, why string) *tools.Result {
	return tools.Errorf("permission: %s was not run: %s. Do not retry the same call; continue without it, or ask the user (ask_user) how to proceed.", t.Name, why)
}

// Summary renders a call's arguments as a permission card's headline:
// compact JSON, cut to MaxSummaryBytes, with what would not show as
// itself escaped as in [Detail], which is the whole call.
func Summary(args json.RawMessage) string {
	s := string(args)
	var buf bytes.Buffer
	if json.Compact(&buf, args) == nil {
		s = buf.String()
	}
	if len(s) <= MaxSummaryBytes {
		return visible(s)
	}
	cut := MaxSummaryBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return visible(s[:cut]) + fmt.Sprintf("… (%d bytes in all)", len(s))
}

// ApproveStep decides a step inside a call made on surface s (see
// [tools.ApproveStep], through which tools reach it): refused when s does
// not allow the step's level; else the policy decides it as a call of
// step.Tool at step.Level — Allow runs it, Deny refuses it, Ask draws a
// permission card whose summary is the step's exact command line and why it
// needs approval. "Allow for this run" on such a card allows that same
// command (not the tool) for the rest of the run. Every refusal wraps
// tools.ErrStepRefused and says what to do instead.
func (g *Gate) ApproveStep(ctx context.Context, s tools.Surface, step tools.Step) error {
	if step.Level > s.MaxLevel() {
		return fmt.Errorf("permission: %s did not run %q: %s; it is a %s-level step and the %s surface allows only %s, so a plan or readonly run cannot run project code: %w",
			step.Tool, step.Command, step.Why, step.Level, s, s.MaxLevel(), tools.ErrStepRefused)
	}
	t := tools.Tool{Name: step.Tool, Level: step.Level}
	action, rule := g.policy.decision(s, t)
	rec := &Audit{Tool: step.Tool, Level: step.Level.String(), Surface: string(s), Rule: rule, Call: Digest([]byte(step.Command)), Summary: StepSummary(step)}
	defer g.record(rec)
	refuse := func(why string) error {
		if rec.Outcome == "" {
			rec.Outcome, rec.Reason = OutcomeRefused, why
		}
		return fmt.Errorf("permission: %s did not run %q (%s): %s; do not retry it unchanged, ask the operator to allow %s-level steps or run the check in a container: %w",
			step.Tool, step.Command, step.Why, why, step.Level, tools.ErrStepRefused)
	}
	switch action {
	case Allow:
		rec.Outcome = OutcomeAllowed
		return nil
	case Deny:
		rec.Outcome = OutcomeDenied
		return refuse(fmt.Sprintf("the operator's policy forbids %s-level steps of %s on the %s surface", step.Level, step.Tool, s))
	}
	key := "step " + step.Tool + ": " + step.Command
	g.mu.Lock()
	ok := g.allowed[key]
	g.mu.Unlock()
	if ok {
		rec.Outcome = OutcomeAllowedBefore
		return nil
	}
	if g.port == nil {
		return refuse("no approver can be reached in this run")
	}
	wctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	card, a, err := g.port.Ask(wctx, questions.Card{
		Kind:    questions.KindPermission,
		Tool:    step.Tool,
		Level:   step.Level.String(),
		Surface: string(s),
		Summary: StepSummary(step),
	})
	rec.Card, rec.By = card.N, a.By
	switch {
	case errors.Is(err, questions.ErrNoSubscriber):
		return refuse("no approver is connected to this run")
	case err != nil && ctx.Err() != nil:
		rec.Outcome, rec.Reason = OutcomeRefused, "the call ended while the card was open: "+ctx.Err().Error()
		return fmt.Errorf("permission: %s stopped waiting for approval of %q: %w", step.Tool, step.Command, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return refuse(fmt.Sprintf("permission card %d got no decision within %v", card.N, g.timeout.Round(time.Second)))
	case err != nil:
		return refuse(err.Error())
	}
	switch a.Decision {
	case questions.Approve:
		rec.Outcome = OutcomeApproved
		return nil
	case questions.AllowRun:
		rec.Outcome = OutcomeAllowRun
		g.mu.Lock()
		g.allowed[key] = true
		g.mu.Unlock()
		return nil
	}
	rec.Outcome = OutcomeRejected
	return refuse(fmt.Sprintf("the operator denied it (permission card %d)", card.N))
}

// StepSummary is a step's permission card summary: the whole command line,
// never cut, and why it needs approval.
func StepSummary(step tools.Step) string {
	return fmt.Sprintf("step of %s: %s\nwhy: %s", step.Tool, visible(step.Command), visible(step.Why))
}
