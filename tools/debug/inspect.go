package debug

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	godap "github.com/google/go-dap"

	"berth.dev/berth/dap"
	"berth.dev/berth/tools"
)

// threads lists the program's threads.
func (s *Supervisor) threads(ctx context.Context, _ Input, ss *session) (reply, error) {
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

// needStopped refuses the operation name unless the program is stopped.
func (s *Supervisor) needStopped(ss *session, name string) error {
	st := ss.ds.State()
	if st.Ended() {
		return tools.Fail("the program has ended: %s needs a stopped program; launch again", name)
	}
	if st.Stopped == nil {
		return tools.Fail("the program is running: %s needs it stopped; call pause first", name)
	}
	return nil
}

// stack lists the frames of the thread in.ThreadID, or of the stopped one.
func (s *Supervisor) stack(ctx context.Context, in Input, ss *session) (reply, error) {
	if err := s.needStopped(ss, "stack"); err != nil {
		return reply{}, err
	}
	tid, err := threadOr(ctx, ss, in.ThreadID)
	if err != nil {
		return reply{}, err
	}
	frames, err := ss.stackTrace(ctx, tid, dap.MaxFrames)
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
	total := len(frames)
	if total == dap.MaxFrames {
		// The adapter's total may be missing or an estimate: count.
		more, err := ss.ds.CountFrames(ctx, tid, len(frames), maxCountedFrames)
		if err != nil {
			return reply{}, s.dapError(ss, "stack", err)
		}
		total += more // a lower bound when more is maxCountedFrames
		switch {
		case more == maxCountedFrames:
			fmt.Fprintf(&b, "(at least %d more frames not shown; at most %d are listed)\n", more, dap.MaxFrames)
		case more > 0:
			fmt.Fprintf(&b, "(%d more frames not shown; at most %d are listed)\n", more, dap.MaxFrames)
		}
	}
	return reply{text: strings.TrimSpace(b.String()), data: map[string]any{"thread_id": tid, "frames": data, "total": total}}, nil
}

// stackTrace asks for the first levels frames of thread tid. Within one
// stop, every answer keeps the frame ids the first one gave: delve makes a
// new id for a frame at each stackTrace request (all valid until the
// program runs again), so without this the frame_id of a stop report would
// not be the one stack shows for the same frame.
func (ss *session) stackTrace(ctx context.Context, tid, levels int) ([]godap.StackFrame, error) {
	stops := ss.ds.State().Stops
	ss.mu.Lock()
	if ss.framesStops != stops {
		ss.framesStops, ss.frames = stops, nil
	}
	known := ss.frames[tid]
	ss.mu.Unlock()
	if len(known) >= levels {
		return slices.Clone(known[:levels]), nil
	}
	frames, _, err := ss.ds.StackTrace(ctx, tid, levels)
	if err != nil {
		return nil, err
	}
	for i := range min(len(known), len(frames)) {
		frames[i].Id = known[i].Id
	}
	now := ss.ds.State().Stops
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.framesStops == stops && now == stops {
		if ss.frames == nil {
			ss.frames = map[int][]godap.StackFrame{}
		}
		ss.frames[tid] = slices.Clone(frames)
	}
	return frames, nil
}

// maxCountedFrames bounds counting the frames a stack does not list.
const maxCountedFrames = 1000

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
	frames, err := ss.stackTrace(ctx, tid, 1)
	if err != nil {
		return 0, s.dapError(ss, "stack", err)
	}
	if len(frames) == 0 {
		return 0, tools.Fail("the stopped thread %d has no frames", tid)
	}
	return frames[0].Id, nil
}

// scopes lists the scopes of the frame in.FrameID, or of the top frame.
func (s *Supervisor) scopes(ctx context.Context, in Input, ss *session) (reply, error) {
	frameID := in.FrameID
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
	// Changed, in a stop report, says the local is "new" or "changed"
	// since the previous stop in the same function.
	Changed string `json:"changed,omitempty"`
}

// variables lists a page of the children of in.Reference.
func (s *Supervisor) variables(ctx context.Context, in Input, ss *session) (reply, error) {
	ref, start := in.Reference, in.Start
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

// evaluate evaluates in.Expression in the frame in.FrameID, or in the top
// frame.
func (s *Supervisor) evaluate(ctx context.Context, in Input, ss *session) (reply, error) {
	expr, frameID := in.Expression, in.FrameID
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
	a, _ := specFor(ss.adapter)
	ss.forget() // the expression may change the locals a stop report showed
	body, err := ss.ds.Evaluate(ctx, expr, frameID, "repl")
	if err != nil {
		err = s.dapError(ss, "evaluate", err)
		if te := (*tools.Error)(nil); a.evaluates != "" && errors.As(err, &te) && ss.gone() == "" && ss.stuckNote() == "" {
			err = tools.Fail("%s\n(%s %s)", te.Msg, a.id, a.evaluates)
		}
		return reply{}, err
	}
	text := formatVar(expr, body.Type, body.Result, body.VariablesReference)
	if body.Result == "" && body.VariablesReference == 0 {
		// debugpy answers a statement (and None) in the repl context with
		// nothing; delve a call without results.
		text = fmt.Sprintf("%s: no value; %s ran it in frame %d", expr, ss.adapter, frameID)
		if a.evaluates != "" {
			text += " (" + a.id + " " + a.evaluates + ")"
		}
		text += ". Anything it printed is in output."
	}
	return reply{text: text, data: map[string]any{"expression": expr, "frame_id": frameID, "type": body.Type, "value": body.Result, "reference": body.VariablesReference}}, nil
}
