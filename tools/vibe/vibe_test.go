package vibe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sandbox/host"
	"berth.dev/berth/tools"
)

// fixture is a host sandbox with a temporary workspace and the vibe tools.
type fixture struct {
	t       *testing.T
	surface tools.Surface // the lead's surface for calls (default tools.SurfaceDefault)
	dir     string
	sb      *host.Sandbox
	sup     *Supervisor
	reg     *tools.Registry
}

// newFixture builds the vibe tools over a runner made for the fixture's
// sandbox and workspace.
func newFixture(t *testing.T, mk func(f *fixture) Runner, opts Options) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), sb: host.New(host.Options{}), reg: tools.NewRegistry()}
	opts.Runner = mk(f)
	runCtx, cancel := context.WithCancel(context.Background())
	f.sup = Register(f.reg, runCtx, opts)
	t.Cleanup(func() {
		if err := f.sup.Close(); err != nil {
			t.Errorf("supervisor close: %v", err)
		}
		cancel()
		f.sb.Close()
	})
	return f
}

// commandFixture runs `sh -c script sh TIER` for every attempt, in the
// workspace.
func commandFixture(t *testing.T, script string) *fixture {
	return newFixture(t, func(f *fixture) Runner {
		return Command(CommandOptions{
			Sandbox:  f.sb,
			Args:     []string{"sh", "-c", script, "sh"},
			TierArgs: map[string][]string{TierFast: {"FAST"}, TierGood: {"GOOD"}},
			Dir:      f.dir,
		})
	}, Options{})
}

func (f *fixture) call(name string, args map[string]any) *tools.Result {
	f.t.Helper()
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	surface := f.surface
	if surface == "" {
		surface = tools.SurfaceDefault
	}
	res, err := f.reg.Call(ctx, surface, name, raw)
	if err != nil {
		f.t.Fatalf("%s %s: call error: %v", name, raw, err)
	}
	return res
}

// ok calls a tool, and fails the test on a tool error or a missing want.
func (f *fixture) ok(name string, args map[string]any, wants ...string) string {
	f.t.Helper()
	res := f.call(name, args)
	text := res.AllText()
	if res.IsError {
		f.t.Fatalf("%s %v: tool error:\n%s", name, args, text)
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			f.t.Fatalf("%s %v: result lacks %q:\n%s", name, args, w, text)
		}
	}
	f.t.Logf("%s %v:\n%s", name, args, text)
	return text
}

// fails calls a tool and expects a tool error containing every want.
func (f *fixture) fails(name string, args map[string]any, wants ...string) string {
	f.t.Helper()
	res := f.call(name, args)
	text := res.AllText()
	if !res.IsError {
		f.t.Fatalf("%s %v: want a tool error, got:\n%s", name, args, text)
	}
	for _, w := range wants {
		if !strings.Contains(text, w) {
			f.t.Fatalf("%s %v: error lacks %q:\n%s", name, args, w, text)
		}
	}
	return text
}

func (f *fixture) touch(name string) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) status(id string) WorkerInfo {
	f.t.Helper()
	for _, w := range f.sup.Workers() {
		if w.ID == id {
			return w
		}
	}
	f.t.Fatalf("no worker %s", id)
	return WorkerInfo{}
}

// gatedScript waits for the file "gate" in the workspace, then prints its
// tier argument, its worker id and its stdin.
const gatedScript = `input=$(cat); while [ ! -f gate ]; do sleep 0.02; done; printf 'tier=%s worker=%s surface=%s\n%s\n' "$1" "$BERTH_VIBE_WORKER" "$BERTH_VIBE_SURFACE" "$input"`

func TestCommandSpawnListWait(t *testing.T) {
	f := commandFixture(t, gatedScript)

	start := time.Now()
	f.ok("vibe_spawn", map[string]any{"brief": "rename Foo to Bar", "label": "rename foo"}, "spawned w1", "tier fast")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("vibe_spawn took %s; it must return at once", d)
	}
	f.ok("vibe_list", nil, "w1", "rename foo", "tier=fast", "running")

	// A timeout is the current status, not an error, with the time the
	// worker has run by the end of the wait.
	text := f.ok("vibe_wait", map[string]any{"worker_id": "w1", "timeout_seconds": 1}, "still running", "not an error")
	m := regexp.MustCompile(`running  (\S+)  attempt`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no elapsed time in %q", text)
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d < time.Second {
		t.Errorf("vibe_wait after a 1 s wait reports %s elapsed (%v): want the time at the end of the wait", m[1], err)
	}

	f.touch("gate")
	f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "done", "tier=FAST worker=w1", "rename Foo to Bar")
	f.ok("vibe_list", nil, "w1", "done", "result: tier=FAST")

	// The good tier maps to its own arguments.
	f.ok("vibe_spawn", map[string]any{"brief": "review w1", "label": "review", "tier": "good"}, "spawned w2", "tier good")
	f.ok("vibe_wait", map[string]any{"worker_id": "w2"}, "tier=GOOD worker=w2 surface=default", "review w1")

	// A plan-mode lead's worker is told its surface.
	f.surface = tools.SurfacePlan
	f.ok("vibe_spawn", map[string]any{"brief": "survey", "label": "survey"}, "spawned w3")
	f.ok("vibe_wait", map[string]any{"worker_id": "w3"}, "worker=w3 surface=plan")
}

func TestCommandSend(t *testing.T) {
	f := commandFixture(t, gatedScript)

	// Sent while running: queued, and the worker runs again after.
	f.ok("vibe_spawn", map[string]any{"brief": "write the parser", "label": "parser"}, "spawned w1")
	f.ok("vibe_send", map[string]any{"worker_id": "w1", "message": "also handle comments"}, "queued", "attempt 1")
	f.ok("vibe_list", nil, "1 message(s) queued")
	f.touch("gate")
	text := f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "attempt 2", "write the parser", "Your previous result", "Follow-up 1 from the lead", "also handle comments")
	if n := strings.Count(text, "tier=FAST"); n != 2 {
		t.Errorf("want the first result quoted in the second (tier=FAST twice), got %d:\n%s", n, text)
	}

	// Sent after it ended: runs again at once.
	f.ok("vibe_send", map[string]any{"worker_id": "w1", "message": "and add tests"}, "runs again (attempt 3)")
	f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "attempt 3", "Follow-up 2 from the lead", "and add tests")
}

func TestCommandFailure(t *testing.T) {
	f := commandFixture(t, `cat >/dev/null; echo partial; echo "no such file: config.yaml" >&2; exit 3`)
	f.ok("vibe_spawn", map[string]any{"brief": "x", "label": "fails"})
	f.fails("vibe_wait", map[string]any{"worker_id": "w1"}, "failed", "exit status 3", "no such file: config.yaml", "partial")
	f.ok("vibe_list", nil, "failed")
}

// childScript starts a child, a grandchild under a nested shell, and
// records every pid (its own too) in the file "pids".
const childScript = `sleep 1000 & echo $! >> pids; sh -c 'sleep 1000 & echo $! >> pids; wait' & echo $! >> pids; echo $$ >> pids; wait`

// startedPids waits until the worker's script has recorded its four pids.
func (f *fixture) startedPids(file string) []int {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(f.dir, file))
		var pids []int
		for _, l := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(l); err == nil {
				pids = append(pids, n)
			}
		}
		if len(pids) == 4 {
			for _, p := range pids {
				if !alive(p) {
					f.t.Fatalf("pid %d of %v is not running", p, pids)
				}
			}
			return pids
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the worker recorded pids %v, want 4", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noneSurvive fails unless every pid is gone (or a zombie) within a few
// seconds.
func noneSurvive(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []int
		for _, p := range pids {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of %v survived", left, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether a host process exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z'
}

func TestCommandKillTakesChildren(t *testing.T) {
	f := commandFixture(t, childScript)
	f.ok("vibe_spawn", map[string]any{"brief": "loop forever", "label": "hog"})
	pids := f.startedPids("pids")

	f.ok("vibe_kill", map[string]any{"worker_id": "w1"}, "killed w1")
	noneSurvive(t, pids)
	if st := f.status("w1").Status; st != StatusKilled {
		t.Fatalf("status after kill = %s, want killed", st)
	}
	f.ok("vibe_wait", map[string]any{"worker_id": "w1"}, "killed")
	f.ok("vibe_kill", map[string]any{"worker_id": "w1"}, "already ended")
}

func TestCloseEndsAllWorkers(t *testing.T) {
	f := commandFixture(t, strings.ReplaceAll(childScript, "pids", `pids-$BERTH_VIBE_WORKER`))
	f.ok("vibe_spawn", map[string]any{"brief": "a", "label": "one"})
	f.ok("vibe_spawn", map[string]any{"brief": "b", "label": "two", "tier": "good"})
	pids := append(f.startedPids("pids-w1"), f.startedPids("pids-w2")...)

	if err := f.sup.Close(); err != nil {
		t.Fatal(err)
	}
	noneSurvive(t, pids)
	for _, w := range f.sup.Workers() {
		if w.Status != StatusKilled {
			t.Errorf("%s after Close: %s, want killed", w.ID, w.Status)
		}
	}
	f.fails("vibe_spawn", map[string]any{"brief": "c", "label": "three"}, "closing")
	f.fails("vibe_send", map[string]any{"worker_id": "w1", "message": "again"}, "closing")
}

func TestInputErrors(t *testing.T) {
	f := commandFixture(t, gatedScript)
	f.ok("vibe_list", nil, "no workers")
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"vibe_spawn", map[string]any{"brief": "x", "label": "y", "tier": "medium"}, "unknown tier"},
		{"vibe_spawn", map[string]any{"brief": " ", "label": "y"}, "brief is empty"},
		{"vibe_spawn", map[string]any{"brief": "x", "label": ""}, "label is empty"},
		{"vibe_send", map[string]any{"worker_id": "w9", "message": "m"}, "no workers"},
		{"vibe_send", map[string]any{"worker_id": "w1", "message": ""}, "message is empty"},
		{"vibe_wait", map[string]any{"worker_id": "w9"}, "no worker"},
		{"vibe_wait", map[string]any{"worker_id": "w9", "timeout_seconds": -1}, "positive"},
		{"vibe_kill", map[string]any{"worker_id": "nope"}, "no worker"},
	}
	for _, tt := range tests {
		t.Run(tt.tool+"/"+tt.want, func(t *testing.T) {
			f.t = t
			f.fails(tt.tool, tt.args, tt.want)
		})
	}
	f.t = t
	f.ok("vibe_spawn", map[string]any{"brief": "x", "label": "y"})
	f.fails("vibe_kill", map[string]any{"worker_id": "w2"}, "workers are w1")
}

func TestLevels(t *testing.T) {
	reg := tools.NewRegistry()
	s := Register(reg, context.Background(), Options{Runner: RunnerFunc(func(ctx context.Context, j Job) (string, error) { return "", nil })})
	defer s.Close()
	var names []string
	for _, info := range reg.List(tools.SurfaceReadonly) {
		names = append(names, info.Name)
		if info.Level != tools.LevelRead {
			t.Errorf("%s is %s, want read (VIBE-1)", info.Name, info.Level)
		}
	}
	if got, want := strings.Join(names, " "), "vibe_kill vibe_list vibe_send vibe_spawn vibe_wait"; got != want {
		t.Fatalf("readonly surface lists %q, want %q", got, want)
	}
}

func TestMaxRunning(t *testing.T) {
	block := RunnerFunc(func(ctx context.Context, j Job) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	f := newFixture(t, func(*fixture) Runner { return block }, Options{MaxRunning: 2})
	f.ok("vibe_spawn", map[string]any{"brief": "a", "label": "a"})
	f.ok("vibe_spawn", map[string]any{"brief": "b", "label": "b"})
	f.fails("vibe_spawn", map[string]any{"brief": "c", "label": "c"}, "2 workers are already running")
	f.ok("vibe_kill", map[string]any{"worker_id": "w1"})
	f.ok("vibe_spawn", map[string]any{"brief": "c", "label": "c"}, "spawned w3")
}

func TestWaitCancelled(t *testing.T) {
	block := RunnerFunc(func(ctx context.Context, j Job) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	f := newFixture(t, func(*fixture) Runner { return block }, Options{})
	f.ok("vibe_spawn", map[string]any{"brief": "a", "label": "a"})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := f.reg.Call(ctx, tools.SurfaceDefault, "vibe_wait", json.RawMessage(`{"worker_id":"w1"}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("vibe_wait with a cancelled call: err = %v, want deadline exceeded", err)
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{strings.Repeat("a", 10) + strings.Repeat("b", 10), 10, "aaaaa\n… (10 characters cut) …\nbbbbb"},
		{"ééééé", 4, "é\n… (6 characters cut) …\né"},
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestCapBuffer(t *testing.T) {
	b := &capBuffer{max: 8}
	for _, s := range []string{"ab", "cd", "ef", "gh", "ij", "kl"} {
		b.Write([]byte(s))
	}
	if got, want := b.String(), "abcd\n… (4 bytes cut) …\nijkl"; got != want {
		t.Fatalf("capBuffer = %q, want %q", got, want)
	}
}
