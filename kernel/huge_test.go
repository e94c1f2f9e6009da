package kernel

import (
	"context"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// hugeLine is the size of the one line the huge-output tests print.
const hugeLine = 100_000_000

// tightGC keeps the collector close behind the heap for the rest of the
// test, so that peak heap measures what is live rather than garbage the
// collector has not reached yet.
func tightGC(t *testing.T) {
	old := debug.SetGCPercent(20)
	t.Cleanup(func() { debug.SetGCPercent(old) })
}

// heapPeak samples the heap in use until stop is called and returns the
// peak growth over the heap when it started (after a collection).
type heapPeak struct {
	base uint64
	mu   sync.Mutex
	peak uint64
	done chan struct{}
	wg   sync.WaitGroup
}

func watchHeap() *heapPeak {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &heapPeak{base: ms.HeapInuse, peak: ms.HeapInuse, done: make(chan struct{})}
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
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			h.mu.Lock()
			h.peak = max(h.peak, ms.HeapInuse)
			h.mu.Unlock()
		}
	}()
	return h
}

// stop ends the sampling and returns the peak growth in bytes.
func (h *heapPeak) stop() uint64 {
	close(h.done)
	h.wg.Wait()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peak = max(h.peak, ms.HeapInuse)
	return h.peak - h.base
}

// TestHugeOutputIsCutWhileReceived: a real ipykernel prints one 100 MB
// line. The client cuts it while it streams in, so the heap grows by at
// most the bound documented at MaxContent, and the event says how much was
// dropped.
func TestHugeOutputIsCutWhileReceived(t *testing.T) {
	k := startKernel(t)
	c := connect(t, k, &countingDialer{})
	tightGC(t)
	h := watchHeap()
	var (
		kept    strings.Builder
		events  int
		dropped int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r, err := c.Execute(ctx, "print('<' + 'x' * "+strconv.Itoa(hugeLine-2)+" + '>')", ExecuteOptions{
		OnEvent: func(e Event) {
			events++
			dropped += e.Dropped
			// Keep only the ends, as tools/eval does.
			if kept.Len() < 100 {
				kept.WriteString(e.Text[:min(len(e.Text), 100)])
			}
			if n := len(e.Text); n > 0 && e.Text[n-1] == '\n' {
				kept.WriteString(e.Text[max(n-100, 0):])
			}
		},
	})
	grew := h.stop()
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "ok" {
		t.Fatalf("reply %+v", r)
	}
	limit := uint64(3*MaxContent + 32<<20)
	t.Logf("heap grew by %d MiB (limit %d MiB) over %d events; %d bytes dropped", grew>>20, limit>>20, events, dropped)
	if grew > limit {
		t.Errorf("heap grew by %d bytes receiving one %d-byte line, want at most 3×MaxContent + 32 MiB = %d", grew, hugeLine, limit)
	}
	if s := kept.String(); !strings.HasPrefix(s, "<xxx") || !strings.HasSuffix(s, "xx>\n") {
		t.Errorf("the line's ends were not kept: %.40q … %.40q", s, s[max(len(s)-40, 0):])
	}
	if dropped <= 0 || dropped > hugeLine {
		t.Errorf("events report %d bytes dropped, want between 1 and %d", dropped, hugeLine)
	}
}
