package debug

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"berth.dev/berth/dap"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/workspace"
)

// Input is the debug tool's arguments: op selects the operation, the other
// fields are its arguments. The schema prefixes each argument's
// description with the operations that read it (see [ops]).
type Input struct {
	Op string `json:"op" jsonschema:"the operation"`
	// Adapter's values are listed from the adapter table (schemaOptions).
	Adapter     string            `json:"adapter,omitempty" jsonschema:"the debug adapter; by default chosen from the program"`
	File        string            `json:"file,omitempty" jsonschema:"the source file, relative to the workspace"`
	Lines       []any             `json:"lines,omitempty" jsonschema:"line numbers, or objects {line, condition, hit_condition, log_message}; empty clears the file"`
	Program     string            `json:"program,omitempty" jsonschema:"the program, relative to the workspace"`
	Module      string            `json:"module,omitempty" jsonschema:"a Python module to run as python -m does, instead of program (debugpy only; for delve a package directory is the program)"`
	Args        []string          `json:"args,omitempty" jsonschema:"the program's arguments"`
	Cwd         string            `json:"cwd,omitempty" jsonschema:"the program's working directory, relative to the workspace; default the project root"`
	Env         map[string]string `json:"env,omitempty" jsonschema:"environment variables for the program, NAME to value, added to the sandbox's own"`
	StopOnEntry bool              `json:"stop_on_entry,omitempty" jsonschema:"stop at the program's first line"`
	Test        bool              `json:"test,omitempty" jsonschema:"debug the Go package's tests, as go test runs them (delve's test mode): program is the package directory; a _test.go program or test_run implies it"`
	TestRun     string            `json:"test_run,omitempty" jsonschema:"the tests to run, a regular expression as go test -run takes it (^TestName$, TestA|TestB, TestX/sub); default all, or for a _test.go program the tests it declares"`
	Port        int               `json:"port,omitempty" jsonschema:"the port the debuggee listens on, on 127.0.0.1 inside the sandbox"`
	ThreadID    int               `json:"thread_id,omitempty" jsonschema:"the thread; default the stopped thread"`
	FrameID     int               `json:"frame_id,omitempty" jsonschema:"the frame id from stack; default the top frame of the stopped thread"`
	Reference   int               `json:"reference,omitempty" jsonschema:"a reference from scopes, variables or evaluate"`
	Start       int               `json:"start,omitempty" jsonschema:"skip this many children, to page past the first ones"`
	Expression  string            `json:"expression,omitempty" jsonschema:"the expression, evaluated in the frame's scope"`
}

// op is one operation of the debug tool. [ops] is the one place an
// operation is named: the tool's description, the enum of op, the
// argument descriptions, every message that lists the
// operations and the dispatch are all rendered from it.
type op struct {
	name string
	// args are the Input fields the operation reads, by JSON name, as the
	// description shows them: "[x]" is optional, "x[]" a list.
	args []string
	doc  string
	// live says the operation needs a live session; without one it is
	// refused before run is called.
	live bool
	run  func(s *Supervisor, ctx context.Context, in Input, cur *session) (reply, error)
}

// step is a run-control operation that resumes a stopped thread with act.
func step(name string, act func(ds *dap.Session, ctx context.Context, threadID int) error) op {
	return op{name: name, args: []string{"[thread_id]"}, doc: resumeDoc, live: true,
		run: func(s *Supervisor, ctx context.Context, in Input, ss *session) (reply, error) {
			return s.resume(ctx, ss, name, in.ThreadID, act)
		}}
}

var resumeDoc = fmt.Sprintf("run and report where it stopped: the source line, the exception and its message, the values just returned (debugpy) and the frame's first %d locals.", MaxStopLocals)

// evaluateDoc describes evaluate, with what each adapter does beyond
// expressions.
func evaluateDoc() string {
	doc := "evaluate in the frame's scope (default: the top frame of the stopped thread)"
	for _, a := range adapterTable {
		if a.evaluates != "" {
			doc += fmt.Sprintf("; %s %s", a.id, a.evaluates)
		}
	}
	return doc + "."
}

// ops is the debug tool's table of operations, in the order the
// description lists them; neighbours with the same arguments and doc share
// a line.
var ops = []op{
	{name: "adapters", args: []string{"[program]"}, run: (*Supervisor).adapters,
		doc: fmt.Sprintf("which debug adapters (%s) are usable here, for the program when given, and exactly why not.", adapterIDs())},
	{name: "status", run: (*Supervisor).status,
		doc: "whether a session runs and where it stopped, or how its program ended (its exit code or the signal that killed it, and the end of its output: a program's end closes its session, also one killed from outside the debugger)."},
	{name: "breakpoints", args: []string{"file", "lines[]"}, run: (*Supervisor).breakpoints,
		doc: `set the file's breakpoints (empty lines clears them; no file lists them all); may be called before launch. A line is a number or {"line":12,"condition":"i > 3","hit_condition":"2","log_message":"i is {i}"}.`},
	{name: "launch", args: []string{"program", "[module]", "args[]", "[cwd]", "[env]", "[adapter]", "[stop_on_entry]", "[test]", "[test_run]", "[file]", "[lines[]]"}, run: (*Supervisor).launch,
		doc: "start the program (a path in the workspace: a .py file, a Go package directory or .go file, a binary) or, for debugpy, module (as python -m runs it), stopped at your breakpoints (file and lines set one file's first, as breakpoints does); cwd (in the workspace, default the project root) and env {NAME: value} are the program's. Go tests: program a package directory with test true, or a _test.go file (its tests), and test_run to choose them (go test -run; args take go test's flags such as -v, and the tests run in the package's directory). env never sets BERTH_*, and on the host nothing that changes the loader, an interpreter's startup or the Go build (LD_*, PATH, HOME, PYTHONPATH, GOFLAGS, …)."},
	{name: "attach", args: []string{"port", "[adapter]"}, run: (*Supervisor).attach,
		doc: "connect to a debuggee already listening on 127.0.0.1:port in the sandbox (python -m debugpy --listen 127.0.0.1:PORT --wait-for-client ...)."},
	step("continue", (*dap.Session).Continue),
	{name: "pause", args: []string{"[thread_id]"}, doc: resumeDoc, live: true, run: (*Supervisor).pause},
	step("step_over", (*dap.Session).Next),
	step("step_in", (*dap.Session).StepIn),
	step("step_out", (*dap.Session).StepOut),
	{name: "threads", live: true, run: (*Supervisor).threads,
		doc: "the program's threads."},
	{name: "stack", args: []string{"[thread_id]"}, live: true, run: (*Supervisor).stack,
		doc: fmt.Sprintf("the thread's frames, at most %d, each with its frame_id.", dap.MaxFrames)},
	{name: "scopes", args: []string{"[frame_id]"}, live: true, run: (*Supervisor).scopes,
		doc: "the frame's scopes, each with a reference for variables (default: the top frame of the stopped thread)."},
	{name: "variables", args: []string{"reference", "[start]"}, live: true, run: (*Supervisor).variables,
		doc: fmt.Sprintf("the children of a reference, %d at a time from start; values are cut at %d characters.", dap.MaxVariables, dap.MaxValueChars)},
	{name: "evaluate", args: []string{"expression", "[frame_id]"}, live: true, run: (*Supervisor).evaluate,
		doc: evaluateDoc()},
	{name: "output", live: true, run: (*Supervisor).output,
		doc: fmt.Sprintf("the program's new stdout/stderr since the last call, at most its last %d characters.", MaxOutputChars)},
	{name: "terminate", run: (*Supervisor).terminate,
		doc: "end the session, killing the adapter and the program (an attached program keeps running)."},
}

// opNames lists the operations, for the enum and the messages.
func opNames() []string {
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.name
	}
	return names
}

// argName is the JSON name of an argument as op.args writes it.
func argName(arg string) string {
	return strings.Trim(arg, "[]")
}

// description renders the tool's description from ops; ttl is a session's
// lifetime.
func description(ttl time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Drive a debugger in the sandbox: one session at a time, ended after %s.\nPick the operation with \"op\":", span(ttl))
	for i := 0; i < len(ops); {
		names := []string{ops[i].name}
		j := i + 1
		for ; j < len(ops) && ops[j].doc == ops[i].doc && slices.Equal(ops[j].args, ops[i].args); j++ {
			names = append(names, ops[j].name)
		}
		fmt.Fprintf(&b, "\n- %s", strings.Join(names, ", "))
		if len(ops[i].args) > 0 {
			fmt.Fprintf(&b, " %s", strings.Join(ops[i].args, ", "))
		}
		fmt.Fprintf(&b, ": %s", ops[i].doc)
		i = j
	}
	return b.String()
}

// span writes a duration in words when it is whole minutes: "30 minutes".
func span(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "1 minute"
	case d > 0 && d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}

// schemaOptions render the schema's parts that come from the tables: the
// operations on op, the adapters on adapter, and which operations read
// each argument.
func schemaOptions() []tools.Option {
	return []tools.Option{tools.Enum("op", opNames()...), tools.Enum("adapter", adapterList()...), argUsers}
}

// argUsers prefixes each argument's description with the operations that
// read it: "launch, attach: debugpy, delve, …".
func argUsers(s *jsonschema.Schema, _ bool) {
	users := map[string][]string{}
	for _, o := range ops {
		for _, a := range o.args {
			users[argName(a)] = append(users[argName(a)], o.name)
		}
	}
	for name, names := range users {
		p, ok := s.Properties[name]
		if !ok {
			panic(fmt.Sprintf("debug: operation argument %q is not a field of Input", name))
		}
		p.Description = strings.Join(names, ", ") + ": " + p.Description
	}
}

// reply is an operation's answer: text for the model and its structure.
type reply struct {
	text string
	data any
}

// pick returns the operation in.Op names, lower-cased and trimmed.
func pick(in Input) (op, error) {
	name := strings.ToLower(strings.TrimSpace(in.Op))
	if name == "" {
		return op{}, tools.Fail("no operation: set op to one of %s", strings.Join(opNames(), ", "))
	}
	i := slices.IndexFunc(ops, func(o op) bool { return o.name == name })
	if i < 0 {
		return op{}, tools.Fail("unknown operation %q: use one of %s", name, strings.Join(opNames(), ", "))
	}
	return ops[i], nil
}

// call is the debug tool's handler. Its errors are the registry's to
// settle: a message for the model, or the call's end.
func (s *Supervisor) call(ctx context.Context, in Input) (*tools.Result, error) {
	o, err := pick(in)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, tools.Fail("the run is closing, so no debug session can be used; open a new run")
	}
	cur, notes := s.current()
	if cur != nil && s.checkProgram(ctx, cur) {
		// The program is dead: its session is closed now, not at
		// terminate, and the operation reports the end (or the adapter's).
		var more []string
		cur, more = s.current()
		notes = append(notes, more...)
	}
	var rep reply
	if o.live && cur == nil {
		err = s.noSession(o.name)
	} else {
		rep, err = o.run(s, ctx, in, cur)
		if err == nil && o.live && o.name != "output" && cur != nil {
			cur.setStuck("") // the adapter answered again
		}
	}
	note := ""
	if len(notes) > 0 {
		note = "Note: " + strings.Join(notes, "\n") + "\n"
	}
	if err != nil {
		if note != "" {
			err = fmt.Errorf("%s%w", note, err)
		}
		return nil, err
	}
	res := tools.Text(note + rep.text)
	res.StructuredContent = rep.data
	return res, nil
}

// resolve maps a path given by the model (what it names, for messages) to
// a workspace-relative name.
func (s *Supervisor) resolve(p, what string) (string, error) {
	if p == "" {
		return "", tools.Fail("%s is empty: give a path relative to the workspace %s", what, s.root)
	}
	name, err := workspace.Name(s.root, p)
	var we *tools.Error
	if errors.As(err, &we) {
		return "", tools.Fail("%s: %w", what, we)
	}
	return name, err
}

func (s *Supervisor) abs(name string) string { return path.Join(s.root, name) }

// show writes an adapter's absolute path workspace-relative when it is in
// the workspace.
func (s *Supervisor) show(p string) string {
	if p == "" {
		return "<no source>"
	}
	c := path.Clean(p)
	if s.root != "/" && strings.HasPrefix(c, s.root+"/") {
		return strings.TrimPrefix(c, s.root+"/")
	}
	return p
}

// sourceLine returns line n of a file in the workspace, or "".
func (s *Supervisor) sourceLine(ctx context.Context, p string, n int) string {
	if p == "" || n <= 0 {
		return ""
	}
	name, err := s.resolve(p, "source")
	if err != nil {
		return ""
	}
	data, err := s.ws.ReadFile(ctx, name)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(data), "\n")
	if n > len(lines) {
		return ""
	}
	return dap.ClipValue(strings.TrimRight(lines[n-1], "\r"))
}

// dapError explains a failed request, noticing a dead adapter.
func (s *Supervisor) dapError(ss *session, what string, err error) error {
	return dapError(ss, what, err)
}

// dapError explains a failed request what (the operation, or the request
// it sent), noticing a dead adapter and naming one that did not answer.
func dapError(ss *session, what string, err error) error {
	var te *tools.Error
	if errors.As(err, &te) || errors.Is(err, context.Canceled) {
		return err
	}
	if why := ss.gone(); why != "" {
		return tools.Fail("%s", why)
	}
	if errors.Is(err, dap.ErrNoAnswer) {
		why := fmt.Sprintf("%s did not answer %s within %v: it is stuck or stopped", ss.who(), what, ss.ds.RequestTimeout())
		ss.setStuck(why)
		return tools.Fail("%s. Call debug with op terminate (it ends the session, killing the adapter and the program), then launch again", why)
	}
	return tools.Fail("%s failed: %v", what, err)
}
