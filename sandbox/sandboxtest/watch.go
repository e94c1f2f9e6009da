package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// testFSWatch: an FS that is a [sandbox.Watcher] reports, relative to its
// root, the files written through it and by processes in the sandbox
// below the watched directory, also in a directory made after the watch
// began, and neither skipped directories nor anything outside; a file a
// process made comes at or before the mark of a Sync called after the
// process returned; Close closes Events with Err nil (Sync then fails),
// and so does the FS's Close for a watch left open. An FS that is no Watcher, or a sandbox that cannot watch
// (ErrUnsupported), skips.
func testFSWatch(t *testing.T, e *env) {
	f := e.fsys(t)
	wf, ok := f.(sandbox.Watcher)
	if !ok {
		t.Skipf("the FS (%T) is not a sandbox.Watcher", f)
	}
	ctx := ctxT(t)
	for _, d := range []string{"ws/sub", "ws/.git", "other"} {
		if err := f.MkdirAll(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.WriteFile(ctx, "ws/sub/old.txt", []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := wf.Watch(ctx, "ws", sandbox.WatchOptions{SkipDirs: []string{".git"}})
	if errors.Is(err, sandbox.ErrUnsupported) {
		t.Skipf("this sandbox cannot watch: %v", err)
	}
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w.Close()
	if err := f.WriteFile(ctx, "ws/sub/a.txt", []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `cd ` + e.dir + ` && echo x > ws/.git/HEAD && echo x > other/x && mkdir -p ws/new/deep && echo x > ws/new/deep/b.txt && mv ws/sub/old.txt ws/sub/moved.txt && echo x > ws/z`
	if r := run(t, e.sb, sh(script)); !r.status.Success() {
		t.Fatalf("%s: %v %s", script, r.status, r.stderr)
	}
	want := []string{"ws/sub/a.txt", "ws/new", "ws/new/deep/b.txt", "ws/sub/old.txt", "ws/sub/moved.txt", "ws/z"}
	seen := make(map[string]bool)
	deadline := time.After(hang)
	for slices.ContainsFunc(want, func(p string) bool { return !seen[p] }) {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("Events closed (Err %v) before %v were all reported; reported %v", w.Err(), want, seen)
			}
			if !slices.IsSorted(ev.Paths) {
				t.Errorf("event paths %q not sorted", ev.Paths)
			}
			for _, p := range ev.Paths {
				seen[p] = true
			}
		case <-deadline:
			t.Fatalf("%v not all reported within %v; reported %v", want, hang, seen)
		}
	}
	for _, p := range []string{"ws/.git/HEAD", "other/x", "ws/.git"} {
		if seen[p] {
			t.Errorf("%s reported; reported %v", p, seen)
		}
	}
	// Sync is a barrier: a file made by a process that returned before
	// it comes at or before its mark, with no wait in between.
	var last uint64
	for i := range 5 {
		name := fmt.Sprintf("ws/sub/synced%d.txt", i)
		script := `cd ` + e.dir + ` && echo x > ` + name
		if r := run(t, e.sb, sh(script)); !r.status.Success() {
			t.Fatalf("%s: %v %s", script, r.status, r.stderr)
		}
		mark, err := w.Sync(ctx)
		if err != nil {
			t.Fatalf("Sync: %v", err)
		}
		if mark <= last {
			t.Errorf("Sync returned mark %d after mark %d", mark, last)
		}
		last = mark
		if seen := untilSynced(t, w, mark); !seen[name] {
			t.Fatalf("mark %d delivered before %s, made before the Sync; delivered %v", mark, name, seen)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	drainEvents(t, w)
	if err := w.Err(); err != nil {
		t.Errorf("Err after Close = %v, want nil", err)
	}
	if _, err := w.Sync(ctx); err == nil {
		t.Error("Sync after Close succeeded")
	}

	// A watch left open ends with its FS.
	w2, err := wf.Watch(ctx, ".", sandbox.WatchOptions{})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	defer w2.Close()
	if c, ok := f.(io.Closer); ok {
		c.Close()
		drainEvents(t, w2)
	}
	if _, err := wf.Watch(context.Background(), "nonexistent", sandbox.WatchOptions{}); err == nil {
		t.Error("Watch of a closed FS, or of a missing directory, succeeded")
	}
}

// untilSynced reads events until one carries Synced >= mark, and returns
// the paths delivered meanwhile, that event's included.
func untilSynced(t *testing.T, w sandbox.Watch, mark uint64) map[string]bool {
	t.Helper()
	seen := make(map[string]bool)
	deadline := time.After(hang)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("Events closed (Err %v) before mark %d", w.Err(), mark)
			}
			for _, p := range ev.Paths {
				seen[p] = true
			}
			if ev.Synced >= mark {
				return seen
			}
		case <-deadline:
			t.Fatalf("mark %d not delivered within %v; delivered %v", mark, hang, seen)
		}
	}
}

// drainEvents reads Events until it is closed.
func drainEvents(t *testing.T, w sandbox.Watch) {
	t.Helper()
	deadline := time.After(hang)
	for {
		select {
		case _, ok := <-w.Events():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("Events not closed within %v", hang)
		}
	}
}
