package syntax

// Partial parsing: a pattern whose every match lies inside one top-level
// declaration (a function, a type, a class, a statement at the top of a
// module) needs only the declarations that contain all of its required
// tokens parsed. A cheap scan of the source splits it into declarations
// (splitGo, splitPython), and tree-sitter parses just the chosen ones as
// included ranges, so every node keeps its offsets in the file. Anything
// the scan cannot vouch for falls back to parsing the whole file: a
// language without a splitter, a pattern that may match across
// declarations, a file the scanner cannot read (unbalanced brackets, an
// unterminated string or comment), a split that leaves most of the file to
// parse anyway, and a partial tree with an error or missing node.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
)

// ParseMode says how ParseFor parsed a file.
type ParseMode uint8

const (
	// ParsedWhole: the whole file was parsed.
	ParsedWhole ParseMode = iota
	// ParsedPartial: only the declarations holding the pattern's tokens.
	ParsedPartial
	// ParsedNone: no declaration holds them all, so nothing was parsed
	// and there is no match.
	ParsedNone
	// ParsedFallback: a partial parse had an error node, so the whole
	// file was parsed again.
	ParsedFallback
)

func (m ParseMode) String() string {
	switch m {
	case ParsedPartial:
		return "partial"
	case ParsedNone:
		return "none"
	case ParsedFallback:
		return "fallback"
	}
	return "whole"
}

// partialMaxShare is the share of a file (in 1/100) above which the chosen
// declarations are parsed as the whole file instead: the split saves little
// then, and a whole parse needs no error check.
const partialMaxShare = 75

// gapWorth weighs a gap between two included ranges against the jump over
// it. tree-sitter's lexer finds the range of a position by a scan from the
// first range (ts_lexer_goto, which runs after most tokens), so every range
// before a token costs it a step: Go's tree split at every statement spent
// 16 % of a `$X.$Y($$$)` search there. A gap is parsed instead when
// gapWorth times its length is below the bytes parsed after it (chosen on
// Go's tree and Python's library: 500 to 2,000 are as good, 100 parses too
// much, none jumps too often).
const gapWorth = 1000

// joinGaps parses across the gaps worth less than the jump (see gapWorth)
// and returns ranges with total grown by the bytes of the gaps joined. A gap
// is whole chunks, so parsing it is sound.
func joinGaps(ranges []parseRange, total int) ([]parseRange, int) {
	parsed := 0
	for _, r := range ranges {
		parsed += int(r.endByte - r.startByte)
	}
	before := 0
	out := ranges[:0]
	for _, r := range ranges {
		n := len(out)
		if n > 0 {
			if gap := int(r.startByte - out[n-1].endByte); gap*gapWorth < parsed-before {
				total += gap
				out[n-1].endByte = r.endByte
				before += int(r.endByte - r.startByte)
				continue
			}
		}
		before += int(r.endByte - r.startByte)
		out = append(out, r)
	}
	return out, total
}

// chunk is a run of whole declarations, or statements of a split one, of a
// source: bytes [start, end), starting at the beginning of line row.
type chunk struct {
	start, end, row uint32
	// level is 0 for a top-level declaration, one more for each split
	// header above (a Python class's method's statements are at 2). body
	// marks a header whose body statements follow one level deeper (a
	// Python class or function, a Go function, if or for statement); plan
	// parses the header with the ones it chooses. tail marks a Go closing
	// line (a closing brace, an "} else {" between branches): parsed
	// whenever its header is.
	level uint8
	// inner marks the header of a split statement (not a class or
	// function).
	body, tail, inner bool
}

// pyMaxLevel is the deepest level splitPython splits to: the statements of
// a method of a top-level class.
const pyMaxLevel = 2

// splitter splits a source into chunks, or reports false when it cannot
// tell where its top-level declarations begin.
type splitter func(src []byte, buf []chunk) ([]chunk, bool)

// splitters are the languages with a declaration scanner, by id, and the
// kind of their tree's root (a pattern of that kind spans declarations).
// containers are the kinds of a node that spans a class or function header
// and its body statements: a pattern of one of these kinds takes a split
// class or function whole; inner are those that span a split statement's
// header, body statements and closing lines (a Go if or for statement),
// which a pattern of one of them takes whole.
var splitters = map[string]struct {
	split             splitter
	root              string
	containers, inner []string
}{
	"go": {splitGo, "source_file",
		[]string{"function_declaration", "method_declaration", "block", "statement_list"},
		[]string{"if_statement", "for_statement", "block", "statement_list"}},
	"python": {splitPython, "module", []string{"class_definition", "function_definition", "decorated_definition", "block"}, nil},
}

// PartialTokens returns the texts that every match of p contains and that
// let a file be parsed declaration by declaration: the pattern's literals
// (see Literals) and its operator tokens. It returns nil when p cannot be
// matched on a partial parse: its language has no declaration scanner, it
// is a sequence of nodes or a bare metavariable, its root is the tree's
// root kind, or it has no such token.
func (p *Pattern) PartialTokens() []string {
	return p.partial
}

// setPartial computes PartialTokens (after setLiterals).
func (p *Pattern) setPartial() {
	sp, ok := splitters[p.lang.ID]
	if !ok || p.seq || p.root == nil || p.root.meta != metaNone || p.root.kind == errorKind {
		return
	}
	if p.lang.kindName(p.root.kind) == sp.root {
		return
	}
	p.container = slices.Contains(sp.containers, p.lang.kindName(p.root.kind))
	p.innerContainer = slices.Contains(sp.inner, p.lang.kindName(p.root.kind))
	toks := slices.Clone(p.lits)
	add := func(n *pnode) {
		if n.named || n.kind == errorKind || !isOperator(n.text) || p.lang.kindName(n.kind) != n.text {
			return
		}
		if !slices.Contains(toks, n.text) {
			toks = append(toks, n.text)
		}
	}
	// The same leaves as setLiterals: a token right after a $$$ may be
	// skipped by the matcher, so it is not required.
	eachRequiredLeaf(p.root, func(n *pnode, _ bool) { add(n) })
	if len(toks) == 0 {
		return
	}
	slices.SortStableFunc(toks, func(a, b string) int { return len(b) - len(a) })
	p.partial = toks
}

// isOperator reports whether s is an operator or bracket token whose text
// is its kind's name (so a node of that kind is spelled s in the source):
// punctuation only, not the statement terminators a grammar may spell as a
// newline.
func isOperator(s string) bool {
	if s == "" || s == ";" || len(s) > 4 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune("!%&*+-./:<=>?^|~()[]{},@", rune(s[i])) {
			return false
		}
	}
	return true
}

// ParseFor parses src for matching pat: only the top-level declarations
// that contain all of pat's PartialTokens when the language and the file
// allow it (see the package's partial-parsing notes in partial.go), else
// the whole file. The mode says which; with ParsedNone the tree is nil and
// src holds no match of pat. Matches in a partial tree are those of the
// whole file's tree: same nodes, offsets, captures and enclosing symbols.
// Like Parse, the tree is valid until p parses again.
func (p *Parser) ParseFor(ctx context.Context, pat *Pattern, src []byte) (*Tree, ParseMode, error) {
	lang := pat.lang
	ranges, mode := p.plan(pat, src)
	switch mode {
	case ParsedNone:
		return nil, ParsedNone, nil
	case ParsedWhole:
		t, err := p.Parse(ctx, lang, src)
		return t, ParsedWhole, err
	}
	t, err := p.parse(ctx, lang, src, ranges)
	if err != nil {
		return nil, mode, err
	}
	if t.t.hasError() {
		t, err = p.Parse(ctx, lang, src)
		return t, ParsedFallback, err
	}
	return t, ParsedPartial, nil
}

// plan chooses the ranges of src to parse for pat.
func (p *Parser) plan(pat *Pattern, src []byte) ([]parseRange, ParseMode) {
	toks := pat.partial
	if len(toks) == 0 || len(src) > MaxSourceBytes {
		return nil, ParsedWhole
	}
	chunks, ok := splitters[pat.lang.ID].split(src, p.chunks[:0])
	p.chunks = chunks[:0]
	if !ok || len(chunks) < 2 {
		return nil, ParsedWhole
	}
	ranges := p.ranges[:0]
	total := 0
	add := func(c chunk) {
		total += int(c.end - c.start)
		if n := len(ranges); n > 0 && ranges[n-1].endByte == c.start {
			ranges[n-1].endByte = c.end
			return
		}
		ranges = append(ranges, parseRange{startRow: c.row, startByte: c.start, endByte: c.end})
	}
	holds := func(start, end uint32) bool { return containsAllStr(src[start:end], toks) }
	// below is the index after chunk k and the chunks below it.
	below := func(k int) int {
		j := k + 1
		for j < len(chunks) && chunks[j].level > chunks[k].level {
			j++
		}
		return j
	}
	// pick adds what to parse of chunk k and the chunks below it (up to j).
	var pick func(k, j int)
	pick = func(k, j int) {
		c := chunks[k]
		end := chunks[j-1].end
		switch {
		case !holds(c.start, end):
			return
		case !c.body || pat.container || (c.inner && pat.innerContainer):
			add(chunk{start: c.start, end: end, row: c.row})
			return
		}
		// A split class, function or statement: its header, those of its
		// body's statements that hold the tokens (split again below), and
		// a Go statement's closing lines (tails: its closing brace, an
		// else between branches). A Python body's shortest statement is
		// parsed when none holds them (the header did): a Python body
		// cannot be empty, a Go one can. Where neither the header nor any
		// statement holds all the tokens, no match can lie in it.
		wanted := holds(c.start, c.end)
		for i := k + 1; i < j && !wanted; {
			next := below(i)
			wanted = holds(chunks[i].start, chunks[next-1].end)
			i = next
		}
		if !wanted {
			return
		}
		add(c)
		picked, tails, shortest, shortestEnd := false, false, -1, uint32(0)
		for i := k + 1; i < j; {
			b, next := chunks[i], below(i)
			bEnd := chunks[next-1].end
			switch {
			case b.tail:
				add(b)
				tails = true
			case holds(b.start, bEnd):
				pick(i, next)
				picked = true
			case shortest < 0 || bEnd-b.start < shortestEnd-chunks[shortest].start:
				shortest, shortestEnd = i, bEnd
			}
			i = next
		}
		if !picked && !tails && shortest >= 0 {
			s := chunks[shortest]
			add(chunk{start: s.start, end: shortestEnd, row: s.row})
		}
	}
	for k := 0; k < len(chunks); {
		j := below(k)
		pick(k, j)
		k = j
	}
	ranges, total = joinGaps(ranges, total)
	p.ranges = ranges[:0]
	switch {
	case len(ranges) == 0:
		return nil, ParsedNone
	case total*100 > len(src)*partialMaxShare:
		return nil, ParsedWhole
	}
	for i := range ranges {
		ranges[i].endRow, ranges[i].endCol = endPoint(src, chunks, ranges[i].endByte)
	}
	return ranges, ParsedPartial
}

// endPoint returns the row and column of off, the end of a chunk: the start
// of the next chunk (column 0), or the end of src.
func endPoint(src []byte, chunks []chunk, off uint32) (row, col uint32) {
	i, found := slices.BinarySearchFunc(chunks, off, func(c chunk, off uint32) int { return int(c.start) - int(off) })
	if found {
		return chunks[i].row, 0
	}
	last := chunks[len(chunks)-1]
	row = last.row + uint32(bytes.Count(src[last.start:off], []byte{'\n'}))
	col = off - uint32(bytes.LastIndexByte(src[:off], '\n')+1)
	return row, col
}

func containsAllStr(data []byte, toks []string) bool {
	for _, t := range toks {
		if !bytes.Contains(data, []byte(t)) {
			return false
		}
	}
	return true
}

// hasError reports whether t has an error or missing node.
func (t *tree) hasError() bool {
	for i := range t.nodes {
		if t.nodes[i].flags&(flagError|flagMissing) != 0 || t.nodes[i].kind == errorKind {
			return true
		}
	}
	return false
}

// parse is Parse reading only ranges of src (all of it when empty).
func (p *Parser) parse(ctx context.Context, lang *Language, src []byte, ranges []parseRange) (*Tree, error) {
	if lang == nil {
		return nil, fmt.Errorf("syntax: parse: no language given")
	}
	if p.last != nil {
		p.nodes, p.lines = p.last.nodes, p.last.lines[:0]
		p.last.nodes, p.last.lines = nil, nil // a stale tree fails loudly instead of showing the next file's nodes
		p.last = nil
	}
	if p.cp == nil {
		p.cp = getParser()
	}
	t, err := parseRanges(ctx, p.cp, lang, src, ParseTimeout, p.nodes, false, ranges)
	if err != nil {
		return nil, err
	}
	t.lines = p.lines
	p.last = t
	return &Tree{t: t}, nil
}

// isIdentByte reports whether c may be part of an identifier (bytes of a
// multi-byte UTF-8 character included).
func isIdentByte(c byte) bool {
	return c == '_' || c >= 0x80 || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// hasWord reports whether src[i:] starts with word followed by a byte that
// cannot continue an identifier.
func hasWord(src []byte, i int, word string) bool {
	if !bytes.HasPrefix(src[i:], []byte(word)) {
		return false
	}
	j := i + len(word)
	return j == len(src) || !isIdentByte(src[j])
}

// splitGo splits Go source at each line that starts, at column 0 and
// outside any bracket, string or comment, with func, type, var, const or
// import, where the source before it ends a statement (gofmt'd code always
// does; other code only splits less). Raw strings, interpreted strings,
// runes and comments are skipped; an unbalanced bracket or an unterminated
// string or comment makes the file unsplittable.
//
// A top-level function is split further at the statements of its body:
// its chunk becomes its header (body set: from func to the line after the
// body's opening brace), one chunk per line that starts a statement
// directly inside the body (a level deeper: outside any other bracket,
// after a line that ended a statement), and its closing brace's line
// (tail set). An if or for statement of a body is split the same way, down
// to goMaxLevel, an "} else {" or "} else if … {" line being a tail of its
// own between its branches. A function or statement whose opening brace
// does not end its first line's code, whose closing brace does not start a
// line, or that has anything but comments after that brace (an else aside)
// stays whole.
func splitGo(src []byte, out []chunk) ([]chunk, bool) {
	out = append(out, chunk{})
	depth := 0
	row := uint32(0)
	last := byte(';') // the last byte of the last token: whether a statement ended
	n := len(src)
	// The function and the statements in it being split, innermost last:
	// the header's chunk, the bracket depth of the line holding the
	// header's opening brace, and how far its scan got.
	type frame struct{ hdr, depth, state int }
	var frames []frame
	// merge gives up splitting frames[f] (and those inside it): the chunks
	// below its header become part of it again.
	merge := func(f int) {
		out = unsplit(out, frames[f].hdr)
		frames = frames[:f]
	}
	// endFunc ends the top-level function's split, keeping it only when
	// its closing brace was seen.
	endFunc := func() {
		if len(frames) > 0 && (len(frames) > 1 || frames[0].state != fnClosed) {
			merge(0)
		}
		frames = frames[:0]
	}
	token := func() {
		if len(frames) == 1 && frames[0].state == fnClosed {
			merge(0) // more after the function's closing brace: keep it whole
		}
	}
	for i := 0; i < n; {
		if i == 0 || src[i-1] == '\n' {
			if depth == 0 && i > 0 && goEnds(last) &&
				(hasWord(src, i, "func") || hasWord(src, i, "type") || hasWord(src, i, "var") || hasWord(src, i, "const") || hasWord(src, i, "import")) {
				out[len(out)-1].end = uint32(i)
				endFunc()
				out = append(out, chunk{start: uint32(i), row: row})
				if hasWord(src, i, "func") {
					frames = append(frames, frame{hdr: len(out) - 1, depth: 0, state: fnSig})
				}
			} else if k := len(frames) - 1; k >= 0 && depth == frames[k].depth+1 &&
				(frames[k].state == fnOpen || (frames[k].state == fnBody && goEnds(last))) {
				ws := skipBlanks(src, i)
				if ws < n && src[ws] != '\n' && src[ws] != '\r' {
					f := &frames[k]
					level := out[f.hdr].level + 1
					closing := src[ws] == '}'
					out[len(out)-1].end = uint32(i)
					out[f.hdr].body = true
					out = append(out, chunk{start: uint32(i), row: row, level: level, tail: closing})
					f.state = fnBody
					if closing {
						f.state = fnClosing
					} else if level < goMaxLevel && (hasWord(src, ws, "if") || hasWord(src, ws, "for")) {
						out[len(out)-1].inner = true
						frames = append(frames, frame{hdr: len(out) - 1, depth: depth, state: fnSig})
					}
				}
			}
		}
		c := src[i]
		switch {
		case c == '\n':
			row++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '/' && i+1 < n && src[i+1] == '/':
			j := bytes.IndexByte(src[i:], '\n')
			if j < 0 {
				i = n
			} else {
				i += j
			}
		case c == '/' && i+1 < n && src[i+1] == '*':
			j := bytes.Index(src[i+2:], []byte("*/"))
			if j < 0 {
				return out, false
			}
			body := src[i : i+2+j+2]
			row += uint32(bytes.Count(body, []byte{'\n'}))
			i += len(body)
		case c == '`':
			token()
			j := bytes.IndexByte(src[i+1:], '`')
			if j < 0 {
				return out, false
			}
			row += uint32(bytes.Count(src[i:i+1+j], []byte{'\n'}))
			i += j + 2
			last = '`'
		case c == '"' || c == '\'':
			token()
			j := i + 1
			for j < n && src[j] != c {
				if src[j] == '\n' {
					return out, false
				}
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= n {
				return out, false
			}
			i = j + 1
			last = c
		default:
			token()
			switch c {
			case '(', '[', '{':
				if k := len(frames) - 1; c == '{' && k >= 0 && frames[k].state == fnSig && depth == frames[k].depth {
					if lineEnds(src, i+1) {
						frames[k].state = fnOpen
					} else {
						merge(k)
					}
				}
				depth++
			case ')', ']', '}':
				depth--
				if depth < 0 {
					return out, false
				}
				for k := len(frames) - 1; k >= 0 && depth <= frames[k].depth; k = len(frames) - 1 {
					f := &frames[k]
					if f.state == fnSig || f.state == fnClosed {
						break
					}
					if f.state != fnClosing || depth != f.depth {
						merge(k) // a brace closed in the middle of a line
						continue
					}
					// The closing line's brace: an else reopens the statement,
					// the end of the line ends it, anything else keeps it
					// whole.
					j := skipBlanks(src, i+1)
					switch {
					case k > 0 && hasWord(src, j, "else"):
						f.state = fnSig
					case lineEnds(src, j) && k == 0:
						f.state = fnClosed
					case lineEnds(src, j):
						frames = frames[:k]
					default:
						merge(k)
					}
					break
				}
			}
			last = c
			i++
		}
	}
	out[len(out)-1].end = uint32(n)
	endFunc()
	return out, depth == 0
}

// How far splitGo got in a function or statement: its first line (or an
// else), the line after its opening brace, its body, its closing brace's
// line, after that brace (a function).
const (
	fnSig = iota
	fnOpen
	fnBody
	fnClosing
	fnClosed
)

// goMaxLevel is the deepest level splitGo splits to: statements of an if
// or for statement of an if or for statement of a function.
const goMaxLevel = 3

// unsplit folds the chunks after header h back into it (the last of them
// may still be open, its end unset) and returns out up to h.
func unsplit(out []chunk, h int) []chunk {
	if len(out) > h+1 {
		end := out[len(out)-1].end
		out = out[:h+1]
		out[h].end = end
	}
	out[h].body = false
	return out
}

// lineEnds reports whether src holds nothing but spaces, tabs and a line
// comment from i to the end of its line.
func lineEnds(src []byte, i int) bool {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t' || src[i] == '\r') {
		i++
	}
	return i == len(src) || src[i] == '\n' || bytes.HasPrefix(src[i:], []byte("//"))
}

// goEnds reports whether a line whose last token ends in c ends a Go
// statement (a conservative subset of the automatic semicolon rule: ++ and
// -- are left out).
func goEnds(c byte) bool {
	return isIdentByte(c) || strings.IndexByte(")]}\"'`;", c) >= 0
}

// splitPython splits Python source at each line that starts, at column 0
// and outside any bracket, string or backslash continuation, with a
// statement: not a comment, not else/elif/except/finally (which continue
// the statement before) and not right after a decorator line. Strings
// (single, triple, with any prefix) and comments are skipped; an unbalanced
// bracket or an unterminated string makes the file unsplittable.
//
// A class or function is split further, the same way, at the statements
// of its body (the lines at the indentation of its first body line), down
// to pyMaxLevel (a top-level class's methods' statements): its chunk
// becomes its header (body set: from its first line to its first body
// statement) followed by one chunk per body statement, a level deeper. A
// body with a line indented less than its first one and more than its
// header, or differently, stays whole, and so does one on its header's
// line.
func splitPython(src []byte, out []chunk) ([]chunk, bool) {
	out = append(out, chunk{})
	depth := 0
	row := uint32(0)
	cont := false      // the line before ended in a backslash continuation
	decorated := false // the last top-level line was a decorator
	// The classes and functions being split, innermost last: its header's
	// chunk, the indentation of its header's line and of its body (nil
	// until the first body line), whether its body's last statement was a
	// decorator.
	type frame struct {
		hdr       int
		own, body []byte
		decorated bool
	}
	var frames []frame
	// merge gives up splitting frames[f] (and those inside it): the chunks
	// below its header become part of it again.
	merge := func(f int) {
		out = unsplit(out, frames[f].hdr)
		frames = frames[:f]
	}
	n := len(src)
	for i := 0; i < n; {
		if (i == 0 || src[i-1] == '\n') && depth == 0 && !cont {
			ws := skipBlanks(src, i)
			if ws < n && src[ws] != '\n' && src[ws] != '\r' && src[ws] != '#' && src[ws] != '\f' {
				c, ind := src[ws], src[i:ws]
				follows := hasWord(src, ws, "else") || hasWord(src, ws, "elif") || hasWord(src, ws, "except") || hasWord(src, ws, "finally")
				opens := !follows && (hasWord(src, ws, "class") || hasWord(src, ws, "def") || isAsyncDef(src, ws))
				// Leave the bodies this line is not in.
				for len(frames) > 0 {
					f := &frames[len(frames)-1]
					if f.body == nil && len(ind) > len(f.own) && bytes.HasPrefix(ind, f.own) {
						f.body = ind // its first body line
						break
					}
					if f.body != nil && bytes.HasPrefix(ind, f.body) {
						break // in its body
					}
					if f.body != nil && len(ind) <= len(f.own) && bytes.HasPrefix(f.own, ind) {
						frames = frames[:len(frames)-1] // its body ended
						continue
					}
					merge(len(frames) - 1) // a body on the header's line, or odd indentation
				}
				switch {
				case ws == i:
					if i > 0 && !follows && !decorated {
						out[len(out)-1].end = uint32(i)
						out = append(out, chunk{start: uint32(i), row: row})
					}
					if opens {
						frames = append(frames[:0], frame{hdr: len(out) - 1, own: ind})
					}
					decorated = c == '@'
				case len(frames) > 0 && bytes.Equal(ind, frames[len(frames)-1].body):
					f := &frames[len(frames)-1]
					level := out[f.hdr].level + 1
					if !follows && !f.decorated {
						out[len(out)-1].end = uint32(i)
						out[f.hdr].body = true
						out = append(out, chunk{start: uint32(i), row: row, level: level})
					}
					f.decorated = c == '@'
					if opens && level < pyMaxLevel {
						frames = append(frames, frame{hdr: len(out) - 1, own: ind})
					}
				}
			}
		}
		if i > 0 && src[i-1] == '\n' {
			cont = false
		}
		c := src[i]
		switch {
		case c == '\n':
			row++
			i++
		case c == '#':
			j := bytes.IndexByte(src[i:], '\n')
			if j < 0 {
				i = n
			} else {
				i += j
			}
		case c == '\\':
			if i+1 < n && src[i+1] == '\n' {
				cont = true
			} else if i+2 < n && src[i+1] == '\r' && src[i+2] == '\n' {
				cont = true
				i++
			}
			i++
		case c == '"' || c == '\'':
			q := src[i : i+1]
			triple := i+2 < n && src[i+1] == c && src[i+2] == c
			if triple {
				q = src[i : i+3]
			}
			j := i + len(q)
			for {
				if j >= n {
					return out, false
				}
				switch src[j] {
				case '\\':
					if j+1 < n && src[j+1] == '\n' {
						row++
					}
					j += 2
					continue
				case '\n':
					if !triple {
						return out, false
					}
					row++
				case c:
					if bytes.HasPrefix(src[j:], q) {
						j += len(q)
						goto closed
					}
				}
				j++
			}
		closed:
			i = j
		default:
			switch c {
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				depth--
				if depth < 0 {
					return out, false
				}
			}
			i++
		}
	}
	out[len(out)-1].end = uint32(n)
	for f := len(frames) - 1; f >= 0; f-- {
		if frames[f].body == nil {
			merge(f)
		}
	}
	return out, depth == 0
}

// isAsyncDef reports whether src[i:] starts with "async def".
func isAsyncDef(src []byte, i int) bool {
	if !hasWord(src, i, "async") {
		return false
	}
	return hasWord(src, skipBlanks(src, i+len("async")), "def")
}

// skipBlanks returns the index of the first byte at or after i that is not
// a space or a tab (len(src) when there is none).
func skipBlanks(src []byte, i int) int {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
		i++
	}
	return i
}
