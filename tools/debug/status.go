package debug

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	godap "github.com/google/go-dap"

	"berth.dev/berth/dap"
)

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
	// Exception is the exception the program stopped on, when the
	// adapter can say (exceptionInfo).
	Exception *Exception `json:"exception,omitempty"`
	// Returned are the values the adapter reports as just returned
	// (debugpy's "(return) f" variables), named by the function.
	Returned []Var `json:"returned,omitempty"`
	// Locals are the top frame's first locals.
	Locals *Locals `json:"locals,omitempty"`
	// Unknown says why the adapter could not tell where the thread is.
	Unknown string `json:"unknown,omitempty"`
}

// Locals are the first MaxStopLocals variables of a frame's locals scope.
type Locals struct {
	// Reference is the scope's, for variables.
	Reference int   `json:"reference,omitempty"`
	Vars      []Var `json:"variables,omitempty"`
	// More counts the locals not shown; variables with Reference and
	// Start shows them (among others, when the shown ones were taken
	// out of the adapter's order for having changed).
	More  int `json:"more,omitempty"`
	Start int `json:"start,omitempty"`
	// Error says why the locals could not be read.
	Error string `json:"error,omitempty"`
}

// Exception is what the adapter says of the exception a thread stopped on.
type Exception struct {
	// ID is the adapter's exception id: the type for debugpy, "panic"
	// or the runtime error's kind for delve.
	ID string `json:"id,omitempty"`
	// Message is the exception's message (its description, else the
	// details' message).
	Message string `json:"message,omitempty"`
	// Type is the details' type name, when it differs from ID.
	Type      string `json:"type,omitempty"`
	BreakMode string `json:"break_mode,omitempty"`
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
	// Signal is the signal that killed the program ("SIGKILL"), when
	// the sandbox told.
	Signal string `json:"signal,omitempty"`
	// Output is the program's output since the last call, when it ended.
	Output string `json:"output,omitempty"`
	// NewOutput is how many characters of output have not been shown.
	NewOutput int    `json:"new_output,omitempty"`
	TTLLeft   string `json:"ttl_left,omitempty"`
}

// describe tells where the program is, asking the adapter where a stop
// is. A program that ended closes the session ([Supervisor.finish]) and
// reports the end.
func (s *Supervisor) describe(ctx context.Context, ss *session, st dap.State) (reply, error) {
	return s.report(ctx, ss, st, false)
}

// report is describe; with fromSnapshot, a stop already described is
// reported as it was then, without asking the adapter again.
func (s *Supervisor) report(ctx context.Context, ss *session, st dap.State, fromSnapshot bool) (reply, error) {
	if st.Ended() {
		return endedReply(s.finish(ss))
	}
	status := Status{Session: ss.id, Adapter: ss.adapter, Program: ss.program, TTLLeft: time.Until(ss.deadline).Round(time.Second).String()}
	var b strings.Builder
	switch {
	case st.Stopped != nil:
		status.State = "stopped"
		loc, ok := Location{}, false
		if fromSnapshot {
			loc, ok = ss.snapshotOf(st.Stops)
		}
		if !ok {
			var err error
			if loc, err = s.locate(ctx, ss, st.Stops, *st.Stopped); err != nil {
				return reply{}, err
			}
			ss.remember(st.Stops, loc)
		}
		status.Stopped = &loc
		b.WriteString(formatLocation(loc))
	default:
		status.State = "running"
		b.WriteString("the program is running.")
	}
	if n := pendingOutput(ss); n > 0 {
		status.NewOutput = n
		fmt.Fprintf(&b, "\n(%d characters of new output: call output)", n)
	}
	return reply{text: b.String(), data: status}, nil
}

func formatLocation(loc Location) string {
	var b strings.Builder
	if loc.Unknown != "" {
		fmt.Fprintf(&b, "stopped (%s), thread %d; where is unknown: %s. Continue or step to reach code, or set a breakpoint", loc.Reason, loc.ThreadID, loc.Unknown)
		return b.String()
	}
	fmt.Fprintf(&b, "stopped at %s:%d", loc.Path, loc.Line)
	if loc.Function != "" {
		fmt.Fprintf(&b, " in %s", loc.Function)
	}
	if loc.Reason != "" {
		fmt.Fprintf(&b, " (%s)", loc.Reason)
	}
	fmt.Fprintf(&b, ", thread %d, frame_id %d", loc.ThreadID, loc.FrameID)
	exception := ""
	if ex := loc.Exception; ex != nil {
		exception = "exception: " + ex.ID
		if ex.Type != "" {
			exception += " (" + ex.Type + ")"
		}
		if ex.Message != "" {
			exception += ": " + ex.Message
		}
	}
	if d := loc.Description; d != "" && d != loc.Reason && !strings.Contains(exception, d) {
		fmt.Fprintf(&b, "\n%s", d)
	}
	if loc.Source != "" {
		fmt.Fprintf(&b, "\n%6d | %s", loc.Line, loc.Source)
	}
	if exception != "" {
		b.WriteString("\n" + exception)
	}
	for _, v := range loc.Returned {
		fmt.Fprintf(&b, "\nreturned from %s", formatVar(v.Name, v.Type, v.Value, v.Reference))
	}
	switch l := loc.Locals; {
	case l == nil:
	case l.Error != "":
		fmt.Fprintf(&b, "\nlocals not shown: %s", l.Error)
	case len(l.Vars) > 0:
		b.WriteString("\nlocals:")
		for _, v := range l.Vars {
			fmt.Fprintf(&b, "\n  %s", formatVar(v.Name, v.Type, v.Value, v.Reference))
			if v.Changed != "" {
				fmt.Fprintf(&b, "  (%s)", v.Changed)
			}
		}
		if l.More > 0 {
			fmt.Fprintf(&b, "\n  … %d more: call variables with reference %d and start %d", l.More, l.Reference, l.Start)
		}
	}
	return b.String()
}

// locate reads the top frame of the stopped thread.
func (s *Supervisor) locate(ctx context.Context, ss *session, stops uint64, body godap.StoppedEventBody) (Location, error) {
	loc := Location{Reason: body.Reason, ThreadID: body.ThreadId}
	if body.Text != "" {
		loc.Description = body.Text
	} else if body.Description != "" {
		loc.Description = body.Description
	}
	tid, err := threadOr(ctx, ss, body.ThreadId)
	if err != nil {
		return loc, err
	}
	loc.ThreadID = tid
	frames, err := ss.stackTrace(ctx, tid, 1)
	var refused *dap.ResponseError
	if errors.As(err, &refused) {
		// The stop is real, its place unknown (delve at entry has no
		// goroutine 1 yet): report it, with the adapter's reason.
		loc.Unknown = refused.Error()
		return loc, nil
	}
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
	if body.Reason == "exception" && ss.ds.Capabilities().SupportsExceptionInfoRequest {
		if info, err := ss.ds.ExceptionInfo(ctx, tid); err == nil {
			loc.Exception = exceptionOf(info)
		} else if ctx.Err() != nil {
			return loc, ctx.Err()
		} else if errors.Is(err, dap.ErrNoAnswer) {
			return loc, s.dapError(ss, "exceptionInfo", err)
		}
	}
	if loc.FrameID != 0 {
		if err := s.stopLocals(ctx, ss, stops, &loc); err != nil {
			return loc, err
		}
	}
	return loc, nil
}

// exceptionOf keeps what a stop report shows of an exceptionInfo answer.
func exceptionOf(info godap.ExceptionInfoResponseBody) *Exception {
	ex := &Exception{ID: info.ExceptionId, Message: info.Description, BreakMode: string(info.BreakMode)}
	if d := info.Details; d != nil {
		if ex.Message == "" {
			ex.Message = d.Message
		}
		if t := d.TypeName; t != "" && t != ex.ID && !strings.HasSuffix(ex.ID, "."+t) {
			ex.Type = t
		}
	}
	return ex
}

// returnPrefix marks debugpy's return values among the locals
// (showReturnValue): "(return) add".
const returnPrefix = "(return) "

// stopLocals adds the top frame's first MaxStopLocals locals, and the
// values just returned, to loc, the report of the stop counted by stops.
// The locals whose value changed since the previous stop in the same
// function, or that are new since, come first (the variable a step just
// assigned is the one wanted, wherever the adapter lists it: debugpy
// sorts by name), then the others in the adapter's order. A failure is
// noted in loc rather than failing the stop report; only the call's end
// is an error.
func (s *Supervisor) stopLocals(ctx context.Context, ss *session, stops uint64, loc *Location) error {
	scs, err := ss.ds.Scopes(ctx, loc.FrameID)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, dap.ErrNoAnswer) {
			return s.dapError(ss, "scopes", err)
		}
		loc.Locals = &Locals{Error: "scopes failed: " + err.Error()}
		return nil
	}
	sc := localsScope(scs)
	if sc == nil {
		return nil
	}
	// Read the locals, a page at a time, up to maxComparedLocals: what
	// changed may be anywhere in the adapter's order.
	type local struct {
		v     Var
		index int // in the adapter's order, as variables' start counts
	}
	var all []local
	remaining, start := 0, 0
	for {
		page, err := ss.ds.Variables(ctx, sc.VariablesReference, start)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, dap.ErrNoAnswer) {
				return s.dapError(ss, "variables", err)
			}
			if start > 0 {
				remaining = -1 // how many more is unknown
				break
			}
			loc.Locals = &Locals{Reference: sc.VariablesReference, Error: "variables failed: " + err.Error()}
			return nil
		}
		for i, v := range page.Vars {
			vr := Var{Name: v.Name, Type: v.Type, Value: v.Value, Reference: v.VariablesReference}
			if fn, ok := strings.CutPrefix(v.Name, returnPrefix); ok {
				vr.Name = fn
				loc.Returned = append(loc.Returned, vr)
				continue
			}
			if group(v) {
				continue
			}
			all = append(all, local{vr, page.Start + i})
		}
		start = page.Start + len(page.Vars)
		remaining = page.Remaining
		if remaining <= 0 || len(page.Vars) == 0 || start >= maxComparedLocals {
			break
		}
	}
	cur := &stopVars{stops: stops, thread: loc.ThreadID, function: loc.Function, values: map[string]string{}, complete: remaining == 0}
	for _, l := range all {
		cur.values[l.v.Name] = l.v.Value
	}
	prev := ss.changedSince(cur)
	if prev != nil {
		for i := range all {
			old, had := prev.values[all[i].v.Name]
			switch {
			case had && old != all[i].v.Value:
				all[i].v.Changed = "changed"
			case !had && prev.complete:
				all[i].v.Changed = "new"
			}
		}
		slices.SortStableFunc(all, func(a, b local) int {
			return cmp.Compare(changedRank(a.v), changedRank(b.v))
		})
	}
	l := &Locals{Reference: sc.VariablesReference}
	for _, lc := range all {
		if len(l.Vars) < MaxStopLocals {
			l.Vars = append(l.Vars, lc.v)
			continue
		}
		if l.More == 0 || lc.index < l.Start {
			l.Start = lc.index
		}
		l.More++
	}
	if remaining > 0 {
		if l.More == 0 {
			l.Start = start
		}
		l.More += remaining
	}
	if len(l.Vars) > 0 {
		loc.Locals = l
	}
	return nil
}

// maxComparedLocals bounds the locals a stop report reads to tell which
// changed: a frame with more shows the changes among its first ones.
const maxComparedLocals = 4 * dap.MaxVariables

// changedRank orders a stop report's locals: changed or new first.
func changedRank(v Var) int {
	if v.Changed != "" {
		return 0
	}
	return 1
}

// stopVars are the top frame's locals in one stop, to tell which changed
// by the next.
type stopVars struct {
	stops    uint64
	thread   int
	function string
	values   map[string]string // name → value, as the adapter wrote it
	complete bool              // every local was read
}

// changedSince records cur, the locals of a stop, and returns those of the
// stop before it to compare with, or nil when there is nothing to compare
// with: the first stop, or one in another function or thread. A stop
// described again (status after evaluate) compares with the same stop as
// before.
func (ss *session) changedSince(cur *stopVars) *stopVars {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.seen != nil && ss.seen.stops != cur.stops {
		ss.before = ss.seen
	}
	ss.seen = cur
	if p := ss.before; p != nil && p.thread == cur.thread && p.function == cur.function && p.stops != cur.stops {
		return p
	}
	return nil
}

// group reports a grouping entry of debugpy's ("special variables",
// "function variables"): no value of its own, only children. A stop
// report leaves them to variables.
func group(v godap.Variable) bool {
	return v.Value == "" && v.VariablesReference > 0 && strings.HasSuffix(v.Name, " variables")
}

// localsScope picks the scope of a frame's own variables: the first
// named Locals (or Local), else the first that is not expensive.
func localsScope(scs []godap.Scope) *godap.Scope {
	for i := range scs {
		if strings.HasPrefix(scs[i].Name, "Local") {
			return &scs[i]
		}
	}
	for i := range scs {
		if !scs[i].Expensive {
			return &scs[i]
		}
	}
	return nil
}

// status says whether a session runs, and where it is; after its
// program's end, how it ended; without one it lists the breakpoints set
// for the next. A stop already reported is reported again from its
// snapshot, without asking the adapter, so status answers while an
// adapter is stuck; a stop not yet reported is asked for, and when the
// adapter does not answer, status says what it knows without it.
func (s *Supervisor) status(ctx context.Context, _ Input, cur *session) (reply, error) {
	if cur == nil {
		bl := s.listBreakpoints(nil)
		if e := s.ended(); e != nil {
			rep, _ := endedReply(e)
			rep.text = "no debug session: " + rep.text + "\nbreakpoints for the next launch:\n" + bl.text
			return rep, nil
		}
		return reply{text: "no debug session. " + bl.text, data: Status{State: "none"}}, nil
	}
	st := cur.ds.State()
	rep, err := s.report(ctx, cur, st, true)
	warn := err == nil
	if err != nil {
		stuck := cur.stuckNote()
		if stuck == "" || st.Stopped == nil {
			return reply{}, err
		}
		b := *st.Stopped
		loc := Location{Reason: b.Reason, ThreadID: b.ThreadId, Description: b.Description}
		rep = reply{text: fmt.Sprintf("stopped (%s), thread %d; where is unknown: %s", b.Reason, b.ThreadId, stuck),
			data: Status{State: "stopped", Session: cur.id, Adapter: cur.adapter, Program: cur.program, Stopped: &loc}}
	}
	if st.Ended() {
		return rep, nil
	}
	head := fmt.Sprintf("session %d: %s, %sed %s, %s left before it is ended.\n", cur.id, cur.adapter, cur.command, cur.program, time.Until(cur.deadline).Round(time.Second))
	rep.text = head + rep.text
	if stuck := cur.stuckNote(); stuck != "" && warn {
		rep.text += "\nwarning: " + stuck + "; call debug with op terminate, then launch again."
	}
	return rep, nil
}
