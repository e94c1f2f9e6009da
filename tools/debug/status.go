package debug

import (
	"context"
	"fmt"
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
		status.Output = s.takeOutput(ss, endOutputChars)
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

// status says whether a session runs, and where it is; without one it
// lists the breakpoints set for the next.
func (s *Supervisor) status(ctx context.Context, _ Input, cur *session) (reply, error) {
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
