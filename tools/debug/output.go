package debug

import (
	"context"
	"fmt"
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
