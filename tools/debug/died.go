package debug

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/dap"
)

// A program killed from outside the debugger (kill -9 of its pid) while
// it is stopped is not noticed by every adapter: delve's native backend
// waits for the program it traces only while it runs it, so the killed
// program stays a zombie under dlv, and dlv goes on answering threads and
// status from the stop it remembers; debugpy reports the end, but only a
// moment later, and a call made in between answers from the old stop. So
// every call first looks at the program's entry in the sandbox's /proc,
// by the pid of the adapter's process event; a program that is gone or a
// zombie ends the session as its own end does ([Supervisor.finish]): the
// call reports how it ended, and killing the adapter orphans the zombie
// to the sandbox's reaper.

// probeTimeout bounds the look at the program's /proc entry.
const probeTimeout = 10 * time.Second

// death is how a program ended outside the debugger.
type death struct {
	// known says the sandbox told the wait status (a zombie's exit_code
	// in /proc/PID/stat); otherwise the process was already gone.
	known bool
	// code is the exit code, signal the signal that killed it (0: none).
	code, signal int
}

// programDied returns how the program ended outside the debugger, or nil.
func (ss *session) programDied() *death {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.died
}

// checkProgram looks at the program's /proc entry in the sandbox; a
// program that is gone or a zombie closes the session as its end
// ([Supervisor.finish]). An adapter that reports its program's end gets
// endGrace to do so, with its exit code; for one blind to it (delve) the
// status of a zombie left at a stop is taken at once. It returns true
// when the session is over: the program's end, or the adapter gone with
// it, which [Supervisor.current] reports. A look that fails (no sh in the
// sandbox, the sandbox not answering) changes nothing: the session goes
// on as the adapter reports it. A program attached by port is not looked
// at unless its adapter is blind: its death ends the DAP server it serves.
func (s *Supervisor) checkProgram(ctx context.Context, ss *session) bool {
	a, _ := specFor(ss.adapter)
	if ss.command != "launch" && !a.blindToDeath {
		return false
	}
	st := ss.ds.State()
	if st.Ended() || st.Process == nil || st.Process.SystemProcessId <= 0 {
		return false
	}
	d, dead := s.probe(ctx, st.Process.SystemProcessId)
	if !dead {
		return false
	}
	if !a.blindToDeath || !d.known || st.Stopped == nil {
		// A program delve was running when it died is reaped by delve,
		// which reports its end: only the status of a zombie left at a
		// stop is taken at once.
		wctx, cancel := context.WithTimeout(ctx, endGrace)
		st, err := ss.ds.WaitFor(wctx, dap.State.Ended)
		cancel()
		if err == nil && st.Ended() {
			s.finish(ss)
			return true
		}
	}
	if ss.gone() != "" {
		return true // the adapter died, and its program with it
	}
	ss.mu.Lock()
	if ss.died == nil {
		ss.died = &d
	}
	ss.mu.Unlock()
	s.finish(ss)
	return true
}

// statScript prints /proc/$1/stat, or "gone" when there is no such
// process; test is the shell's own, so a sandbox without cat fails
// rather than saying gone.
const statScript = `if [ -d "/proc/$1" ]; then cat "/proc/$1/stat"; else echo gone; fi`

// probe reads the /proc entry of pid in the sandbox. dead is true when the
// process is a zombie (its wait status, when readable, in d) or gone.
func (s *Supervisor) probe(ctx context.Context, pid int) (d death, dead bool) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	out, err := s.script(ctx, statScript, nil, []string{strconv.Itoa(pid)})
	if err != nil {
		return death{}, false
	}
	return parseStat(out)
}

// parseStat reads the output of statScript: a process that is gone, or
// a zombie (state Z or X) whose exit_code (field 52, the wait status;
// Linux 3.5 and later) says how it ended. A status of 0 is taken as
// unknown: /proc shows 0 to a reader not allowed to trace the process,
// and a program killed at a stop did not exit with 0.
func parseStat(s string) (death, bool) {
	s = strings.TrimSpace(s)
	if s == "gone" {
		return death{}, true
	}
	rp := strings.LastIndexByte(s, ')') // comm may hold spaces and parentheses
	if rp < 0 {
		return death{}, false
	}
	f := strings.Fields(s[rp+1:])
	if len(f) == 0 || (f[0] != "Z" && f[0] != "X") {
		return death{}, false
	}
	const exitCodeField = 52 - 3 // f[0] is field 3, the state
	if len(f) <= exitCodeField {
		return death{}, true
	}
	ws, err := strconv.Atoi(f[exitCodeField])
	if err != nil || ws == 0 {
		return death{}, true
	}
	if sig := ws & 0x7f; sig != 0 {
		return death{known: true, signal: sig}, true
	}
	return death{known: true, code: (ws >> 8) & 0xff}, true
}

// signalNames are Linux's names of the signals that commonly end a
// program.
var signalNames = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
	9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
	24: "SIGXCPU", 25: "SIGXFSZ", 31: "SIGSYS",
}

// signalName is "SIGKILL", or "signal 40" for a signal without a name here.
func signalName(sig int) string {
	if n, ok := signalNames[sig]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", sig)
}

// signalText is "signal 9 (SIGKILL)".
func signalText(sig int) string {
	if n, ok := signalNames[sig]; ok {
		return fmt.Sprintf("signal %d (%s)", sig, n)
	}
	return fmt.Sprintf("signal %d", sig)
}
