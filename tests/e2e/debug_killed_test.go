package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/tools/debug/debugtest"
)

// killedCase is a program killed from outside while stopped, in a
// container.
type killedCase struct {
	image    string
	optional bool // the image may be missing (berth-test-go)
	files    map[string]string
	program  string
	file     string
	line     int
	adapter  string
	how      string
	live     string   // a process that runs during the session
	words    []string // what no process may name after the session
	// pattern picks the program's process out of ps -eo pid=,args= (a
	// grep pattern that does not match itself).
	pattern string
	end     func(t *testing.T, st debugtest.Status)
}

// TestDebugKilledGoInContainer: in berth-test-go (--network none), a Go
// program stopped under delve at a breakpoint is killed with kill -9 of
// its pid, from the test's own docker exec: delve does not notice, and
// the next debug call says the program was killed by signal 9 (SIGKILL)
// outside the debugger, not the old stop; dlv is gone, and no zombie is
// left in the container (ps -o stat), with no terminate. It skips when
// the image was not built.
func TestDebugKilledGoInContainer(t *testing.T) {
	checkKilledInContainer(t, killedCase{
		image:    "berth-test-go",
		optional: true,
		files:    map[string]string{"go.mod": "module example.com/hello\n\ngo 1.22\n", "main.go": debugtest.GoProgram},
		program:  ".",
		file:     "main.go",
		line:     12,
		adapter:  "delve",
		how:      "was killed by signal 9 (SIGKILL) outside the debugger",
		live:     "dlv",
		words:    []string{"dlv", "__debug_bin"},
		pattern:  "__debug_bi[n]",
		end: func(t *testing.T, st debugtest.Status) {
			if st.Signal != "SIGKILL" || st.ExitCode != nil {
				t.Errorf("the end = %+v, want signal SIGKILL and no exit code", st)
			}
		},
	})
}

// TestDebugKilledPythonInContainer is [TestDebugKilledGoInContainer]
// under debugpy in berth-test-python: debugpy reports the end itself, as
// the exit code 247 (256 - 9), which the result explains.
func TestDebugKilledPythonInContainer(t *testing.T) {
	checkKilledInContainer(t, killedCase{
		image:   "berth-test-python",
		files:   map[string]string{"requirements.txt": "", "app/main.py": debugtest.PyProgram},
		program: "app/main.py",
		file:    "app/main.py",
		line:    7,
		adapter: "debugpy",
		how:     "exited (code 247, which is how debugpy reports a program killed by signal 9 (SIGKILL))",
		live:    "debugpy.adapter",
		words:   []string{"debugpy", "app/main.py"},
		pattern: "[-]-connect .*app/main.py",
		end: func(t *testing.T, st debugtest.Status) {
			if st.ExitCode == nil || *st.ExitCode != 247 {
				t.Errorf("the end = %+v, want exit code 247, as debugpy reports it", st)
			}
		},
	})
}

func checkKilledInContainer(t *testing.T, c killedCase) {
	needImage(t, c.image, c.optional)
	ctr := startContainer(t, c.image)
	for name, content := range c.files {
		ctr.put(t, name, content)
	}
	a := newAPI(t)
	run, _ := a.open(ctr.conv)
	e := debugEnv(a, run, ctr, c.live, c.words...)
	e.Reaped = func(t *testing.T) {
		t.Helper()
		noZombies(t, ctr)
	}
	e.KillProgram = func(t *testing.T) {
		t.Helper()
		pid := strings.TrimSpace(ctr.sh(t, fmt.Sprintf("ps -eo pid=,args= | grep -e '%s' | awk '{print $1}'", c.pattern)))
		if pid == "" || strings.ContainsAny(pid, " \n") {
			t.Fatalf("want one program process matching %q, got %q: %v", c.pattern, pid, ctr.processes(t))
		}
		ctr.sh(t, "kill -9 "+pid)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			// The state field of /proc/PID/stat, after the command's name.
			st := strings.TrimSpace(ctr.sh(t, fmt.Sprintf(`sed -n 's/.*) \(.\).*/\1/p' /proc/%s/stat 2>/dev/null || true`, pid)))
			if st == "" || strings.HasPrefix(st, "Z") {
				t.Logf("killed the program (pid %s in the container): state %q", pid, st)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the killed program (pid %s) is still alive: state %s", pid, st)
			}
		}
	}
	c.end(t, debugtest.CheckKilled(t, e, c.program, c.file, c.line, c.adapter, c.how))
}
