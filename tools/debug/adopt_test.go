package debug

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
)

// residence returns the host sandbox's resident supervisors, or skips (fails
// in CI) when the host backend has none.
func residence(t *testing.T, sb *host.Sandbox) sandbox.Residence {
	t.Helper()
	r, ok := any(sb).(sandbox.Residence)
	if !ok {
		unavailable(t, "the host sandbox does not implement sandbox.Residence")
	}
	return r
}

// residentSpec is a new resident supervisor's spec, in a directory of
// the test's.
func residentSpec(t *testing.T) sandbox.ResidentSpec {
	secret := make([]byte, sandbox.MinResidentSecret)
	rand.Read(secret)
	return sandbox.ResidentSpec{Dir: filepath.Join(t.TempDir(), "resident"), Secret: secret, Grace: time.Minute}
}

// residentBerth is newBerth whose Options.Resident starts the run's
// resident supervisor at spec on first use; res returns it (nil before).
func residentBerth(t *testing.T, dir string, spec sandbox.ResidentSpec, opts Options) (b *berth, res func() sandbox.Resident) {
	t.Helper()
	var mu sync.Mutex
	var r sandbox.Resident
	opts.Resident = func(ctx context.Context) (sandbox.Resident, error) {
		mu.Lock()
		defer mu.Unlock()
		if r == nil {
			rr, err := residence(t, b.sb).Resident(ctx, spec)
			if err != nil {
				return nil, err
			}
			r = rr
		}
		return r, nil
	}
	b = newBerth(t, dir, opts)
	return b, func() sandbox.Resident {
		mu.Lock()
		defer mu.Unlock()
		return r
	}
}

// adoptingBerth is a berth restarted on dir: it adopts the resident at
// spec, which its Options.Resident returns, and closes it at the end.
func adoptingBerth(t *testing.T, dir string, spec sandbox.ResidentSpec, opts Options) (*berth, sandbox.Resident) {
	t.Helper()
	var res sandbox.Resident
	opts.Resident = func(context.Context) (sandbox.Resident, error) { return res, nil }
	b := newBerth(t, dir, opts)
	adopt := spec
	adopt.Adopt = true
	r, err := residence(t, b.sb).Resident(t.Context(), adopt)
	if err != nil {
		t.Fatalf("adopting the resident: %v", err)
	}
	res = r
	t.Cleanup(func() { r.Close() })
	return b, r
}

// TestDebugpyAdoptHost stops a debugpy session at a breakpoint under the
// run's resident supervisor, lets berth go (Snapshot, Detach, the
// resident detached, the sandbox closed) and takes the session over in a
// new berth on the same workspace (Adopt): status shows the same stop,
// the locals are there, continue runs to the next breakpoint and to the
// end, and after a new launch terminate leaves no process behind.
func TestDebugpyAdoptHost(t *testing.T) {
	dir := pyWorkspace(t)
	spec := residentSpec(t)
	var claims claimCounter
	first, res1 := residentBerth(t, dir, spec, Options{Claim: claims.claim})
	first.Ok(t, map[string]any{"op": "breakpoints", "file": "main.py", "lines": []any{6, 12}})
	first.Ok(t, map[string]any{"op": "launch", "program": "main.py"}, "stopped at main.py:6")
	gen := first.sup.Generation()
	first.Ok(t, map[string]any{"op": "step_over"}, "stopped at main.py:7", "x: int = 2")
	first.Ok(t, map[string]any{"op": "output"})
	if g := first.sup.Generation(); g == gen || first.sup.Generation() != g {
		t.Errorf("Generation %d after a step from %d, then %d with nothing new: want a change, then none", g, gen, first.sup.Generation())
	}
	ss := first.session()
	if ss.resident == "" {
		t.Fatal("the debugpy adapter did not start under the resident supervisor")
	}
	adapter := ss.pid
	debuggee := processesWith(filepath.Join(dir, "main.py"))
	claims.want(t, 1, 1)
	snap, err := first.sup.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	first.leave(t, res1())
	claims.want(t, 1, 0)
	if !alive(adapter) {
		t.Fatalf("the adapter (pid %d) did not outlive berth", adapter)
	}
	if len(debuggee) == 0 || len(processesWith(filepath.Join(dir, "main.py"))) == 0 {
		t.Fatalf("the debuggee did not outlive berth: before %v, now %v", debuggee, processesWith(filepath.Join(dir, "main.py")))
	}

	second, res2 := adoptingBerth(t, dir, spec, Options{Claim: claims.claim})
	if err := second.sup.Adopt(t.Context(), res2, snap); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	claims.want(t, 2, 1)
	second.Ok(t, map[string]any{"op": "status"}, "berth restarted; debug session 1 (debugpy, launched main.py) was kept", "still stopped at main.py:7",
		"stopped at main.py:7 in main", "x: int = 2")
	if got := second.session().pid; got != adapter {
		t.Errorf("adopted adapter pid %d, want %d", got, adapter)
	}
	second.Ok(t, map[string]any{"op": "evaluate", "expression": "x * 10"}, "20")
	second.Ok(t, map[string]any{"op": "continue"}, "stopped at main.py:12", "z: int = 15")
	second.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 0)", "done 15")
	claims.want(t, 2, 0)
	if alive(adapter) {
		t.Errorf("the adopted adapter (pid %d) outlived its program's end", adapter)
	}
	// A new session under the new berth's resident; terminate leaves nothing.
	second.Ok(t, map[string]any{"op": "launch", "program": "main.py"}, "stopped at main.py:6")
	second.Live(t)
	second.Ok(t, map[string]any{"op": "terminate"}, "terminated")
	second.Gone(t)
	if ps, err := res2.Processes(t.Context()); err != nil {
		t.Error(err)
	} else {
		for _, p := range ps {
			if !p.Exited {
				t.Errorf("process left under the resident: %+v", p)
			}
		}
	}
}

// TestDebugpyAdoptAfterCrash: berth goes away without Detach while the
// program runs (its streams to the resident cut, as when berth is killed),
// the program reaches a breakpoint while no berth is attached, and a new
// berth adopting the last snapshot (taken while the program ran) finds it
// stopped there, from the adapter's output the resident kept.
func TestDebugpyAdoptAfterCrash(t *testing.T) {
	dir := pyWorkspace(t)
	marker := filepath.Join(t.TempDir(), "reached")
	put(t, dir, "slow.py", fmt.Sprintf("import time\nx = 1\ntime.sleep(1)\nopen(%q, 'w').close()\ny = x + 1\nprint('y', y)\n", marker))
	spec := residentSpec(t)
	first, res1 := residentBerth(t, dir, spec, Options{Wait: 200 * time.Millisecond})
	first.Ok(t, map[string]any{"op": "breakpoints", "file": "slow.py", "lines": []any{2, 5}})
	first.Ok(t, map[string]any{"op": "launch", "program": "slow.py"}, "stopped at slow.py:2")
	first.Ok(t, map[string]any{"op": "continue"}, "the program is running")
	snap, err := first.sup.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	adapter := first.session().pid
	first.crash(t, res1())
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the program never reached line 4")
		}
	}
	time.Sleep(200 * time.Millisecond) // the stop follows the marker at once

	second, res2 := adoptingBerth(t, dir, spec, Options{})
	if err := second.sup.Adopt(t.Context(), res2, snap); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if got := second.session().pid; got != adapter {
		t.Errorf("adopted adapter pid %d, want %d", got, adapter)
	}
	second.Ok(t, map[string]any{"op": "status"}, "was kept", "stopped at slow.py:5", "x: int = 1")
	second.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 0)", "y 2")
	if alive(adapter) {
		t.Errorf("the adopted adapter (pid %d) outlived its program's end", adapter)
	}
	if p := lingering(dir); len(p) > 0 {
		t.Errorf("processes left: %v", p)
	}
}

// TestAdoptEndsExpiredSession: a session whose time limit ended while no
// berth was attached is not taken over: Adopt ends its adapter and
// program through the resident, and the next result says why.
func TestAdoptEndsExpiredSession(t *testing.T) {
	dir := pyWorkspace(t)
	spec := residentSpec(t)
	first, res1 := residentBerth(t, dir, spec, Options{TTL: 2 * time.Second})
	first.Ok(t, map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true}, "stopped at main.py:1")
	adapter := first.session().pid
	first.leave(t, res1())
	snap, err := first.sup.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var st stored
	if err := json.Unmarshal(snap, &st); err != nil || st.Session == nil {
		t.Fatalf("snapshot %s: %v", snap, err)
	}
	time.Sleep(time.Until(st.Session.Deadline))
	if !alive(adapter) {
		t.Fatal("the adapter did not outlive berth")
	}

	second, res2 := adoptingBerth(t, dir, spec, Options{})
	if err := second.sup.Adopt(t.Context(), res2, snap); err == nil || !strings.Contains(err.Error(), "time limit") {
		t.Errorf("adopt = %v, want the time limit named", err)
	}
	second.Ok(t, map[string]any{"op": "status"}, "could not take over debug session 1", "time limit ended", "it was stopped at main.py:1", "no debug session")
	if alive(adapter) {
		t.Errorf("the expired session's adapter (pid %d) runs on", adapter)
	}
	if p := lingering(dir); len(p) > 0 {
		t.Errorf("processes left: %v", p)
	}
}

// TestLLDBAdoptHost: an lldb-dap session stopped in a C program is taken
// over by a restarted berth as a debugpy one is.
func TestLLDBAdoptHost(t *testing.T) {
	needLLDB(t)
	dir := t.TempDir()
	put(t, dir, "CMakeLists.txt", "project(hello C)\nadd_executable(hello main.c)\n")
	put(t, dir, "main.c", cProgram)
	if out, err := exec.Command("cc", "-g", "-O0", "-o", filepath.Join(dir, "hello"), filepath.Join(dir, "main.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v: %s", err, out)
	}
	spec := residentSpec(t)
	first, res1 := residentBerth(t, dir, spec, Options{})
	first.Ok(t, map[string]any{"op": "breakpoints", "file": "main.c", "lines": []any{10}})
	first.Ok(t, map[string]any{"op": "launch", "program": "hello"}, "stopped at main.c:10 in main")
	adapter := first.session().pid
	first.leave(t, res1())
	snap, err := first.sup.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	second, res2 := adoptingBerth(t, dir, spec, Options{})
	if err := second.sup.Adopt(t.Context(), res2, snap); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	second.Ok(t, map[string]any{"op": "status"}, "was kept: it is still stopped at main.c:10", "stopped at main.c:10 in main")
	second.Ok(t, map[string]any{"op": "evaluate", "expression": "x * 21"}, "42")
	second.Ok(t, map[string]any{"op": "step_over"}, "stopped at main.c:11")
	second.Ok(t, map[string]any{"op": "continue"}, "the program exited (code 0)")
	if alive(adapter) {
		t.Errorf("the adopted lldb adapter (pid %d) outlived its program's end", adapter)
	}
	if p := lingering(filepath.Join(dir, "hello")); len(p) > 0 {
		t.Errorf("processes left: %v", p)
	}
}
