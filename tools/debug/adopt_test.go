package debug

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestDebugpyAdoptHost stops a debugpy session at a breakpoint under the
// run's resident supervisor, lets berth go (Snapshot, Detach, the
// resident detached, the sandbox closed) and takes the session over in a
// new berth on the same workspace (Adopt): status shows the same stop,
// the locals are there, continue runs to the next breakpoint and to the
// end, and after a new launch terminate leaves no process behind.
func TestDebugpyAdoptHost(t *testing.T) {
	dir := pyWorkspace(t)
	secret := make([]byte, sandbox.MinResidentSecret)
	rand.Read(secret)
	spec := sandbox.ResidentSpec{Dir: filepath.Join(t.TempDir(), "resident"), Secret: secret, Grace: time.Minute}

	var res1 sandbox.Resident
	var claims claimCounter
	var first *berth
	first = newBerth(t, dir, Options{Claim: claims.claim, Resident: func(ctx context.Context) (sandbox.Resident, error) {
		if res1 == nil {
			r, err := residence(t, first.sb).Resident(ctx, spec)
			if err != nil {
				return nil, err
			}
			res1 = r
		}
		return res1, nil
	}})
	first.Ok(t, map[string]any{"op": "breakpoints", "file": "main.py", "lines": []any{6, 12}})
	first.Ok(t, map[string]any{"op": "launch", "program": "main.py"}, "stopped at main.py:6")
	first.Ok(t, map[string]any{"op": "step_over"}, "stopped at main.py:7", "x: int = 2")
	first.Ok(t, map[string]any{"op": "output"})
	ss := first.session()
	if ss.resident == "" {
		t.Fatal("the debugpy adapter did not start under the resident supervisor")
	}
	adapter := ss.pid
	debuggee := processesWith(filepath.Join(dir, "main.py"))
	claims.want(t, 1, 1)
	gen := first.sup.Generation()
	if first.sup.Generation() != gen {
		t.Errorf("Generation changed with nothing new")
	}
	snap, err := first.sup.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	first.leave(t, res1)
	claims.want(t, 1, 0)
	if !alive(adapter) {
		t.Fatalf("the adapter (pid %d) did not outlive berth", adapter)
	}
	if len(debuggee) == 0 || len(processesWith(filepath.Join(dir, "main.py"))) == 0 {
		t.Fatalf("the debuggee did not outlive berth: before %v, now %v", debuggee, processesWith(filepath.Join(dir, "main.py")))
	}

	var res2 sandbox.Resident
	second := newBerth(t, dir, Options{Claim: claims.claim, Resident: func(context.Context) (sandbox.Resident, error) { return res2, nil }})
	adopt := spec
	adopt.Adopt = true
	res2, err = residence(t, second.sb).Resident(t.Context(), adopt)
	if err != nil {
		t.Fatalf("adopting the resident: %v", err)
	}
	defer res2.Close()
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
	secret := make([]byte, sandbox.MinResidentSecret)
	rand.Read(secret)
	spec := sandbox.ResidentSpec{Dir: filepath.Join(t.TempDir(), "resident"), Secret: secret, Grace: time.Minute}

	var first *berth
	var res1 sandbox.Resident
	first = newBerth(t, dir, Options{Wait: 200 * time.Millisecond, Resident: func(ctx context.Context) (sandbox.Resident, error) {
		if res1 == nil {
			r, err := residence(t, first.sb).Resident(ctx, spec)
			if err != nil {
				return nil, err
			}
			res1 = r
		}
		return res1, nil
	}})
	first.Ok(t, map[string]any{"op": "breakpoints", "file": "slow.py", "lines": []any{2, 5}})
	first.Ok(t, map[string]any{"op": "launch", "program": "slow.py"}, "stopped at slow.py:2")
	first.Ok(t, map[string]any{"op": "continue"}, "the program is running")
	snap, err := first.sup.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	adapter := first.session().pid
	first.crash(t, res1)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the program never reached line 4")
		}
	}
	time.Sleep(200 * time.Millisecond) // the stop follows the marker at once

	var res2 sandbox.Resident
	second := newBerth(t, dir, Options{Resident: func(context.Context) (sandbox.Resident, error) { return res2, nil }})
	adopt := spec
	adopt.Adopt = true
	res2, err = residence(t, second.sb).Resident(t.Context(), adopt)
	if err != nil {
		t.Fatalf("adopting the resident: %v", err)
	}
	defer res2.Close()
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
	if p := processesWith(dir); len(p) > 0 {
		t.Errorf("processes left: %v", p)
	}
}

// TestAdoptEndsExpiredSession: a session whose time limit ended while no
// berth was attached is not taken over: Adopt ends its adapter and
// program through the resident, and the next result says why.
func TestAdoptEndsExpiredSession(t *testing.T) {
	dir := pyWorkspace(t)
	secret := make([]byte, sandbox.MinResidentSecret)
	rand.Read(secret)
	spec := sandbox.ResidentSpec{Dir: filepath.Join(t.TempDir(), "resident"), Secret: secret, Grace: time.Minute}
	var first *berth
	var res1 sandbox.Resident
	first = newBerth(t, dir, Options{TTL: 2 * time.Second, Resident: func(ctx context.Context) (sandbox.Resident, error) {
		if res1 == nil {
			r, err := residence(t, first.sb).Resident(ctx, spec)
			if err != nil {
				return nil, err
			}
			res1 = r
		}
		return res1, nil
	}})
	first.Ok(t, map[string]any{"op": "launch", "program": "main.py", "stop_on_entry": true}, "stopped at main.py:1")
	adapter := first.session().pid
	first.leave(t, res1)
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

	second := newBerth(t, dir, Options{})
	adopt := spec
	adopt.Adopt = true
	res2, err := residence(t, second.sb).Resident(t.Context(), adopt)
	if err != nil {
		t.Fatalf("adopting the resident: %v", err)
	}
	defer res2.Close()
	if err := second.sup.Adopt(t.Context(), res2, snap); err == nil || !strings.Contains(err.Error(), "time limit") {
		t.Errorf("adopt = %v, want the time limit named", err)
	}
	second.Ok(t, map[string]any{"op": "status"}, "could not take over debug session 1", "time limit ended", "it was stopped at main.py:1", "no debug session")
	if alive(adapter) {
		t.Errorf("the expired session's adapter (pid %d) runs on", adapter)
	}
	if p := processesWith(dir); len(p) > 0 {
		t.Errorf("processes left: %v", p)
	}
}
