package syntax

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

type metaKind uint8

const (
	metaNone   metaKind = iota
	metaSingle          // $NAME, $_: one named node
	metaAny             // $$NAME: one node, named or not
	metaMulti           // $$$NAME, $$$: zero or more sibling nodes
)

// pnode is one node of a compiled pattern.
type pnode struct {
	kind     uint16
	named    bool
	leaf     bool // no children in the pattern tree: compared as a terminal
	text     string
	meta     metaKind
	name     string // binding name; "" when the metavariable does not bind
	children []*pnode
}

func (p *pnode) trivial() bool { return p.meta == metaNone && p.leaf && !p.named }

// Pattern is a compiled structural pattern for one language.
type Pattern struct {
	lang    *Language
	root    *pnode
	source  string
	context string
	literal string
	lits    []string
	partial []string // PartialTokens
	// container: the root's kind may span a class or function header and
	// its body; innerContainer: a split statement's (see splitters).
	container, innerContainer bool
	seq                       bool // root's children are a sequence of sibling nodes (Context.Sequence)
	vars                      []patVar
	inert                     []InertVar
}

// patVar is a variable the pattern binds.
type patVar struct {
	name  string
	multi bool
}

func (v patVar) display() string {
	if v.multi {
		return "$$$" + v.name
	}
	return "$" + v.name
}

// InertVar is a metavariable written inside a leaf of a pattern (a string
// literal, or part of a name as in obj.on$EVENT), where it is plain text:
// it matches only itself and binds nothing.
type InertVar struct {
	Var      string // "$MSG"
	Leaf     string // the leaf's text as written: "$MSG: %v"
	InString bool   // the leaf is (part of) a string literal
}

// Language returns the language the pattern was compiled for.
func (p *Pattern) Language() *Language { return p.lang }

// Context returns the name of the ladder rung that accepted the pattern
// ("bare", "statement", "expression", "member" or "declaration").
func (p *Pattern) Context() string { return p.context }

// Literal returns the longest of Literals, or "" when there is none.
func (p *Pattern) Literal() string { return p.literal }

// Literals returns every text each match must contain verbatim, longest
// first, without duplicates; nil when there is none: the pattern's named
// leaves that are not metavariables and, for a language with
// VerbatimKeywords, the keywords it must match. A file that lacks one of
// them has no match, so callers may skip it without parsing it.
func (p *Pattern) Literals() []string { return p.lits }

// Vars returns the names of the variables the pattern binds (without their
// '$'s), in order of first appearance; $_ and other names starting with _
// bind nothing and are not listed.
func (p *Pattern) Vars() []string {
	names := make([]string, len(p.vars))
	for i, v := range p.vars {
		names[i] = v.name
	}
	return names
}

// Inert returns the metavariables written inside leaves of the pattern,
// which bind nothing (see [InertVar]); nil when there are none.
func (p *Pattern) Inert() []InertVar { return p.inert }

// String returns the pattern source.
func (p *Pattern) String() string { return p.source }

// preprocess replaces '$' by the language's expando character where '$' starts
// a metavariable (before A–Z or '_', or a run of exactly three), as ast-grep's
// pre_process_pattern does.
func preprocess(expando rune, pattern string) string {
	if expando == 0 || expando == '$' {
		return pattern
	}
	var b strings.Builder
	dollars := 0
	flush := func(replace bool) {
		r := '$'
		if replace {
			r = expando
		}
		for range dollars {
			b.WriteRune(r)
		}
		dollars = 0
	}
	for _, c := range pattern {
		if c == '$' {
			dollars++
			continue
		}
		flush(dollars > 0 && ((c >= 'A' && c <= 'Z') || c == '_' || dollars == 3))
		b.WriteRune(c)
	}
	flush(dollars == 3)
	return b.String()
}

// validVarName reports whether n is a metavariable name: [A-Z_][A-Z0-9_]*.
func validVarName(n string) bool {
	if n == "" || !(n[0] == '_' || (n[0] >= 'A' && n[0] <= 'Z')) {
		return false
	}
	for i := 0; i < len(n); i++ {
		if !isVarChar(n[i]) {
			return false
		}
	}
	return true
}

// metaVar classifies text as a metavariable token written with sigil.
func metaVar(sigil rune, text string) (metaKind, string) {
	s := string(sigil)
	validName := validVarName
	bind := func(n string) string {
		if strings.HasPrefix(n, "_") {
			return ""
		}
		return n
	}
	switch {
	case text == s+s+s:
		return metaMulti, ""
	case strings.HasPrefix(text, s+s+s):
		if n := text[3*len(s):]; validName(n) {
			return metaMulti, bind(n)
		}
	case strings.HasPrefix(text, s+s):
		if n := text[2*len(s):]; validName(n) {
			return metaAny, bind(n)
		}
	case strings.HasPrefix(text, s):
		if n := text[len(s):]; validName(n) {
			return metaSingle, bind(n)
		}
	}
	return metaNone, ""
}

// Compile parses pattern with lang's grammar, trying each rung of the
// language's context ladder; the first rung in which the fragment parses
// without ERROR or MISSING nodes wins.
func Compile(lang *Language, pattern string) (*Pattern, error) {
	if lang == nil {
		return nil, fmt.Errorf("syntax: compile: no language given; pass one of: %s", strings.Join(IDs(), ", "))
	}
	frag := strings.TrimSpace(pattern)
	if frag == "" {
		return nil, fmt.Errorf("syntax: the pattern is empty; write a code fragment such as `foo($A)`")
	}
	sigil := '$'
	if lang.Expando != 0 {
		sigil = lang.Expando
	}
	pre := preprocess(lang.Expando, frag)
	var tried []string
	for _, cx := range lang.Contexts {
		p, why := compileIn(lang, cx, pre, sigil, nil)
		if p != nil {
			p.source = pattern
			return p, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", cx.Name, why))
	}
	// A bare metavariable where the grammar wants a string literal
	// (TypeScript's `import type { $$$ } from $S`): quote it, one
	// metavariable at a time, then all of them, and read the quoted
	// literal back as the metavariable.
	if lang.VarQuote != "" {
		for _, q := range quotings(pre, sigil, lang.VarQuote) {
			for _, cx := range lang.Contexts {
				if p, _ := compileIn(lang, cx, q.frag, sigil, q.vars); p != nil {
					p.source = pattern
					return p, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("syntax: the %s pattern %q does not parse as %s code in any context: %s; fix the fragment so it is valid %s (metavariables stand for whole nodes)",
		lang.ID, frag, lang.ID, strings.Join(tried, "; "), lang.ID)
}

// compileIn tries one ladder rung. It returns the pattern, or nil and the
// reason the rung rejected the fragment.
func compileIn(lang *Language, cx Context, frag string, sigil rune, quoted map[string]bool) (*Pattern, string) {
	body := frag
	if cx.BlockEllipsis != "" {
		body = blockEllipsis(sigil).ReplaceAllString(body, "{ ${1}"+cx.BlockEllipsis+" }")
	}
	if cx.Indent != "" {
		body = cx.Indent + strings.ReplaceAll(frag, "\n", "\n"+cx.Indent)
	}
	if cx.Append != "" && !strings.HasSuffix(body, cx.Append) {
		body += cx.Append
	}
	src := []byte(cx.Prefix + body + cx.Suffix)
	fs := uint32(len(cx.Prefix) + len(cx.Indent))
	fe := uint32(len(cx.Prefix) + len(body))
	t, err := parse(context.Background(), lang, src)
	if err != nil {
		return nil, err.Error()
	}
	for i := range t.nodes {
		n := &t.nodes[i]
		if n.missing() && afterMetaVar(t, int32(i), sigil) {
			continue // `{ $$$ }` in C-like bodies: the `;` after a metavariable is implied
		}
		if n.isError() {
			if k, _ := metaVar(sigil, t.text(int32(i))); k == metaMulti {
				continue // a bare metavariable where the grammar wants more (Java `{ $$$ }`)
			}
		}
		if n.isError() || n.missing() {
			what := "syntax error"
			if n.missing() {
				what = "missing " + lang.kindName(n.kind)
			}
			return nil, fmt.Sprintf("%s at %s", what, fragPos(src, fs, n.start, cx.Indent))
		}
	}
	cv := &converter{t: t, sigil: sigil, term: cx.BlockEllipsis, quote: lang.VarQuote, quoted: quoted}
	// The maximal nodes inside the fragment.
	var tops []int32
	for i := range t.nodes {
		n := &t.nodes[i]
		if n.start < fs || n.end > fe || n.extra() || n.end == n.start {
			continue
		}
		if n.parent >= 0 {
			p := &t.nodes[n.parent]
			if p.start >= fs && p.end <= fe {
				continue
			}
		}
		tops = append(tops, int32(i))
	}
	switch len(tops) {
	case 0:
		return nil, "no syntax node in the fragment"
	case 1:
	default:
		if cx.Sequence {
			return compileSeq(cv, lang, cx, tops)
		}
		return nil, fmt.Sprintf("%d separate nodes (%s, %s, …); a pattern must be one node", len(tops), lang.kindName(t.nodes[tops[0]].kind), lang.kindName(t.nodes[tops[1]].kind))
	}
	eff := tops[0]
	for t.nodes[eff].nchild == 1 {
		eff++ // the only child follows in pre-order
	}
	if eff == 0 && t.nodes[0].nchild > 1 {
		var kids []string
		for _, c := range t.children(0, nil) {
			kids = append(kids, lang.kindName(t.nodes[c].kind))
		}
		return nil, fmt.Sprintf("%d separate nodes (%s); a pattern must be one node", len(kids), strings.Join(kids, ", "))
	}
	for _, k := range cx.Reject {
		if lang.kindName(t.nodes[eff].kind) == k {
			return nil, "the fragment is a " + k + ", which this context cannot hold"
		}
	}
	if len(cx.Needs) > 0 && !containsKind(t, lang, tops[0], cx.Needs) {
		return nil, "no " + strings.Join(cx.Needs, "/") + " in the fragment"
	}
	root := cv.convert(eff)
	if root.meta == metaMulti {
		return nil, "a standalone $$$ matches sequences inside a node, not a node; put it inside code, as in `f($$$)`"
	}
	p := &Pattern{lang: lang, root: root, context: cx.Name}
	p.setLiterals()
	p.setPartial()
	p.setVars(sigil)
	return p, ""
}

// blockEllipsis returns the regular expression of a `{ $$$NAME }` block
// (a lone ellipsis between braces) for the sigil.
func blockEllipsis(sigil rune) *regexp.Regexp {
	sg := regexp.QuoteMeta(string(sigil))
	return regexp.MustCompile(`\{\s*(` + sg + sg + sg + `[A-Z0-9_]*)\s*\}`)
}

// quoting is a fragment with some metavariables quoted.
type quoting struct {
	frag string
	vars map[string]bool // the quoted metavariables, as written ("$S")
}

// maxQuotedVars caps the metavariables Compile tries quoting one by one.
const maxQuotedVars = 8

// quotings returns frag with each single metavariable that is not already
// inside quotes quoted alone, then with all of them quoted.
func quotings(frag string, sigil rune, quote string) []quoting {
	type span struct{ start, end int }
	var vars []span
	rs := []rune(frag)
	for i := 0; i < len(rs); i++ {
		if rs[i] != sigil {
			continue
		}
		j := i
		for j < len(rs) && rs[j] == sigil {
			j++
		}
		if j-i != 1 {
			i = j - 1
			continue
		}
		k := j
		for k < len(rs) && (rs[k] == '_' || (rs[k] >= 'A' && rs[k] <= 'Z') || (k > j && rs[k] >= '0' && rs[k] <= '9')) {
			k++
		}
		if k == j {
			continue
		}
		before, after := ' ', ' '
		if i > 0 {
			before = rs[i-1]
		}
		if k < len(rs) {
			after = rs[k]
		}
		if !strings.ContainsRune("\"'`", before) && !strings.ContainsRune("\"'`", after) && !isWordRune(before) && !isWordRune(after) {
			vars = append(vars, span{i, k})
		}
		i = k - 1
	}
	if len(vars) == 0 || len(vars) > maxQuotedVars {
		return nil
	}
	build := func(sel []span) quoting {
		q := quoting{vars: map[string]bool{}}
		var b strings.Builder
		last := 0
		for _, v := range sel {
			name := string(rs[v.start:v.end])
			q.vars[name] = true
			b.WriteString(string(rs[last:v.start]))
			b.WriteString(quote + name + quote)
			last = v.end
		}
		b.WriteString(string(rs[last:]))
		q.frag = b.String()
		return q
	}
	var out []quoting
	for i := len(vars) - 1; i >= 0; i-- {
		out = append(out, build(vars[i:i+1]))
	}
	if len(vars) > 1 {
		out = append(out, build(vars))
	}
	return out
}

// isWordRune reports whether r can be part of an identifier.
func isWordRune(r rune) bool {
	return r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

// fragPos renders the position of byte off of src as line:column of the
// pattern fragment starting at fs (1-based line and column).
func fragPos(src []byte, fs, off uint32, indent string) string {
	if off < fs {
		return "the start of the pattern"
	}
	if int(off) > len(src) {
		off = uint32(len(src))
	}
	line, col := 1, 0
	for i := fs; i < off; i++ {
		if src[i] == '\n' {
			line++
			col = -len(indent)
		} else {
			col++
		}
	}
	if col < 0 {
		col = 0
	}
	return fmt.Sprintf("line %d column %d", line, col+1)
}

// converter turns a parsed fragment into pattern nodes.
type converter struct {
	t     *tree
	sigil rune
	// term is the rung's BlockEllipsis: a node whose text is a $$$
	// metavariable followed by term is that metavariable.
	term string
	// quote and quoted: a node whose text is quote + $NAME + quote, for a
	// NAME in quoted, is the metavariable $NAME (Compile quoted it so that
	// the fragment parses; see Language.VarQuote).
	quote  string
	quoted map[string]bool
}

func convert(t *tree, i int32, sigil rune) *pnode {
	return (&converter{t: t, sigil: sigil}).convert(i)
}

func (cv *converter) convert(i int32) *pnode {
	t, sigil := cv.t, cv.sigil
	n := &t.nodes[i]
	text := t.text(i)
	if k, name := metaVar(sigil, text); k != metaNone {
		return &pnode{meta: k, name: name, kind: n.kind, named: n.named(), text: text}
	}
	if cv.term != "" && n.nchild > 0 {
		if v, ok := strings.CutSuffix(text, cv.term); ok {
			v = strings.TrimSpace(v)
			if k, name := metaVar(sigil, v); k == metaMulti {
				return &pnode{meta: k, name: name, kind: n.kind, named: n.named(), text: v}
			}
		}
	}
	if len(cv.quoted) > 0 && len(text) > 2*len(cv.quote) && strings.HasPrefix(text, cv.quote) && strings.HasSuffix(text, cv.quote) {
		v := text[len(cv.quote) : len(text)-len(cv.quote)]
		if k, name := metaVar(sigil, v); k == metaSingle && cv.quoted[v] {
			return &pnode{meta: k, name: name, kind: n.kind, named: n.named(), text: v}
		}
	}
	p := &pnode{kind: n.kind, named: n.named(), leaf: n.nchild == 0}
	if p.leaf {
		p.text = text
		return p
	}
	if t.hasGaps(i) && !strings.ContainsRune(text, sigil) {
		// Text no child covers (tree-sitter-dart's string_literal has
		// only its quotes as children): the node compares by its text.
		p.leaf = true
		p.text = text
		return p
	}
	for _, c := range t.children(i, nil) {
		cn := &t.nodes[c]
		if cn.missing() || (cn.extra() && !cn.isError()) { // an extra ERROR here is a tolerated `$$$` (Dart `{ $$$ }`)
			continue
		}
		p.children = append(p.children, cv.convert(c))
	}
	if len(p.children) == 0 {
		p.leaf = true
		p.text = text
	}
	return p
}

// setLiterals records the texts every match contains: a named leaf that is
// not a metavariable matches only a node with the same text, and, where the
// grammar spells keywords verbatim, an unnamed word leaf matches only a node
// of its kind, which is spelled as the kind is named, unless the leaf is
// one the matcher may skip (a token right after a $$$, see matchChildren).
func (p *Pattern) setLiterals() {
	add := func(text string) {
		if text != "" && !strings.Contains(text, "\n") && !slices.Contains(p.lits, text) {
			p.lits = append(p.lits, text)
		}
	}
	keyword := func(n *pnode) {
		if p.lang.VerbatimKeywords && isWord(n.text) && p.lang.kindName(n.kind) == n.text {
			add(n.text)
		}
	}
	eachRequiredLeaf(p.root, func(n *pnode, trivial bool) {
		if !trivial && n.named {
			add(n.text)
		} else {
			keyword(n)
		}
	})
	slices.SortStableFunc(p.lits, func(a, b string) int { return len(b) - len(a) })
	if len(p.lits) > 0 {
		p.literal = p.lits[0]
	}
}

// eachRequiredLeaf calls fn for every leaf of the pattern under n that
// every match contains: a leaf that is not a metavariable (trivial false)
// and a trivial child (trivial true) unless it follows a $$$, which the
// matcher may skip (see matchChildren). setLiterals and setPartial read
// the pattern's required texts through it.
func eachRequiredLeaf(n *pnode, fn func(n *pnode, trivial bool)) {
	switch {
	case n.meta != metaNone:
	case n.leaf:
		fn(n, false)
	default:
		afterMulti := false
		for _, c := range n.children {
			switch {
			case c.meta == metaMulti:
				afterMulti = true
			case c.trivial():
				if !afterMulti {
					fn(c, true)
				}
			default:
				afterMulti = false
				eachRequiredLeaf(c, fn)
			}
		}
	}
}

// setVars records the variables the pattern binds and the metavariables
// written inside its leaves.
func (p *Pattern) setVars(sigil rune) {
	var walk func(n, parent *pnode)
	walk = func(n, parent *pnode) {
		switch {
		case n.meta != metaNone:
			if n.name != "" && !slices.ContainsFunc(p.vars, func(v patVar) bool { return v.name == n.name }) {
				p.vars = append(p.vars, patVar{name: n.name, multi: n.meta == metaMulti})
			}
		case n.leaf:
			text := n.text
			if sigil != '$' {
				text = strings.ReplaceAll(text, string(sigil), "$")
			}
			for i := 0; i < len(text); i++ {
				if text[i] != '$' {
					continue
				}
				_, k, name := templateVar(text, i)
				if name == "" {
					continue
				}
				inString := strings.Contains(p.lang.kindName(n.kind), "string") ||
					(parent != nil && strings.Contains(p.lang.kindName(parent.kind), "string"))
				p.inert = append(p.inert, InertVar{Var: "$" + name, Leaf: text, InString: inString})
				i = k - 1
			}
		default:
			for _, c := range n.children {
				walk(c, n)
			}
		}
	}
	walk(p.root, nil)
}

// isWord reports whether s is an identifier-like token ("return", "def").
func isWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')) {
			return false
		}
	}
	return s != ""
}

// containsKind reports whether the subtree at i has a node of one of kinds.
func containsKind(t *tree, lang *Language, i int32, kinds []string) bool {
	end := t.nodes[i].end
	for j := i; int(j) < len(t.nodes) && (j == i || t.nodes[j].start < end); j++ {
		if t.nodes[j].start >= t.nodes[i].start && t.nodes[j].end <= end {
			name := lang.kindName(t.nodes[j].kind)
			for _, k := range kinds {
				if name == k {
					return true
				}
			}
		}
	}
	return false
}

// afterMetaVar reports whether the MISSING node i directly follows a sibling
// whose whole text is a metavariable.
func afterMetaVar(t *tree, i int32, sigil rune) bool {
	p := t.nodes[i].parent
	if p < 0 {
		return false
	}
	prev := int32(-1)
	for c := p + 1; c >= 0 && c != i; c = t.nodes[c].next {
		prev = c
	}
	if prev < 0 {
		return false
	}
	k, _ := metaVar(sigil, t.text(prev))
	return k != metaNone
}
