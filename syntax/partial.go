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

// chunk is a run of whole top-level declarations of a source: bytes
// [start, end), starting at column 0 of row.
type chunk struct {
	start, end, row uint32
	// body marks a header whose body statements follow as sub chunks (a
	// Python class, a Go function); plan parses the header with the ones it
	// chooses. tail marks the last sub chunk of a Go function, its closing
	// brace: parsed whenever the header is.
	body, sub, tail bool
}

// splitter splits a source into chunks, or reports false when it cannot
// tell where its top-level declarations begin.
type splitter func(src []byte, buf []chunk) ([]chunk, bool)

// splitters are the languages with a declaration scanner, by id, and the
// kind of their tree's root (a pattern of that kind spans declarations).
// containers are the kinds of a node that spans a class header and its
// body statements: a pattern of one of these kinds takes a split class
// whole.
var splitters = map[string]struct {
	split      splitter
	root       string
	containers []string
}{
	"go":     {splitGo, "source_file", []string{"function_declaration", "method_declaration", "block", "statement_list"}},
	"python": {splitPython, "module", []string{"class_definition", "decorated_definition", "block"}},
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
	for k := 0; k < len(chunks); k++ {
		c := chunks[k]
		if !c.body {
			if containsAllStr(src[c.start:c.end], toks) {
				add(c)
			}
			continue
		}
		// A split class: its header, then its body statements.
		j := k + 1
		for j < len(chunks) && chunks[j].sub {
			j++
		}
		whole := chunk{start: c.start, end: chunks[j-1].end, row: c.row}
		// A Go function's header and closing brace parse with any of its
		// statements (with none as well), so a header holding the tokens
		// (a signature's "(") is parsed with just the statements that hold
		// them too; a Python class body cannot be left empty.
		braced := chunks[j-1].tail
		switch {
		case !containsAllStr(src[whole.start:whole.end], toks):
		case pat.container || (!braced && containsAllStr(src[c.start:c.end], toks)):
			add(whole)
		default:
			header := braced && containsAllStr(src[c.start:c.end], toks)
			if header {
				add(c)
			}
			for _, b := range chunks[k+1 : j] {
				if b.tail && header {
					add(b)
				} else if containsAllStr(src[b.start:b.end], toks) {
					if !header {
						add(c)
						header = true
					}
					add(b)
				}
			}
		}
		k = j - 1
	}
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
// directly inside the body (sub set: outside any other bracket, after a
// line that ended a statement), and its closing brace's line (tail set).
// A function whose body brace does not end its signature's line, whose
// closing brace does not start a line, or that has anything but comments
// after that brace stays whole.
func splitGo(src []byte, out []chunk) ([]chunk, bool) {
	out = append(out, chunk{})
	depth := 0
	row := uint32(0)
	last := byte(';') // the last byte of the last token: whether a statement ended
	n := len(src)
	// The function being split: its header chunk's index (-1: none) and
	// how far its scan got.
	fn, state := -1, fnSig
	endFn := func() {
		if fn >= 0 && state != fnClosed && len(out) > fn+1 {
			end := out[len(out)-1].end
			out = out[:fn+1]
			out[fn].end, out[fn].body = end, false
		}
		fn = -1
	}
	token := func() {
		if fn >= 0 && state == fnClosed {
			state = fnSig // more after the closing brace: keep it whole
			endFn()
		}
	}
	for i := 0; i < n; {
		if i == 0 || src[i-1] == '\n' {
			if depth == 0 && i > 0 && goEnds(last) &&
				(hasWord(src, i, "func") || hasWord(src, i, "type") || hasWord(src, i, "var") || hasWord(src, i, "const") || hasWord(src, i, "import")) {
				out[len(out)-1].end = uint32(i)
				endFn()
				out = append(out, chunk{start: uint32(i), row: row})
				if hasWord(src, i, "func") {
					fn, state = len(out)-1, fnSig
				}
			} else if fn >= 0 && depth == 1 && (state == fnOpen || (state == fnBody && goEnds(last))) {
				ws := i
				for ws < n && (src[ws] == ' ' || src[ws] == '\t') {
					ws++
				}
				if ws < n && src[ws] != '\n' && src[ws] != '\r' {
					out[len(out)-1].end = uint32(i)
					out[fn].body = true
					closing := src[ws] == '}'
					out = append(out, chunk{start: uint32(i), row: row, sub: true, tail: closing})
					state = fnBody
					if closing {
						state = fnClosing
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
				if c == '{' && depth == 0 && fn >= 0 && state == fnSig {
					if lineEnds(src, i+1) {
						state = fnOpen
					} else {
						endFn()
					}
				}
				depth++
			case ')', ']', '}':
				depth--
				if depth < 0 {
					return out, false
				}
				if depth == 0 && fn >= 0 && state != fnSig {
					if state == fnClosing {
						state = fnClosed
					} else {
						endFn()
					}
				}
			}
			last = c
			i++
		}
	}
	out[len(out)-1].end = uint32(n)
	endFn()
	return out, depth == 0
}

// How far splitGo got in a function: its signature, the line after its
// body's opening brace, its body, its closing brace's line, after that
// brace.
const (
	fnSig = iota
	fnOpen
	fnBody
	fnClosing
	fnClosed
)

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
// A top-level class is split further, the same way, at the statements of
// its body (the lines at the indentation of its first body line): the
// class's chunk becomes its header (body set: from its first line to its
// first body statement) followed by one chunk per body statement (sub
// set). A class body with a line indented less than its first one, or
// differently, stays whole.
func splitPython(src []byte, out []chunk) ([]chunk, bool) {
	out = append(out, chunk{})
	depth := 0
	row := uint32(0)
	cont := false      // the line before ended in a backslash continuation
	decorated := false // the last top-level line was a decorator
	// The class being split: its header chunk's index (-1: none), the
	// indentation of its body, whether its body may be split, and whether
	// its last body statement was a decorator.
	class, classOK, subDecorated := -1, false, false
	var indent []byte
	endClass := func() {
		if class >= 0 && !classOK && len(out) > class+1 {
			out[class].end = out[len(out)-1].end
			out[class].body = false
			out = out[:class+1]
		}
		class = -1
	}
	n := len(src)
	for i := 0; i < n; {
		if (i == 0 || src[i-1] == '\n') && depth == 0 && !cont {
			ws := i
			for ws < n && (src[ws] == ' ' || src[ws] == '\t') {
				ws++
			}
			if ws < n && src[ws] != '\n' && src[ws] != '\r' && src[ws] != '#' && src[ws] != '\f' {
				c := src[ws]
				follows := hasWord(src, ws, "else") || hasWord(src, ws, "elif") || hasWord(src, ws, "except") || hasWord(src, ws, "finally")
				switch {
				case ws == i:
					isClass := hasWord(src, i, "class")
					if i > 0 && !follows && !decorated {
						out[len(out)-1].end = uint32(i)
						endClass()
						out = append(out, chunk{start: uint32(i), row: row})
					}
					if isClass && !follows {
						class, classOK, subDecorated, indent = len(out)-1, true, false, nil
					} else if !decorated {
						endClass()
					}
					decorated = c == '@'
				case class < 0 || !classOK:
				case indent == nil || bytes.Equal(src[i:ws], indent):
					indent = src[i:ws]
					if !follows && !subDecorated {
						out[len(out)-1].end = uint32(i)
						out[class].body = true
						out = append(out, chunk{start: uint32(i), row: row, sub: true})
					}
					subDecorated = c == '@'
				case ws-i <= len(indent) || !bytes.HasPrefix(src[i:ws], indent):
					classOK = false
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
	endClass()
	return out, depth == 0
}
