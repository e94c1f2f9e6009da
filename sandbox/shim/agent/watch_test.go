package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// watchWait bounds every wait on the watching agent, only so that a broken
// agent fails the test instead of hanging it.
const watchWait = 20 * time.Second

// watchFrame is one frame of the watch protocol, copied.
type watchFrame struct {
	typ     byte
	payload []byte
}

// watchAgent is a running "berth-shim watch" and its frames.
type watchAgent struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	frames chan watchFrame // closed when its stdout ended
	exited chan struct{}
	stderr *strings.Builder
}

// startWatch starts the agent's watch mode with args. The cleanup closes
// its input and waits for it.
func startWatch(t *testing.T, args ...string) *watchAgent {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"watch"}, args...)...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	a := &watchAgent{cmd: cmd, in: in, frames: make(chan watchFrame, 1024), exited: make(chan struct{}), stderr: new(strings.Builder)}
	cmd.Stderr = a.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // ends with the agent's stdout
		defer close(a.frames)
		fr := NewReader(out)
		for {
			typ, p, err := fr.Next()
			if err != nil {
				return
			}
			a.frames <- watchFrame{typ, append([]byte(nil), p...)}
		}
	}()
	go func() { cmd.Wait(); close(a.exited) }() // ends with the agent
	t.Cleanup(func() {
		in.Close()
		select {
		case <-a.exited:
		case <-time.After(watchWait):
			cmd.Process.Kill()
			<-a.exited
			t.Errorf("the watching agent did not exit on its input's end")
		}
	})
	return a
}

// next returns the next frame, failing the test when none comes.
func (a *watchAgent) next(t *testing.T) watchFrame {
	t.Helper()
	select {
	case f, ok := <-a.frames:
		if !ok {
			t.Fatalf("the agent's output ended; stderr: %s", a.stderr)
		}
		return f
	case <-time.After(watchWait):
		t.Fatalf("no frame from the agent within %v", watchWait)
	}
	panic("unreachable")
}

// ready waits for the ready frame and returns its count of directories.
func (a *watchAgent) ready(t *testing.T) int {
	t.Helper()
	f := a.next(t)
	if f.typ != TypeWatchReady {
		t.Fatalf("first frame %q %q, want ready", f.typ, f.payload)
	}
	n, err := Uint32s(f.payload, 1)
	if err != nil {
		t.Fatal(err)
	}
	return int(n[0])
}

// until collects reported paths until every one of want was reported, and
// returns all reported paths and whether an overflow came.
func (a *watchAgent) until(t *testing.T, want ...string) (seen map[string]bool, overflow bool) {
	t.Helper()
	seen = make(map[string]bool)
	missing := func() []string {
		var m []string
		for _, p := range want {
			if !seen[p] {
				m = append(m, p)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		select {
		case f, ok := <-a.frames:
			if !ok {
				t.Fatalf("the agent's output ended before %v were reported; stderr: %s", missing(), a.stderr)
			}
			switch f.typ {
			case TypeWatchChanges:
				var paths []string
				if err := json.Unmarshal(f.payload, &paths); err != nil {
					t.Fatal(err)
				}
				if !slices.IsSorted(paths) {
					t.Errorf("batch %q is not sorted", paths)
				}
				for _, p := range paths {
					seen[p] = true
				}
			case TypeWatchOverflow:
				overflow = true
			default:
				t.Fatalf("unexpected frame %q %q", f.typ, f.payload)
			}
		case <-time.After(watchWait):
			t.Fatalf("%v not reported within %v; reported: %v", missing(), watchWait, seen)
		}
	}
	return seen, overflow
}

func mkfile(t *testing.T, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWatchReports: every kind of change below the watched directory is
// reported relative to ROOT, also in directories made or moved in after
// the watch began; skipped directories, and directories moved out of it,
// are not.
func TestWatchReports(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before []string                      // files made before the watch, relative to ROOT/ws
		change func(t *testing.T, ws string) // ROOT/ws
		want   []string                      // reported (relative to ROOT)
		never  []string                      // not reported before want
	}{
		{"write", []string{"a.txt"}, func(t *testing.T, ws string) {
			os.WriteFile(filepath.Join(ws, "a.txt"), []byte("changed"), 0o644)
		}, []string{"ws/a.txt"}, nil},
		{"create", nil, func(t *testing.T, ws string) {
			mkfile(t, filepath.Join(ws, "new.go"))
		}, []string{"ws/new.go"}, nil},
		{"delete", []string{"old.go"}, func(t *testing.T, ws string) {
			os.Remove(filepath.Join(ws, "old.go"))
		}, []string{"ws/old.go"}, nil},
		{"rename", []string{"from.go"}, func(t *testing.T, ws string) {
			os.Rename(filepath.Join(ws, "from.go"), filepath.Join(ws, "to.go"))
		}, []string{"ws/from.go", "ws/to.go"}, nil},
		{"chmod", []string{"x.sh"}, func(t *testing.T, ws string) {
			os.Chmod(filepath.Join(ws, "x.sh"), 0o755)
		}, []string{"ws/x.sh"}, nil},
		{"in a subdirectory", []string{"sub/deep/f.go"}, func(t *testing.T, ws string) {
			os.WriteFile(filepath.Join(ws, "sub/deep/f.go"), []byte("changed"), 0o644)
		}, []string{"ws/sub/deep/f.go"}, nil},
		{"mkdir -p, then a file in it", nil, func(t *testing.T, ws string) {
			mkfile(t, filepath.Join(ws, "a/b/c/f.go"))
		}, []string{"ws/a", "ws/a/b", "ws/a/b/c", "ws/a/b/c/f.go"}, nil},
		{"new directory, then a change in it", nil, func(t *testing.T, ws string) {
			mkfile(t, filepath.Join(ws, "d/e/f.go"))
			time.Sleep(100 * time.Millisecond) // d/e watched by now, or the change is lost anyway
			mkfile(t, filepath.Join(ws, "d/e/later.go"))
		}, []string{"ws/d/e/f.go", "ws/d/e/later.go"}, nil},
		{"directory moved in", nil, func(t *testing.T, ws string) {
			out := t.TempDir()
			mkfile(t, filepath.Join(out, "pkg/x/y.go"))
			if err := os.Rename(filepath.Join(out, "pkg"), filepath.Join(ws, "pkg")); err != nil {
				t.Fatal(err)
			}
		}, []string{"ws/pkg", "ws/pkg/x", "ws/pkg/x/y.go"}, nil},
		{"directory moved out, then changed there", []string{"gone/f.go"}, func(t *testing.T, ws string) {
			out := t.TempDir()
			if err := os.Rename(filepath.Join(ws, "gone"), filepath.Join(out, "gone")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			mkfile(t, filepath.Join(out, "gone/after.go"))
			mkfile(t, filepath.Join(ws, "sentinel"))
		}, []string{"ws/gone", "ws/sentinel"}, []string{"ws/gone/after.go"}},
		{"directory renamed, then changed", []string{"d1/f.go"}, func(t *testing.T, ws string) {
			os.Rename(filepath.Join(ws, "d1"), filepath.Join(ws, "d2"))
			time.Sleep(100 * time.Millisecond)
			os.WriteFile(filepath.Join(ws, "d2/f.go"), []byte("changed"), 0o644)
			mkfile(t, filepath.Join(ws, "sentinel"))
		}, []string{"ws/d1", "ws/d2", "ws/d2/f.go", "ws/sentinel"}, []string{"ws/d1/f.go"}},
		{"skipped directories", []string{".git/HEAD"}, func(t *testing.T, ws string) {
			os.WriteFile(filepath.Join(ws, ".git/HEAD"), []byte("changed"), 0o644)
			mkfile(t, filepath.Join(ws, "node_modules/pkg/index.js"))
			mkfile(t, filepath.Join(ws, "sub/node_modules/x.js"))
			os.RemoveAll(filepath.Join(ws, ".git"))
			mkfile(t, filepath.Join(ws, "sentinel"))
		}, []string{"ws/sub", "ws/sentinel"}, []string{"ws/.git", "ws/.git/HEAD", "ws/node_modules", "ws/node_modules/pkg/index.js", "ws/sub/node_modules", "ws/sub/node_modules/x.js"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			ws := filepath.Join(root, "ws")
			os.Mkdir(ws, 0o755)
			for _, f := range tc.before {
				mkfile(t, filepath.Join(ws, f))
			}
			a := startWatch(t, "--skip=.git", "--skip=node_modules", root, "ws")
			a.ready(t)
			tc.change(t, ws)
			seen, overflow := a.until(t, tc.want...)
			if overflow {
				t.Errorf("overflow reported for a few changes")
			}
			for _, p := range tc.never {
				if seen[p] {
					t.Errorf("%s reported; reported: %v", p, seen)
				}
			}
		})
	}
}

// TestWatchReadyCountsDirectories: ready comes once every directory but
// the skipped ones is watched, and says how many.
func TestWatchReadyCountsDirectories(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"a/b/f", "a/c/f", ".git/objects/x/y", "f"} {
		mkfile(t, filepath.Join(root, f))
	}
	a := startWatch(t, "--skip=.git", root, ".")
	if n := a.ready(t); n != 4 { // ., a, a/b, a/c
		t.Errorf("ready says %d directories, want 4", n)
	}
	mkfile(t, filepath.Join(root, "a/c/g"))
	a.until(t, "a/c/g")
}

// TestWatchOverflow: more changes than --max-pending before the agent
// sends them are reported as an overflow, and the watch goes on.
func TestWatchOverflow(t *testing.T) {
	root := t.TempDir()
	a := startWatch(t, "--max-pending=50", root, ".")
	a.ready(t)
	// All within WatchQuiet, so they pile up before a send.
	for i := range 500 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seenOverflow := false
	for !seenOverflow {
		f := a.next(t)
		switch f.typ {
		case TypeWatchOverflow:
			seenOverflow = true
		case TypeWatchChanges:
			var paths []string
			json.Unmarshal(f.payload, &paths)
			if len(paths) > 50 {
				t.Fatalf("a batch of %d paths with --max-pending=50", len(paths))
			}
		default:
			t.Fatalf("unexpected frame %q", f.typ)
		}
	}
	time.Sleep(2 * WatchMaxDelay) // let the rest be sent
	mkfile(t, filepath.Join(root, "after"))
	a.until(t, "after")
}

// TestWatchUnsupported: when the watch limit is reached, at the start or
// for a directory made later, the agent says so and exits 0.
func TestWatchUnsupported(t *testing.T) {
	t.Run("at the start", func(t *testing.T) {
		root := t.TempDir()
		mkfile(t, filepath.Join(root, "a/b/f"))
		a := startWatch(t, "--max-watches=2", root, ".")
		f := a.next(t)
		if f.typ != TypeWatchUnsupported || !strings.Contains(string(f.payload), "limit") {
			t.Fatalf("frame %q %q, want unsupported for the limit", f.typ, f.payload)
		}
		waitExit(t, a, 0)
	})
	t.Run("later", func(t *testing.T) {
		root := t.TempDir()
		a := startWatch(t, "--max-watches=2", root, ".")
		a.ready(t)
		mkfile(t, filepath.Join(root, "a/b/c/f"))
		for {
			f := a.next(t)
			if f.typ == TypeWatchUnsupported {
				break
			}
			if f.typ != TypeWatchChanges {
				t.Fatalf("frame %q %q, want changes or unsupported", f.typ, f.payload)
			}
		}
		waitExit(t, a, 0)
	})
	t.Run("DIR not a directory", func(t *testing.T) {
		root := t.TempDir()
		mkfile(t, filepath.Join(root, "f"))
		a := startWatch(t, root, "f")
		if _, ok := <-a.frames; ok {
			t.Fatal("a frame for a DIR that is a file")
		}
		waitExit(t, a, 1)
		if !strings.Contains(a.stderr.String(), "not a directory") {
			t.Errorf("stderr %q, want it to say why", a.stderr)
		}
	})
}

func waitExit(t *testing.T, a *watchAgent, code int) {
	t.Helper()
	select {
	case <-a.exited:
	case <-time.After(watchWait):
		t.Fatal("the agent did not exit")
	}
	if got := a.cmd.ProcessState.ExitCode(); got != code {
		t.Errorf("exit code %d, want %d; stderr: %s", got, code, a.stderr)
	}
}

// TestWatchSilentBerth: the agent exits once berth sent nothing for
// --ping-timeout, and stays while it pings.
func TestWatchSilentBerth(t *testing.T) {
	const timeout = 600 * time.Millisecond
	root := t.TempDir()
	silent := startWatch(t, "--ping-timeout="+timeout.String(), root, ".")
	pinged := startWatch(t, "--ping-timeout="+timeout.String(), root, ".")
	silent.ready(t)
	pinged.ready(t)
	deadline := time.After(timeout + 5*time.Second)
	tick := time.NewTicker(timeout / 4)
	defer tick.Stop()
	for {
		select {
		case <-silent.exited:
			select {
			case <-pinged.exited:
				t.Fatalf("the pinged agent exited too: %s", pinged.stderr)
			default:
			}
			return
		case <-tick.C:
			WriteFrame(pinged.in, TypePing, nil)
		case <-deadline:
			t.Fatal("the agent still runs after berth went silent")
		}
	}
}

func TestParseWatch(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		ok      bool
		skip    []string
		pending int
	}{
		{[]string{"/r", "."}, true, nil, DefaultWatchMaxPending},
		{[]string{"--skip=.git", "--skip=node_modules", "--max-pending=7", "/r", "ws"}, true, []string{".git", "node_modules"}, 7},
		{[]string{"--skip=a/b", "/r", "."}, false, nil, 0},
		{[]string{"--max-pending=0", "/r", "."}, false, nil, 0},
		{[]string{"/r", "../x"}, false, nil, 0},
		{[]string{"/r"}, false, nil, 0},
		{[]string{"--bogus", "/r", "."}, false, nil, 0},
	} {
		o, _, _, err := parseWatch(tc.args)
		if (err == nil) != tc.ok {
			t.Errorf("parseWatch(%q) = %v, want ok %v", tc.args, err, tc.ok)
			continue
		}
		if tc.ok && (!slices.Equal(o.skip, tc.skip) || o.maxPending != tc.pending) {
			t.Errorf("parseWatch(%q) = %+v", tc.args, o)
		}
	}
}

// TestWatchKernelOverflow: when the kernel's event queue overflowed (the
// agent stopped while files were made), the agent reports an overflow and
// watches the directories made meanwhile, whose creation it never saw.
func TestWatchKernelOverflow(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skipf("no inotify queue limit to read: %v", err)
	}
	var queue int
	fmt.Sscan(string(b), &queue)
	if queue <= 0 || queue > 100000 {
		t.Skipf("fs.inotify.max_queued_events is %d: too many events to make", queue)
	}
	root := t.TempDir()
	a := startWatch(t, root, ".")
	a.ready(t)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for i := range queue + 100 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%06d", i)), nil, 0o644); err != nil {
			a.cmd.Process.Signal(syscall.SIGCONT)
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "unseen"), 0o755); err != nil {
		t.Fatal(err)
	}
	a.cmd.Process.Signal(syscall.SIGCONT)
	for f := a.next(t); f.typ != TypeWatchOverflow; f = a.next(t) {
		if f.typ != TypeWatchChanges {
			t.Fatalf("frame %q %q, want changes or overflow", f.typ, f.payload)
		}
	}
	// The agent watches unseen once its rescan after the overflow reaches
	// it, which on a loaded machine may take a while: a file made in it
	// before then is part of the rescan's resync, not a change. Make one
	// file after another until one is reported as a change.
	deadline := time.After(2 * time.Minute)
	tick := time.NewTicker(2 * WatchMaxDelay)
	defer tick.Stop()
	for n := 0; ; {
		select {
		case f, ok := <-a.frames:
			if !ok {
				t.Fatalf("the agent's output ended before a file in unseen was reported; stderr: %s", a.stderr)
			}
			if f.typ != TypeWatchChanges {
				continue // a later overflow of the rescan is not this test's question
			}
			var paths []string
			if err := json.Unmarshal(f.payload, &paths); err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				if strings.HasPrefix(p, "unseen/f") {
					return
				}
			}
		case <-tick.C:
			mkfile(t, filepath.Join(root, fmt.Sprintf("unseen/f%d", n)))
			n++
		case <-deadline:
			t.Fatalf("no file made in unseen (a directory made during the overflow) was reported within 2 minutes: it is not watched")
		}
	}
}
