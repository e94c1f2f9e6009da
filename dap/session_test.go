package dap

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	godap "github.com/google/go-dap"
)

var fakeCaps = map[string]any{
	"supportsConfigurationDoneRequest":  true,
	"supportsConditionalBreakpoints":    true,
	"supportsHitConditionalBreakpoints": true,
}

// answerBreakpoints answers a setBreakpoints request, verifying every line
// but 99.
func answerBreakpoints(p *peer, req msg) godap.SetBreakpointsArguments {
	var args godap.SetBreakpointsArguments
	json.Unmarshal(req.Arguments, &args)
	var bps []map[string]any
	for _, b := range args.Breakpoints {
		if b.Line == 99 {
			bps = append(bps, map[string]any{"verified": false, "message": "no code at line 99"})
		} else {
			bps = append(bps, map[string]any{"verified": true, "line": b.Line, "id": b.Line})
		}
	}
	p.respond(req, map[string]any{"breakpoints": bps})
	return args
}

// TestLaunchOrder runs the launch sequence against the orders real adapters
// use, and against refused launches.
func TestLaunchOrder(t *testing.T) {
	tests := []struct {
		name    string
		adapter func(p *peer) []string // returns the commands it saw, in order
		wantErr string
	}{
		{
			// debugpy: initialized after launch, launch answered only after
			// configurationDone.
			name: "debugpy order",
			adapter: func(p *peer) []string {
				seen := []string{}
				init := p.expect("initialize")
				p.respond(init, fakeCaps)
				launch := p.expect("launch")
				p.event("initialized", nil)
				bp := p.expect("setBreakpoints")
				args := answerBreakpoints(p, bp)
				if args.Source.Path != "/w/main.py" || len(args.Breakpoints) != 2 || args.Breakpoints[0].Condition != "i > 3" {
					p.t.Errorf("setBreakpoints arguments = %+v", args)
				}
				done := p.expect("configurationDone")
				p.respond(done, nil)
				p.respond(launch, nil)
				p.event("stopped", map[string]any{"reason": "breakpoint", "threadId": 1, "allThreadsStopped": true})
				for _, m := range []msg{init, launch, bp, done} {
					seen = append(seen, m.Command)
				}
				return seen
			},
		},
		{
			// delve: initialized, then the launch response, before any
			// configuration.
			name: "dlv order",
			adapter: func(p *peer) []string {
				init := p.expect("initialize")
				p.respond(init, fakeCaps)
				launch := p.expect("launch")
				p.event("initialized", nil)
				p.respond(launch, nil)
				bp := p.expect("setBreakpoints")
				answerBreakpoints(p, bp)
				done := p.expect("configurationDone")
				p.respond(done, nil)
				p.event("stopped", map[string]any{"reason": "breakpoint", "threadId": 1, "allThreadsStopped": true})
				return []string{init.Command, launch.Command, bp.Command, done.Command}
			},
		},
		{
			// Some adapters send initialized right after the initialize
			// response, before launch.
			name: "early initialized",
			adapter: func(p *peer) []string {
				init := p.expect("initialize")
				p.respond(init, fakeCaps)
				p.event("initialized", nil)
				launch := p.expect("launch")
				bp := p.expect("setBreakpoints")
				answerBreakpoints(p, bp)
				done := p.expect("configurationDone")
				p.respond(done, nil)
				p.respond(launch, nil)
				p.event("stopped", map[string]any{"reason": "breakpoint", "threadId": 1, "allThreadsStopped": true})
				return []string{init.Command, launch.Command, bp.Command, done.Command}
			},
		},
		{
			name: "launch refused before initialized",
			adapter: func(p *peer) []string {
				init := p.expect("initialize")
				p.respond(init, fakeCaps)
				launch := p.expect("launch")
				p.fail(launch, "", map[string]any{"id": 1, "format": "program {p} does not exist", "variables": map[string]string{"p": "/w/nope.py"}})
				return nil
			},
			wantErr: "program /w/nope.py does not exist",
		},
		{
			name: "launch refused after configurationDone",
			adapter: func(p *peer) []string {
				init := p.expect("initialize")
				p.respond(init, fakeCaps)
				launch := p.expect("launch")
				p.event("initialized", nil)
				answerBreakpoints(p, p.expect("setBreakpoints"))
				p.respond(p.expect("configurationDone"), nil)
				p.fail(launch, "Could not build the program", nil)
				return nil
			},
			wantErr: "Could not build the program",
		},
		{
			name: "adapter dies before initialized",
			adapter: func(p *peer) []string {
				p.respond(p.expect("initialize"), fakeCaps)
				p.expect("launch")
				p.Conn.Close()
				return nil
			},
			wantErr: "debug adapter exited",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := newPair(t, Options{})
			s := NewSession(c, SessionOptions{AdapterID: "fake"})
			res, err := s.SetBreakpoints(t.Context(), "/w/main.py", []Breakpoint{{Line: 12, Condition: "i > 3"}, {Line: 99}})
			if err != nil || len(res) != 2 || res[0].Verified || res[0].Message != PendingMessage {
				t.Fatalf("breakpoints before launch = %+v, %v; want pending", res, err)
			}
			var seen []string
			wait := p.script(func() { seen = tt.adapter(p) })
			err = s.Launch(t.Context(), map[string]any{"program": "/w/main.py", "console": "internalConsole"})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Launch = %v, want an error containing %q", err, tt.wantErr)
				}
				p.Conn.Close()
				wait()
				if _, err := s.SetBreakpoints(t.Context(), "/w/main.py", []Breakpoint{{Line: 1}}); err == nil {
					t.Error("breakpoints accepted after a failed launch")
				}
				return
			}
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			st, err := c.WaitStop(t.Context(), 0)
			wait()
			if err != nil || st.Stopped == nil || st.Stopped.Reason != "breakpoint" || st.Stopped.ThreadId != 1 || !st.Stopped.AllThreadsStopped {
				t.Fatalf("first stop = %+v, %v", st, err)
			}
			if want := "initialize launch setBreakpoints configurationDone"; strings.Join(seen, " ") != want {
				t.Errorf("adapter saw %v, want %s", seen, want)
			}
			got := s.Breakpoints()["/w/main.py"]
			if len(got) != 2 || !got[0].Verified || got[0].ActualLine != 12 || got[1].Verified || got[1].Message != "no code at line 99" {
				t.Errorf("breakpoint results = %+v", got)
			}
			if err := s.Launch(t.Context(), map[string]any{}); err == nil || !strings.Contains(err.Error(), "already ran launch") {
				t.Errorf("second launch = %v, want a refusal", err)
			}
		})
	}
}

// TestBreakpointsAfterLaunch: breakpoints set on a running session go to
// the adapter; an empty list clears the file; unsupported features are
// dropped with a note.
func TestBreakpointsAfterLaunch(t *testing.T) {
	c, p := newPair(t, Options{})
	s := NewSession(c, SessionOptions{AdapterID: "fake"})
	var cleared godap.SetBreakpointsArguments
	wait := p.script(func() {
		p.respond(p.expect("initialize"), map[string]any{"supportsConfigurationDoneRequest": true})
		launch := p.expect("launch")
		p.event("initialized", nil)
		p.respond(p.expect("configurationDone"), nil)
		p.respond(launch, nil)
		args := answerBreakpoints(p, p.expect("setBreakpoints"))
		if args.Breakpoints[0].LogMessage != "" {
			t.Errorf("log message sent to an adapter without logpoints: %+v", args)
		}
		cleared = answerBreakpoints(p, p.expect("setBreakpoints"))
	})
	if err := s.Launch(t.Context(), map[string]any{}); err != nil {
		t.Fatal(err)
	}
	res, err := s.SetBreakpoints(t.Context(), "/w/a.py", []Breakpoint{{Line: 3, LogMessage: "x={x}"}})
	if err != nil || len(res) != 1 || !res[0].Verified || !strings.Contains(res[0].Message, "log message] ignored") {
		t.Fatalf("results = %+v, %v", res, err)
	}
	res, err = s.SetBreakpoints(t.Context(), "/w/a.py", nil)
	wait()
	if err != nil || len(res) != 0 || cleared.Source.Path != "/w/a.py" || len(cleared.Breakpoints) != 0 {
		t.Fatalf("clearing: %+v, %v, sent %+v", res, err, cleared)
	}
	if _, ok := s.Breakpoints()["/w/a.py"]; ok {
		t.Error("cleared file still listed")
	}
}

// TestStepAndWait: a resume marks the debuggee running; WaitStop returns
// the next stop, and the end.
func TestStepAndWait(t *testing.T) {
	c, p := newPair(t, Options{})
	wait := p.script(func() {
		p.event("stopped", map[string]any{"reason": "breakpoint", "threadId": 1})
		p.respond(p.expect("next"), nil)
		p.event("stopped", map[string]any{"reason": "step", "threadId": 1})
		p.respond(p.expect("continue"), map[string]any{"allThreadsContinued": true})
		p.event("exited", map[string]any{"exitCode": 3})
		p.event("terminated", nil)
	})
	st, err := c.WaitStop(t.Context(), 0)
	if err != nil || st.Stopped.Reason != "breakpoint" {
		t.Fatalf("first stop: %+v, %v", st, err)
	}
	mark := st.Stops
	if err := c.Next(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if st, err = c.WaitStop(t.Context(), mark); err != nil || st.Stopped == nil || st.Stopped.Reason != "step" {
		t.Fatalf("after next: %+v, %v", st, err)
	}
	mark = st.Stops
	if err := c.Continue(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	st, err = c.WaitFor(t.Context(), func(s State) bool { return s.Terminated })
	wait()
	if err != nil || st.Stops <= mark || !st.Exited || st.ExitCode != 3 || st.Stopped != nil || !st.Ended() {
		t.Fatalf("after continue: %+v, %v", st, err)
	}
}

// TestDisconnectBounded: an adapter that never answers disconnect does not
// hold Close beyond the disconnect timeout; the client is closed anyway.
func TestDisconnectBounded(t *testing.T) {
	c, p := newPair(t, Options{})
	s := NewSession(c, SessionOptions{AdapterID: "fake", DisconnectTimeout: 50 * time.Millisecond})
	wait := p.script(func() {
		req := p.expect("disconnect")
		var args godap.DisconnectArguments
		json.Unmarshal(req.Arguments, &args)
		if !args.TerminateDebuggee {
			t.Errorf("disconnect arguments = %+v, want terminateDebuggee", args)
		}
		for { // read until the client closes the stream, never answering
			if _, ok := p.recv(); !ok {
				return
			}
		}
	})
	err := s.Close(t.Context(), true)
	wait()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer disconnect") {
		t.Errorf("Close = %v, want a disconnect deadline error", err)
	}
	<-c.Done()
	if !errors.Is(c.Err(), ErrClosed) {
		t.Errorf("client Err = %v, want ErrClosed", c.Err())
	}
}

// TestDisconnectAnswered: a normal disconnect returns nil.
func TestDisconnectAnswered(t *testing.T) {
	c, p := newPair(t, Options{})
	s := NewSession(c, SessionOptions{AdapterID: "fake"})
	wait := p.script(func() {
		p.respond(p.expect("disconnect"), nil)
	})
	if err := s.Close(t.Context(), false); err != nil {
		t.Errorf("Close = %v", err)
	}
	wait()
}
