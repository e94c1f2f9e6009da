package debug

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"berth.dev/berth/dap"
)

// outputText renders the output from offset from on, keeping at most
// limit bytes at the end.
func outputText(ds *dap.Session, from int64, limit int) string {
	text, _ := outputFrom(ds, from, limit)
	return text
}

// outputFrom is outputText that also returns the offset reached.
func outputFrom(ds *dap.Session, from int64, limit int) (string, int64) {
	chunks, _ := ds.Output()
	return renderOutput(chunks, from, limit)
}

// outputPiece is a run of one category's output: whole lines, or the
// beginning of a line not ended yet. The line's later parts are appended,
// not concatenated, so a program that writes a long line in many small
// pieces (a progress bar redrawn with \r) costs linear time to render.
type outputPiece struct {
	category string
	parts    []string
}

// renderOutput renders chunks from offset from on, keeping at most limit
// bytes at the end, and returns the offset reached. A category other than
// the program's stdout is marked where it begins ("[stderr] "), and stdout
// again after it. A line stays whole: when a category's line had begun and
// another category's output came before its end — an adapter reads a
// program's stdout and stderr on threads of their own, so print("done", z)
// can reach it as "done" and " 15\n" with stderr's "err\n" between — the
// rest of the line joins its beginning, and the other category's output
// follows the line. Lines are in the order they began.
func renderOutput(chunks []dap.OutputChunk, from int64, limit int) (string, int64) {
	var pieces []outputPiece
	open := map[string]int{} // category → index of its open piece
	end := from
	for _, c := range chunks {
		cend := c.Offset + int64(len(c.Text))
		if cend <= from {
			continue
		}
		t := c.Text
		if c.Offset < from {
			t = t[from-c.Offset:]
		}
		end = cend
		if i, ok := open[c.Category]; ok {
			nl := strings.IndexByte(t, '\n')
			if nl < 0 {
				pieces[i].parts = append(pieces[i].parts, t)
				continue
			}
			pieces[i].parts = append(pieces[i].parts, t[:nl+1])
			delete(open, c.Category)
			t = t[nl+1:]
		}
		if k := strings.LastIndexByte(t, '\n'); k >= 0 {
			pieces = append(pieces, outputPiece{category: c.Category, parts: []string{t[:k+1]}})
			t = t[k+1:]
		}
		if t != "" {
			open[c.Category] = len(pieces)
			pieces = append(pieces, outputPiece{category: c.Category, parts: []string{t}})
		}
	}
	var b strings.Builder
	last := ""
	for _, p := range pieces {
		if p.category != last && (p.category != "stdout" || last != "") {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "[%s] ", p.category)
		}
		last = p.category
		for _, part := range p.parts {
			b.WriteString(part)
		}
	}
	s := b.String()
	if len(s) > limit {
		cut := len(s) - limit
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		s = fmt.Sprintf("[… %d earlier bytes not shown]\n%s", cut, s[cut:])
	}
	return s, end
}

// pendingOutput counts the bytes of output the model has not been shown.
func pendingOutput(ss *session) int {
	ss.mu.Lock()
	from := ss.outShown
	ss.mu.Unlock()
	chunks, _ := ss.ds.Output()
	n := 0
	for _, c := range chunks {
		if end := c.Offset + int64(len(c.Text)); end > from {
			n += int(end - max(from, c.Offset))
		}
	}
	return n
}

// takeOutput returns the output not shown yet (at most limit bytes, the
// last) and marks it shown.
func (s *Supervisor) takeOutput(ss *session, limit int) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	text, end := outputFrom(ss.ds, ss.outShown, limit)
	ss.outShown = end
	return text
}

// output shows the program's output since the last call.
func (s *Supervisor) output(_ context.Context, _ Input, ss *session) (reply, error) {
	text := s.takeOutput(ss, MaxOutputChars)
	if text == "" {
		return reply{text: "no new output.", data: map[string]any{"output": ""}}, nil
	}
	return reply{text: text, data: map[string]any{"output": text}}, nil
}

// pyFrame is a frame line of a Python traceback: `  File "PATH", line N,
// in F`, maybe after the category mark renderOutput writes.
var pyFrame = regexp.MustCompile(`^(?:\[\w+\] )?( +)File "([^"]+)", line \d+, in `)

// goFrame is the file line of a frame of a Go goroutine trace: a tab, the
// file and line, and the pc offset.
var goFrame = regexp.MustCompile(`^\t(/.+\.go):\d+(?: \+0x[0-9a-f]+)?$`)

// adapterFile reports whether a Python frame's file is the debugger's
// (debugpy, its vendored pydevd) or the interpreter's own launcher
// (runpy), through which debugpy runs every program.
func adapterFile(p string) bool {
	return strings.Contains(p, "/debugpy/") || strings.Contains(p, "/pydevd/") || strings.Contains(p, "/_pydevd_bundle/") ||
		strings.HasSuffix(p, "/runpy.py")
}

// trimAdapterFrames drops from a program's output the traceback frames
// that are not the program's: a Python traceback's frames of debugpy,
// pydevd and runpy (the six or more above every uncaught exception of a
// program debugpy runs), and a Go goroutine trace's frames in the Go
// runtime and the testing package (panic, tRunner). Each run of dropped frames leaves one line
// saying how many went. The program's own frames, and every other line,
// stay as they were.
func trimAdapterFrames(text string) string {
	lines := strings.SplitAfter(text, "\n")
	var b strings.Builder
	dropped, indent, what := 0, "", ""
	flush := func() {
		if dropped > 0 {
			fmt.Fprintf(&b, "%s[… %d frames of %s left out]\n", indent, dropped, what)
			dropped = 0
		}
	}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], "\r\n")
		if m := pyFrame.FindStringSubmatch(line); m != nil && adapterFile(m[2]) {
			if dropped > 0 && what != "debugpy and Python's runpy" {
				flush()
			}
			if dropped == 0 {
				indent, what = m[1], "debugpy and Python's runpy"
				if mark, _, ok := strings.Cut(line, m[1]+"File"); ok && mark != "" {
					b.WriteString(mark) // the category mark stays
				}
			}
			dropped++
			// The frame's source and caret lines are indented deeper.
			for i+1 < len(lines) && strings.HasPrefix(lines[i+1], m[1]+" ") && !pyFrame.MatchString(strings.TrimRight(lines[i+1], "\r\n")) {
				i++
			}
			continue
		}
		if i+1 < len(lines) && goRuntimeFrame(line, strings.TrimRight(lines[i+1], "\r\n")) {
			if dropped > 0 && what != "the Go runtime and testing package" {
				flush()
			}
			indent, what = "", "the Go runtime and testing package"
			dropped++
			i++
			continue
		}
		flush()
		b.WriteString(lines[i])
	}
	flush()
	return b.String()
}

// goRuntimeFrame reports whether fn and file are the two lines of a Go
// trace's frame in the runtime or the testing package (which runs a
// test and re-panics its panic): runtime.gopanic(…), panic(…),
// testing.tRunner(…), created by testing.(*T).Run, with its file under
// GOROOT's src/runtime or src/testing.
func goRuntimeFrame(fn, file string) bool {
	m := goFrame.FindStringSubmatch(file)
	if m == nil {
		return false
	}
	fn = strings.TrimPrefix(fn, "created by ")
	switch {
	case strings.Contains(m[1], "/src/runtime/"):
		return strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "panic(")
	case strings.Contains(m[1], "/src/testing/"):
		return strings.HasPrefix(fn, "testing.")
	}
	return false
}

// endOutput is the end of a program's output as its ending shows it: the
// last endOutputChars, with the debugger's and the runtime's own
// traceback frames left out (trimAdapterFrames).
func endOutput(ds *dap.Session) string {
	text := trimAdapterFrames(outputText(ds, 0, 4*endOutputChars))
	if len(text) <= endOutputChars {
		return text
	}
	cut := len(text) - endOutputChars
	for cut < len(text) && !utf8.RuneStart(text[cut]) {
		cut++
	}
	return fmt.Sprintf("[… earlier output not shown]\n%s", text[cut:])
}
