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
	var b strings.Builder
	end := from
	last := ""
	for _, c := range chunks {
		cend := c.Offset + int64(len(c.Text))
		if cend <= from {
			continue
		}
		t := c.Text
		if c.Offset < from {
			t = t[from-c.Offset:]
		}
		if c.Category != last && (c.Category != "stdout" || last != "") {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "[%s] ", c.Category)
		}
		last = c.Category
		b.WriteString(t)
		end = cend
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
