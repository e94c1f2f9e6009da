package debug

import (
	"context"
	"fmt"
	"strings"

	"berth.dev/berth/dap"
	"berth.dev/berth/tools"
)

// ending is what is left of a session whose program ended: the call
// that ran into the end, status and the refusals of later calls report it
// until the next session starts or terminate is called.
type ending struct {
	id      int
	adapter string
	command string
	program string
	// exited is set when the exit code is known (the adapter's exited
	// event, or the sandbox's /proc); otherwise only that the session
	// terminated is known.
	exited bool
	code   int
	// signal is the signal that killed the program, when the sandbox
	// told (0: none, or unknown).
	signal int
	// outside says the program ended outside the debugger (killed from
	// outside while stopped), as the sandbox's /proc told: the adapter
	// did not report the end.
	outside bool
	// output is the tail of the program's output, at most endOutputChars.
	output string
	// warning says what went wrong closing the session, if anything.
	warning string
}

// how says how the program ended: "exited (code 3)", "was killed by
// signal 9 (SIGKILL) outside the debugger".
func (e *ending) how() string {
	switch {
	case e.signal != 0 && e.outside:
		return fmt.Sprintf("was killed by %s outside the debugger", signalText(e.signal))
	case e.signal != 0:
		return fmt.Sprintf("was killed by %s", signalText(e.signal))
	case e.outside && e.exited:
		return fmt.Sprintf("exited (code %d) outside the debugger", e.code)
	case e.outside:
		return "ended outside the debugger (it was killed while stopped: its process is gone, and the sandbox could not tell its exit status)"
	case e.exited && e.adapter == AdapterDebugpy && e.code > 128 && signalNames[256-e.code] != "":
		// debugpy's launcher reports a program killed by signal n as
		// the exit code 256-n.
		return fmt.Sprintf("exited (code %d, which is how debugpy reports a program killed by %s)", e.code, signalText(256-e.code))
	case e.exited:
		return fmt.Sprintf("exited (code %d)", e.code)
	}
	return "ended (the debug adapter reported the session terminated; it gave no exit code)"
}

// text is the report of the end, for the call that ran into it and for
// status.
func (e *ending) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the program %s.", e.how())
	if e.output != "" {
		b.WriteString("\nthe end of its output:\n" + e.output)
		if !strings.HasSuffix(e.output, "\n") {
			b.WriteByte('\n')
		}
	} else if e.command == "attach" {
		b.WriteString("\nno output came through the debugger (an attached program writes where it was started).\n")
	} else {
		b.WriteString("\nit wrote no output.\n")
	}
	what := "the adapter and the program are gone"
	if e.command == "attach" {
		what = "the debugger detached"
	}
	fmt.Fprintf(&b, "session %d (%s, %s) is closed: %s. Set breakpoints and launch again to debug it again.", e.id, e.adapter, e.program, what)
	if e.warning != "" {
		b.WriteString("\nwarning: " + e.warning)
	}
	return b.String()
}

// status is the structured form of the end.
func (e *ending) status() Status {
	st := Status{State: "exited", Session: e.id, Adapter: e.adapter, Program: e.program, Output: e.output}
	if e.exited {
		code := e.code
		st.ExitCode = &code
	}
	if e.signal != 0 {
		st.Signal = signalName(e.signal)
	}
	return st
}

// finish closes a session whose program ended: it gives the adapter
// endGrace to send the rest of the output and the terminated event, then
// disconnects, stops the adapter's process group (which reaps the
// debuggee and anything left under the adapter), removes the session's
// scratch directory and releases the conversation's claim, all through
// [session.stop]. The ending is recorded once and, while ss is the
// current session, becomes s.last. It is safe to call from any goroutine
// and more than once. It returns nil, once the session has stopped, when
// the session was already being ended for another reason (terminate, its
// TTL, the run's close) — its program's end then is no news.
func (s *Supervisor) finish(ss *session) *ending {
	ss.endOnce.Do(func() {
		ss.mu.Lock()
		stopping := ss.stopping
		ss.mu.Unlock()
		if stopping {
			ss.stop(context.Background()) // waits for whoever stops it
			return
		}
		died := ss.programDied()
		if died == nil {
			ctx, cancel := context.WithTimeout(context.Background(), endGrace)
			ss.ds.WaitFor(ctx, func(st dap.State) bool { return st.Terminated })
			cancel()
		}
		err := ss.stop(context.Background())
		st := ss.ds.State()
		e := &ending{id: ss.id, adapter: ss.adapter, command: ss.command, program: ss.program,
			exited: st.Exited, code: st.ExitCode, output: endOutput(ss.ds)}
		switch {
		case died != nil:
			e.outside, e.exited, e.code, e.signal = true, died.known && died.signal == 0, died.code, died.signal
		case e.exited && e.code < 0 && e.code >= -64:
			// delve reports a program killed by signal n (while it ran
			// it) as the exit code -n; an exit code is never negative.
			e.exited, e.signal, e.code = false, -e.code, 0
		}
		if err != nil {
			e.warning = "closing the session: " + err.Error()
		}
		ss.end = e
	})
	if ss.end == nil {
		return nil
	}
	s.mu.Lock()
	if s.cur == ss {
		s.cur = nil
		s.last = ss.end
	}
	s.mu.Unlock()
	return ss.end
}

// ended returns the last ending, if no session has started since.
func (s *Supervisor) ended() *ending {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// endedReply reports an ending as the answer of a call; nil is a session
// ended by something else while the call ran.
func endedReply(e *ending) (reply, error) {
	if e == nil {
		return reply{}, tools.Fail("the debug session was ended while this call ran (its time limit, or the run closing); call status, then launch again")
	}
	return reply{text: e.text(), data: e.status()}, nil
}

// noSession is the refusal of an operation that needs a live session.
func (s *Supervisor) noSession(name string) error {
	if e := s.ended(); e != nil {
		return tools.Fail("no debug session: %s needs one, and session %d ended: the program %s. Set breakpoints and launch again (op launch) to debug it again", name, e.id, e.how())
	}
	return tools.Fail("no debug session: %s needs one; set breakpoints, then launch a program (op launch) or attach (op attach)", name)
}
