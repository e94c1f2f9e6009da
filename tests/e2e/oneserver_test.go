package e2e

import (
	"strings"
	"testing"
	"time"
)

// One language server and one debug adapter per run, always (issue 33,
// finding 2): a stream to a server or an adapter that breaks — the
// engine's connections cut, a `berth-shim dial` relay killed — does not
// leave the old process running beside a new one.

// hoverUntil asks hover on main.py's hello until it answers with its
// docstring, for up to a minute (pylsp's start and jedi's first inference
// may be slow on a loaded machine). It returns the texts of every answer.
func hoverUntil(t *testing.T, a *api, run, after string) string {
	t.Helper()
	args := map[string]any{"action": "hover", "file": "main.py", "line": 1, "symbol": "hello"}
	var all []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		r := a.callTool(t, run, "lsp", args)
		all = append(all, r.texts())
		if !r.IsError && strings.Contains(r.texts(), "Greet name") {
			return strings.Join(all, "\n")
		}
		if time.Now().After(deadline) {
			t.Fatalf("hover %s: %s", after, r.texts())
		}
		t.Logf("hover %s, not yet: %s", after, r.texts())
	}
}

// TestEngineCutOneLanguageServer cuts every connection to the engine
// (an engine restarting) while pylsp runs, twice: each time the next
// hover answers from the file, and exactly one pylsp runs in the
// container. (Docker closes an exec's stdin when its client goes, so the
// server's supervisor ends it at once: this one holds on Docker before and
// after; TestEngineSeveredOneLanguageServer is the engine that does not.)
func TestEngineCutOneLanguageServer(t *testing.T) {
	durableBackend(t)
	dockerOnly(t, "an engine proxy before docker's socket")
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	ctr.put(t, "main.py", pyModule)
	p := newEngineProxy(t, "/var/run/docker.sock")
	a := durableAPI(t, p)
	run, _ := a.open(ctr.conv)
	hoverUntil(t, a, run, "before the cut")
	for i := range 2 {
		p.cut()
		time.Sleep(2 * time.Second)
		if err := p.restore(); err != nil {
			t.Fatal(err)
		}
		awaitUsable(t, a, run)
		r := hoverUntil(t, a, run, "after the engine cut")
		t.Logf("round %d: %s", i, r)
		if s := matching(ctr.procTable(t), "pylsp"); len(s) != 1 {
			t.Errorf("round %d: want exactly one pylsp in the container after the engine cut: %v", i, s)
		}
	}
}

// TestEngineSeveredOneLanguageServer drops berth's side of every
// connection to the engine while the engine keeps its side open (as
// containerd keeps an exec's stdin open after its client went): berth
// sees pylsp's stream end, while in the container pylsp and its
// supervisor see nothing until the supervisor misses berth's pings. Twice,
// the next hover answers from the file, saying the server was restarted,
// and exactly one pylsp runs in the container. Before, berth started a
// second pylsp beside the first, which ran on until its supervisor gave up
// on berth.
func TestEngineSeveredOneLanguageServer(t *testing.T) {
	durableBackend(t)
	dockerOnly(t, "an engine proxy before docker's socket")
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	ctr.put(t, "main.py", pyModule)
	p := newEngineProxy(t, "/var/run/docker.sock")
	a := durableAPI(t, p)
	run, _ := a.open(ctr.conv)
	hoverUntil(t, a, run, "before the connections were severed")
	for i := range 2 {
		before := matching(ctr.procTable(t), "pylsp")
		p.sever()
		r := hoverUntil(t, a, run, "after the connections were severed")
		t.Logf("round %d: %s", i, r)
		after := matching(ctr.procTable(t), "pylsp")
		if len(after) != 1 {
			t.Errorf("round %d: want exactly one pylsp in the container after berth's connections were severed (before: %v): %v", i, before, after)
		}
		const again = "started it again"
		if len(after) == 1 && len(before) == 1 && after[0].pid != before[0].pid {
			if n := strings.Count(r, again); n != 1 {
				t.Errorf("round %d: pylsp was replaced (pid %d, was %d); want the answers to say so once (%q), said %d times: %s", i, after[0].pid, before[0].pid, again, n, r)
			}
			if r := hoverUntil(t, a, run, "once more"); strings.Contains(r, again) {
				t.Errorf("round %d: the next hover says the server was started again once more: %s", i, r)
			}
		}
		p.release()
	}
}

// debugRun is a run of ctr, under a berth reaching its engine through p
// when p is not nil, with a debugpy session stopped at prog.py:3.
func debugRun(t *testing.T, ctr *container, p *engineProxy) (*api, string, func(map[string]any) toolReply) {
	t.Helper()
	a := durableAPI(t, p)
	run, _ := a.open(ctr.conv)
	debug := func(args map[string]any) toolReply {
		t.Helper()
		return a.callTool(t, run, "debug", args)
	}
	ctr.put(t, "prog.py", "total = 0\nfor i in range(3):\n    total += i\nprint(total)\n")
	if r := debug(map[string]any{"op": "breakpoints", "file": "prog.py", "lines": []int{3}}); r.IsError {
		t.Fatalf("breakpoints: %s", r.texts())
	}
	if r := debug(map[string]any{"op": "launch", "program": "prog.py"}); r.IsError || !strings.Contains(r.texts(), "prog.py:3") {
		t.Fatalf("launch: %s; want a stop at prog.py:3", r.texts())
	}
	return a, run, debug
}

// oneAdapterAfter checks the run's debug session after its stream broke:
// status either still shows it stopped at prog.py:3 with its adapter
// answering (kept), or says it was lost, and then no adapter is left and
// a new launch stops again with exactly one adapter in the container.
func oneAdapterAfter(t *testing.T, ctr *container, debug func(map[string]any) toolReply, after string) {
	t.Helper()
	var r toolReply
	for deadline := time.Now().Add(callTimeout); ; time.Sleep(200 * time.Millisecond) {
		r = debug(map[string]any{"op": "status"})
		if strings.Contains(r.texts(), "no debug session") || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("status after %s: %s", after, r.texts())
	if !strings.Contains(r.texts(), "no debug session") {
		// Kept: the adapter still answers for the stop.
		if e := debug(map[string]any{"op": "evaluate", "expression": "total + 42"}); e.IsError || !strings.Contains(e.texts(), "42") {
			t.Errorf("evaluate after %s on a session status shows as kept: %s", after, e.texts())
		}
	} else {
		if !strings.Contains(r.texts(), "lost") {
			t.Errorf("status after %s: %s; want it to say the session was lost", after, r.texts())
		}
		if d := matching(ctr.procTable(t), "debugpy.adapter"); len(d) != 0 {
			t.Errorf("after %s the session is reported lost, but its adapter runs on: %v", after, d)
		}
		if l := debug(map[string]any{"op": "launch", "program": "prog.py"}); l.IsError || !strings.Contains(l.texts(), "prog.py:3") {
			t.Fatalf("launch after %s: %s; want a stop at prog.py:3", after, l.texts())
		}
	}
	if d := matching(ctr.procTable(t), "debugpy.adapter"); len(d) != 1 {
		t.Errorf("want exactly one debugpy adapter in the container after %s: %v", after, d)
	}
}

// TestDialRelayKilledOneAdapter kills every `berth-shim dial` relay in the
// container (the stream of a debugpy adapter under the run's resident,
// berth's hold on the resident) while a session is stopped at a
// breakpoint, twice. Before, berth took the broken stream for the
// adapter's exit, left the adapter running under the resident, and the
// next launch started a second one beside it.
func TestDialRelayKilledOneAdapter(t *testing.T) {
	durableBackend(t)
	dockerOnly(t, "kill in the container with docker exec")
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	_, _, debug := debugRun(t, ctr, nil)
	for i := range 2 {
		var relays []proc
		for deadline := time.Now().Add(callTimeout); ; time.Sleep(200 * time.Millisecond) {
			// The adapter's stream, and berth's hold made again.
			if relays = matchingAgent(ctr.procTable(t), "berth-shim dial"); len(relays) >= 2 || time.Now().After(deadline) {
				break
			}
		}
		if len(relays) == 0 {
			t.Fatal("no berth-shim dial relay in the container")
		}
		t.Logf("round %d: killing %v", i, relays)
		killAll(t, ctr, relays)
		oneAdapterAfter(t, ctr, debug, "the dial relays were killed")
	}
}

// TestEngineCutOneAdapter cuts every connection to the engine while a
// debugpy session under the run's resident is stopped at a breakpoint,
// twice: afterwards the session is kept or reported lost, and one adapter
// runs.
func TestEngineCutOneAdapter(t *testing.T) {
	durableBackend(t)
	dockerOnly(t, "an engine proxy before docker's socket")
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	p := newEngineProxy(t, "/var/run/docker.sock")
	a, run, debug := debugRun(t, ctr, p)
	for i := range 2 {
		p.cut()
		time.Sleep(2 * time.Second)
		if err := p.restore(); err != nil {
			t.Fatal(err)
		}
		awaitUsable(t, a, run)
		t.Logf("round %d", i)
		oneAdapterAfter(t, ctr, debug, "the engine cut")
	}
}

// TestEngineSeveredOneAdapter drops berth's side of every connection to
// the engine, the engine keeping its side open, while a debugpy session
// under the run's resident is stopped at a breakpoint, twice: in the
// container the adapter's relay and the resident see nothing, and still
// the session is kept or reported lost, and one adapter runs.
func TestEngineSeveredOneAdapter(t *testing.T) {
	durableBackend(t)
	dockerOnly(t, "an engine proxy before docker's socket")
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	p := newEngineProxy(t, "/var/run/docker.sock")
	_, _, debug := debugRun(t, ctr, p)
	for i := range 2 {
		p.sever()
		t.Logf("round %d", i)
		oneAdapterAfter(t, ctr, debug, "berth's connections were severed")
		p.release()
	}
}
