package lsp

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

// target is a resolved line+symbol position in a workspace file.
type target struct {
	name     string // workspace name
	line     int    // 1-based
	lineText string
	byteCol  int    // 0-based byte offset of ident in lineText
	symbol   string // the symbol as given, without "#N"
	ident    string // the whole identifier at byteCol that symbol resolved to
	// partial lists, when symbol is no whole identifier on the line, the
	// identifiers it is part of, in line order; ident is one of them.
	partial []span
	note    string // what the model should know (first of several occurrences)
}

// span is an identifier on a line: its text and 0-based byte offset.
type span struct {
	ident string
	col   int
}

// cols is a span's 1-based byte column range, end exclusive ("29-35").
func (sp span) cols() string { return fmt.Sprintf("%d-%d", sp.col+1, sp.col+len(sp.ident)+1) }

// at is where the target resolved: "main.go:11:15-20".
func (t target) at() string {
	return fmt.Sprintf("%s:%d:%s", t.name, t.line, span{t.ident, t.byteCol}.cols())
}

// head starts a result about the target: what the action answers, of the
// identifier it resolved, and where that is.
func (t target) head(what string) string {
	return fmt.Sprintf("%s of %q (resolved at %s)", what, t.ident, t.at())
}

// resolved is the target as structuredContent reports it.
func (t target) resolved() map[string]any {
	return map[string]any{"symbol": t.ident, "file": t.name, "line": t.line, "column": t.byteCol + 1, "end_column": t.byteCol + len(t.ident) + 1, "partial": len(t.partial) > 0}
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
	dollar := dollarIdents[path.Ext(name)]
	sym, nth := in.Symbol, 1
	idxs, partial := findSymbol(lineText, sym, dollar)
	if m := occurrence.FindStringSubmatch(in.Symbol); m != nil && len(idxs) == 0 {
		sym = m[1]
		nth, _ = strconv.Atoi(m[2])
		idxs, partial = findSymbol(lineText, sym, dollar)
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
	what := "occurs"
	if partial {
		what = "occurs only inside identifiers"
	}
	var spans []span
	for _, at := range idxs {
		// An identifier holding sym twice is one place to point at.
		if sp := identAt(lineText, at, len(sym), dollar); len(spans) == 0 || spans[len(spans)-1] != sp {
			spans = append(spans, sp)
		}
	}
	if nth > len(spans) {
		return target{}, tools.Fail("symbol %q %s %d times on line %d of %s, not %d: %s", sym, what, len(spans), in.Line, name, nth, quoteLine(lineText))
	}
	t.byteCol, t.ident = spans[nth-1].col, spans[nth-1].ident
	if partial {
		t.partial = spans
		t.note = fmt.Sprintf("note: %q is no whole identifier on line %d; resolved %q (column %s), which contains it", sym, in.Line, t.ident, spans[nth-1].cols())
		if len(spans) > 1 {
			t.note += fmt.Sprintf("; it is also part of %s. Pass the whole identifier as symbol", listSpans(spans, nth-1))
		}
		return t, nil
	}
	if len(spans) > 1 {
		which := "the first"
		if nth > 1 {
			which = "occurrence " + strconv.Itoa(nth)
		}
		pick := fmt.Sprintf("\"%s#2\"", sym)
		if len(spans) > 2 {
			pick += fmt.Sprintf(" … \"%s#%d\"", sym, len(spans))
		}
		t.note = fmt.Sprintf("note: %q occurs %d times on line %d; used %s (column %d). Pass %s to pick another.",
			sym, len(spans), in.Line, which, t.byteCol+1, pick)
	}
	return t, nil
}

// dollarIdents are the extensions of languages whose identifiers may hold
// "$" (JavaScript, TypeScript, Dart).
var dollarIdents = map[string]bool{".js": true, ".jsx": true, ".mjs": true, ".cjs": true, ".ts": true, ".tsx": true, ".mts": true, ".cts": true, ".dart": true}

// isIdent reports whether r can be part of an identifier: a letter, a
// digit, "_", and "$" where dollar says so.
func isIdent(r rune, dollar bool) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || (dollar && r == '$')
}

// findSymbol returns the byte offsets where sym stands on line as a whole
// identifier (not preceded or followed by an identifier character where
// sym itself starts or ends with one). When there are none, it returns the
// offsets where sym occurs at all, and partial.
func findSymbol(line, sym string, dollar bool) (idxs []int, partial bool) {
	all := allIndex(line, sym)
	if len(all) == 0 {
		return nil, false
	}
	first, _ := utf8.DecodeRuneInString(sym)
	last, _ := utf8.DecodeLastRuneInString(sym)
	for _, i := range all {
		before, _ := utf8.DecodeLastRuneInString(line[:i])
		after, _ := utf8.DecodeRuneInString(line[i+len(sym):])
		if isIdent(first, dollar) && i > 0 && isIdent(before, dollar) {
			continue
		}
		if isIdent(last, dollar) && i+len(sym) < len(line) && isIdent(after, dollar) {
			continue
		}
		idxs = append(idxs, i)
	}
	if len(idxs) == 0 {
		return all, true
	}
	return idxs, false
}

// identAt returns the identifier that a match of n bytes at byte offset i
// of line resolves to: the whole identifier around the match's first
// identifier character. A match without one stands for itself.
func identAt(line string, i, n int, dollar bool) span {
	j := i
	for j < i+n {
		r, size := utf8.DecodeRuneInString(line[j:])
		if isIdent(r, dollar) {
			break
		}
		j += size
	}
	if j == i+n {
		return span{line[i : i+n], i}
	}
	start, end := j, j
	for start > 0 {
		r, size := utf8.DecodeLastRuneInString(line[:start])
		if !isIdent(r, dollar) {
			break
		}
		start -= size
	}
	for end < len(line) {
		r, size := utf8.DecodeRuneInString(line[end:])
		if !isIdent(r, dollar) {
			break
		}
		end += size
	}
	return span{line[start:end], start}
}

// listSpans names identifiers of a line with their columns, leaving out
// the one at skip (-1: none).
func listSpans(spans []span, skip int) string {
	var parts []string
	for i, sp := range spans {
		if i != skip {
			parts = append(parts, fmt.Sprintf("%q (column %s)", sp.ident, sp.cols()))
		}
	}
	return strings.Join(parts, ", ")
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

func quoteLine(l string) string { return "`" + clipLine(l) + "`" }

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
