package eval

import (
	"strings"
	"testing"

	"berth.dev/berth/kernel"
)

// TestOutputSaysWhatWasDropped: the result of a cell tells how much output
// berth cut and how much the kernel dropped before it arrived, and never
// says "(no output)" when output was produced.
func TestOutputSaysWhatWasDropped(t *testing.T) {
	tests := []struct {
		name   string
		text   string // what arrived
		lost   int64  // what the kernel reported dropped
		shrunk int64  // what the kernel client cut while receiving (Event.Dropped)
		want   []string
		noWant []string
	}{
		{"nothing arrived, all dropped by the kernel", "", 70_000_000, 0,
			[]string{"[… 70,000,000 bytes of output dropped (kept none of it; the kernel dropped 70,000,000 of them, written faster than berth could read)"}, []string{"(no output)"}},
		{"some arrived", "hello\n", 12_345, 0,
			[]string{"hello\n[… 12,345 bytes of output dropped (kept the first 6 and last 0; the kernel dropped 12,345 of them"}, nil},
		{"cut by berth only", strings.Repeat("a", MaxOutputChars/2) + strings.Repeat("b", 12_345) + strings.Repeat("c", MaxOutputChars/2), 0, 0,
			[]string{"[… 12,345 bytes of output dropped (kept the first 10,000 and last 10,000): print less"}, []string{"bbbb", "kernel dropped"}},
		{"cut by berth and dropped by the kernel", strings.Repeat("a", MaxOutputChars+5), 100, 0,
			[]string{"[… 105 bytes of output dropped (kept the first 10,000 and last 10,000; the kernel dropped 100 of them"}, nil},
		{"nothing at all", "", 0, 0, []string{"(no output)"}, []string{"dropped"}},
		{"cut while received, then by berth", strings.Repeat("a", 70_000) + strings.Repeat("c", 70_000), 0, 99_860_000,
			[]string{"[… 99,980,000 bytes of output dropped (kept the first 10,000 and last 10,000): print less"}, []string{"kernel dropped"}},
		{"cut while received, short text kept", "short", 0, 1_000,
			[]string{"short\n[… 1,000 bytes of output dropped (kept the first 5 and last 0)"}, nil},
	}
	for _, tt := range tests {
		o := &output{}
		if tt.text != "" {
			o.event(kernel.Event{Type: kernel.EventStream, Name: "stdout", Text: tt.text, Dropped: tt.shrunk})
		}
		got := o.result(&kernel.ExecuteReply{Status: "ok", OutputDropped: tt.lost}).AllText()
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: result lacks %q:\n%.400s", tt.name, w, got)
			}
		}
		for _, w := range tt.noWant {
			if strings.Contains(got, w) {
				t.Errorf("%s: result has %q:\n%.400s", tt.name, w, got)
			}
		}
	}
}
