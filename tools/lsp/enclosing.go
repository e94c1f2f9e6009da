package lsp

import (
	"context"
	"hash/maphash"
	"slices"
	"strings"
	"sync"

	lspc "berth.dev/berth/lsp"
)

// MaxEnclosingFiles caps the files whose symbols one call asks for, to
// name the symbol around each location; locations in further files are
// listed without it.
const MaxEnclosingFiles = 25

// enclosingKinds are the symbol kinds a location is said to be in.
var enclosingKinds = map[string]bool{"class": true, "method": true, "constructor": true, "interface": true, "function": true, "struct": true}

// scope is a symbol of a file as the encloser and the symbols action see
// it.
type scope struct {
	name     string
	kind     string
	detail   string
	rng      lspc.Range  // the whole symbol
	sel      *lspc.Range // its name; nil from a flat symbol list
	children []scope
}

// encloser names the symbol a location is in, from the server's
// documentSymbol tree of the location's file: one request per file, kept
// for the call and, while the file stays as it was, for later calls (see
// symCache).
type encloser struct {
	q     *query
	files map[string][]scope // by URI; nil when the server gave none
}

// MaxCachedSymbolFiles caps the files whose symbol trees a server's
// generation keeps between calls; past it the cache starts again empty.
const MaxCachedSymbolFiles = 512

// symCache keeps the scopes of files a call has asked the server for, so
// that the next call about the same unchanged files (a references call
// repeated after an edit elsewhere, a call hierarchy walked step by step)
// sends no documentSymbol request: asked anew, one costs about 0.5 ms per
// file (bench TestLSPReport), and references paid 2 ms for them. A file's
// symbols depend on its text alone, so an entry holds while that text
// does: an open document's text is hashed, a file the server reads from
// disk is known by the size and mtime the last refresh saw (the stamps by
// which the server itself is told of changes). A file that is neither is
// not cached. It belongs to a generation: a restarted server starts empty.
type symCache struct {
	mu    sync.Mutex
	files map[string]symEntry // by URI
}

type symEntry struct {
	ver    symVersion
	scopes []scope
}

// symVersion is what a file's text was when its symbols were asked for.
type symVersion struct {
	open bool
	hash uint64 // of an open document's text
	disk stamp  // of a file on disk
}

var symSeed = maphash.MakeSeed()

// symVersionOf says which text of uri the server has, and false when
// berth cannot tell (a file outside the stamps).
func (q *query) symVersionOf(uri string) (symVersion, bool) {
	if d, ok := q.c.Document(uri); ok {
		return symVersion{open: true, hash: maphash.String(symSeed, d.Text) ^ uint64(len(d.Text))}, true
	}
	p, err := lspc.URIPath(uri)
	if err != nil {
		return symVersion{}, false
	}
	name, ok := q.in.s.rel(p)
	if !ok {
		return symVersion{}, false
	}
	q.g.syncMu.Lock()
	st, ok := q.g.stamps[name]
	q.g.syncMu.Unlock()
	return symVersion{disk: st}, ok
}

// symbols returns uri's scopes from the cache, or asks the server.
func (q *query) symbols(ctx context.Context, uri string) []scope {
	ver, known := q.symVersionOf(uri)
	sc := &q.g.syms
	if known {
		sc.mu.Lock()
		e, ok := sc.files[uri]
		sc.mu.Unlock()
		if ok && e.ver == ver {
			return e.scopes
		}
	}
	tree, flat, err := q.c.DocumentSymbols(ctx, uri)
	if err != nil {
		return nil
	}
	scopes := append(fromTree(tree), nestFlat(flat)...)
	if known {
		sc.mu.Lock()
		if sc.files == nil || len(sc.files) >= MaxCachedSymbolFiles {
			sc.files = map[string]symEntry{}
		}
		sc.files[uri] = symEntry{ver, scopes}
		sc.mu.Unlock()
	}
	return scopes
}

func newEncloser(q *query) *encloser { return &encloser{q: q, files: map[string][]scope{}} }

// in returns the qualified name ("HTTPConnection.putheader") of the
// smallest function, method, class, struct, interface or constructor
// whose range holds p in uri, "" when there is none. A declaration's own
// name is in the symbol's parent. From a flat symbol list, whose ranges
// may be those of whole import statements, the first line of a symbol
// counts as its name.
func (e *encloser) in(ctx context.Context, uri string, p lspc.Position) string {
	scopes, ok := e.files[uri]
	if !ok {
		if len(e.files) >= MaxEnclosingFiles || !e.q.c.Supports("textDocument/documentSymbol") {
			return ""
		}
		scopes = e.q.symbols(ctx, uri)
		e.files[uri] = scopes
	}
	var names []string
	for {
		i := innermost(scopes, p)
		if i < 0 {
			break
		}
		sc := scopes[i]
		if sc.sel != nil && contains(*sc.sel, p) || sc.sel == nil && p.Line == sc.rng.Start.Line {
			break
		}
		if enclosingKinds[sc.kind] {
			names = append(names, sc.name)
		}
		scopes = sc.children
	}
	return strings.Join(names, ".")
}

// innermost returns the index of the scope whose range holds p (the
// smallest, when ranges of a flat list overlap), or -1.
func innermost(scopes []scope, p lspc.Position) int {
	best := -1
	for i, sc := range scopes {
		if contains(sc.rng, p) && (best < 0 || contains(scopes[best].rng, sc.rng.Start) && contains(scopes[best].rng, sc.rng.End)) {
			best = i
		}
	}
	return best
}

// contains reports whether r holds p; its end is inclusive, so a location
// at the end of a one-line range is in it.
func contains(r lspc.Range, p lspc.Position) bool {
	return !before(p, r.Start) && !before(r.End, p)
}

func before(a, b lspc.Position) bool {
	return a.Line < b.Line || a.Line == b.Line && a.Character < b.Character
}

func fromTree(ds []lspc.DocumentSymbol) []scope {
	out := make([]scope, 0, len(ds))
	for _, d := range ds {
		sel := d.SelectionRange
		out = append(out, scope{name: d.Name, kind: d.Kind.String(), detail: d.Detail, rng: d.Range, sel: &sel, children: fromTree(d.Children)})
	}
	return out
}

// nestFlat makes a tree of a flat symbol list by range: a symbol is the
// child of the smallest earlier one whose range holds its range.
func nestFlat(flat []lspc.SymbolInformation) []scope {
	var roots []scope
	var insert func(list *[]scope, sc scope)
	insert = func(list *[]scope, sc scope) {
		for i := range *list {
			r := (*list)[i].rng
			if contains(r, sc.rng.Start) && contains(r, sc.rng.End) && r != sc.rng {
				insert(&(*list)[i].children, sc)
				return
			}
		}
		*list = append(*list, sc)
	}
	for _, f := range sortedBySize(flat) {
		insert(&roots, scope{name: f.Name, kind: f.Kind.String(), rng: f.Location.Range})
	}
	return roots
}

// sortedBySize returns flat with outer symbols first: by start, then the
// longer range first.
func sortedBySize(flat []lspc.SymbolInformation) []lspc.SymbolInformation {
	out := slices.Clone(flat)
	slices.SortStableFunc(out, func(a, b lspc.SymbolInformation) int {
		ra, rb := a.Location.Range, b.Location.Range
		switch {
		case ra.Start != rb.Start:
			return boolInt(before(rb.Start, ra.Start)) - boolInt(before(ra.Start, rb.Start))
		default:
			return boolInt(before(ra.End, rb.End)) - boolInt(before(rb.End, ra.End))
		}
	})
	return out
}
