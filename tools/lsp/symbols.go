package lsp

import (
	"context"
	"fmt"
	"slices"
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
	}
	var all []sym
	var texts []string
	sl := &sourceLines{s: s}
	for _, q := range qs {
		if !q.c.Supports("workspace/symbol") {
			continue
		}
		syms, err := q.c.WorkspaceSymbols(ctx, in.Query)
		if err != nil {
			return nil, q.explain("symbols", err)
		}
		for _, si := range syms {
			lo, text := s.loc(ctx, sl, si.Location.URI, si.Location.Range, q.c.PositionEncoding())
			all = append(all, sym{Name: si.Name, Kind: si.Kind.String(), Container: si.ContainerName, Loc: lo})
			texts = append(texts, text)
		}
	}
	head := fmt.Sprintf("workspace symbols matching %q", in.Query)
	if len(all) == 0 {
		return tools.Textf("%s: none", head), nil
	}
	total := len(all)
	all = all[:min(total, MaxWorkspaceSymbols)]
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d", head, total)
	if total > MaxWorkspaceSymbols {
		fmt.Fprintf(&b, ", the first %d shown", MaxWorkspaceSymbols)
	}
	b.WriteString("\n")
	for i, x := range all {
		fmt.Fprintf(&b, "%s %s", x.Kind, x.Name)
		if x.Container != "" {
			fmt.Fprintf(&b, " (in %s)", x.Container)
		}
		fmt.Fprintf(&b, "  %s:%d:%d", x.File, x.Line, x.Column)
		if texts[i] != "" {
			b.WriteString("  " + clipLine(texts[i]))
		}
		b.WriteString("\n")
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = map[string]any{"symbols": all, "total": total}
	return res, nil
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
		in, err := s.instance(c)
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
		Name   string `json:"name"`
		Kind   string `json:"kind"`
		Detail string `json:"detail,omitempty"`
		Line   int    `json:"line"`
		Depth  int    `json:"depth"`
	}
	var out []sym
	total := 0
	var walk func(ds []lspc.DocumentSymbol, depth int)
	walk = func(ds []lspc.DocumentSymbol, depth int) {
		for _, d := range ds {
			total++
			if len(out) < MaxDocumentSymbols {
				out = append(out, sym{Name: d.Name, Kind: d.Kind.String(), Detail: d.Detail, Line: int(d.SelectionRange.Start.Line) + 1, Depth: depth})
			}
			walk(d.Children, depth+1)
		}
	}
	walk(tree, 0)
	for _, f := range flat {
		total++
		if len(out) < MaxDocumentSymbols {
			depth := 0
			if f.ContainerName != "" {
				depth = 1
			}
			out = append(out, sym{Name: f.Name, Kind: f.Kind.String(), Line: int(f.Location.Range.Start.Line) + 1, Depth: depth})
		}
	}
	if total == 0 {
		return tools.Textf("symbols of %s: none", name), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "symbols of %s: %d", name, total)
	if total > MaxDocumentSymbols {
		fmt.Fprintf(&b, ", the first %d shown", MaxDocumentSymbols)
	}
	b.WriteString("\n")
	for _, x := range out {
		fmt.Fprintf(&b, "%s%d: %s %s", strings.Repeat("  ", x.Depth), x.Line, x.Kind, x.Name)
		if x.Detail != "" {
			b.WriteString("  " + clipLine(x.Detail))
		}
		b.WriteString("\n")
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = map[string]any{"symbols": out, "total": total}
	return res, nil
}
