package debug

import (
	"testing"

	"berth.dev/berth/dap"
)

// chunksOf lays texts out as consecutive chunks: each pair is a category
// and its text.
func chunksOf(pairs ...string) []dap.OutputChunk {
	var cs []dap.OutputChunk
	var off int64
	for i := 0; i+1 < len(pairs); i += 2 {
		cs = append(cs, dap.OutputChunk{Category: pairs[i], Text: pairs[i+1], Offset: off})
		off += int64(len(pairs[i+1]))
	}
	return cs
}

func TestRenderOutput(t *testing.T) {
	tests := []struct {
		name    string
		chunks  []dap.OutputChunk
		from    int64
		limit   int
		want    string
		wantEnd int64
	}{
		{"stdout alone is not marked", chunksOf("stdout", "sum 5\n", "stdout", "done 15\n"), 0, 1000, "sum 5\ndone 15\n", 14},
		{"categories are marked where they change",
			chunksOf("console", "starting\n", "stdout", "a\n", "stderr", "e\n", "stdout", "b\n"), 0, 1000,
			"[console] starting\n[stdout] a\n[stderr] e\n[stdout] b\n", 15},
		// The split CI saw: debugpy read stdout's "done" and " 15\n" apart
		// with stderr's line between.
		{"a line another category interrupted stays whole",
			chunksOf("stdout", "sum 5\ndone", "stderr", "err\n", "stdout", " 15\n"), 0, 1000,
			"sum 5\ndone 15\n[stderr] err\n", 18},
		{"a line joined from many chunks, other lines after it in order",
			chunksOf("stdout", "a", "stderr", "x\n", "stdout", "b", "stderr", "y\nz", "stdout", "c\nd\n"), 0, 1000,
			"abc\n[stderr] x\ny\nz\n[stdout] d\n", 11},
		{"a line not ended when the render is taken is shown as far as it got",
			chunksOf("stdout", "prompt> ", "stderr", "warn\n"), 0, 1000,
			"prompt> \n[stderr] warn\n", 13},
		{"both categories open at the end",
			chunksOf("stdout", "out", "stderr", "err"), 0, 1000,
			"out\n[stderr] err", 6},
		{"from skips what was shown, inside a chunk too",
			chunksOf("stdout", "sum 5\ndone", "stderr", "err\n", "stdout", " 15\n"), 8, 1000,
			"ne 15\n[stderr] err\n", 18},
		{"from at the end renders nothing", chunksOf("stdout", "a\n"), 2, 1000, "", 2},
		{"limit keeps the end",
			chunksOf("stdout", "0123456789\n", "stdout", "abc\n"), 0, 6,
			"[… 9 earlier bytes not shown]\n9\nabc\n", 15},
		{"limit never cuts a character apart",
			chunksOf("stdout", "ééé\n"), 0, 4,
			"[… 4 earlier bytes not shown]\né\n", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, end := renderOutput(tt.chunks, tt.from, tt.limit)
			if got != tt.want || end != tt.wantEnd {
				t.Errorf("renderOutput = %q, %d; want %q, %d", got, end, tt.want, tt.wantEnd)
			}
		})
	}
}
