package dap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	godap "github.com/google/go-dap"
)

// resumeSeqGap is how far above the last sequence number known to the
// previous client a resumed client starts numbering its requests. The
// previous client may have sent requests after its state was taken, and
// their responses may still come (kept by whoever held the adapter's
// output meanwhile): numbering far above them means such a late response
// can never be taken for the answer to a request of the new client.
const resumeSeqGap = 1 << 20

// ResumeState is what a [Session] needs to go on over a new [Client] on
// an adapter that an earlier client already configured and launched: a
// berth that restarted while the adapter lived on under the run's resident
// supervisor. [Session.ResumeState] takes it from a live session; it is
// plain JSON, for a store.
type ResumeState struct {
	// Command is "launch" or "attach", as the session started.
	Command string `json:"command"`
	// Capabilities are the adapter's, from initialize.
	Capabilities godap.Capabilities `json:"capabilities"`
	// Breakpoints are the requested breakpoints per file, and Results
	// what the adapter made of them.
	Breakpoints map[string][]Breakpoint       `json:"breakpoints,omitempty"`
	Results     map[string][]BreakpointResult `json:"results,omitempty"`
	// Stopped is the last stop while the debuggee was stopped; nil while
	// it ran. Stops is [State.Stops] then.
	Stopped *godap.StoppedEventBody `json:"stopped,omitempty"`
	Stops   uint64                  `json:"stops"`
	// Process is the adapter's process event, if it sent one.
	Process *godap.ProcessEventBody `json:"process,omitempty"`
	// Seq is the last sequence number the client used.
	Seq int `json:"seq"`
	// OutputOffset is where the client's output ended ([OutputChunk]
	// offsets): the resumed client's output goes on from there.
	OutputOffset int64 `json:"output_offset"`
}

// ResumeState returns what [Resume] needs to take this session over on a
// new client. It fails before the session is configured (launch or attach
// still running, or failed).
func (s *Session) ResumeState() (ResumeState, error) {
	s.mu.Lock()
	ph, command := s.phase, s.command
	want := make(map[string][]Breakpoint, len(s.want))
	for f, b := range s.want {
		want[f] = slices.Clone(b)
	}
	results := make(map[string][]BreakpointResult, len(s.results))
	for f, r := range s.results {
		results[f] = slices.Clone(r)
	}
	s.mu.Unlock()
	if ph != phaseRunning {
		return ResumeState{}, errors.New("dap: the session is not configured yet (or its launch failed); only a launched or attached session can be resumed")
	}
	st := s.State()
	s.Client.mu.Lock()
	seq := s.Client.seq
	s.Client.mu.Unlock()
	s.ev.mu.Lock()
	offset := s.ev.out.next
	s.ev.mu.Unlock()
	return ResumeState{Command: command, Capabilities: st.Capabilities, Breakpoints: want, Results: results,
		Stopped: st.Stopped, Stops: st.Stops, Process: st.Process, Seq: seq, OutputOffset: offset}, nil
}

// Resume takes over an adapter that an earlier client configured and
// launched, over a new stream to the same adapter (rw, which the new
// client owns): no initialize, no launch; the session goes on with st's
// capabilities, breakpoints and stop. The stream may start in the middle of
// a message — the previous client may have read part of it before it went
// away — and is read from the next message header on. Output and events
// the adapter sent meanwhile (a stop, the program's end) are applied as
// they come; then Resume asks the adapter for its threads, and, when the
// debuggee is taken for stopped, for the stopped thread's top frame and
// its variables: a stop the adapter does not confirm (the debuggee was
// resumed and the answer lost) is dropped, and the debuggee counts as
// running. ctx bounds those
// requests (each at most [Options.RequestTimeout]). On an error the client
// is closed (and with it rw); the caller then ends the adapter.
func Resume(ctx context.Context, rw io.ReadWriteCloser, opts Options, sopts SessionOptions, st ResumeState) (*Session, error) {
	if st.Command != "launch" && st.Command != "attach" {
		rw.Close()
		return nil, fmt.Errorf("dap: cannot resume a session whose command is %q; it must be launch or attach", st.Command)
	}
	c := newClient(withResync(rw, opts.Logf), opts, func(c *Client) {
		c.seq = max(st.Seq, 0) + resumeSeqGap
		c.ev.st = State{Initialized: true, Capabilities: st.Capabilities, Stops: st.Stops, Process: st.Process}
		if st.Stopped != nil {
			b := *st.Stopped
			c.ev.st.Stopped = &b
		}
		c.ev.out.next = max(st.OutputOffset, 0)
	})
	s := NewSession(c, sopts)
	s.phase, s.command = phaseRunning, st.Command
	s.want = maps.Clone(st.Breakpoints)
	if s.want == nil {
		s.want = map[string][]Breakpoint{}
	}
	s.results = maps.Clone(st.Results)
	if s.results == nil {
		s.results = map[string][]BreakpointResult{}
	}
	if err := s.check(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return s, nil
}

// check asks a resumed adapter whether it still debugs, and whether the
// stop the session holds is real. The adapter's answers come after
// everything it sent before them, so the state is up to date when the
// threads answer is in.
func (s *Session) check(ctx context.Context) error {
	if _, err := s.Threads(ctx); err != nil {
		if s.State().Ended() {
			return nil // the program ended meanwhile; the state says how
		}
		return fmt.Errorf("dap: resuming the debug session: the adapter did not answer threads: %w", err)
	}
	st := s.State()
	if st.Ended() || st.Stopped == nil {
		return nil
	}
	confirmed, err := s.suspended(ctx, st.Stopped.ThreadId)
	if err != nil {
		return fmt.Errorf("dap: resuming the debug session: the adapter did not answer about the stopped thread: %w", err)
	}
	if !confirmed {
		// The debuggee was resumed and the answer lost: the stop is over.
		s.ev.resumed(st.Stops)
	}
	return nil
}

// suspended reports whether thread tid is stopped: its top frame's
// variables can be read. Asking for the stack alone does not tell:
// debugpy answers it for a running thread too (after half a second), but
// refuses the variables of a thread that is not suspended. An adapter
// refusing any of the requests counts as "not stopped"; a frame without
// scopes counts as stopped.
func (s *Session) suspended(ctx context.Context, tid int) (bool, error) {
	var refused *ResponseError
	frames, _, err := s.StackTrace(ctx, tid, 1)
	if errors.As(err, &refused) || err == nil && len(frames) == 0 {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	scopes, err := s.Scopes(ctx, frames[0].Id)
	if errors.As(err, &refused) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, sc := range scopes {
		if sc.VariablesReference <= 0 || sc.Expensive {
			continue
		}
		_, err := s.Variables(ctx, sc.VariablesReference, 0)
		if errors.As(err, &refused) {
			return false, nil
		}
		return err == nil, err
	}
	return true, nil
}
