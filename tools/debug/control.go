package debug

import (
	"context"
	"fmt"

	"berth.dev/berth/dap"
	"berth.dev/berth/tools"
)

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
		return 0, dapError(ss, "threads", err)
	}
	if len(ths) == 0 {
		return 0, tools.Fail("the program has no threads to act on")
	}
	return ths[0].Id, nil
}

// resume starts the stopped program on the thread with act (continue,
// step_over, step_in, step_out: name) and reports the next stop.
func (s *Supervisor) resume(ctx context.Context, ss *session, name string, tid int, act func(ds *dap.Session, ctx context.Context, threadID int) error) (reply, error) {
	st := ss.ds.State()
	if err := notEnded(st, name); err != nil {
		return reply{}, err
	}
	if st.Stopped == nil {
		return reply{}, tools.Fail("the program is running, not stopped: %s needs it stopped; call pause, or status to see where it is", name)
	}
	return s.act(ctx, ss, st, name, tid, act)
}

// pause stops the running program, and describes a stopped one as it is.
func (s *Supervisor) pause(ctx context.Context, in Input, ss *session) (reply, error) {
	st := ss.ds.State()
	if err := notEnded(st, "pause"); err != nil {
		return reply{}, err
	}
	if st.Stopped != nil {
		rep, err := s.describe(ctx, ss, st)
		rep.text = "already stopped. " + rep.text
		return rep, err
	}
	return s.act(ctx, ss, st, "pause", in.ThreadID, (*dap.Session).Pause)
}

// notEnded refuses the run-control operation name once the program ended.
func notEnded(st dap.State, name string) error {
	if !st.Ended() {
		return nil
	}
	how := "ended"
	if st.Exited {
		how = fmt.Sprintf("exited (code %d)", st.ExitCode)
	}
	return tools.Fail("the program has %s, so %s has nothing to run; the session is closed: set breakpoints and launch again", how, name)
}

// act sends the run-control request name (act) for the thread and waits
// for the stop after st.
func (s *Supervisor) act(ctx context.Context, ss *session, st dap.State, name string, tid int, act func(ds *dap.Session, ctx context.Context, threadID int) error) (reply, error) {
	tid, err := threadOr(ctx, ss, tid)
	if err != nil {
		return reply{}, err
	}
	if err := act(ss.ds, ctx, tid); err != nil {
		return reply{}, s.dapError(ss, name, err)
	}
	rep, err := s.waitStop(ctx, ss, st.Stops)
	if a, _ := specFor(ss.adapter); err == nil && name == "step_out" && a.noReturn != "" {
		if status, ok := rep.data.(Status); ok && status.Stopped != nil {
			rep.text += "\n(" + a.noReturn + ")"
		}
	}
	return rep, err
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

// terminate ends the session: a launched program is killed with the
// adapter, an attached one is left running.
func (s *Supervisor) terminate(_ context.Context, _ Input, cur *session) (reply, error) {
	if cur == nil {
		s.mu.Lock()
		e := s.last
		s.last = nil
		s.mu.Unlock()
		if e != nil {
			return reply{text: fmt.Sprintf("no debug session to terminate: session %d (%s, %s) was already closed when its program %s.", e.id, e.adapter, e.program, e.how()),
				data: map[string]any{"terminated": 0, "ended": e.id}}, nil
		}
		return reply{text: "no debug session to terminate.", data: Status{State: "none"}}, nil
	}
	s.mu.Lock()
	if s.cur == cur {
		s.cur = nil
	}
	s.mu.Unlock()
	out := s.takeOutput(cur, endOutputChars)
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
