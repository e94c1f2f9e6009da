package lsp

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

// symbols searches the workspace (query) or lists a file's symbols.
func (s *Supervisor) symbols(ctx context.Context, in Input) (*tools.Result, error) {
	if in.Query == "" && in.File == "" {
		return nil, tools.Fail("symbols needs query (search the workspace by name) or file (list the file's symbols)")
	}
	if in.Start < 0 || in.Depth < 0 {
		return nil, tools.Fail("start and depth must be 0 or more")
	}
	if in.Query == "" {
		return s.documentSymbols(ctx, in)
	}
	var qs []*query
	defer func() {
		for _, q := range qs {
			q.release()
		}
	}()
	if in.File != "" {
		name, err := wspath.Name(s.root, in.File)
		if err != nil {
			return nil, err
		}
		q, err := s.query(ctx, name)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	} else {
		var err error
		if qs, err = s.workspaceServers(ctx); err != nil {
			return nil, err
		}
	}
	type sym struct {
		Name      string `json:"name"`
		Kind      string `json:"kind"`
		Container string `json:"container,omitempty"`
		Loc
		rank int
		text string
	}
	kinds := kindSet(in.Kind)
	var all []sym
	var without []string // servers that offer no workspace search
	sl := &sourceLines{s: s}
	for _, q := range qs {
		if !q.c.Supports("workspace/symbol") {
			without = append(without, q.in.spec.ID)
			continue
		}
		if err := q.crossFile(ctx); err != nil {
			return nil, err
		}
		syms, err := q.c.WorkspaceSymbols(ctx, in.Query)
		if err != nil {
			return nil, q.explain("symbols", err)
		}
		for _, si := range syms {
			if kinds != nil && !kinds[si.Kind.String()] {
				continue
			}
			lo, text := s.loc(ctx, sl, si.Location.URI, si.Location.Range, q.c.PositionEncoding())
			all = append(all, sym{Name: si.Name, Kind: si.Kind.String(), Container: si.ContainerName, Loc: lo, rank: matchRank(si.Name, in.Query, lo.File), text: text})
		}
	}
	if len(without) == len(qs) {
		return nil, tools.Fail("%s offers no workspace symbol search (workspace/symbol); list one file's symbols with file and no query, or search the text with ast_grep", strings.Join(without, " and "))
	}
	// Exact names first, the workspace's before the rest; the server's
	// order within each.
	slices.SortStableFunc(all, func(a, b sym) int { return a.rank - b.rank })
	head := fmt.Sprintf("workspace symbols matching %q", in.Query)
	if in.Kind != "" {
		head += " of kind " + in.Kind
	}
	var b strings.Builder
	for _, id := range without {
		fmt.Fprintf(&b, "note: %s offers no workspace symbol search; not asked\n", id)
	}
	if len(all) == 0 {
		return tools.Text(b.String() + head + ": none"), nil
	}
	total := len(all)
	from, to := window(total, in.Start, MaxWorkspaceSymbols)
	page := all[from:to]
	fmt.Fprintf(&b, "%s: %d", head, total)
	writeWindow(&b, total, from, to)
	b.WriteString("\n")
	for _, x := range page {
		fmt.Fprintf(&b, "%s %s", x.Kind, x.Name)
		if x.Container != "" {
			fmt.Fprintf(&b, " (in %s)", x.Container)
		}
		fmt.Fprintf(&b, "  %s:%d:%d", x.File, x.Line, x.Column)
		if x.text != "" {
			b.WriteString("  " + clipLine(x.text))
		}
		b.WriteString("\n")
	}
	writeMore(&b, total, to)
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = paged(map[string]any{"symbols": nonNil(page)}, total, from, to)
	return res, nil
}

// matchRank orders a workspace symbol for a query: its name (or the last
// part of a qualified one) equal to the query first, then equal but for
// case, then the rest; within each, workspace files before those outside.
func matchRank(name, query, file string) int {
	last := name
	if i := strings.LastIndexAny(name, ".:"); i >= 0 {
		last = name[i+1:]
	}
	r := 4
	switch {
	case name == query || last == query:
		r = 0
	case strings.EqualFold(name, query) || strings.EqualFold(last, query):
		r = 2
	}
	if strings.HasPrefix(file, "/") {
		r++ // outside the workspace
	}
	return r
}

// kindSet reads a comma-separated kind filter ("function,method"); nil
// when there is none.
func kindSet(kinds string) map[string]bool {
	var set map[string]bool
	for _, k := range strings.Split(kinds, ",") {
		if k = strings.ToLower(strings.TrimSpace(k)); k != "" {
			if set == nil {
				set = map[string]bool{}
			}
			set[k] = true
		}
	}
	return set
}

// workspaceServers returns ready servers for a workspace-wide question: the
// running ones, else those whose marker is at the workspace root.
func (s *Supervisor) workspaceServers(ctx context.Context) ([]*query, error) {
	var qs []*query
	for _, in := range s.instances() {
		if in.alive() {
			if err := in.waitReady(ctx, s.opts.QueryWait); err != nil {
				continue
			}
			if q, err := s.ready(ctx, in); err == nil {
				qs = append(qs, q)
			}
		}
	}
	if len(qs) > 0 {
		return qs, nil
	}
	choices, err := s.discover(ctx, ".", "", false)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{} // one server per language
	for _, c := range choices {
		lang := langSet(c.Server)
		// A server that would only fall back to the root is not started
		// for a question about the whole workspace: a Go workspace has no
		// Python to ask pylsp about.
		if !c.Usable() || c.Fallback || seen[lang] {
			continue
		}
		seen[lang] = true
		in, err := s.instance(ctx, c)
		if err != nil {
			return nil, err
		}
		if err := in.waitReady(ctx, s.opts.QueryWait); err != nil {
			return nil, err
		}
		q, err := s.ready(ctx, in)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	if len(qs) == 0 {
		return nil, tools.Fail("no language server is running and none applies at the workspace root; pass file to pick the project (lsp status shows what is missing)")
	}
	return qs, nil
}

func langSet(sv Server) string {
	var ls []string
	for _, l := range sv.Languages {
		ls = append(ls, l)
	}
	slices.Sort(ls)
	return strings.Join(slices.Compact(ls), ",")
}

// DefaultSymbolDepth is how many levels of a file's symbols are listed
// when depth is not given: top-level symbols and their members.
const DefaultSymbolDepth = 2

// documentSymbols lists a file's symbols with their kinds and lines: by
// default DefaultSymbolDepth levels without the locals of functions, else
// as deep as depth says (locals included), only of the kinds kind names,
// paged from start.
func (s *Supervisor) documentSymbols(ctx context.Context, in Input) (_ *tools.Result, err error) {
	name, q, _, err := s.opened(ctx, in.File)
	if err != nil {
		return nil, err
	}
	defer q.release()
	defer func() { err = q.died(err) }()
	tree, flat, err := q.c.DocumentSymbols(ctx, s.uriOf(name))
	if err != nil {
		return nil, q.explain("symbols", err)
	}
	type sym struct {
		Name    string `json:"name"`
		Kind    string `json:"kind"`
		Detail  string `json:"detail,omitempty"`
		Line    int    `json:"line"`
		EndLine int    `json:"end_line"`
		Depth   int    `json:"depth"`
	}
	depth, locals := in.Depth, true
	if depth == 0 {
		depth, locals = DefaultSymbolDepth, false
	}
	kinds := kindSet(in.Kind)
	var listed []sym
	total, deeper := 0, 0
	var walk func(scs []scope, level int, inFunc bool)
	walk = func(scs []scope, level int, inFunc bool) {
		for _, sc := range scs {
			total++
			line := sc.rng.Start.Line
			if sc.sel != nil {
				line = sc.sel.Start.Line
			}
			switch {
			case level >= depth || inFunc && !locals:
				deeper++
			case kinds == nil || kinds[sc.kind]:
				listed = append(listed, sym{Name: sc.name, Kind: sc.kind, Detail: sc.detail, Line: int(line) + 1, EndLine: lastLine(sc.rng), Depth: level})
			}
			walk(sc.children, level+1, inFunc || functionKinds[sc.kind])
		}
	}
	walk(append(fromTree(tree), nestFlat(flat)...), 0, false)
	head := "symbols of " + name
	if in.Kind != "" {
		head += " of kind " + in.Kind
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d", head, len(listed))
	from, to := window(len(listed), in.Start, MaxDocumentSymbols)
	writeWindow(&b, len(listed), from, to)
	if left := total - len(listed); left > 0 {
		var why []string
		if deeper > 0 {
			what := "deeper symbol"
			if !locals {
				what = "local or deeper symbol"
			}
			why = append(why, fmt.Sprintf("%s (depth %d lists more)", plural(deeper, what), depth+1))
		}
		if n := left - deeper; n > 0 {
			why = append(why, fmt.Sprintf("%d of other kinds", n))
		}
		fmt.Fprintf(&b, " (left out: %s)", strings.Join(why, "; "))
	}
	b.WriteString("\n")
	for _, x := range listed[from:to] {
		lines := strconv.Itoa(x.Line)
		if x.EndLine > x.Line {
			lines += "-" + strconv.Itoa(x.EndLine)
		}
		fmt.Fprintf(&b, "%s%s: %s %s", strings.Repeat("  ", x.Depth), lines, x.Kind, x.Name)
		if x.Detail != "" {
			b.WriteString("  " + clipLine(x.Detail))
		}
		b.WriteString("\n")
	}
	writeMore(&b, len(listed), to)
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = paged(map[string]any{"symbols": nonNil(listed[from:to]), "left_out": total - len(listed)}, len(listed), from, to)
	return res, nil
}

// lastLine is the 1-based last line of a range: a range that ends at the
// start of a line ends on the line before it.
func lastLine(r lspc.Range) int {
	if r.End.Character == 0 && r.End.Line > r.Start.Line {
		return int(r.End.Line)
	}
	return int(r.End.Line) + 1
}

// functionKinds are the symbol kinds whose children are locals.
var functionKinds = map[string]bool{"function": true, "method": true, "constructor": true}
