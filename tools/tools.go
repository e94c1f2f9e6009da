// Package tools holds what every berth tool shares: the [Tool] description,
// approval [Level]s and [Surface]s, the per-run [Registry] that enforces them,
// and the [Result] shape (MCP's CallToolResult).
//
// A tool package (tools/files, tools/lsp, …) registers handlers bound to one
// run's resources; the controller builds one Registry per run. Every entry
// into a tool — HTTP, the Go API, the eval tool() bridge, workers — goes
// through [Registry.Call], which checks the surface before it decodes a single
// argument.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// Level is what a tool may do. Levels are ordered: a surface that allows
// LevelExec also allows LevelWrite and LevelRead.
type Level int

const (
	LevelRead  Level = iota + 1 // no side effects
	LevelWrite                  // changes files
	LevelExec                   // starts or controls a process
)

func (l Level) String() string {
	switch l {
	case LevelRead:
		return "read"
	case LevelWrite:
		return "write"
	case LevelExec:
		return "exec"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// MarshalText encodes the level as "read", "write" or "exec".
func (l Level) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// Surface is where a tool list is shown: the main agent, plan mode, or a
// read-only sub-agent (LVL-2).
type Surface string

const (
	SurfaceDefault  Surface = "default"
	SurfacePlan     Surface = "plan"
	SurfaceReadonly Surface = "readonly"
)

// Surfaces lists the known surfaces.
var Surfaces = []Surface{SurfaceDefault, SurfacePlan, SurfaceReadonly}

// MaxLevel is the highest level a surface may see and call.
func (s Surface) MaxLevel() Level {
	switch s {
	case SurfaceDefault:
		return LevelExec
	case SurfacePlan, SurfaceReadonly:
		return LevelRead
	}
	return 0
}

type surfaceKey struct{}

// SurfaceOf returns the surface a tool call was made on, for a tool that
// calls other tools on the caller's behalf (eval's tool() bridge) and must
// pass the same gate. Outside a call it is SurfaceReadonly, the narrowest.
func SurfaceOf(ctx context.Context) Surface {
	if s, ok := ctx.Value(surfaceKey{}).(Surface); ok {
		return s
	}
	return SurfaceReadonly
}

// ParseSurface validates a surface name; empty means SurfaceDefault.
func ParseSurface(s string) (Surface, error) {
	if s == "" {
		return SurfaceDefault, nil
	}
	for _, k := range Surfaces {
		if string(k) == s {
			return k, nil
		}
	}
	return "", &InputError{Msg: fmt.Sprintf("unknown surface %q: use one of default, plan, readonly", s)}
}

// Tool describes one tool.
type Tool struct {
	Name        string
	Description string
	Level       Level
	// Serial tools (debug, eval) keep state across calls; the registry runs
	// at most one call of each Serial tool of a run at a time. Each has its
	// own slot: a cell that keeps running does not hold off a debug call.
	Serial bool
	// Output, for a tool whose every successful result carries
	// StructuredContent of one fixed shape, is that shape's JSON Schema
	// (OutputOf); nil for the others. MCP lists it as the tool's
	// outputSchema, and clients check the results against it.
	Output *jsonschema.Schema
	// Hints tell a client how the tool behaves (MCP's tool annotations).
	Hints Hints
}

// Hints describe a tool's effects for clients that decide what to confirm
// (MCP's destructiveHint, idempotentHint and openWorldHint). The zero value
// is the most cautious: destructive, not idempotent, open world. A read
// level tool is read-only whatever they say.
type Hints struct {
	// Additive: the tool changes no file in place; it only adds or stages
	// what another call applies (ast_edit stages, resolve applies).
	Additive bool
	// Idempotent: calling it again with the same arguments has no further
	// effect.
	Idempotent bool
	// Confined: it reaches nothing outside the run's sandbox and
	// workspace (no network, no human, no other service).
	Confined bool
}

// OutputOf is the JSON Schema of T's JSON encoding, for Tool.Output. It
// panics when T has none (a programming error).
func OutputOf[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("tools: output schema of %T: %v", *new(T), err))
	}
	return s
}

// Info is a tool as listed to a surface.
type Info struct {
	Name         string             `json:"name"`
	Description  string             `json:"description"`
	Level        Level              `json:"level"`
	InputSchema  *jsonschema.Schema `json:"inputSchema"`
	OutputSchema *jsonschema.Schema `json:"outputSchema,omitempty"`
	Hints        Hints              `json:"-"`
}

// Handler runs a tool with raw JSON arguments. An error that is not a call
// error (see [IsCallError]) is the tool's failure: the registry returns it
// to the caller as a Result with IsError.
type Handler func(ctx context.Context, args json.RawMessage) (*Result, error)

// Middleware wraps the handler of a tool, for cross-cutting behaviour such as
// diagnostics after a write. It is applied at Call time, so middleware added
// after a tool was registered still applies.
type Middleware func(t Tool, next Handler) Handler

// Call errors. A tool's own failure that the model should act on is a
// Result with IsError set, not an error: a handler returns it as any other
// error (an [*Error] or a wrapped one) and the registry turns it into that
// Result. Only these, an [*InputError] and the end of the call's context
// stay errors of the call.
var (
	// ErrUnknownTool: no tool of that name is registered for this run (HTTP 404).
	ErrUnknownTool = errors.New("unknown tool")
	// ErrDenied: the tool exists but the surface's level does not allow it,
	// or a permission gate refused it (HTTP 403).
	ErrDenied = errors.New("denied")
)

// InputError is a call error caused by the caller's input: malformed JSON,
// arguments that do not fit the schema (HTTP 400).
type InputError struct {
	Tool string
	Msg  string
	Err  error
}

func (e *InputError) Error() string {
	if e.Tool != "" {
		return fmt.Sprintf("tools: bad arguments for %s: %s", e.Tool, e.Msg)
	}
	return "tools: " + e.Msg
}

func (e *InputError) Unwrap() error { return e.Err }

// Error is a tool's failure written for the model: what failed, why, and
// what to call next. A handler returns it like any error; so do the shared
// pieces under tools/ (tools/workspace's path checks), so that a message
// reaches the model as written, whichever package wrote it.
type Error struct {
	Msg   string
	cause error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.cause }

// Fail returns an [*Error] with a formatted message. Use %w to keep a cause
// for errors.Is; the message is the whole text.
func Fail(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Msg: err.Error(), cause: errors.Unwrap(err)}
}

// IsCallError reports whether err, returned by a handler or middleware while
// ctx is the call's context, ends the call as an error rather than becoming
// a tool error for the model: unknown tool, denied, bad input, or ctx's end.
func IsCallError(ctx context.Context, err error) bool {
	var ie *InputError
	switch {
	case errors.Is(err, ErrUnknownTool), errors.Is(err, ErrDenied), errors.As(err, &ie):
		return true
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return true
	}
	return false
}

// settle is what every handler's answer goes through: a call error stays
// one (ctx's end as ctx.Err()), any other error becomes a Result with
// IsError and the error's text, and a nil Result an empty one.
func settle(ctx context.Context, res *Result, err error) (*Result, error) {
	if err == nil {
		if res == nil {
			res = &Result{}
		}
		return res, nil
	}
	if IsCallError(ctx, err) {
		if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return Errorf("%s", err.Error()), nil
}

// Registry is one run's set of tools. It is safe for concurrent use.
type Registry struct {
	mu         sync.RWMutex
	tools      map[string]*entry
	middleware []Middleware
}

type entry struct {
	tool    Tool
	schema  *jsonschema.Schema
	handler Handler
	serial  chan struct{} // for a Serial tool: the token its running call holds
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{tools: map[string]*entry{}}
}

// Option adjusts the input schema that [Register] derives from In. listed
// says which of the two schemas it adjusts: the one the tool is listed
// with, or the one arguments are validated against before the handler.
type Option func(s *jsonschema.Schema, listed bool)

// Enum lists values as the only ones of a top-level string property (an
// action, an operation): the listed schema says so, so a model picks one.
// The handler still sees any other string — the tool answers it with its
// own "use one of …" tool error (or accepts a spelling it normalises, as
// " Continue "), which tells the model more than a schema violation
// would. It panics, when the tool is registered, if the schema has no such
// property.
func Enum(property string, values ...string) Option {
	return func(s *jsonschema.Schema, listed bool) {
		p, ok := s.Properties[property]
		if !ok || p == nil {
			panic(fmt.Sprintf("tools: Enum: the input schema has no property %q", property))
		}
		if !listed {
			return
		}
		p.Enum = make([]any, len(values))
		for i, v := range values {
			p.Enum[i] = v
		}
	}
}

// Register adds a tool whose input is decoded into In, with its JSON Schema
// derived from In (field tags `json` and `jsonschema:"description"`) and
// then adjusted by opts. Unknown fields, malformed JSON and arguments the
// schema refuses are InputErrors before h runs (an [Enum] is listed, and
// left to h). It panics on a programming
// error: a duplicate name, a missing level, or an In that has no schema.
func Register[In any](r *Registry, t Tool, h func(context.Context, In) (*Result, error), opts ...Option) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tools: schema for %s: %v", t.Name, err))
	}
	checked, err := jsonschema.For[In](nil) // a copy of its own, for validation
	if err != nil {
		panic(fmt.Sprintf("tools: schema for %s: %v", t.Name, err))
	}
	for _, o := range opts {
		o(schema, true)
		o(checked, false)
	}
	resolved, err := checked.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("tools: schema for %s: %v", t.Name, err))
	}
	raw := func(ctx context.Context, args json.RawMessage) (*Result, error) {
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		var generic any
		if err := json.Unmarshal(args, &generic); err != nil {
			return nil, &InputError{Tool: t.Name, Msg: "arguments are not valid JSON: " + err.Error(), Err: err}
		}
		if err := resolved.Validate(generic); err != nil {
			return nil, &InputError{Tool: t.Name, Msg: err.Error(), Err: err}
		}
		var in In
		dec := json.NewDecoder(strings.NewReader(string(args)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return nil, &InputError{Tool: t.Name, Msg: err.Error(), Err: err}
		}
		return h(ctx, in)
	}
	r.add(t, schema, raw)
}

// RegisterRaw adds a tool with a hand-written schema and raw arguments.
func (r *Registry) RegisterRaw(t Tool, schema *jsonschema.Schema, h Handler) {
	r.add(t, schema, h)
}

func (r *Registry) add(t Tool, schema *jsonschema.Schema, h Handler) {
	if t.Name == "" || t.Level < LevelRead || t.Level > LevelExec {
		panic(fmt.Sprintf("tools: tool %q needs a name and a level", t.Name))
	}
	if reflect.ValueOf(h).IsNil() {
		panic("tools: nil handler for " + t.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.tools[t.Name]; dup {
		panic("tools: duplicate tool " + t.Name)
	}
	e := &entry{tool: t, schema: schema, handler: func(ctx context.Context, args json.RawMessage) (*Result, error) {
		res, err := h(ctx, args)
		return settle(ctx, res, err)
	}}
	if t.Serial {
		e.serial = make(chan struct{}, 1)
	}
	r.tools[t.Name] = e
}

// Use adds middleware that wraps every tool's handler, outermost last.
func (r *Registry) Use(m Middleware) {
	r.mu.Lock()
	r.middleware = append(r.middleware, m)
	r.mu.Unlock()
}

// List returns the tools the surface may see, sorted by name. An unknown
// surface sees nothing.
func (r *Registry) List(s Surface) []Info {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []Info
	for _, e := range r.tools {
		if e.tool.Level <= s.MaxLevel() {
			out = append(out, Info{Name: e.tool.Name, Description: e.tool.Description, Level: e.tool.Level, InputSchema: e.schema, OutputSchema: e.tool.Output, Hints: e.tool.Hints})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns a registered tool's description.
func (r *Registry) Lookup(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.tools[name]
	if !ok {
		return Tool{}, false
	}
	return e.tool, true
}

// Call runs a tool on behalf of a surface. The surface is checked before the
// arguments are decoded (LVL-1, LVL-2): a tool above the surface's level is
// refused with ErrDenied even when called by name. Tool failures the model
// should act on come back as a Result with IsError; err is a call error
// (ErrUnknownTool, ErrDenied, *InputError) or ctx's error.
func (r *Registry) Call(ctx context.Context, s Surface, name string, args json.RawMessage) (*Result, error) {
	r.mu.RLock()
	e, ok := r.tools[name]
	mws := r.middleware
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("tools: %w %q: call one of the tools listed for this run", ErrUnknownTool, name)
	}
	if s.MaxLevel() == 0 {
		return nil, &InputError{Tool: name, Msg: fmt.Sprintf("unknown surface %q: use one of default, plan, readonly", s)}
	}
	if e.tool.Level > s.MaxLevel() {
		return nil, fmt.Errorf("tools: %s is a %s-level tool and the %s surface allows only %s: %w",
			name, e.tool.Level, s, s.MaxLevel(), ErrDenied)
	}
	h := e.handler
	for _, m := range mws {
		h = m(e.tool, h)
	}
	ctx = context.WithValue(ctx, surfaceKey{}, s)
	if e.serial != nil {
		select {
		case e.serial <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("tools: %s waited for another %s call of this run to finish: %w", name, name, ctx.Err())
		}
		defer func() { <-e.serial }()
	}
	res, err := h(ctx, args)
	if err == nil && res == nil {
		res = &Result{}
	}
	return res, err
}

// Step is a program that a tool of a lower level would run and that does
// more than the tool's level says: a read-level project check whose checker
// executes the project's own code (cargo check runs build scripts and proc
// macros). Such a step is asked for as if it were a call of Level.
type Step struct {
	// Tool is the tool running the step ("lsp").
	Tool string
	// Level is the step's own level, normally LevelExec.
	Level Level
	// Command is the exact command line that would run (environment
	// assignments, the program and its arguments, and the directory); a
	// permission card shows it verbatim.
	Command string
	// Why says what in the step executes project code, for the card and
	// for the refusal.
	Why string
}

// ErrStepRefused is wrapped by every refusal of [ApproveStep].
var ErrStepRefused = errors.New("step refused")

// StepApprover decides a [Step] for the call whose context carries it: nil
// means it may run.
type StepApprover func(ctx context.Context, step Step) error

type stepApproverKey struct{}

// WithStepApprover returns ctx carrying a, for the handler of one call. The
// permission gate installs it (tools/permission's Gate.Wrap); nothing else
// should.
func WithStepApprover(ctx context.Context, a StepApprover) context.Context {
	return context.WithValue(ctx, stepApproverKey{}, a)
}

// ApproveStep asks the permission gate of the current call whether a step
// inside a lower-level tool may run. It refuses, with an error wrapping
// ErrStepRefused that says why and what to do instead, when the call's
// surface (SurfaceOf) does not allow the step's level (plan and readonly
// runs), when no gate is in ctx (fail closed), or when the gate's policy or
// the operator refuses it. A nil error means the step may run now.
func ApproveStep(ctx context.Context, step Step) error {
	if step.Level < LevelRead || step.Level > LevelExec {
		return fmt.Errorf("tools: step %q of %s has no level: %w", step.Command, step.Tool, ErrStepRefused)
	}
	s := SurfaceOf(ctx)
	if step.Level > s.MaxLevel() {
		return fmt.Errorf("tools: %s did not run %q: %s; it is a %s-level step and the %s surface allows only %s, so a plan or readonly run cannot run project code: %w",
			step.Tool, step.Command, step.Why, step.Level, s, s.MaxLevel(), ErrStepRefused)
	}
	a, _ := ctx.Value(stepApproverKey{}).(StepApprover)
	if a == nil {
		return fmt.Errorf("tools: %s did not run %q: %s; this call has no permission gate to approve a %s-level step: %w",
			step.Tool, step.Command, step.Why, step.Level, ErrStepRefused)
	}
	return a(ctx, step)
}
