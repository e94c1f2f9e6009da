package syntax

import (
	"bytes"
	"context"
	"fmt"
)

// Point is a position in source: Line is 0-based, Column is a 0-based byte
// offset within the line (callers add 1 to the line for display).
type Point struct {
	Line, Column int
}

// Range is a byte range of the source with its start and end points; EndByte
// is exclusive.
type Range struct {
	StartByte, EndByte int
	Start, End         Point
}

// Capture is what one metavariable captured. A single capture ($NAME) is one
// node; a multi capture ($$$NAME) is a possibly empty sequence of sibling
// nodes, and its Text is the source from the first node to the last,
// separators included.
type Capture struct {
	Multi bool
	Text  string
	// Range spans the captured text; for an empty multi capture it is the
	// zero-width position where the sequence would be.
	Range Range
}

// Match is one match of a pattern.
type Match struct {
	Range
	Text     string
	Captures map[string]*Capture
}

// Tree is a parsed source. It holds no C memory and is safe to share between
// goroutines once built; callers may cache it per file.
type Tree struct {
	t *tree
}

// Parser parses file after file with the same tree-sitter parser and into
// the same memory, for callers that search each tree once and drop it: a
// tree it returns is valid until its next Parse. It is not safe for
// concurrent use; the zero value is ready, and Close releases it.
type Parser struct {
	cp    *cparser
	last  *tree
	nodes []node   // the last tree's nodes, reused by the next parse
	lines []uint32 // the last tree's line table, likewise
	// chunks and ranges are ParseFor's buffers.
	chunks []chunk
	ranges []parseRange
}

// Close gives p's tree-sitter parser back to the package's pool; p may be
// used again afterwards.
func (p *Parser) Close() {
	if p.cp != nil {
		putParser(p.cp)
		p.cp = nil
	}
}

// Parse is like the package's Parse, but the tree it returns lives in p's
// memory and is valid only until p parses again (a stale tree is refused when
// matched). Matches found in it stay valid: they copy what they report.
func (p *Parser) Parse(ctx context.Context, lang *Language, src []byte) (*Tree, error) {
	return p.parse(ctx, lang, src, nil)
}

// Parse parses src with lang's grammar. It refuses sources over
// MaxSourceBytes (ErrTooLarge) and stops parses that run over ParseTimeout
// (ErrParseBudget) or whose ctx ends.
func Parse(ctx context.Context, lang *Language, src []byte) (*Tree, error) {
	if lang == nil {
		return nil, fmt.Errorf("syntax: parse: no language given")
	}
	t, err := parse(ctx, lang, src)
	if err != nil {
		return nil, err
	}
	return &Tree{t: t}, nil
}

// Language returns the tree's language.
func (t *Tree) Language() *Language { return t.t.lang }

// Source returns the parsed bytes (not a copy; do not modify).
func (t *Tree) Source() []byte { return t.t.src }

// NodeCount returns the number of syntax nodes in the tree.
func (t *Tree) NodeCount() int { return len(t.t.nodes) }

// HasError reports whether the source has syntax errors (the tree is still
// searched; tree-sitter recovers).
func (t *Tree) HasError() bool {
	for i := range t.t.nodes {
		if t.t.nodes[i].isError() || t.t.nodes[i].missing() {
			return true
		}
	}
	return false
}

// SyntaxError is a place where the parser recovered from a syntax error:
// text it could not parse (an ERROR node), or a token the grammar required
// and the source lacks (a MISSING node; Missing names its kind, such as
// ")").
type SyntaxError struct {
	Range
	Missing string
}

// SyntaxErrors returns the tree's syntax errors in source order: each
// outermost ERROR node (not the ERROR nodes inside it) and each MISSING
// node outside them.
func (t *Tree) SyntaxErrors() []SyntaxError {
	tr := t.t
	var out []SyntaxError
	for i := range tr.nodes {
		n := &tr.nodes[i]
		if !n.isError() && !n.missing() {
			continue
		}
		inside := false
		for p := n.parent; p >= 0 && !inside; p = tr.nodes[p].parent {
			inside = tr.nodes[p].isError()
		}
		if inside {
			continue
		}
		e := SyntaxError{Range: tr.rangeOf(int32(i))}
		if n.missing() {
			e.Missing = tr.lang.kindName(n.kind)
		}
		out = append(out, e)
	}
	return out
}

// Search compiles pattern for lang and returns every match in src.
func Search(ctx context.Context, lang *Language, pattern string, src []byte) ([]Match, error) {
	p, err := Compile(lang, pattern)
	if err != nil {
		return nil, err
	}
	return p.Search(ctx, src)
}

// Search parses src and returns every match of p, in pre-order (outer
// before inner, then by position). Nested and overlapping matches are all
// reported.
func (p *Pattern) Search(ctx context.Context, src []byte) ([]Match, error) {
	t, err := Parse(ctx, p.lang, src)
	if err != nil {
		return nil, err
	}
	return p.Match(ctx, t)
}

// ctxCheckEvery is how many candidate nodes are tried between ctx checks.
const ctxCheckEvery = 4096

// Match returns every match of p in an already parsed tree.
func (p *Pattern) Match(ctx context.Context, tr *Tree) ([]Match, error) {
	t := tr.t
	if t.nodes == nil {
		return nil, fmt.Errorf("syntax: the tree is stale: its Parser has parsed another file since; match a tree before parsing the next one")
	}
	if t.lang != p.lang {
		return nil, fmt.Errorf("syntax: the pattern is for %s but the tree is %s; compile the pattern for the file's language", p.lang.ID, t.lang.ID)
	}
	if p.seq {
		return p.matchSeq(ctx, t)
	}
	m := &matcher{t: t}
	var out []Match
	root := p.root
	for i := range t.nodes {
		if i%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("syntax: search: %w", err)
			}
		}
		n := &t.nodes[i]
		if root.meta == metaNone && root.kind != n.kind && root.kind != errorKind {
			continue
		}
		m.env = m.env[:0]
		if m.matchNode(root, int32(i)) != matched {
			continue
		}
		out = append(out, m.result(int32(i), int32(i)))
	}
	return out, nil
}

type outcome uint8

const (
	noMatch outcome = iota
	matched
	skipCandidate
)

type binding struct {
	name  string
	multi bool
	nodes []int32
	at    uint32 // byte offset of an empty multi capture
}

type matcher struct {
	t   *tree
	env []binding
	buf [][]int32 // children buffers by depth
	dep int
}

func (m *matcher) lookup(name string) *binding {
	for i := len(m.env) - 1; i >= 0; i-- {
		if m.env[i].name == name {
			return &m.env[i]
		}
	}
	return nil
}

// kids returns node i's children without extras (comments are skipped on
// both sides in smart mode). The slice is valid until the depth is released.
func (m *matcher) kids(i int32) []int32 {
	if m.dep >= len(m.buf) {
		m.buf = append(m.buf, nil)
	}
	b := m.buf[m.dep][:0]
	n := &m.t.nodes[i]
	if n.nchild > 0 {
		for c := i + 1; c >= 0; c = m.t.nodes[c].next {
			if !m.t.nodes[c].extra() {
				b = append(b, c)
			}
		}
	}
	m.buf[m.dep] = b
	m.dep++
	return b
}

func (m *matcher) matchNode(g *pnode, c int32) outcome {
	cn := &m.t.nodes[c]
	switch g.meta {
	case metaSingle, metaAny, metaMulti:
		if g.meta == metaSingle && !cn.named() {
			return noMatch
		}
		if g.name == "" {
			return matched
		}
		if old := m.lookup(g.name); old != nil {
			if old.multi || len(old.nodes) != 1 || !m.sameNode(old.nodes[0], c) {
				return noMatch
			}
		}
		m.env = append(m.env, binding{name: g.name, nodes: []int32{c}})
		return matched
	}
	kindOK := g.kind == cn.kind || g.kind == errorKind
	if g.leaf {
		if kindOK && (!g.named || string(m.t.textBytes(c)) == g.text) {
			return matched
		}
		if !cn.named() {
			return skipCandidate
		}
		return noMatch
	}
	if !kindOK {
		return noMatch
	}
	kids := m.kids(c)
	ok := m.matchChildren(g.children, kids)
	m.dep--
	if ok {
		return matched
	}
	return noMatch
}

// matchChildren is ast-grep's match_nodes_impl_recursive for smart
// strictness: lazy, non-backtracking ellipses; unnamed candidate tokens
// skipped against terminals; trailing candidate children allowed.
func (m *matcher) matchChildren(goals []*pnode, cands []int32) bool {
	if len(cands) == 0 {
		return false
	}
	gi, ci := 0, 0
	for {
		// An ellipsis at the current goal position.
		if gi >= len(goals) {
			return true
		}
		if g := goals[gi]; g.meta == metaMulti {
			var got []int32
			gi++
			if gi >= len(goals) {
				return m.bindMulti(g, append(got, cands[ci:]...), 0, cands, ci)
			}
			skipped := 0
			for goals[gi].trivial() {
				gi++
				skipped++
				if gi >= len(goals) {
					return m.bindMulti(g, append(got, cands[ci:]...), skipped, cands, ci)
				}
			}
			if goals[gi].meta == metaMulti {
				got = append(got, cands[ci])
				ci++
				if ci >= len(cands) {
					return false
				}
				if !m.bindMulti(g, got, skipped, cands, ci-1) {
					return false
				}
				continue
			}
			start := ci
			for {
				mark := len(m.env)
				r := m.matchNode(goals[gi], cands[ci])
				m.env = m.env[:mark]
				if r == matched {
					if !m.bindMulti(g, got, skipped, cands, start) {
						return false
					}
					break
				}
				got = append(got, cands[ci])
				ci++
				if ci >= len(cands) {
					return false
				}
			}
		}
		// One goal node, skipping unnamed candidate tokens against terminals.
		for {
			if ci >= len(cands) {
				for ; gi < len(goals); gi++ {
					if goals[gi].meta != metaMulti {
						return false
					}
					if !m.bindMulti(goals[gi], nil, 0, cands, ci) {
						return false
					}
				}
				return true
			}
			if g := goals[gi]; len(m.t.lang.Chain) > 0 && (g.meta == metaSingle || g.meta == metaAny) {
				// The rest of the goals after each run the metavariable
				// may bind (see varEnds).
				for _, end := range m.varEnds(goals, gi, cands, ci) {
					mark := len(m.env)
					if m.bindRun(g, cands[ci:end]) {
						if gi+1 >= len(goals) {
							return true // trailing candidate children are allowed
						}
						if end < len(cands) && m.matchChildren(goals[gi+1:], cands[end:]) {
							return true
						}
					}
					m.env = m.env[:mark]
				}
				return false
			}
			r := m.matchNode(goals[gi], cands[ci])
			if r == matched {
				break
			}
			if r == skipCandidate {
				ci++
				continue
			}
			return false
		}
		gi++
		ci++
		if gi >= len(goals) {
			return true // trailing candidate children are allowed
		}
		if ci >= len(cands) {
			// As in ast-grep: goals remain after a matched pair but the
			// candidate has no children left, so even a trailing $$$ fails
			// (`echo $$$` does not match a bare `echo`).
			return false
		}
	}
}

// varEnds returns where the run a single metavariable goals[gi] binds at
// cands[ci] may end (exclusive indices, most preferred first), in a
// language with chain kinds (Language.Chain): the metavariable binds the
// candidate together with the chain siblings that follow it (`c` and
// `.value` in Dart's `c.value == c.value`), as one member expression binds
// in other grammars. When the pattern's next node is itself of a chain
// kind (`$X.dispose()`), every shorter run is a choice too, longest first,
// so that $X binds `a.b` in `a.b.dispose()`.
func (m *matcher) varEnds(goals []*pnode, gi int, cands []int32, ci int) []int {
	lang := m.t.lang
	cn := &m.t.nodes[cands[ci]]
	if goals[gi].meta == metaSingle && !cn.named() {
		return nil
	}
	end := ci + 1
	if cn.named() && !lang.chainKind(cn.kind) {
		for end < len(cands) && lang.chainKind(m.t.nodes[cands[end]].kind) {
			end++
		}
	}
	if gi+1 < len(goals) && goals[gi+1].meta == metaNone && lang.chainKind(goals[gi+1].kind) {
		ends := make([]int, 0, end-ci)
		for e := end; e > ci; e-- {
			ends = append(ends, e)
		}
		return ends
	}
	return []int{end}
}

// bindRun binds the single metavariable g to the run of sibling nodes
// (one node, or one with its chain siblings); a metavariable bound before
// must bind an equal run.
func (m *matcher) bindRun(g *pnode, run []int32) bool {
	if g.name == "" {
		return true
	}
	if old := m.lookup(g.name); old != nil {
		if old.multi || len(old.nodes) != len(run) {
			return false
		}
		for i := range run {
			if !m.sameNode(old.nodes[i], run[i]) {
				return false
			}
		}
	}
	m.env = append(m.env, binding{name: g.name, nodes: append([]int32(nil), run...)})
	return true
}

// bindMulti records an ellipsis capture. Trailing unnamed nodes that stand
// for pattern tokens skipped after the ellipsis are dropped. at is the index
// in cands where the sequence starts (for the position of empty captures).
func (m *matcher) bindMulti(g *pnode, nodes []int32, skipped int, cands []int32, at int) bool {
	for skipped > 0 && len(nodes) > 0 && !m.t.nodes[nodes[len(nodes)-1]].named() {
		nodes = nodes[:len(nodes)-1]
		skipped--
	}
	if g.name == "" {
		return true
	}
	if old := m.lookup(g.name); old != nil {
		if !old.multi || !m.sameNamed(old.nodes, nodes) {
			return false
		}
	}
	var pos uint32
	switch {
	case len(nodes) > 0:
		pos = m.t.nodes[nodes[0]].start
	case at < len(cands):
		pos = m.t.nodes[cands[at]].start
	case len(cands) > 0:
		pos = m.t.nodes[cands[len(cands)-1]].end
	}
	m.env = append(m.env, binding{name: g.name, multi: true, nodes: append([]int32(nil), nodes...), at: pos})
	return true
}

// sameNamed compares two ellipsis captures on their named nodes.
func (m *matcher) sameNamed(a, b []int32) bool {
	var na, nb []int32
	for _, x := range a {
		if m.t.nodes[x].named() {
			na = append(na, x)
		}
	}
	for _, x := range b {
		if m.t.nodes[x].named() {
			nb = append(nb, x)
		}
	}
	if len(na) != len(nb) {
		return false
	}
	for i := range na {
		if !m.sameNode(na[i], nb[i]) {
			return false
		}
	}
	return true
}

// sameNode is ast-grep's does_node_match_exactly: structural equality that
// ignores whitespace but not comments, parentheses or commas; named leaves
// compare by text.
func (m *matcher) sameNode(a, b int32) bool {
	if a == b {
		return true
	}
	na, nb := &m.t.nodes[a], &m.t.nodes[b]
	if (na.named() && na.nchild == 0) || (nb.named() && nb.nchild == 0) {
		return bytes.Equal(m.t.textBytes(a), m.t.textBytes(b))
	}
	if na.kind != nb.kind || na.nchild != nb.nchild {
		return false
	}
	if na.nchild == 0 {
		return true
	}
	if !m.t.sameGaps(a, b) {
		return false
	}
	for x, y := a+1, b+1; x >= 0 && y >= 0; x, y = m.t.nodes[x].next, m.t.nodes[y].next {
		if !m.sameNode(x, y) {
			return false
		}
	}
	return true
}

func (t *tree) rangeOf(i int32) Range {
	n := &t.nodes[i]
	return Range{
		StartByte: int(n.start), EndByte: int(n.end),
		Start: t.point(n.start),
		End:   t.point(n.end),
	}
}

// result is the match spanning nodes first to last (siblings; the same
// node for all but sequence patterns) with the bindings in m.env.
func (m *matcher) result(first, last int32) Match {
	t := m.t
	r := t.rangeOf(first)
	if last != first {
		l := t.rangeOf(last)
		r.EndByte, r.End = l.EndByte, l.End
	}
	mt := Match{Range: r, Text: string(t.src[r.StartByte:r.EndByte])}
	if len(m.env) == 0 {
		return mt
	}
	// One allocation for the captures, and a map of pointers into it: a
	// small map's table holds eight slots, so pointers keep it a quarter
	// the size of one holding the captures themselves.
	caps := make([]Capture, len(m.env))
	mt.Captures = make(map[string]*Capture, len(m.env))
	for i, b := range m.env {
		c := &caps[i]
		c.Multi = b.multi
		if len(b.nodes) == 0 {
			p := t.point(b.at)
			c.Range = Range{StartByte: int(b.at), EndByte: int(b.at), Start: p, End: p}
		} else {
			first, last := t.rangeOf(b.nodes[0]), t.rangeOf(b.nodes[len(b.nodes)-1])
			c.Range = Range{StartByte: first.StartByte, EndByte: last.EndByte, Start: first.Start, End: last.End}
		}
		if r.StartByte <= c.Range.StartByte && c.Range.EndByte <= r.EndByte {
			// The usual case, a capture inside the match: its text is
			// a piece of the match's, not another copy.
			c.Text = mt.Text[c.Range.StartByte-r.StartByte : c.Range.EndByte-r.StartByte]
		} else {
			c.Text = string(t.src[c.Range.StartByte:c.Range.EndByte])
		}
		mt.Captures[b.name] = c // later bindings overwrite: the last occurrence is reported
	}
	return mt
}

// hasGaps reports whether node i has text outside its children other than
// whitespace (tree-sitter-dart's string_literal: the quotes are children,
// the contents are not).
func (t *tree) hasGaps(i int32) bool {
	has := false
	t.eachGap(i, func(g []byte) bool {
		if len(bytes.TrimSpace(g)) > 0 {
			has = true
			return false
		}
		return true
	})
	return has
}

// sameGaps reports whether nodes a and b (same kind, same child count)
// have the same text outside their children: the same gaps that are not
// only whitespace, each compared without the whitespace at its edges.
func (t *tree) sameGaps(a, b int32) bool {
	var ga [][]byte
	t.eachGap(a, func(g []byte) bool {
		if g = bytes.TrimSpace(g); len(g) > 0 {
			ga = append(ga, g)
		}
		return true
	})
	k, same := 0, true
	t.eachGap(b, func(g []byte) bool {
		if g = bytes.TrimSpace(g); len(g) == 0 {
			return true
		}
		if k >= len(ga) || !bytes.Equal(ga[k], g) {
			same = false
			return false
		}
		k++
		return true
	})
	return same && k == len(ga)
}

// eachGap calls f with the bytes of node i before its first child, between
// its children and after its last, in order, while f returns true.
func (t *tree) eachGap(i int32, f func([]byte) bool) {
	n := &t.nodes[i]
	if n.nchild == 0 {
		return
	}
	at := n.start
	for c := i + 1; c >= 0; c = t.nodes[c].next {
		cn := &t.nodes[c]
		if cn.start > at && !f(t.src[at:cn.start]) {
			return
		}
		if cn.end > at {
			at = cn.end
		}
	}
	if n.end > at {
		f(t.src[at:n.end])
	}
}
