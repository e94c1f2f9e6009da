package debug

import (
	"fmt"
	"strings"
	"testing"
)

// TestParseStat reads /proc/PID/stat lines as statScript prints them: a
// live process, a zombie killed by a signal or exited with a code (its
// exit_code, field 52, a wait status), one whose status /proc hides (0),
// a process that is gone, and an entry cut short.
func TestParseStat(t *testing.T) {
	// stat is a line with state and the exit_code field, after a command
	// name holding spaces and parentheses.
	stat := func(state string, ws int) string {
		return fmt.Sprintf("4242 (a (b) c) %s%s %d\n", state, strings.Repeat(" 7", 48), ws)
	}
	tests := []struct {
		name string
		in   string
		want death
		dead bool
	}{
		{"stopped by the tracer", stat("t", 0), death{}, false},
		{"sleeping", stat("S", 0), death{}, false},
		{"zombie killed by SIGKILL", stat("Z", 9), death{known: true, signal: 9}, true},
		{"zombie killed by SIGSEGV with a core", stat("Z", 0x80|11), death{known: true, signal: 11}, true},
		{"zombie exited with 3", stat("Z", 3<<8), death{known: true, code: 3}, true},
		{"zombie whose status is hidden", stat("Z", 0), death{}, true},
		{"dead", stat("X", 15), death{known: true, signal: 15}, true},
		{"gone", "gone\n", death{}, true},
		{"cut short", "4242 (a) Z 1 2\n", death{}, true},
		{"not a stat line", "cat: /proc/4242/stat: No such file\n", death{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, dead := parseStat(tt.in)
			if got != tt.want || dead != tt.dead {
				t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tt.in, got, dead, tt.want, tt.dead)
			}
		})
	}
}

// TestEndingHow: how an ending reads, for each way a program ends.
func TestEndingHow(t *testing.T) {
	tests := []struct {
		e    ending
		want string
	}{
		{ending{adapter: AdapterDelve, exited: true, code: 3}, "exited (code 3)"},
		{ending{adapter: AdapterDelve, signal: 9, outside: true}, "was killed by signal 9 (SIGKILL) outside the debugger"},
		{ending{adapter: AdapterDelve, signal: 6}, "was killed by signal 6 (SIGABRT)"},
		{ending{adapter: AdapterDelve, signal: 40}, "was killed by signal 40"},
		{ending{adapter: AdapterDelve, outside: true}, "ended outside the debugger (it was killed while stopped: its process is gone, and the sandbox could not tell its exit status)"},
		{ending{adapter: AdapterDebugpy, exited: true, code: 247}, "exited (code 247, which is how debugpy reports a program killed by signal 9 (SIGKILL))"},
		{ending{adapter: AdapterDebugpy, exited: true, code: 200}, "exited (code 200)"},
		{ending{adapter: AdapterLLDB, exited: true, code: 247}, "exited (code 247)"},
	}
	for _, tt := range tests {
		if got := tt.e.how(); got != tt.want {
			t.Errorf("%+v: how() = %q, want %q", tt.e, got, tt.want)
		}
	}
}
