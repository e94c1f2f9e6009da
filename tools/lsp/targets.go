package lsp

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

// target is a resolved line+symbol position in a workspace file.
type target struct {
	name     string // workspace name
	line     int    // 1-based
	lineText string
	byteCol  int // 0-based byte offset of the symbol in lineText
	symbol   string
	note     string // what the model should know (first of several occurrences)
}

// aim resolves file, line and symbol (LSP-2) and readies the file's
// server; the caller calls the query's release.
func (s *Supervisor) aim(ctx context.Context, in Input) (target, *query, error) {
	t, err := s.target(ctx, in)
	if err != nil {
		return target{}, nil, err
	}
	q, err := s.query(ctx, t.name)
	return t, q, err
}

var occurrence = regexp.MustCompile(`^(.+)#([1-9][0-9]*)$`)

// target resolves file, line and symbol (LSP-2) against the file on disk.
func (s *Supervisor) target(ctx context.Context, in Input) (target, error) {
	if in.File == "" {
		return target{}, tools.Fail("file is required for %s: the file (relative to the workspace), with line and symbol", in.Action)
	}
	name, err := wspath.Name(s.root, in.File)
	if err != nil {
		return target{}, err
	}
	data, err := s.ws.ReadFile(ctx, name)
	if err != nil {
		return target{}, wspath.Explain(s.root, name, err)
	}
	lines := strings.Split(string(data), "\n")
	if in.Line < 1 {
		return target{}, tools.Fail("line is required for %s: the 1-based line of %s where the symbol is (it has %d lines)", in.Action, name, len(lines))
	}
	if in.Line > len(lines) {
		return target{}, tools.Fail("line %d is past the end of %s, which has %d lines", in.Line, name, len(lines))
	}
	lineText := strings.TrimSuffix(lines[in.Line-1], "\r")
	if in.Symbol == "" {
		return target{}, tools.Fail("symbol is required for %s: give the symbol's text as it appears on line %d of %s, which is: %s", in.Action, in.Line, name, quoteLine(lineText))
	}
	sym, nth := in.Symbol, 1
	idxs := allIndex(lineText, sym)
	if m := occurrence.FindStringSubmatch(in.Symbol); m != nil && len(idxs) == 0 {
		sym = m[1]
		nth, _ = strconv.Atoi(m[2])
		idxs = allIndex(lineText, sym)
	}
	t := target{name: name, line: in.Line, lineText: lineText, symbol: sym}
	if len(idxs) == 0 {
		msg := fmt.Sprintf("symbol %q is not on line %d of %s, which is: %s", sym, in.Line, name, quoteLine(lineText))
		var near []string
		for d := 1; d <= nearbyLines && len(near) < 3; d++ {
			for _, l := range []int{in.Line - d, in.Line + d} {
				if l >= 1 && l <= len(lines) && strings.Contains(lines[l-1], sym) {
					near = append(near, strconv.Itoa(l))
				}
			}
		}
		if len(near) > 0 {
			msg += fmt.Sprintf(". It is on line %s nearby", strings.Join(near, ", "))
		}
		return target{}, tools.Fail("%s", msg)
	}
	if nth > len(idxs) {
		return target{}, tools.Fail("symbol %q occurs %d times on line %d of %s, not %d: %s", sym, len(idxs), in.Line, name, nth, quoteLine(lineText))
	}
	t.byteCol = idxs[nth-1]
	if len(idxs) > 1 {
		which := "the first"
		if nth > 1 {
			which = "occurrence " + strconv.Itoa(nth)
		}
		t.note = fmt.Sprintf("note: %q occurs %d times on line %d; used %s (column %d). Pass \"%s#2\" … \"%s#%d\" to pick another.",
			sym, len(idxs), in.Line, which, t.byteCol+1, sym, sym, len(idxs))
	}
	return t, nil
}

func allIndex(s, sub string) []int {
	var out []int
	for i := 0; i+len(sub) <= len(s); {
		j := strings.Index(s[i:], sub)
		if j < 0 {
			break
		}
		out = append(out, i+j)
		i += j + len(sub)
	}
	return out
}

func quoteLine(l string) string {
	l = strings.TrimSpace(l)
	if len(l) > MaxLineChars {
		l = l[:MaxLineChars] + "…"
	}
	return "`" + l + "`"
}

// position syncs the target's file into the server and returns the LSP
// position of the symbol in the text the server now has.
func (q *query) position(ctx context.Context, t target) (lspc.Position, error) {
	text, _, err := q.in.open(ctx, q.c, t.name)
	if err != nil {
		return lspc.Position{}, wspath.Explain(q.in.s.root, t.name, err)
	}
	lines := strings.Split(text, "\n")
	if t.line > len(lines) || strings.TrimSuffix(lines[t.line-1], "\r") != t.lineText {
		return lspc.Position{}, tools.Fail("%s changed while the request was prepared; call again", t.name)
	}
	return lspc.Position{Line: uint32(t.line - 1), Character: lspc.Character(t.lineText, t.byteCol, q.c.PositionEncoding())}, nil
}
