package debug

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"berth.dev/berth/dap"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools/internal/proc"
)

// adoptTimeout bounds taking one session over: reattaching to its adapter
// and asking it where the program is.
const adoptTimeout = 30 * time.Second

// residentPrefix starts the names of adapters under the run's resident
// supervisor.
const residentPrefix = "debug-"

// handle is what a restarted berth needs to take a session over.
type handle struct {
	ID       int       `json:"id"`
	Adapter  string    `json:"adapter"`
	Server   string    `json:"server"`
	Command  string    `json:"command"`
	Program  string    `json:"program"`
	Root     string    `json:"root"`
	Host     bool      `json:"host,omitempty"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline"`
	// Resident is the adapter's process name under the run's resident
	// supervisor; "" for a session that ends with berth (delve, attach by
	// port, an adapter run as a plain process).
	Resident string `json:"resident,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	Scratch  string `json:"scratch,omitempty"`
	// OutShown is the output offset the output operation reached.
	OutShown int64 `json:"out_shown"`
	// Stop is where the last stop report placed the program.
	Stop *Location `json:"stop,omitempty"`
	// DAP is the DAP session's state; nil while it was still starting.
	DAP *dap.ResumeState `json:"dap,omitempty"`
}

// stored is the supervisor's durable state.
type stored struct {
	NextID      int                         `json:"next_id"`
	Breakpoints map[string][]dap.Breakpoint `json:"breakpoints,omitempty"`
	Notes       []string                    `json:"notes,omitempty"`
	Session     *handle                     `json:"session,omitempty"`
}

// Generation changes whenever the Snapshot does, so that the owner of the
// run's store rewrites it only then.
func (s *Supervisor) Generation() uint64 {
	data, err := s.Snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !bytes.Equal(data, s.stored) {
		s.gen++
		s.stored = data
	}
	return s.gen
}

// Snapshot returns the run's debug state for Adopt in a restarted berth:
// the breakpoints, the notes not yet shown and the current session. A
// session whose adapter runs under the run's resident supervisor is taken
// over by Adopt; any other is recorded only so that the next call says it
// ended with berth.
func (s *Supervisor) Snapshot() ([]byte, error) {
	s.mu.Lock()
	st := stored{NextID: s.nextID, Breakpoints: maps.Clone(s.bps), Notes: slices.Clone(s.notes)}
	cur, left := s.cur, s.left
	s.mu.Unlock()
	switch {
	case left != nil:
		st.Session = left
	case cur != nil && !cur.ds.State().Ended():
		h := cur.handle()
		st.Session = &h
	}
	return json.Marshal(st)
}

// handle returns what Adopt needs of the session.
func (ss *session) handle() handle {
	h := handle{ID: ss.id, Adapter: ss.adapter, Server: ss.server, Command: ss.command, Program: ss.program, Root: ss.root, Host: ss.host,
		Started: ss.started, Deadline: ss.deadline, Resident: ss.resident, Pid: ss.pid, Scratch: ss.scratch}
	ss.mu.Lock()
	h.OutShown = ss.outShown
	if ss.snap != nil {
		loc := ss.snap.loc
		loc.Locals, loc.Returned, loc.Exception = nil, nil, nil
		h.Stop = &loc
	}
	ss.mu.Unlock()
	if ss.resident != "" {
		if rs, err := ss.ds.ResumeState(); err == nil {
			h.DAP = &rs
		}
	}
	return h
}

// Adopt takes over the debug state of a Snapshot taken by an earlier
// berth for this run: the breakpoints, and a session whose adapter runs
// under res, the run's resident supervisor, stopped where it was (or
// running, or ended while berth was away: the next call says which). Its
// time limit goes on from where it was, and it takes the conversation's
// claim again (Options.Claim). A session that cannot be taken over is
// ended — its adapter and program killed through res — and so is any
// other adapter of this tool under res; the next call's result says so,
// and why. Adopt is called once, before the first call.
func (s *Supervisor) Adopt(ctx context.Context, res sandbox.Resident, data []byte) error {
	var st stored
	if err := json.Unmarshal(data, &st); err != nil {
		s.note(fmt.Sprintf("berth restarted and could not read this run's stored debug state (%v): a debug session that ran was ended, and the breakpoints set before are gone; set them and launch again", err))
		s.endStray(res, "")
		return fmt.Errorf("debug: the stored debug state of this run is unreadable: %w", err)
	}
	s.mu.Lock()
	s.nextID = max(s.nextID, st.NextID)
	for f, b := range st.Breakpoints {
		if _, ok := s.bps[f]; !ok {
			s.bps[f] = b
		}
	}
	s.notes = append(s.notes, st.Notes...)
	s.mu.Unlock()
	h := st.Session
	if h == nil {
		s.endStray(res, "")
		return nil
	}
	if h.Resident == "" {
		s.note(fmt.Sprintf("berth restarted, and debug session %d (%s, %sed %s) ended with it: %s", h.ID, h.Adapter, h.Command, h.Program, lostWhy(h)))
		if h.Scratch != "" {
			(&session{scratch: h.Scratch, sb: s.sb}).removeScratch()
		}
		s.endStray(res, "")
		return nil
	}
	ss, err := s.adopt(ctx, res, h)
	if err != nil {
		where := ""
		if h.Stop != nil && h.Stop.Path != "" {
			where = fmt.Sprintf(" (it was stopped at %s:%d)", h.Stop.Path, h.Stop.Line)
		}
		s.note(fmt.Sprintf("berth restarted and could not take over debug session %d (%s, %sed %s)%s: %v. The session was ended, its adapter and program killed; the breakpoints are kept: launch again", h.ID, h.Adapter, h.Command, h.Program, where, err))
		if h.Scratch != "" {
			(&session{scratch: h.Scratch, sb: s.sb}).removeScratch()
		}
		s.endStray(res, "")
		return fmt.Errorf("debug: session %d: %w", h.ID, err)
	}
	s.endStray(res, h.Resident)
	s.mu.Lock()
	if s.closed || s.cur != nil {
		s.mu.Unlock()
		ss.stop(context.Background())
		return errors.New("debug: Adopt was called after the run closed or a session started; the session taken over was ended")
	}
	s.cur = ss
	s.mu.Unlock()
	go s.watch(ss) // ends when the session stops
	ss.setTimer(time.Until(ss.deadline), func() { s.expire(ss) })
	st2 := ss.ds.State()
	what := "its program is running"
	switch {
	case st2.Ended():
		what = "its program ended while berth was away"
	case st2.Stopped != nil && h.Stop != nil && h.Stop.Path != "" && st2.Stops == h.DAP.Stops:
		what = fmt.Sprintf("it is still stopped at %s:%d (call status for the stop)", h.Stop.Path, h.Stop.Line)
	case st2.Stopped != nil:
		what = "its program is stopped (call status for where)"
	}
	note := fmt.Sprintf("berth restarted; debug session %d (%s, %sed %s) was kept: %s", ss.id, ss.adapter, ss.command, ss.program, what)
	if lost := h.DAP.OutputOffset - h.OutShown; lost > 0 {
		note += fmt.Sprintf("; %d bytes of its output that were not shown before the restart were lost", lost)
	}
	s.note(note)
	return nil
}

// lostWhy says why a session that was not under the resident ended with
// berth.
func lostWhy(h *handle) string {
	switch {
	case h.Command == "attach":
		return "its connection to the debuggee's DAP server was berth's own and closed with it. The debuggee itself may still run: attach again"
	case h.Adapter == AdapterDelve:
		return "dlv dap serves a single client connection and ends its debug session (and the program) when that connection closes, so a Go debug session cannot outlive berth. The breakpoints are kept: launch again"
	default:
		return "its adapter ran as a process of berth's own, not under the run's resident supervisor. The breakpoints are kept: launch again"
	}
}

// adopt reattaches to a session's adapter under res and resumes its DAP
// session.
func (s *Supervisor) adopt(ctx context.Context, res sandbox.Resident, h *handle) (*session, error) {
	if res == nil {
		return nil, errors.New("the run's resident supervisor, which kept its adapter, is gone")
	}
	if h.DAP == nil {
		return nil, errors.New("it was still starting when berth went away")
	}
	left := time.Until(h.Deadline)
	if left <= 0 {
		return nil, fmt.Errorf("its time limit ended at %s, while berth was away", h.Deadline.Format(time.TimeOnly))
	}
	release := func() {}
	if s.opts.Claim != nil {
		r, err := s.opts.Claim()
		if err != nil {
			return nil, fmt.Errorf("the conversation's one debug session could not be claimed again: %w", err)
		}
		release = r
	}
	ctx, cancel := context.WithTimeout(ctx, adoptTimeout)
	defer cancel()
	pctx, pcancel := context.WithCancel(s.runCtx)
	stderr := proc.NewTail(stderrKeep)
	rs, err := startResident(pctx, res, h.Resident, true, &sandbox.Cmd{Stderr: stderr})
	if err != nil {
		pcancel()
		release()
		return nil, fmt.Errorf("its adapter process is gone: %w", err)
	}
	opts := sessionOptions(h.Adapter)
	ds, err := dap.Resume(ctx, rs, dap.Options{RequestTimeout: s.opts.RequestTimeout}, opts, *h.DAP)
	if err != nil {
		pcancel() // the resident sends TERM, then KILL, to the adapter's group
		t := time.NewTimer(stopTimeout)
		select {
		case <-rs.done:
		case <-t.C:
		}
		t.Stop()
		msg := err.Error()
		if tail := stderr.String(); tail != "" {
			msg += "; its last stderr: " + proc.Clip(tail, 600)
		}
		release()
		return nil, errors.New(msg)
	}
	ss := &session{id: h.ID, adapter: h.Adapter, server: h.Server, host: h.Host, command: h.Command, program: h.Program, root: h.Root,
		started: h.Started, deadline: h.Deadline, ds: ds, cancel: pcancel, exited: rs.done, status: rs.exitStatus, pid: rs.proc.Pid(),
		stderr: stderr, release: release, resident: h.Resident, rs: rs, res: res}
	if ss.pid == 0 {
		ss.pid = h.Pid
	}
	if h.Scratch != "" {
		ss.scratch, ss.sb = h.Scratch, s.sb
	}
	// Output the earlier berth received and did not show is gone with it;
	// the resumed client's output goes on from its end.
	ss.outShown = max(h.OutShown, h.DAP.OutputOffset)
	return ss, nil
}

// endStray ends every adapter of this tool under res but keep: one that
// a berth started and could not record, or that could not be taken over.
func (s *Supervisor) endStray(res sandbox.Resident, keep string) {
	if res == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	ps, err := res.Processes(ctx)
	if err != nil {
		s.note(fmt.Sprintf("berth could not list the processes of the run's resident supervisor to end stray debug adapters: %v", err))
		return
	}
	for _, p := range ps {
		if !strings.HasPrefix(p.Name, residentPrefix) || p.Name == keep {
			continue
		}
		if err := endResident(ctx, res, p.Name); err != nil {
			s.note(fmt.Sprintf("berth could not end the stray debug adapter %s (pid %d) of an earlier berth: %v", p.Name, p.Pid, err))
		}
	}
}

// endResident ends the resident process name (TERM, then KILL) through a
// fresh attach and collects it, within stopTimeout of its own.
func endResident(ctx context.Context, res sandbox.Resident, name string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	pctx, pcancel := context.WithCancel(ctx)
	p, err := res.Attach(pctx, name, &sandbox.Cmd{})
	if err != nil {
		pcancel()
		// An engine not answering is unavailable, which wraps gone and
		// may read as not found: asked first, it is not the adapter's end.
		if !errors.Is(err, sandbox.ErrUnavailable) && errors.Is(err, sandbox.ErrNotFound) {
			return nil
		}
		return err
	}
	pcancel() // the resident sends TERM, then KILL after the wait delay
	done := make(chan error, 1)
	go func() { // ends with the process, or when ctx ends its stream
		_, err := p.Wait()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("debug: the adapter %s did not end after SIGKILL: %w", name, ctx.Err())
	}
}

// note adds a note for the next call.
func (s *Supervisor) note(n string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, n)
}

// Detach lets go of the session without ending it, for a berth that shuts
// down while its run lives on: berth's side of the adapter's stream
// closes, and an adapter under the run's resident supervisor runs on (with
// its program, stopped or not) for the next berth to Adopt; its claim is
// given back, and its time limit goes on counting. A session that cannot
// outlive berth (delve, attach by port, a plain process) is ended as by
// Close. Later calls are refused as after Close, while Snapshot still
// records the session as it was. The caller must not end the run's
// context (which bounds the adapter while berth is attached) before it
// detached from the resident.
func (s *Supervisor) Detach() error {
	s.mu.Lock()
	s.closed = true
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return nil
	}
	if !cur.ds.State().Ended() {
		h := cur.handle() // before the session is let go of or ended
		s.mu.Lock()
		s.left = &h
		s.mu.Unlock()
	}
	if cur.resident == "" {
		err := cur.stop(context.Background())
		s.mu.Lock()
		if s.cur == cur {
			s.cur = nil
		}
		s.mu.Unlock()
		return err
	}
	cur.detach()
	return nil
}

// detach closes berth's side of the session, leaving the adapter running
// under the resident: no disconnect, no signal, its stdin left open. The
// session counts as stopped from then on (stop does nothing more).
func (ss *session) detach() {
	ss.stopOnce.Do(func() {
		defer ss.release()
		ss.mu.Lock()
		ss.stopping, ss.detached = true, true
		if ss.timer != nil {
			ss.timer.Stop()
		}
		ss.mu.Unlock()
		ss.rs.detach()
		ss.ds.Client.Close()
	})
}

// sessionOptions are the DAP session options of an adapter.
func sessionOptions(adapter string) dap.SessionOptions {
	opts := dap.SessionOptions{AdapterID: adapter}
	switch adapter {
	case AdapterDebugpy:
		opts.ExceptionFilters = []string{"uncaught"}
	case AdapterDelve:
		opts.AdapterID = "go"
	}
	return opts
}
