package debug

import (
	"berth.dev/berth/tools/workspace"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	godap "github.com/google/go-dap"

	"berth.dev/berth/dap"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
)

const description = `Drive a debugger in the sandbox: one session at a time, ended after 30 minutes.
Pick the operation with "op":
- adapters [program]: which debug adapters (debugpy, delve, lldb, dart) are usable here, and exactly why not.
- status: whether a session runs and where it stopped.
- breakpoints file, lines[]: set the file's breakpoints (empty lines clears them); may be called before launch. A line is a number or {"line":12,"condition":"i > 3","hit_condition":"2","log_message":"i is {i}"}.
- launch program, args[], [adapter], [stop_on_entry]: start the program (path in the workspace; a .py file, a Go package dir or .go file, a binary) stopped at your breakpoints.
- attach port, [adapter]: connect to a debuggee already listening on 127.0.0.1:port in the sandbox (python -m debugpy --listen 127.0.0.1:PORT --wait-for-client ...).
- continue, pause, step_over, step_in, step_out [thread_id]: run and report where it stopped, with the source line.
- threads; stack [thread_id]; scopes [frame_id]; variables reference [start]; evaluate expression [frame_id] (default: the top frame of the stopped thread).
- output: the program's new stdout/stderr since the last call.
- terminate: end the session, killing the adapter and the program.`

// Input is the debug tool's arguments: op selects the operation, the other
// fields are its arguments.
type Input struct {
	Op          string   `json:"op,omitempty" jsonschema:"the operation: adapters, status, breakpoints, launch, attach, continue, pause, step_over, step_in, step_out, threads, stack, scopes, variables, evaluate, output, terminate"`
	Operation   string   `json:"operation,omitempty" jsonschema:"the same as op"`
	Adapter     string   `json:"adapter,omitempty" jsonschema:"launch, attach: debugpy, delve, lldb or dart; by default chosen from the program"`
	File        string   `json:"file,omitempty" jsonschema:"breakpoints: the source file, relative to the workspace"`
	Lines       []any    `json:"lines,omitempty" jsonschema:"breakpoints: line numbers, or objects {line, condition, hit_condition, log_message}; empty clears the file"`
	Program     string   `json:"program,omitempty" jsonschema:"launch: the program, relative to the workspace; adapters: check the adapters for this program"`
	Args        []string `json:"args,omitempty" jsonschema:"launch: the program's arguments"`
	StopOnEntry bool     `json:"stop_on_entry,omitempty" jsonschema:"launch: stop at the program's first line"`
	Port        int      `json:"port,omitempty" jsonschema:"attach: the port the debuggee listens on, on 127.0.0.1 inside the sandbox"`
	ThreadID    int      `json:"thread_id,omitempty" jsonschema:"continue, pause, step_*, stack: the thread; default the stopped thread"`
	FrameID     int      `json:"frame_id,omitempty" jsonschema:"scopes, evaluate: the frame id from stack; default the top frame of the stopped thread"`
	Reference   int      `json:"reference,omitempty" jsonschema:"variables: a reference from scopes, variables or evaluate"`
	Start       int      `json:"start,omitempty" jsonschema:"variables: skip this many children (to page past the first 50)"`
	Expression  string   `json:"expression,omitempty" jsonschema:"evaluate: the expression, evaluated in the frame's scope"`
}

var ops = []string{"adapters", "status", "breakpoints", "launch", "attach", "continue", "pause", "step_over", "step_in", "step_out", "threads", "stack", "scopes", "variables", "evaluate", "output", "terminate"}

// reply is an operation's answer: text for the model and its structure.
type reply struct {
	text string
	data any
}

// call is the debug tool's handler. Its errors are the registry's to
// settle: a message for the model, or the call's end.
func (s *Supervisor) call(ctx context.Context, in Input) (*tools.Result, error) {
	op := strings.ToLower(strings.TrimSpace(in.Op))
	if alt := strings.ToLower(strings.TrimSpace(in.Operation)); alt != "" {
		if op != "" && op != alt {
			return nil, tools.Fail("op %q and operation %q disagree: give one of them", in.Op, in.Operation)
		}
		op = alt
	}
	if op == "" {
		return nil, tools.Fail("no operation: set op to one of %s", strings.Join(ops, ", "))
	}
	if !slices.Contains(ops, op) {
		return nil, tools.Fail("unknown operation %q: use one of %s", op, strings.Join(ops, ", "))
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, tools.Fail("the run is closing, so no debug session can be used; open a new run")
	}
	cur, notes := s.current()
	rep, err := s.dispatch(ctx, op, in, cur)
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

func (s *Supervisor) dispatch(ctx context.Context, op string, in Input, cur *session) (reply, error) {
	switch op {
	case "adapters":
		return s.adapters(ctx, in)
	case "status":
		return s.statusOp(ctx, cur)
	case "breakpoints":
		return s.breakpoints(ctx, in, cur)
	case "launch":
		return s.launch(ctx, in, cur)
	case "attach":
		return s.attach(ctx, in, cur)
	case "terminate":
		return s.terminate(cur)
	}
	if cur == nil {
		return reply{}, tools.Fail("no debug session: %s needs one; set breakpoints, then launch a program (op launch) or attach (op attach)", op)
	}
	switch op {
	case "continue", "pause", "step_over", "step_in", "step_out":
		return s.resume(ctx, cur, op, in.ThreadID)
	case "threads":
		return s.threads(ctx, cur)
	case "stack":
		return s.stack(ctx, cur, in.ThreadID)
	case "scopes":
		return s.scopes(ctx, cur, in.FrameID)
	case "variables":
		return s.variables(ctx, cur, in.Reference, in.Start)
	case "evaluate":
		return s.evaluate(ctx, cur, in.Expression, in.FrameID)
	case "output":
		return s.output(cur), nil
	}
	return reply{}, tools.Fail("unknown operation %q", op)
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

// ---- adapters ----

func (s *Supervisor) adapters(ctx context.Context, in Input) (reply, error) {
	dir := "."
	if in.Program != "" {
		name, err := s.resolve(in.Program, "program")
		if err != nil {
			return reply{}, err
		}
		fi, err := s.ws.Stat(ctx, name)
		if err != nil {
			return reply{}, workspace.Explain(s.root, name, err)
		}
		dir = name
		if !fi.IsDir() {
			dir = path.Dir(name)
		}
	}
	avs, err := s.discover(ctx, dir)
	if err != nil {
		return reply{}, err
	}
	var b strings.Builder
	for _, av := range avs {
		if av.Usable {
			bin := av.Binary
			if av.Interpreter != "" {
				bin = av.Interpreter
			}
			fmt.Fprintf(&b, "%s: usable (%s; project root %s, marker %s)\n", av.Adapter, bin, av.Root, av.Marker)
			for _, sk := range av.Skipped {
				fmt.Fprintf(&b, "%s: skipped %s\n", av.Adapter, sk)
			}
		} else {
			fmt.Fprintf(&b, "%s: not usable: %s\n", av.Adapter, av.Reason)
		}
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"adapters": avs}}, nil
}

// ---- breakpoints ----

// BreakpointInfo is one breakpoint's state as reported.
type BreakpointInfo struct {
	Line         int    `json:"line"`
	Condition    string `json:"condition,omitempty"`
	HitCondition string `json:"hit_condition,omitempty"`
	LogMessage   string `json:"log_message,omitempty"`
	Verified     bool   `json:"verified"`
	Pending      bool   `json:"pending,omitempty"`
	ActualLine   int    `json:"actual_line,omitempty"`
	Message      string `json:"message,omitempty"`
}

func parseLines(lines []any) ([]dap.Breakpoint, error) {
	var out []dap.Breakpoint
	for i, l := range lines {
		var bp dap.Breakpoint
		switch v := l.(type) {
		case float64:
			if v != float64(int(v)) {
				return nil, tools.Fail("lines[%d] = %v is not a whole line number", i, v)
			}
			bp.Line = int(v)
		case map[string]any:
			for k, x := range v {
				switch k {
				case "line":
					f, ok := x.(float64)
					if !ok || f != float64(int(f)) {
						return nil, tools.Fail("lines[%d].line must be a whole number", i)
					}
					bp.Line = int(f)
				case "condition", "hit_condition", "log_message", "hitCondition", "logMessage":
					str, ok := x.(string)
					if !ok {
						return nil, tools.Fail("lines[%d].%s must be a string", i, k)
					}
					switch k {
					case "condition":
						bp.Condition = str
					case "hit_condition", "hitCondition":
						bp.HitCondition = str
					default:
						bp.LogMessage = str
					}
				default:
					return nil, tools.Fail("lines[%d] has an unknown field %q: use line, condition, hit_condition, log_message", i, k)
				}
			}
		default:
			return nil, tools.Fail("lines[%d] = %v: give a line number or an object like {\"line\": 12, \"condition\": \"i > 3\"}", i, l)
		}
		if bp.Line <= 0 {
			return nil, tools.Fail("lines[%d]: line numbers start at 1", i)
		}
		out = append(out, bp)
	}
	return out, nil
}

func (s *Supervisor) breakpoints(ctx context.Context, in Input, cur *session) (reply, error) {
	if in.File == "" {
		if len(in.Lines) > 0 {
			return reply{}, tools.Fail("breakpoints needs file: the source file the lines belong to")
		}
		return s.listBreakpoints(cur), nil
	}
	name, err := s.resolve(in.File, "file")
	if err != nil {
		return reply{}, err
	}
	bps, err := parseLines(in.Lines)
	if err != nil {
		return reply{}, err
	}
	if fi, err := s.ws.Stat(ctx, name); err != nil {
		return reply{}, workspace.Explain(s.root, name, err)
	} else if fi.IsDir() {
		return reply{}, tools.Fail("%s is a directory: breakpoints go into a source file", name)
	}
	abs := s.abs(name)
	s.mu.Lock()
	if len(bps) == 0 {
		delete(s.bps, abs)
	} else {
		s.bps[abs] = bps
	}
	s.mu.Unlock()
	var results []dap.BreakpointResult
	if cur != nil {
		results, err = cur.ds.SetBreakpoints(ctx, abs, bps)
		if err != nil && results == nil {
			return reply{}, tools.Fail("setting breakpoints in %s failed: %v", name, err)
		}
	} else {
		for _, b := range bps {
			results = append(results, dap.BreakpointResult{Line: b.Line, Message: dap.PendingMessage})
		}
	}
	infos := breakpointInfos(bps, results)
	if len(bps) == 0 {
		return reply{text: "cleared the breakpoints of " + name, data: map[string]any{"file": name, "breakpoints": []BreakpointInfo{}}}, nil
	}
	text := name + ":\n" + formatBreakpoints(infos)
	if cur == nil {
		text += "\n(no session yet: they are applied when you launch)"
	}
	return reply{text: text, data: map[string]any{"file": name, "breakpoints": infos}}, nil
}

func breakpointInfos(bps []dap.Breakpoint, results []dap.BreakpointResult) []BreakpointInfo {
	infos := make([]BreakpointInfo, len(bps))
	for i, b := range bps {
		infos[i] = BreakpointInfo{Line: b.Line, Condition: b.Condition, HitCondition: b.HitCondition, LogMessage: b.LogMessage}
		if i < len(results) {
			r := results[i]
			infos[i].Verified, infos[i].Message = r.Verified, r.Message
			infos[i].Pending = r.Message == dap.PendingMessage
			if r.ActualLine != 0 && r.ActualLine != b.Line {
				infos[i].ActualLine = r.ActualLine
			}
		}
	}
	return infos
}

func formatBreakpoints(infos []BreakpointInfo) string {
	var b strings.Builder
	for _, bp := range infos {
		fmt.Fprintf(&b, "  line %d", bp.Line)
		if bp.Condition != "" {
			fmt.Fprintf(&b, " if %s", bp.Condition)
		}
		if bp.HitCondition != "" {
			fmt.Fprintf(&b, " hit %s", bp.HitCondition)
		}
		if bp.LogMessage != "" {
			fmt.Fprintf(&b, " log %q", bp.LogMessage)
		}
		switch {
		case bp.Pending:
			b.WriteString(": pending (sent when the program is launched)")
		case bp.Verified:
			b.WriteString(": verified")
			if bp.ActualLine != 0 {
				fmt.Fprintf(&b, " (moved to line %d)", bp.ActualLine)
			}
			if bp.Message != "" {
				b.WriteString(" — " + bp.Message)
			}
		default:
			b.WriteString(": unverified")
			if bp.Message != "" {
				b.WriteString(" — " + bp.Message)
			}
		}
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

func (s *Supervisor) listBreakpoints(cur *session) reply {
	s.mu.Lock()
	want := make(map[string][]dap.Breakpoint, len(s.bps))
	for k, v := range s.bps {
		want[k] = v
	}
	s.mu.Unlock()
	var results map[string][]dap.BreakpointResult
	if cur != nil {
		results = cur.ds.Breakpoints()
	}
	files := make([]string, 0, len(want))
	for f := range want {
		files = append(files, f)
	}
	slices.Sort(files)
	data := map[string][]BreakpointInfo{}
	var b strings.Builder
	for _, f := range files {
		res := results[f]
		if cur == nil {
			for _, bp := range want[f] {
				res = append(res, dap.BreakpointResult{Line: bp.Line, Message: dap.PendingMessage})
			}
		}
		infos := breakpointInfos(want[f], res)
		data[s.show(f)] = infos
		fmt.Fprintf(&b, "%s:\n%s\n", s.show(f), formatBreakpoints(infos))
	}
	if len(files) == 0 {
		return reply{text: "no breakpoints set", data: map[string]any{"breakpoints": data}}
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"breakpoints": data}}
}

// ---- launch and attach ----

// adapterFor picks the adapter for a program by its kind.
func adapterFor(name string, isDir bool) (string, error) {
	ext := path.Ext(name)
	for _, a := range adapterTable {
		if slices.Contains(a.exts, ext) {
			return a.id, nil
		}
	}
	if isDir {
		return AdapterDelve, nil
	}
	if ext == "" || ext == ".out" || ext == ".bin" || ext == ".exe" {
		return AdapterLLDB, nil
	}
	return "", tools.Fail("cannot tell which debugger runs %s: set adapter to one of %s", name, adapterIDs())
}

// refuse says why a new session cannot start while cur lives (DBG-3); it
// ends cur when its program is over.
func (s *Supervisor) refuse(ctx context.Context, cur *session) (string, error) {
	if cur == nil {
		return "", nil
	}
	st := cur.ds.State()
	if st.Ended() {
		s.mu.Lock()
		if s.cur == cur {
			s.cur = nil
		}
		s.mu.Unlock()
		cur.stop(ctx)
		return fmt.Sprintf("closed the previous session, whose program %s had ended", cur.program), nil
	}
	status, _ := s.statusOp(ctx, cur)
	return "", tools.Fail("a debug session is already running, and only one is allowed: terminate it first (op terminate), or keep using it.\n%s", status.text)
}

func (s *Supervisor) launch(ctx context.Context, in Input, cur *session) (reply, error) {
	note, err := s.refuse(ctx, cur)
	if err != nil {
		return reply{}, err
	}
	name, err := s.resolve(in.Program, "program")
	if err != nil {
		return reply{}, err
	}
	fi, err := s.ws.Stat(ctx, name)
	if err != nil {
		return reply{}, workspace.Explain(s.root, name, err)
	}
	id := in.Adapter
	if id == "" {
		if id, err = adapterFor(name, fi.IsDir()); err != nil {
			return reply{}, err
		}
	} else if _, ok := specFor(id); !ok {
		return reply{}, tools.Fail("unknown adapter %q: use one of %s", id, adapterIDs())
	}
	if fi.IsDir() && id != AdapterDelve {
		return reply{}, tools.Fail("%s is a directory: %s launches a file; give the program file", name, id)
	}
	dir := name
	if !fi.IsDir() {
		dir = path.Dir(name)
	}
	av, err := s.available(ctx, id, dir)
	if err != nil {
		return reply{}, err
	}
	prog := s.abs(name)
	args := map[string]any{"program": prog, "cwd": av.absRoot}
	if len(in.Args) > 0 {
		args["args"] = in.Args
	} else {
		args["args"] = []string{}
	}
	if in.StopOnEntry {
		args["stopOnEntry"] = true
	}
	switch id {
	case AdapterDebugpy:
		args["console"] = "internalConsole"
		args["justMyCode"] = true
		args["python"] = []string{av.Binary}
		args["env"] = map[string]string{"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
	case AdapterDelve:
		args["mode"] = "debug"
		if !fi.IsDir() && path.Ext(name) != ".go" {
			args["mode"] = "exec"
		} else {
			args["output"] = "/tmp/berth-debug-" + randomHex() + "/__debug_bin"
		}
		args["outputMode"] = "remote"
	}
	return s.startSession(ctx, av, "launch", name, args, note, 0)
}

func (s *Supervisor) attach(ctx context.Context, in Input, cur *session) (reply, error) {
	if in.Port <= 0 || in.Port > 65535 {
		return reply{}, tools.Fail("attach needs port: the TCP port (1-65535) the debuggee listens on at 127.0.0.1 inside the sandbox")
	}
	note, err := s.refuse(ctx, cur)
	if err != nil {
		return reply{}, err
	}
	id := in.Adapter
	if id == "" {
		id = AdapterDebugpy
	}
	if id != AdapterDebugpy && id != AdapterDelve {
		return reply{}, tools.Fail("attach by port works with debugpy (python -m debugpy --listen 127.0.0.1:PORT) and delve (dlv --headless --listen 127.0.0.1:PORT); %s cannot attach by port", id)
	}
	// A debuggee started with debugpy --listen (or a headless dlv) serves
	// DAP itself on that port: connect to it inside the sandbox, with no
	// adapter process of our own.
	av := Availability{Adapter: id, Root: "."}
	args := map[string]any{}
	switch id {
	case AdapterDebugpy:
		args["connect"] = map[string]any{"host": "127.0.0.1", "port": in.Port}
		args["justMyCode"] = true
	case AdapterDelve:
		args["mode"] = "remote"
	}
	return s.startSession(ctx, av, "attach", fmt.Sprintf("the debuggee on port %d", in.Port), args, note, in.Port)
}

// available discovers id for a program in dir and fails with the reason
// when it is not usable.
func (s *Supervisor) available(ctx context.Context, id, dir string) (Availability, error) {
	avs, err := s.discover(ctx, dir)
	if err != nil {
		return Availability{}, err
	}
	for _, av := range avs {
		if av.Adapter == id {
			if !av.Usable {
				return av, tools.Fail("the %s debug adapter is not usable here: %s", id, av.Reason)
			}
			return av, nil
		}
	}
	return Availability{}, tools.Fail("unknown adapter %q: use one of %s", id, adapterIDs())
}

func randomHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// startSession starts the adapter, runs launch or attach, installs the
// session and waits for the first stop. attachPort > 0 dials the port
// directly: a debuggee under debugpy --listen or a headless dlv serves DAP.
func (s *Supervisor) startSession(ctx context.Context, av Availability, command, program string, args map[string]any, note string, attachPort int) (reply, error) {
	var ap *adapterProc
	var err error
	if attachPort > 0 {
		conn, derr := s.sb.Dial(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", attachPort))
		if derr != nil {
			return reply{}, tools.Fail("cannot connect to 127.0.0.1:%d inside the sandbox: %v; is the debuggee listening there? start it with python3 -m debugpy --listen 127.0.0.1:%d --wait-for-client PROGRAM (or dlv --headless --listen 127.0.0.1:%d --accept-multiclient)", attachPort, derr, attachPort, attachPort)
		}
		// No process of ours: exited stays nil, the client's end is the end.
		ap = &adapterProc{stream: conn, cancel: func() {}, status: func() (sandbox.ExitStatus, error) { return sandbox.ExitStatus{}, nil }, stderr: proc.NewTail(stderrKeep)}
	} else if ap, err = s.startAdapter(ctx, av); err != nil {
		return reply{}, err
	}
	client := dap.NewClient(ap.stream, dap.Options{})
	opts := dap.SessionOptions{AdapterID: av.Adapter}
	if av.Adapter == AdapterDebugpy {
		opts.ExceptionFilters = []string{"uncaught"}
	}
	if av.Adapter == AdapterDelve {
		opts.AdapterID = "go"
	}
	ds := dap.NewSession(client, opts)
	s.mu.Lock()
	s.nextID++
	ss := &session{id: s.nextID, adapter: av.Adapter, command: command, program: program, root: av.Root,
		started: time.Now(), ds: ds, cancel: ap.cancel, exited: ap.exited, status: ap.status, pid: ap.pid, stderr: ap.stderr}
	ss.deadline = ss.started.Add(s.opts.TTL)
	want := make(map[string][]dap.Breakpoint, len(s.bps))
	for f, b := range s.bps {
		want[f] = b
	}
	s.mu.Unlock()
	for f, b := range want {
		ds.SetBreakpoints(ctx, f, b) // recorded; sent during launch
	}
	var lerr error
	if command == "launch" {
		lerr = ds.Launch(ctx, args)
	} else {
		lerr = ds.Attach(ctx, args)
	}
	if lerr != nil {
		ss.stop(context.Background())
		if ctx.Err() != nil {
			return reply{}, ctx.Err()
		}
		msg := fmt.Sprintf("%s of %s with %s failed: %v", command, program, av.Adapter, lerr)
		if t := ap.stderr.String(); t != "" {
			msg += "\nadapter stderr: " + proc.Clip(t, 1500)
		}
		if out := outputText(ds, 0, 2000); out != "" {
			msg += "\noutput:\n" + out
		}
		return reply{}, tools.Fail("%s", msg)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.stop(context.Background())
		return reply{}, tools.Fail("the run closed while the debug session started")
	}
	s.cur = ss
	ss.timer = time.AfterFunc(s.opts.TTL, func() { s.expire(ss) })
	s.mu.Unlock()

	head := fmt.Sprintf("%sed %s with %s (session %d; ends by itself after %v).", command, program, av.Adapter, ss.id, s.opts.TTL)
	if note != "" {
		head = note + "\n" + head
	}
	if bl := s.listBreakpoints(ss); len(want) > 0 {
		head += "\nbreakpoints:\n" + bl.text
	}
	rep, err := s.waitStop(ctx, ss, 0)
	if err != nil {
		return reply{}, err
	}
	rep.text = head + "\n" + rep.text
	return rep, nil
}

// ---- run control ----

// Location is where the program stopped.
type Location struct {
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description,omitempty"`
	ThreadID    int    `json:"thread_id"`
	FrameID     int    `json:"frame_id,omitempty"`
	Function    string `json:"function,omitempty"`
	Path        string `json:"path,omitempty"`
	Line        int    `json:"line,omitempty"`
	Source      string `json:"source,omitempty"`
}

// Status is the structured answer of status and of every run-control
// operation.
type Status struct {
	// State is "none", "running", "stopped" or "exited".
	State    string    `json:"state"`
	Session  int       `json:"session,omitempty"`
	Adapter  string    `json:"adapter,omitempty"`
	Program  string    `json:"program,omitempty"`
	Stopped  *Location `json:"stopped,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	// Output is the program's output since the last call, when it ended.
	Output string `json:"output,omitempty"`
	// NewOutput is how many characters of output have not been shown.
	NewOutput int    `json:"new_output,omitempty"`
	TTLLeft   string `json:"ttl_left,omitempty"`
}

// threadOr returns tid, or the stopped thread, or the first thread.
func threadOr(ctx context.Context, ss *session, tid int) (int, error) {
	if tid > 0 {
		return tid, nil
	}
	if st := ss.ds.State(); st.Stopped != nil && st.Stopped.ThreadId > 0 {
		return st.Stopped.ThreadId, nil
	}
	ths, err := ss.ds.Threads(ctx)
	if err != nil {
		return 0, err
	}
	if len(ths) == 0 {
		return 0, tools.Fail("the program has no threads to act on")
	}
	return ths[0].Id, nil
}

func (s *Supervisor) resume(ctx context.Context, ss *session, op string, tid int) (reply, error) {
	st := ss.ds.State()
	if st.Ended() {
		how := "ended"
		if st.Exited {
			how = fmt.Sprintf("exited with code %d", st.ExitCode)
		}
		return reply{}, tools.Fail("the program has %s, so %s has nothing to run: launch again (the ended session is closed then) or terminate", how, op)
	}
	if op == "pause" {
		if st.Stopped != nil {
			rep, err := s.describe(ctx, ss, st)
			rep.text = "already stopped. " + rep.text
			return rep, err
		}
	} else if st.Stopped == nil {
		return reply{}, tools.Fail("the program is running, not stopped: %s needs it stopped; call pause, or status to see where it is", op)
	}
	tid, err := threadOr(ctx, ss, tid)
	if err != nil {
		return reply{}, err
	}
	stops := st.Stops
	switch op {
	case "continue":
		err = ss.ds.Continue(ctx, tid)
	case "pause":
		err = ss.ds.Pause(ctx, tid)
	case "step_over":
		err = ss.ds.Next(ctx, tid)
	case "step_in":
		err = ss.ds.StepIn(ctx, tid)
	case "step_out":
		err = ss.ds.StepOut(ctx, tid)
	}
	if err != nil {
		return reply{}, s.dapError(ss, op, err)
	}
	return s.waitStop(ctx, ss, stops)
}

// waitStop waits, bounded by Options.Wait, for a stop after stops and
// describes the program's state then.
func (s *Supervisor) waitStop(ctx context.Context, ss *session, stops uint64) (reply, error) {
	wctx, cancel := context.WithTimeout(ctx, s.opts.Wait)
	defer cancel()
	st, err := ss.ds.WaitStop(wctx, stops)
	if err != nil {
		if ctx.Err() != nil {
			return reply{}, ctx.Err()
		}
		if wctx.Err() != nil {
			rep, derr := s.describe(ctx, ss, ss.ds.State())
			if derr != nil {
				return reply{}, derr
			}
			rep.text = fmt.Sprintf("still running after %v — call status or output to check on it, or pause to stop it.\n%s", s.opts.Wait, rep.text)
			return rep, nil
		}
		if why := ss.gone(); why != "" {
			return reply{}, tools.Fail("%s", why)
		}
		return reply{}, s.dapError(ss, "waiting for the program to stop", err)
	}
	return s.describe(ctx, ss, st)
}

// describe tells where the program is.
func (s *Supervisor) describe(ctx context.Context, ss *session, st dap.State) (reply, error) {
	status := Status{Session: ss.id, Adapter: ss.adapter, Program: ss.program, TTLLeft: time.Until(ss.deadline).Round(time.Second).String()}
	var b strings.Builder
	switch {
	case st.Ended():
		status.State = "exited"
		if st.Exited {
			code := st.ExitCode
			status.ExitCode = &code
			fmt.Fprintf(&b, "the program exited with code %d.", code)
		} else {
			b.WriteString("the program ended (the adapter reported the session terminated).")
		}
		status.Output = s.takeOutput(ss, 4000)
		if status.Output != "" {
			b.WriteString("\noutput since the last call:\n" + status.Output)
		}
		b.WriteString("\nterminate the session, or launch again (the ended session is closed then).")
	case st.Stopped != nil:
		status.State = "stopped"
		loc, err := s.locate(ctx, ss, *st.Stopped)
		if err != nil {
			return reply{}, err
		}
		status.Stopped = &loc
		b.WriteString(formatLocation(loc))
	default:
		status.State = "running"
		b.WriteString("the program is running.")
	}
	if status.State != "exited" {
		if n := pendingOutput(ss); n > 0 {
			status.NewOutput = n
			fmt.Fprintf(&b, "\n(%d characters of new output: call output)", n)
		}
	}
	return reply{text: b.String(), data: status}, nil
}

func formatLocation(loc Location) string {
	var b strings.Builder
	fmt.Fprintf(&b, "stopped at %s:%d", loc.Path, loc.Line)
	if loc.Function != "" {
		fmt.Fprintf(&b, " in %s", loc.Function)
	}
	if loc.Reason != "" {
		fmt.Fprintf(&b, " (%s)", loc.Reason)
	}
	fmt.Fprintf(&b, ", thread %d, frame_id %d", loc.ThreadID, loc.FrameID)
	if loc.Description != "" && loc.Description != loc.Reason {
		fmt.Fprintf(&b, "\n%s", loc.Description)
	}
	if loc.Source != "" {
		fmt.Fprintf(&b, "\n%6d | %s", loc.Line, loc.Source)
	}
	return b.String()
}

// locate reads the top frame of the stopped thread.
func (s *Supervisor) locate(ctx context.Context, ss *session, body godap.StoppedEventBody) (Location, error) {
	loc := Location{Reason: body.Reason, ThreadID: body.ThreadId}
	if body.Text != "" {
		loc.Description = body.Text
	} else if body.Description != "" {
		loc.Description = body.Description
	}
	tid, err := threadOr(ctx, ss, body.ThreadId)
	if err != nil {
		return loc, s.dapError(ss, "threads", err)
	}
	loc.ThreadID = tid
	frames, _, err := ss.ds.StackTrace(ctx, tid, 1)
	if err != nil {
		return loc, s.dapError(ss, "stack", err)
	}
	if len(frames) > 0 {
		f := frames[0]
		loc.FrameID, loc.Function, loc.Line = f.Id, f.Name, f.Line
		if f.Source != nil {
			loc.Path = s.show(f.Source.Path)
			loc.Source = s.sourceLine(ctx, f.Source.Path, f.Line)
		}
	}
	return loc, nil
}

func (s *Supervisor) statusOp(ctx context.Context, cur *session) (reply, error) {
	if cur == nil {
		bl := s.listBreakpoints(nil)
		return reply{text: "no debug session. " + bl.text, data: Status{State: "none"}}, nil
	}
	rep, err := s.describe(ctx, cur, cur.ds.State())
	if err != nil {
		return reply{}, err
	}
	head := fmt.Sprintf("session %d: %s, %sed %s, %s left before it is ended.\n", cur.id, cur.adapter, cur.command, cur.program, time.Until(cur.deadline).Round(time.Second))
	rep.text = head + rep.text
	return rep, nil
}

func (s *Supervisor) terminate(cur *session) (reply, error) {
	if cur == nil {
		return reply{text: "no debug session to terminate.", data: Status{State: "none"}}, nil
	}
	s.mu.Lock()
	if s.cur == cur {
		s.cur = nil
	}
	s.mu.Unlock()
	out := s.takeOutput(cur, 4000)
	err := cur.stop(context.Background())
	text := fmt.Sprintf("terminated session %d (%s, %s): the adapter and the program it launched were killed.", cur.id, cur.adapter, cur.program)
	if cur.command == "attach" {
		text = fmt.Sprintf("detached session %d (%s) from %s and killed the adapter; the attached program keeps running.", cur.id, cur.adapter, cur.program)
	}
	if err != nil {
		text += "\nwarning: " + err.Error()
	}
	if out != "" {
		text += "\noutput not shown before:\n" + out
	}
	return reply{text: text, data: map[string]any{"terminated": cur.id, "output": out}}, nil
}

// ---- inspection ----

func (s *Supervisor) threads(ctx context.Context, ss *session) (reply, error) {
	ths, err := ss.ds.Threads(ctx)
	if err != nil {
		return reply{}, s.dapError(ss, "threads", err)
	}
	var b strings.Builder
	type th struct {
		ID   int    `json:"id"`
		Name string `json:"name"`
	}
	data := []th{}
	for _, t := range ths {
		fmt.Fprintf(&b, "thread %d: %s\n", t.Id, t.Name)
		data = append(data, th{t.Id, t.Name})
	}
	if len(ths) == 0 {
		b.WriteString("no threads")
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"threads": data}}, nil
}

// Frame is one stack frame.
type Frame struct {
	Index    int    `json:"index"`
	FrameID  int    `json:"frame_id"`
	Function string `json:"function"`
	Path     string `json:"path,omitempty"`
	Line     int    `json:"line,omitempty"`
}

func (s *Supervisor) needStopped(ss *session, op string) error {
	st := ss.ds.State()
	if st.Ended() {
		return tools.Fail("the program has ended: %s needs a stopped program; launch again", op)
	}
	if st.Stopped == nil {
		return tools.Fail("the program is running: %s needs it stopped; call pause first", op)
	}
	return nil
}

func (s *Supervisor) stack(ctx context.Context, ss *session, tid int) (reply, error) {
	if err := s.needStopped(ss, "stack"); err != nil {
		return reply{}, err
	}
	tid, err := threadOr(ctx, ss, tid)
	if err != nil {
		return reply{}, err
	}
	frames, total, err := ss.ds.StackTrace(ctx, tid, dap.MaxFrames)
	if err != nil {
		return reply{}, s.dapError(ss, "stack", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "thread %d:\n", tid)
	data := []Frame{}
	for i, f := range frames {
		fr := Frame{Index: i, FrameID: f.Id, Function: f.Name, Line: f.Line}
		if f.Source != nil {
			fr.Path = s.show(f.Source.Path)
		}
		data = append(data, fr)
		fmt.Fprintf(&b, "#%d %s at %s:%d (frame_id %d)\n", i, fr.Function, orUnknown(fr.Path), fr.Line, fr.FrameID)
	}
	if total > len(frames) {
		fmt.Fprintf(&b, "(%d more frames not shown; at most %d are listed)\n", total-len(frames), dap.MaxFrames)
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"thread_id": tid, "frames": data, "total": max(total, len(frames))}}, nil
}

func orUnknown(p string) string {
	if p == "" {
		return "<no source>"
	}
	return p
}

// topFrame returns the top frame id of the stopped thread.
func (s *Supervisor) topFrame(ctx context.Context, ss *session) (int, error) {
	if err := s.needStopped(ss, "this operation"); err != nil {
		return 0, err
	}
	tid, err := threadOr(ctx, ss, 0)
	if err != nil {
		return 0, err
	}
	frames, _, err := ss.ds.StackTrace(ctx, tid, 1)
	if err != nil {
		return 0, s.dapError(ss, "stack", err)
	}
	if len(frames) == 0 {
		return 0, tools.Fail("the stopped thread %d has no frames", tid)
	}
	return frames[0].Id, nil
}

func (s *Supervisor) scopes(ctx context.Context, ss *session, frameID int) (reply, error) {
	if frameID == 0 {
		f, err := s.topFrame(ctx, ss)
		if err != nil {
			return reply{}, err
		}
		frameID = f
	}
	scs, err := ss.ds.Scopes(ctx, frameID)
	if err != nil {
		return reply{}, s.dapError(ss, "scopes", err)
	}
	type scope struct {
		Name      string `json:"name"`
		Reference int    `json:"reference"`
		Expensive bool   `json:"expensive,omitempty"`
	}
	data := []scope{}
	var b strings.Builder
	fmt.Fprintf(&b, "scopes of frame_id %d:\n", frameID)
	for _, sc := range scs {
		data = append(data, scope{sc.Name, sc.VariablesReference, sc.Expensive})
		fmt.Fprintf(&b, "%s (reference %d)", sc.Name, sc.VariablesReference)
		if n := sc.NamedVariables + sc.IndexedVariables; n > 0 {
			fmt.Fprintf(&b, ", %d variables", n)
		}
		b.WriteByte('\n')
	}
	b.WriteString("call variables with a reference to see them.")
	return reply{text: b.String(), data: map[string]any{"frame_id": frameID, "scopes": data}}, nil
}

// Var is one variable.
type Var struct {
	Name      string `json:"name"`
	Type      string `json:"type,omitempty"`
	Value     string `json:"value"`
	Reference int    `json:"reference,omitempty"`
}

func (s *Supervisor) variables(ctx context.Context, ss *session, ref, start int) (reply, error) {
	if ref <= 0 {
		return reply{}, tools.Fail("variables needs reference: a number above 0 from scopes, variables or evaluate")
	}
	if start < 0 {
		return reply{}, tools.Fail("start must be 0 or more")
	}
	page, err := ss.ds.Variables(ctx, ref, start)
	if err != nil {
		return reply{}, s.dapError(ss, "variables", err)
	}
	data := []Var{}
	var b strings.Builder
	for _, v := range page.Vars {
		data = append(data, Var{Name: v.Name, Type: v.Type, Value: v.Value, Reference: v.VariablesReference})
		b.WriteString(formatVar(v.Name, v.Type, v.Value, v.VariablesReference))
		b.WriteByte('\n')
	}
	if len(page.Vars) == 0 {
		b.WriteString("no variables\n")
	}
	if page.Remaining > 0 {
		fmt.Fprintf(&b, "… %d more: call variables with reference %d and start %d\n", page.Remaining, ref, page.Start+len(page.Vars))
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"reference": ref, "start": page.Start, "variables": data, "remaining": page.Remaining}}, nil
}

func formatVar(name, typ, value string, ref int) string {
	s := name
	if typ != "" {
		s += ": " + typ
	}
	s += " = " + value
	if ref > 0 {
		s += fmt.Sprintf("  (reference %d)", ref)
	}
	return s
}

func (s *Supervisor) evaluate(ctx context.Context, ss *session, expr string, frameID int) (reply, error) {
	if strings.TrimSpace(expr) == "" {
		return reply{}, tools.Fail("evaluate needs expression")
	}
	if frameID == 0 {
		f, err := s.topFrame(ctx, ss)
		if err != nil {
			return reply{}, err
		}
		frameID = f
	}
	body, err := ss.ds.Evaluate(ctx, expr, frameID, "repl")
	if err != nil {
		return reply{}, s.dapError(ss, "evaluate", err)
	}
	text := formatVar(expr, body.Type, body.Result, body.VariablesReference)
	return reply{text: text, data: map[string]any{"expression": expr, "frame_id": frameID, "type": body.Type, "value": body.Result, "reference": body.VariablesReference}}, nil
}

// ---- output ----

// outputText renders the output from offset on, keeping at most max
// characters at the end; the second result is the offset reached.
func outputText(ds *dap.Session, from int64, limit int) string {
	text, _ := outputFrom(ds, from, limit)
	return text
}

func outputFrom(ds *dap.Session, from int64, limit int) (string, int64) {
	chunks, _ := ds.Output()
	var b strings.Builder
	end := from
	last := ""
	for _, c := range chunks {
		cend := c.Offset + int64(len(c.Text))
		if cend <= from {
			continue
		}
		t := c.Text
		if c.Offset < from {
			t = t[from-c.Offset:]
		}
		if c.Category != last && (c.Category != "stdout" || last != "") {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "[%s] ", c.Category)
		}
		last = c.Category
		b.WriteString(t)
		end = cend
	}
	s := b.String()
	if len(s) > limit {
		cut := len(s) - limit
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = fmt.Sprintf("[… %d earlier bytes not shown]\n%s", cut, s[cut:])
	}
	return s, end
}

func pendingOutput(ss *session) int {
	ss.mu.Lock()
	from := ss.outShown
	ss.mu.Unlock()
	chunks, _ := ss.ds.Output()
	n := 0
	for _, c := range chunks {
		if end := c.Offset + int64(len(c.Text)); end > from {
			n += int(end - max(from, c.Offset))
		}
	}
	return n
}

func (s *Supervisor) takeOutput(ss *session, limit int) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	text, end := outputFrom(ss.ds, ss.outShown, limit)
	ss.outShown = end
	return text
}

func (s *Supervisor) output(ss *session) reply {
	text := s.takeOutput(ss, MaxOutputChars)
	if text == "" {
		return reply{text: "no new output.", data: map[string]any{"output": ""}}
	}
	return reply{text: text, data: map[string]any{"output": text}}
}

// dapError explains a failed request, noticing a dead adapter.
func (s *Supervisor) dapError(ss *session, what string, err error) error {
	var te *tools.Error
	if errors.As(err, &te) || errors.Is(err, context.Canceled) {
		return err
	}
	if why := ss.gone(); why != "" {
		return tools.Fail("%s", why)
	}
	return tools.Fail("%s failed: %v", what, err)
}
