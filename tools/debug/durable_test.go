package debug

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/debug/debugtest"
)

// berth is one berth process's view of a run on the host, for the tests
// of a restart: its own sandbox, registry and supervisor over the same
// workspace directory.
type berth struct {
	fixture
	cancel context.CancelFunc
	once   sync.Once
}

// newBerth starts a berth on the workspace dir. Its host sandbox has no
// control group of its own: closing a host sandbox kills its group, the
// run's resident supervisor with it, and here the resident must outlive
// the sandbox that started it (see sandbox/host's TestResident).
func newBerth(t *testing.T, dir string, opts Options) *berth {
	t.Helper()
	sb := host.New(host.Options{PidsMax: -1, MemoryMax: -1})
	ws, err := sb.FS(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	reg := tools.NewRegistry()
	b := &berth{fixture: fixture{dir: dir, sb: sb, reg: reg, sup: Register(reg, sb, ws, runCtx, opts)}, cancel: cancel}
	b.Env = b.env()
	t.Cleanup(func() { b.close(t) })
	return b
}

// close ends the berth as when the run closes.
func (b *berth) close(t *testing.T) {
	b.once.Do(func() {
		if err := b.sup.Close(); err != nil {
			t.Errorf("supervisor close: %v", err)
		}
		b.cancel()
		b.sb.Close()
	})
}

// leave ends the berth as a berth that shuts down while its run lives
// on: the supervisor detaches, then the resident (if any), and only then
// the run's context ends.
func (b *berth) leave(t *testing.T, res sandbox.Resident) {
	t.Helper()
	if err := b.sup.Detach(); err != nil {
		t.Errorf("detach: %v", err)
	}
	if res != nil {
		if err := res.Detach(); err != nil {
			t.Errorf("resident detach: %v", err)
		}
	}
	b.once.Do(func() {
		b.cancel()
		b.sb.Close()
	})
}

// crash ends the berth as if it was killed: its streams to the resident
// are cut first, so nothing it does afterwards reaches the adapter.
func (b *berth) crash(t *testing.T, res sandbox.Resident) {
	t.Helper()
	if err := res.Detach(); err != nil {
		t.Fatal(err)
	}
	b.once.Do(func() {
		b.sup.Close() // fails: the session's streams are cut
		b.cancel()
		b.sb.Close()
	})
}

// pyWorkspace is the workspace of pyFixture, in a directory of its own.
func pyWorkspace(t *testing.T) string {
	t.Helper()
	needDebugpy(t)
	dir := t.TempDir()
	put(t, dir, "requirements.txt", "")
	put(t, dir, "main.py", debugtest.PyProgram)
	put(t, dir, ".venv/bin/python", "symlink:"+debianPython)
	return dir
}

// TestLostSessionsAfterRestart: a session that cannot outlive berth — an
// attach by port, a delve session — is ended by Detach and recorded by
// Snapshot, and after Adopt the next result says it ended with berth and
// why; the breakpoints are kept.
func TestLostSessionsAfterRestart(t *testing.T) {
	t.Run("attach by port", func(t *testing.T) {
		dir := pyWorkspace(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		first := newBerth(t, dir, Options{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, err := first.sb.Start(ctx, &sandbox.Cmd{
			Args: []string{debianPython, "-m", "debugpy", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--wait-for-client", filepath.Join(dir, "main.py")},
			Env:  []string{"PYDEVD_DISABLE_FILE_VALIDATION=1"},
			Dir:  dir,
		})
		if err != nil {
			t.Fatal(err)
		}
		waitListen(t, func() string { data, _ := os.ReadFile("/proc/net/tcp"); return string(data) }, port)
		first.Ok(t, map[string]any{"op": "breakpoints", "file": "main.py", "lines": []any{6}})
		first.Ok(t, map[string]any{"op": "attach", "port": port}, "stopped at main.py:6")
		snap, err := first.sup.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		first.leave(t, nil)
		second := newBerth(t, dir, Options{})
		if err := second.sup.Adopt(t.Context(), nil, snap); err != nil {
			t.Fatal(err)
		}
		second.Ok(t, map[string]any{"op": "status"}, "debug session 1 (debugpy, attached the debuggee on port", "ended with it", "attach again", "no debug session")
		second.Ok(t, map[string]any{"op": "breakpoints"}, "main.py:\n  line 6: pending")
		cancel() // the debuggee, which Detach left running
		p.Wait()
	})
	t.Run("delve", func(t *testing.T) {
		needDelve(t)
		dir := t.TempDir()
		put(t, dir, "go.mod", "module example.com/hello\n\ngo 1.22\n")
		put(t, dir, "main.go", debugtest.GoProgram)
		first := newBerth(t, dir, Options{Wait: 2 * time.Minute})
		line := strings.Count(debugtest.GoProgram[:strings.Index(debugtest.GoProgram, "return total")], "\n") + 1
		first.Ok(t, map[string]any{"op": "breakpoints", "file": "main.go", "lines": []any{line}})
		first.Ok(t, map[string]any{"op": "launch", "program": "."}, fmt.Sprintf("stopped at main.go:%d", line))
		scratch := first.session().scratch
		first.leave(t, nil)
		snap, err := first.sup.Snapshot() // as berth shutting down writes it last
		if err != nil {
			t.Fatal(err)
		}
		var st stored
		if err := json.Unmarshal(snap, &st); err != nil || st.Session == nil || st.Session.Resident != "" || st.Session.DAP != nil {
			t.Fatalf("snapshot of a delve session = %s, %v; want it recorded without a resident process", snap, err)
		}
		if p := ourDebuggees(); len(p) > 0 {
			t.Errorf("the Go program runs on after Detach: %v", p)
		}
		second := newBerth(t, dir, Options{})
		if err := second.sup.Adopt(t.Context(), nil, snap); err != nil {
			t.Fatal(err)
		}
		second.Ok(t, map[string]any{"op": "status"}, "debug session 1 (delve, launched .) ended with it", "single client connection", "launch again")
		second.Ok(t, map[string]any{"op": "status"}, "no debug session", fmt.Sprintf("main.go:\n  line %d: pending", line)) // the note is shown once
		if _, err := os.Stat(scratch); err == nil {
			t.Errorf("the session's build directory %s is left", scratch)
		}
	})
}
