package shim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"berth.dev/berth/sandbox"
)

// untilSynced reads events until one carries Synced >= mark, and returns
// the paths delivered meanwhile (that event's included), whether one was
// an overflow, and the mark that came.
func untilSynced(t *testing.T, w sandbox.Watch, mark uint64) (seen map[string]bool, overflow bool, synced uint64) {
	t.Helper()
	seen = make(map[string]bool)
	deadline := time.After(watchWait)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("Events closed (Err %v) before mark %d", w.Err(), mark)
			}
			for _, p := range ev.Paths {
				seen[p] = true
			}
			overflow = overflow || ev.Overflow
			if ev.Synced >= mark {
				return seen, overflow, ev.Synced
			}
		case <-deadline:
			t.Fatalf("no event with mark %d within %v", mark, watchWait)
		}
	}
}

// TestWatchSync: a Sync right after a file is made (no wait) has the
// file's path delivered at or before its mark, each of 200 times; marks
// count up from 1.
func TestWatchSync(t *testing.T) {
	f, root := watchFS(t)
	w := startWatch(t, f, ".", sandbox.WatchOptions{})
	ctx := context.Background()
	for i := range 200 {
		p := fmt.Sprintf("f%03d", i)
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		mark, err := w.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if mark != uint64(i+1) {
			t.Fatalf("Sync %d returned mark %d", i+1, mark)
		}
		seen, _, _ := untilSynced(t, w, mark)
		if !seen[p] {
			t.Fatalf("iteration %d: mark %d delivered before %s; delivered %v", i, mark, p, seen)
		}
	}
}

// TestWatchSyncSlowConsumer: with a consumer that takes nothing while
// files are made and synced, the events are merged, and still every
// mark comes with or after the paths of the files made before its Sync;
// the highest mark is delivered.
func TestWatchSyncSlowConsumer(t *testing.T) {
	f, root := watchFS(t)
	w := startWatch(t, f, ".", sandbox.WatchOptions{})
	ctx := context.Background()
	const n = 20
	var last uint64
	for i := range n {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%02d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		mark, err := w.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = mark
		time.Sleep(30 * time.Millisecond) // the agent answers each alone
	}
	seen := make(map[string]bool)
	events := 0
	deadline := time.After(watchWait)
	for synced := uint64(0); synced < last; {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("Events closed (Err %v) before mark %d", w.Err(), last)
			}
			events++
			for _, p := range ev.Paths {
				seen[p] = true
			}
			if ev.Synced == 0 {
				continue
			}
			if ev.Synced <= synced {
				t.Errorf("mark %d after mark %d", ev.Synced, synced)
			}
			synced = ev.Synced
			for i := range int(synced) { // mark m follows the file made before the m-th Sync
				if p := fmt.Sprintf("f%02d", i); !seen[p] {
					t.Errorf("mark %d delivered before %s", synced, p)
				}
			}
		case <-deadline:
			t.Fatalf("mark %d not delivered within %v", last, watchWait)
		}
	}
	// One event waits in the channel, one with the deliverer; the rest is
	// merged into the next.
	if events > 3 {
		t.Errorf("%d events for %d changes and syncs nobody took meanwhile, want at most 3", events, n)
	}
}

// TestWatchSyncOverflow: an overflow for a consumer that took nothing
// is delivered with or before the mark of a Sync made after it.
func TestWatchSyncOverflow(t *testing.T) {
	f, root := watchFS(t)
	w := startWatch(t, f, ".", sandbox.WatchOptions{})
	for i := range maxWatchPending + 5000 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mark, err := w.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, overflow, _ := untilSynced(t, w, mark); !overflow {
		t.Errorf("mark %d delivered without the overflow of %d paths nobody took", mark, maxWatchPending+5000)
	}
}

// TestWatchSyncEnded: Sync fails after Close, and after the agent was
// killed; a cancelled context fails it too.
func TestWatchSyncEnded(t *testing.T) {
	f, _ := watchFS(t)
	ctx := context.Background()
	w := startWatch(t, f, ".", sandbox.WatchOptions{})
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Sync(cancelled); err == nil {
		t.Error("Sync with a cancelled context succeeded")
	}
	w.Close()
	if _, err := w.Sync(ctx); err == nil {
		t.Error("Sync after Close succeeded")
	}

	w = startWatch(t, f, ".", sandbox.WatchOptions{})
	w.(*watch).stream.(*localStream).Kill()
	for range w.Events() {
	}
	if _, err := w.Sync(ctx); err == nil {
		t.Error("Sync after the agent was killed succeeded")
	}
}
