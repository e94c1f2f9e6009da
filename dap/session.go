package dap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	godap "github.com/google/go-dap"
)

// SessionOptions configure a [Session].
type SessionOptions struct {
	// AdapterID is initialize's adapterID ("debugpy", "go", "lldb-dap",
	// "dart").
	AdapterID string
	// ExceptionFilters, when non-nil, are sent with setExceptionBreakpoints
	// during configuration (for example []string{"uncaught"} for debugpy).
	ExceptionFilters []string
	// DisconnectTimeout bounds disconnect in [Session.Close] (default
	// DisconnectTimeout).
	DisconnectTimeout time.Duration
}

// Breakpoint is a requested source breakpoint. Condition, HitCondition and
// LogMessage are sent only when set; when the adapter does not support one,
// the result's Message says it was ignored.
type Breakpoint struct {
	Line         int    `json:"line"`
	Condition    string `json:"condition,omitempty"`
	HitCondition string `json:"hitCondition,omitempty"`
	LogMessage   string `json:"logMessage,omitempty"`
}

// BreakpointResult is what the adapter made of one requested breakpoint.
type BreakpointResult struct {
	Line       int    // as requested
	Verified   bool   // the adapter bound it to code
	ActualLine int    // where the adapter placed it (0: unknown)
	Message    string // the adapter's reason when unverified, or our note
	ID         int    // the adapter's breakpoint id (0: none)
}

// PendingMessage is the message of breakpoints set before launch.
const PendingMessage = "pending: sent to the debug adapter when the program is launched"

type phase int

const (
	phaseNew         phase = iota // breakpoints are only recorded
	phaseConfiguring              // launch/attach in progress
	phaseRunning                  // configured; breakpoints go to the adapter
	phaseFailed                   // launch/attach failed; close the session
)

// Session drives one debug session over a [Client]: the launch order that
// works for debugpy and delve, breakpoints that may be set before launch,
// and a bounded disconnect. Its configuration methods (Launch, Attach,
// SetBreakpoints) are serialised; the Client's methods may be called
// directly.
type Session struct {
	*Client
	opts SessionOptions

	cfg sync.Mutex // serialises Launch, Attach and SetBreakpoints; held across I/O

	mu      sync.Mutex // guards the fields below; never held across I/O
	phase   phase
	command string // "launch" or "attach" once started
	want    map[string][]Breakpoint
	results map[string][]BreakpointResult
}

// NewSession returns a session over c. The session does not own c until
// [Session.Close], which closes it.
func NewSession(c *Client, opts SessionOptions) *Session {
	if opts.DisconnectTimeout <= 0 {
		opts.DisconnectTimeout = DisconnectTimeout
	}
	return &Session{Client: c, opts: opts, want: map[string][]Breakpoint{}, results: map[string][]BreakpointResult{}}
}

// Launch initializes the adapter and starts the program: args are launch's
// adapter-specific arguments (program, args, cwd, console…). It sends launch
// without waiting for its response (debugpy answers only after
// configurationDone, delve before), waits for the initialized event, sends
// every recorded breakpoint, the exception filters and configurationDone,
// and then collects the launch response: a refused launch is returned as an
// error. ctx bounds it all (cap LaunchTimeout). Wait for the first stop
// with [Client.WaitStop](ctx, 0).
func (s *Session) Launch(ctx context.Context, args any) error {
	return s.start(ctx, "launch", args)
}

// Attach is [Session.Launch] with attach: args say where the debuggee
// listens (for debugpy {"connect": {"host": …, "port": …}}).
func (s *Session) Attach(ctx context.Context, args any) error {
	return s.start(ctx, "attach", args)
}

func (s *Session) start(ctx context.Context, command string, args any) error {
	s.cfg.Lock()
	defer s.cfg.Unlock()
	s.mu.Lock()
	if s.phase != phaseNew {
		prev := s.command
		s.mu.Unlock()
		return fmt.Errorf("dap: %s: this session already ran %s; terminate it and start a new session", command, prev)
	}
	s.phase, s.command = phaseConfiguring, command
	s.mu.Unlock()

	err := s.configure(ctx, command, args)
	s.mu.Lock()
	if err != nil {
		s.phase = phaseFailed
	} else {
		s.phase = phaseRunning
	}
	s.mu.Unlock()
	return err
}

func (s *Session) configure(ctx context.Context, command string, args any) error {
	ctx, cancel := bounded(ctx, LaunchTimeout)
	defer cancel()
	if _, err := s.Initialize(ctx, s.opts.AdapterID); err != nil {
		return err
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("dap: %s: encoding the arguments: %w", command, err)
	}
	var req godap.RequestMessage
	if command == "launch" {
		req = &godap.LaunchRequest{Request: godap.Request{Command: command}, Arguments: raw}
	} else {
		req = &godap.AttachRequest{Request: godap.Request{Command: command}, Arguments: raw}
	}
	call, err := s.Send(ctx, req)
	if err != nil {
		return err
	}
	// The launch response is collected by its own goroutine, owned by this
	// function: every return below drains it, and ctx bounds it.
	launched := make(chan error, 1)
	go func() {
		_, err := call.Wait(ctx)
		launched <- err
	}()
	launchDone := false
	fail := func(err error) error {
		if !launchDone {
			cancel()
			<-launched
		}
		return err
	}

	// Wait for initialized, or for a launch refused before it.
	for {
		st, changed := s.watch()
		if st.Initialized {
			break
		}
		select {
		case err := <-launched:
			launchDone = true
			if err != nil {
				return err
			}
		case <-changed:
		case <-ctx.Done():
			return fail(fmt.Errorf("dap: %s: the adapter never sent initialized: %w", command, ctx.Err()))
		case <-s.Done():
			if st := s.State(); st.Initialized {
				continue
			}
			return fail(fmt.Errorf("dap: %s: %w", command, s.Err()))
		}
	}

	s.mu.Lock()
	files := slices.Sorted(maps.Keys(s.want))
	s.mu.Unlock()
	for _, file := range files {
		if _, err := s.sendBreakpoints(ctx, file); err != nil && s.Err() != nil {
			return fail(err)
		}
	}
	if s.opts.ExceptionFilters != nil {
		_, err := do[*godap.SetExceptionBreakpointsResponse](ctx, s.Client, &godap.SetExceptionBreakpointsRequest{
			Request:   godap.Request{Command: "setExceptionBreakpoints"},
			Arguments: godap.SetExceptionBreakpointsArguments{Filters: s.opts.ExceptionFilters},
		})
		if err != nil {
			return fail(err)
		}
	}
	if s.Capabilities().SupportsConfigurationDoneRequest {
		_, err := do[*godap.ConfigurationDoneResponse](ctx, s.Client, &godap.ConfigurationDoneRequest{
			Request: godap.Request{Command: "configurationDone"},
		})
		if err != nil {
			return fail(err)
		}
	}
	if !launchDone {
		if err := <-launched; err != nil {
			return err
		}
	}
	return nil
}

// watch returns the state and a channel closed at its next change.
func (s *Session) watch() (State, <-chan struct{}) {
	e := &s.ev
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st, e.changed
}

// SetBreakpoints replaces the breakpoints of file (an absolute path as the
// adapter sees it); an empty bps clears them. Before launch they are
// recorded and reported as unverified with [PendingMessage]; from launch on
// they are sent to the adapter and its answer is returned.
func (s *Session) SetBreakpoints(ctx context.Context, file string, bps []Breakpoint) ([]BreakpointResult, error) {
	s.cfg.Lock()
	defer s.cfg.Unlock()
	s.mu.Lock()
	if len(bps) == 0 {
		delete(s.want, file)
	} else {
		s.want[file] = slices.Clone(bps)
	}
	ph := s.phase
	s.mu.Unlock()
	switch ph {
	case phaseNew:
		res := make([]BreakpointResult, len(bps))
		for i, b := range bps {
			res[i] = BreakpointResult{Line: b.Line, Message: PendingMessage}
		}
		s.mu.Lock()
		if len(res) == 0 {
			delete(s.results, file)
		} else {
			s.results[file] = res
		}
		s.mu.Unlock()
		return res, nil
	case phaseFailed:
		return nil, errors.New("dap: setBreakpoints: the launch failed, so this session is over; terminate it and launch again")
	}
	return s.sendBreakpoints(ctx, file)
}

// sendBreakpoints sends file's wanted breakpoints and records the answer.
func (s *Session) sendBreakpoints(ctx context.Context, file string) ([]BreakpointResult, error) {
	s.mu.Lock()
	bps := s.want[file]
	s.mu.Unlock()
	caps := s.Capabilities()
	src := make([]godap.SourceBreakpoint, len(bps))
	notes := make([]string, len(bps))
	for i, b := range bps {
		src[i] = godap.SourceBreakpoint{Line: b.Line, Condition: b.Condition, HitCondition: b.HitCondition, LogMessage: b.LogMessage}
		var ignored []string
		if b.Condition != "" && !caps.SupportsConditionalBreakpoints {
			src[i].Condition, ignored = "", append(ignored, "condition")
		}
		if b.HitCondition != "" && !caps.SupportsHitConditionalBreakpoints {
			src[i].HitCondition, ignored = "", append(ignored, "hit count")
		}
		if b.LogMessage != "" && !caps.SupportsLogPoints {
			src[i].LogMessage, ignored = "", append(ignored, "log message")
		}
		if len(ignored) > 0 {
			notes[i] = fmt.Sprintf("%v ignored: this debug adapter does not support it", ignored)
		}
	}
	resp, err := do[*godap.SetBreakpointsResponse](ctx, s.Client, &godap.SetBreakpointsRequest{
		Request: godap.Request{Command: "setBreakpoints"},
		Arguments: godap.SetBreakpointsArguments{
			Source:      godap.Source{Path: file},
			Breakpoints: src,
		},
	})
	res := make([]BreakpointResult, len(bps))
	for i, b := range bps {
		res[i] = BreakpointResult{Line: b.Line}
		switch {
		case err != nil:
			res[i].Message = err.Error()
		case i < len(resp.Body.Breakpoints):
			got := resp.Body.Breakpoints[i]
			res[i].Verified, res[i].ActualLine, res[i].Message, res[i].ID = got.Verified, got.Line, got.Message, got.Id
		default:
			res[i].Message = "the adapter did not answer for this breakpoint"
		}
		if notes[i] != "" {
			res[i].Message = joinNote(res[i].Message, notes[i])
		}
	}
	s.mu.Lock()
	if len(res) == 0 {
		delete(s.results, file)
	} else {
		s.results[file] = res
	}
	s.mu.Unlock()
	return res, err
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Breakpoints returns the last known result for every file with
// breakpoints.
func (s *Session) Breakpoints() map[string][]BreakpointResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]BreakpointResult, len(s.results))
	for f, r := range s.results {
		out[f] = slices.Clone(r)
	}
	return out
}

// Close ends the session: disconnect (asking the adapter to terminate the
// debuggee when terminateDebuggee is set), bounded by
// [SessionOptions.DisconnectTimeout] and ctx, then [Client.Close]. It
// returns the disconnect error, if any, joined with the stream's Close
// error; either way the client is closed, and the caller should then stop
// the adapter process.
func (s *Session) Close(ctx context.Context, terminateDebuggee bool) error {
	derr := s.disconnect(ctx, terminateDebuggee, s.opts.DisconnectTimeout)
	cerr := s.Client.Close()
	return errors.Join(derr, cerr)
}
