package syntax

import (
	"context"
	"fmt"
	"sort"
)

// Sequence patterns. Some grammars have no node for constructs a pattern
// naturally names: tree-sitter-dart has no call node, so `print(x)` is an
// identifier followed by a selector, flattened into whatever holds the call
// (an expression statement, an argument, the right side of `+`). A ladder
// rung with Context.Sequence accepts such a fragment; the pattern is the run
// of sibling nodes, and it matches every run of consecutive (non-comment)
// children of any node that matches node for node.
//
// A run never starts at a node of a kind that the pattern itself uses as a
// continuation (a later top-level pattern node's kind): with `$X.dispose()`
// in Dart, $X does not bind the `.b` selector in `a.b.dispose()`.

// compileSeq builds a sequence pattern from the maximal nodes tops of the
// fragment.
func compileSeq(cv *converter, lang *Language, cx Context, tops []int32) (*Pattern, string) {
	t, sigil := cv.t, cv.sigil
	parent := t.nodes[tops[0]].parent
	for _, i := range tops[1:] {
		if t.nodes[i].parent != parent {
			return nil, fmt.Sprintf("%d separate nodes (%s, %s, …) that are not siblings; a pattern must be one node or one run of siblings",
				len(tops), lang.kindName(t.nodes[tops[0]].kind), lang.kindName(t.nodes[tops[1]].kind))
		}
	}
	if !t.nodes[tops[0]].named() || !t.nodes[tops[len(tops)-1]].named() {
		return nil, "the fragment starts or ends with a bare token, not a syntax node"
	}
	for _, k := range cx.Reject {
		if lang.kindName(t.nodes[tops[0]].kind) == k {
			return nil, "the fragment is a " + k + ", which this context cannot hold"
		}
	}
	if len(cx.Needs) > 0 {
		found := false
		for _, i := range tops {
			if containsKind(t, lang, i, cx.Needs) {
				found = true
				break
			}
		}
		if !found {
			return nil, "no " + fmt.Sprint(cx.Needs) + " in the fragment"
		}
	}
	root := &pnode{kind: errorKind}
	for _, i := range tops {
		n := cv.convert(i)
		if n.meta == metaMulti {
			return nil, "a $$$ at the top level of a multi-node fragment is not supported; wrap the fragment so it is one node"
		}
		root.children = append(root.children, n)
	}
	p := &Pattern{lang: lang, root: root, context: cx.Name, seq: true}
	p.setLiterals()
	p.setVars(sigil)
	return p, ""
}

// matchSeq returns every run of consecutive children that matches the
// sequence pattern p, outer before inner, then by position.
func (p *Pattern) matchSeq(ctx context.Context, t *tree) ([]Match, error) {
	goals := p.root.children
	cont := map[uint16]bool{}
	for _, g := range goals[1:] {
		if g.meta == metaNone {
			cont[g.kind] = true
		}
	}
	m := &matcher{t: t}
	var out []Match
	for i := range t.nodes {
		if i%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("syntax: search: %w", err)
			}
		}
		if int(t.nodes[i].nchild) < len(goals) {
			continue
		}
		kids := m.kids(int32(i))
		for s := 0; s+len(goals) <= len(kids); s++ {
			if cont[t.nodes[kids[s]].kind] {
				continue
			}
			m.env = m.env[:0]
			end := m.matchRun(goals, kids, s)
			if end < 0 {
				continue
			}
			out = append(out, m.result(kids[s], kids[end-1]))
		}
		m.dep--
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].StartByte != out[b].StartByte {
			return out[a].StartByte < out[b].StartByte
		}
		return out[a].EndByte > out[b].EndByte
	})
	return out, nil
}

// matchRun matches goals node for node against kids from ci on and returns
// the index after the last kid matched, or -1. A single metavariable in a
// language with chain kinds may take several kids (see varEnds).
func (m *matcher) matchRun(goals []*pnode, kids []int32, ci int) int {
	if len(goals) == 0 {
		return ci
	}
	if ci >= len(kids) {
		return -1
	}
	g := goals[0]
	if len(m.t.lang.Chain) > 0 && (g.meta == metaSingle || g.meta == metaAny) {
		for _, end := range m.varEnds(goals, 0, kids, ci) {
			mark := len(m.env)
			if m.bindRun(g, kids[ci:end]) {
				if r := m.matchRun(goals[1:], kids, end); r >= 0 {
					return r
				}
			}
			m.env = m.env[:mark]
		}
		return -1
	}
	if m.matchNode(g, kids[ci]) != matched {
		return -1
	}
	return m.matchRun(goals[1:], kids, ci+1)
}
