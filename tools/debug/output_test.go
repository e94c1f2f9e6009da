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

// TestTrimAdapterFrames: the end of a program's output keeps the
// program's own traceback frames and leaves out debugpy's, pydevd's and
// runpy's (as debugpy's launcher wrote them on this machine), and the Go
// runtime's and testing package's (as go test wrote them for a panicking
// test), saying how many.
func TestTrimAdapterFrames(t *testing.T) {
	py := `before
[stderr] Traceback (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
    return _run_code(code, main_globals, None,
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/runpy.py", line 88, in _run_code
    exec(code, run_globals)
  File "/usr/lib/python3/dist-packages/debugpy/launcher/../../debugpy/__main__.py", line 39, in <module>
    cli.main()
  File "/usr/lib/python3/dist-packages/debugpy/launcher/../../debugpy/../debugpy/server/cli.py", line 430, in main
    run()
  File "/usr/lib/python3/dist-packages/debugpy/launcher/../../debugpy/../debugpy/server/cli.py", line 317, in run_module
    run_module_as_main(options.target, alter_argv=True)
  File "/usr/lib/python3/dist-packages/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_runpy.py", line 233, in _run_module_as_main
    return _run_code(code, main_globals, None,
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3/dist-packages/debugpy/_vendored/pydevd/_pydevd_bundle/pydevd_runpy.py", line 123, in _run_code
    exec(code, run_globals)
  File "/tmp/w/app/report.py", line 25, in <module>
    fail(0)
  File "/tmp/w/app/report.py", line 19, in fail
    return 10 / d
           ~~~^~~
ZeroDivisionError: division by zero
`
	pyWant := `before
[stderr] Traceback (most recent call last):
  [… 7 frames of debugpy and Python's runpy left out]
  File "/tmp/w/app/report.py", line 25, in <module>
    fail(0)
  File "/tmp/w/app/report.py", line 19, in fail
    return 10 / d
           ~~~^~~
ZeroDivisionError: division by zero
`
	goTrace := `--- FAIL: TestP (0.00s)
panic: assignment to entry in nil map [recovered, repanicked]

goroutine 4 [running]:
testing.tRunner.func1.2({0x55a7a0, 0x6cae10})
	/usr/local/go/src/testing/testing.go:1974 +0x232
testing.tRunner.func1()
	/usr/local/go/src/testing/testing.go:1977 +0x349
panic({0x55a7a0?, 0x6cae10?})
	/usr/local/go/src/runtime/panic.go:860 +0x13a
p.TestP(0x263503b64248?)
	/tmp/debuggo-panic/p_test.go:7 +0x28
testing.tRunner(0x263503b64248, 0x592e08)
	/usr/local/go/src/testing/testing.go:2036 +0xea
created by testing.(*T).Run in goroutine 1
	/usr/local/go/src/testing/testing.go:2101 +0x4c5
`
	goWant := `--- FAIL: TestP (0.00s)
panic: assignment to entry in nil map [recovered, repanicked]

goroutine 4 [running]:
[… 3 frames of the Go runtime and testing package left out]
p.TestP(0x263503b64248?)
	/tmp/debuggo-panic/p_test.go:7 +0x28
[… 2 frames of the Go runtime and testing package left out]
`
	for _, tt := range []struct{ in, want string }{{py, pyWant}, {goTrace, goWant}, {"plain\noutput", "plain\noutput"}} {
		if got := trimAdapterFrames(tt.in); got != tt.want {
			t.Errorf("trimAdapterFrames:\n%s\nwant:\n%s", got, tt.want)
		}
	}
}
