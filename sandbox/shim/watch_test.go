package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// localTransport runs the agent on this machine, as the host backend's
// transport does (that one lives in sandbox/host, which imports this
// package).
type localTransport struct{}

func (localTransport) Place(ctx context.Context, bin *Binary) (string, error) { return bin.Path, nil }

func (localTransport) Exec(ctx context.Context, spec ExecSpec) (Stream, error) {
	cmd := exec.Command(spec.Args[0], spec.Args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var ends [6]*os.File // in r/w, out r/w, err r/w
	for i := 0; i < 6; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		ends[i], ends[i+1] = r, w
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ends[0], ends[3], ends[5]
	err := cmd.Start()
	ends[0].Close()
	ends[3].Close()
	ends[5].Close()
	if err != nil {
		ends[1].Close()
		ends[2].Close()
		ends[4].Close()
		return nil, err
	}
	return &localStream{cmd: cmd, in: ends[1], out: ends[2], err: ends[4]}, nil
}

type localStream struct {
	cmd          *exec.Cmd
	in, out, err *os.File
	once         sync.Once
}

func (s *localStream) Stdin() io.WriteCloser { return s.in }
func (s *localStream) Stdout() io.Reader     { return s.out }
func (s *localStream) Stderr() io.Reader     { return s.err }
func (s *localStream) Kill() error           { return s.cmd.Process.Kill() }

func (s *localStream) Wait() (int, error) {
	err := s.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func (s *localStream) Close() error {
	s.once.Do(func() {
		s.in.Close()
		s.out.Close()
		s.err.Close()
	})
	return nil
}

// watchFS opens the agent's FS on a new temporary directory through
// localTransport, with watchFlags added to the agent's watch mode.
func watchFS(t *testing.T, watchFlags ...string) (sandbox.FS, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // may build the agent
	defer cancel()
	s := New(localTransport{}, Options{Name: "local"})
	t.Cleanup(func() { s.Close() })
	dir := t.TempDir()
	f, err := s.FS(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	f.(*fsys).watchFlags = watchFlags
	return f, dir
}

func startWatch(t *testing.T, f sandbox.FS, dir string, opts sandbox.WatchOptions) sandbox.Watch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), watchWait)
	defer cancel()
	w, err := f.(sandbox.Watcher).Watch(ctx, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// watchWait bounds each wait of these tests, only so that a broken watch
// fails instead of hanging.
const watchWait = 20 * time.Second

// collect reads events until every path of want was reported, and
// returns what was reported, how many events came and whether one was an
// overflow.
func collect(t *testing.T, w sandbox.Watch, want ...string) (seen map[string]bool, events int, overflow bool) {
	t.Helper()
	seen = make(map[string]bool)
	for slices.ContainsFunc(want, func(p string) bool { return !seen[p] }) {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("Events closed (Err %v) before %v were reported; reported %d paths", w.Err(), want, len(seen))
			}
			events++
			overflow = overflow || ev.Overflow
			if !slices.IsSorted(ev.Paths) || len(slices.Compact(slices.Clone(ev.Paths))) != len(ev.Paths) {
				t.Errorf("event paths %q are not sorted and distinct", ev.Paths)
			}
			for _, p := range ev.Paths {
				seen[p] = true
			}
		case <-time.After(watchWait):
			t.Fatalf("%v not all reported within %v; reported %d paths", want, watchWait, len(seen))
		}
	}
	return seen, events, overflow
}

// TestWatch: changes below the watched directory, made through the FS
// and directly, come as events with paths relative to the FS root; not
// those in skipped directories; Close closes Events, and Err is nil.
func TestWatch(t *testing.T) {
	f, root := watchFS(t)
	ctx := context.Background()
	for _, d := range []string{"ws/sub", "ws/.git", "other"} {
		if err := f.MkdirAll(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := startWatch(t, f, "ws", sandbox.WatchOptions{SkipDirs: []string{".git"}})
	if err := f.WriteFile(ctx, "ws/sub/a.go", []byte("package a"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "ws/.git/HEAD"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "other/x"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(root, "ws/new/deep"), 0o755)
	os.WriteFile(filepath.Join(root, "ws/new/deep/b.go"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "ws/z"), []byte("x"), 0o644)
	seen, _, overflow := collect(t, w, "ws/sub/a.go", "ws/new", "ws/new/deep", "ws/new/deep/b.go", "ws/z")
	for _, p := range []string{"ws/.git/HEAD", "ws/.git", "other/x"} {
		if seen[p] {
			t.Errorf("%s reported", p)
		}
	}
	if overflow {
		t.Error("an overflow for a few changes")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for range w.Events() {
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err after Close = %v, want nil", err)
	}
}

// TestWatchCoalesces: a consumer that does not take events meanwhile
// gets the batches the agent sent merged, not one event each.
func TestWatchCoalesces(t *testing.T) {
	f, root := watchFS(t)
	w := startWatch(t, f, ".", sandbox.WatchOptions{})
	var want []string
	for burst := range 6 {
		for i := range 3 {
			p := fmt.Sprintf("b%d-%d", burst, i)
			os.WriteFile(filepath.Join(root, p), nil, 0o644)
			want = append(want, p)
		}
		time.Sleep(150 * time.Millisecond) // the agent sends each burst alone
	}
	_, events, _ := collect(t, w, want...)
	// One event waits in the channel, one with the deliverer; the rest is
	// merged into the next.
	if events > 3 {
		t.Errorf("%d events for 6 bursts nobody took meanwhile, want at most 3", events)
	}
}

// TestWatchOverflowForSlowConsumer: past maxWatchPending paths nobody
// took, the pending paths are dropped for an Overflow event, and the watch
// goes on.
func TestWatchOverflowForSlowConsumer(t *testing.T) {
	f, root := watchFS(t)
	w := startWatch(t, f, ".", sandbox.WatchOptions{})
	for i := range maxWatchPending + 5000 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // all of it sent by the agent and taken in
	os.WriteFile(filepath.Join(root, "after"), nil, 0o644)
	seen, _, overflow := collect(t, w, "after")
	if !overflow {
		t.Errorf("no overflow for %d paths nobody took; %d reported", maxWatchPending+5000, len(seen))
	}
	if len(seen) > maxWatchPending+1 {
		t.Errorf("%d paths reported, more than the bound %d", len(seen), maxWatchPending)
	}
}

// TestWatchUnsupported: the agent's watch limit reached at the start is an
// error wrapping sandbox.ErrUnsupported; reached later, it ends the watch
// with such an Err.
func TestWatchUnsupported(t *testing.T) {
	f, root := watchFS(t, "--max-watches=2")
	os.MkdirAll(filepath.Join(root, "a/b"), 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), watchWait)
	defer cancel()
	if _, err := f.(sandbox.Watcher).Watch(ctx, ".", sandbox.WatchOptions{}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("Watch with 3 directories and a limit of 2 = %v, want ErrUnsupported", err)
	}
	w := startWatch(t, f, "a", sandbox.WatchOptions{})
	os.MkdirAll(filepath.Join(root, "a/c/d"), 0o755)
	deadline := time.After(watchWait)
	for {
		select {
		case _, ok := <-w.Events():
			if ok {
				continue
			}
			if err := w.Err(); !errors.Is(err, sandbox.ErrUnsupported) {
				t.Fatalf("Err = %v, want ErrUnsupported", err)
			}
			return
		case <-deadline:
			t.Fatal("the watch did not end when the limit was reached")
		}
	}
}

// TestWatchErrors: a directory that is not there is an error, not
// ErrUnsupported; an agent killed ends the watch with an Err; closing the
// FS closes its watches.
func TestWatchErrors(t *testing.T) {
	f, _ := watchFS(t)
	ctx, cancel := context.WithTimeout(context.Background(), watchWait)
	defer cancel()
	_, err := f.(sandbox.Watcher).Watch(ctx, "missing", sandbox.WatchOptions{})
	if err == nil || errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Watch of a missing directory = %v, want an error other than ErrUnsupported", err)
	}
	if _, err := f.(sandbox.Watcher).Watch(ctx, "../x", sandbox.WatchOptions{}); !errors.Is(err, sandbox.ErrEscape) {
		t.Errorf("Watch(../x) = %v, want ErrEscape", err)
	}

	w := startWatch(t, f, ".", sandbox.WatchOptions{})
	w.(*watch).stream.(*localStream).Kill()
	select {
	case _, ok := <-w.Events():
		if ok {
			t.Fatal("an event from a killed agent")
		}
	case <-time.After(watchWait):
		t.Fatal("Events not closed after the agent was killed")
	}
	if w.Err() == nil {
		t.Error("Err = nil after the agent was killed")
	}
	w.Close()
	if w.Err() == nil {
		t.Error("Err = nil after Close of a watch that had failed")
	}

	w = startWatch(t, f, ".", sandbox.WatchOptions{})
	f.(io.Closer).Close()
	select {
	case _, ok := <-w.Events():
		if ok {
			t.Fatal("an event after the FS closed")
		}
	case <-time.After(watchWait):
		t.Fatal("Events not closed after the FS closed")
	}
	if err := w.Err(); err != nil {
		t.Errorf("Err after the FS closed = %v, want nil", err)
	}
	if _, err := f.(sandbox.Watcher).Watch(ctx, ".", sandbox.WatchOptions{}); err == nil {
		t.Error("Watch on a closed FS succeeded")
	}
}
