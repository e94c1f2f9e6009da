package e2e

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/kernel"
)

// hugeLine is the one line TestHugeOutput prints: 100 MB.
const hugeLine = 100_000_000

// heapWatch samples berth's heap (this process: the API and controller
// run in the test) until stop, with the collector kept close behind.
type heapWatch struct {
	base, peak uint64
	mu         sync.Mutex
	done       chan struct{}
	wg         sync.WaitGroup
}

func watchHeap(t *testing.T) *heapWatch {
	old := debug.SetGCPercent(20)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &heapWatch{base: ms.HeapInuse, peak: ms.HeapInuse, done: make(chan struct{})}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-tick.C:
			}
			runtime.ReadMemStats(&ms)
			h.mu.Lock()
			h.peak = max(h.peak, ms.HeapInuse)
			h.mu.Unlock()
		}
	}()
	return h
}

// stop returns the peak growth in bytes.
func (h *heapWatch) stop() uint64 {
	close(h.done)
	h.wg.Wait()
	return h.peak - h.base
}

// TestHugeOutput: a cell prints one 100 MB line in a --network none
// container of berth-test-python, through berth's HTTP API, once into
// ipykernel and once into berth's own Python kernel (a workspace venv
// without ipykernel). berth cuts the line while it arrives: its heap grows
// by at most 3 × kernel.MaxContent + 48 MiB, and the result keeps the
// line's ends and says how many bytes were dropped.
func TestHugeOutput(t *testing.T) {
	const image = "berth-test-python"
	needImage(t, image, false)
	ctr := startContainer(t, image)
	a := newAPI(t)
	for _, tc := range []struct {
		kind  string
		setup string
	}{
		{"ipykernel", ""},
		{"berth's Python kernel", "python3 -m venv --without-pip " + workspace + "/.venv"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			if tc.setup != "" {
				ctr.sh(t, tc.setup)
				defer ctr.sh(t, "rm -rf "+workspace+"/.venv")
			}
			run, _ := a.open(ctr.conv)
			defer a.do("DELETE", "/v1/runs/"+run, token, "")
			r := a.callTool(t, run, "eval", map[string]any{"code": "1", "description": "start the kernel before measuring memory"})
			if !strings.Contains(r.texts(), "1") || r.IsError {
				t.Fatalf("first cell: %s", r.texts())
			}
			if !strings.Contains(fmt.Sprint(a.callTool(t, run, "eval", map[string]any{"code": "", "description": "which kernel runs the cells here"}).texts()), tc.kind) {
				t.Fatalf("the cells do not run in %s", tc.kind)
			}
			h := watchHeap(t)
			r = a.callTool(t, run, "eval", map[string]any{
				"code":        fmt.Sprintf("print('<' + 'x' * %d + '>')", hugeLine-2),
				"description": "print one line of a hundred megabytes",
			})
			grew := h.stop()
			limit := uint64(3*kernel.MaxContent + 48<<20)
			t.Logf("%s: berth's heap grew by %d MiB (limit %d MiB)", tc.kind, grew>>20, limit>>20)
			if grew > limit {
				t.Errorf("berth's heap grew by %d bytes for one %d-byte line, want at most 3 × kernel.MaxContent + 48 MiB = %d", grew, hugeLine, limit)
			}
			text := r.texts()
			// eval keeps the first and last 10,000 bytes of the line (its
			// newline included): the rest, 99,980,001 bytes, is dropped.
			want := "[… 99,980,001 bytes of output dropped (kept the first 10,000 and last 10,000"
			if strings.Contains(text, "the kernel dropped") {
				// berth's own kernel drops output a slow reader leaves
				// queued past its bound (berth_output_dropped), as a loaded
				// machine may: the line's end may be among what it dropped,
				// and the result must say so.
				t.Logf("%s dropped output before berth read it (a loaded machine)", tc.kind)
				want = "bytes of output dropped (kept the first 10,000 and last 10,000; the kernel dropped"
				if r.IsError || !strings.HasPrefix(text, "<xxx") || !strings.Contains(text, want) {
					t.Errorf("result (%d bytes) %.100q … %.300q, want the line's start and %q", len(text), text, text[max(len(text)-300, 0):], want)
				}
				return
			}
			if r.IsError || !strings.HasPrefix(text, "<xxx") || !strings.HasSuffix(text, "xxx>") || !strings.Contains(text, want) {
				t.Errorf("result (%d bytes) %.100q … %.300q, want the line's ends and %q", len(text), text, text[max(len(text)-300, 0):], want)
			}
		})
	}
}
