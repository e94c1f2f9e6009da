package agent

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// sync sends a sync of mark and returns the paths reported until the
// synced frame, failing unless that frame carries mark.
func (a *watchAgent) sync(t *testing.T, mark uint64) (seen map[string]bool, overflow bool) {
	t.Helper()
	if err := WriteFrame(a.in, TypeWatchSync, binary.BigEndian.AppendUint64(nil, mark)); err != nil {
		t.Fatal(err)
	}
	seen = make(map[string]bool)
	for {
		f := a.next(t)
		switch f.typ {
		case TypeWatchChanges:
			var paths []string
			if err := json.Unmarshal(f.payload, &paths); err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				seen[p] = true
			}
		case TypeWatchOverflow:
			overflow = true
		case TypeWatchSynced:
			if len(f.payload) != 8 || binary.BigEndian.Uint64(f.payload) != mark {
				t.Fatalf("synced %x, want mark %d", f.payload, mark)
			}
			return seen, overflow
		default:
			t.Fatalf("unexpected frame %q %q", f.typ, f.payload)
		}
	}
}

// TestWatchSync: a sync right after a change (no wait) is answered after
// the change's path, each of 200 times; also after more paths than one
// batch holds, and in a directory made just before. Without the sync
// frame the agent exits 1 on the unknown frame.
func TestWatchSync(t *testing.T) {
	root := t.TempDir()
	a := startWatch(t, root, ".")
	a.ready(t)
	mark := uint64(0)
	for i := range 200 {
		p := fmt.Sprintf("f%03d", i)
		mkfile(t, filepath.Join(root, p))
		mark++
		seen, _ := a.sync(t, mark)
		if !seen[p] {
			t.Fatalf("iteration %d: synced before %s was reported; reported %v", i, p, seen)
		}
	}
	// More than WatchBatch paths, and a new directory's file.
	for i := range WatchBatch + 500 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("many%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mkfile(t, filepath.Join(root, "new/deep/last"))
	mark++
	seen, _ := a.sync(t, mark)
	for i := range WatchBatch + 500 {
		if p := fmt.Sprintf("many%05d", i); !seen[p] {
			t.Fatalf("synced before %s was reported", p)
		}
	}
	if !seen["new/deep/last"] {
		t.Fatalf("synced before new/deep/last was reported")
	}
	// Nothing changed: the synced frame comes alone.
	mark++
	if seen, overflow := a.sync(t, mark); len(seen) > 0 || overflow {
		t.Errorf("sync with nothing changed reported %v, overflow %v", seen, overflow)
	}
}

// TestWatchSyncOverflow: an overflow pending (more than --max-pending
// paths) is sent before the synced frame.
func TestWatchSyncOverflow(t *testing.T) {
	root := t.TempDir()
	a := startWatch(t, "--max-pending=10", root, ".")
	a.ready(t)
	for i := range 50 {
		mkfile(t, filepath.Join(root, fmt.Sprintf("f%02d", i)))
	}
	if _, overflow := a.sync(t, 1); !overflow {
		t.Error("synced before the overflow of 50 paths over --max-pending=10")
	}
}

// TestWatchSyncBadFrame: a sync frame without an 8-byte non-zero mark
// ends the agent with code 1.
func TestWatchSyncBadFrame(t *testing.T) {
	for _, payload := range [][]byte{nil, {1, 2, 3}, make([]byte, 8)} {
		a := startWatch(t, t.TempDir(), ".")
		a.ready(t)
		WriteFrame(a.in, TypeWatchSync, payload)
		select {
		case <-a.exited:
		case <-time.After(watchWait):
			t.Fatalf("sync %x: the agent did not exit", payload)
		}
		waitExit(t, a, 1)
	}
}
