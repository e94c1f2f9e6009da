package lsp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
)

// Loc is a location as the tools report it in structuredContent.
type Loc struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	EndLine   int    `json:"end_line"`
	EndColumn int    `json:"end_column"`
	// In is the function, method or type the location is in
	// ("English.greet"), when the server's symbols say.
	In string `json:"in,omitempty"`
	// Calls is, for an outgoing call, the callee and where it is
	// ("Greeter.Greet greet/greet.go:5").
	Calls string `json:"calls,omitempty"`
}

// spot is where a position action asks: the action, its LSP method, the
// target, and the target's URI and position in the text the server has.
type spot struct {
	action, method string
	t              target
	start          int // the first item of a list to show (paging)
	uri            string
	pos            lspc.Position
	// also are the URIs of what the answer is about (the functions a call
	// hierarchy prepared), counted as covered by the verdict.
	also []string
}

// answer asks a ready server at a spot and renders the reply.
type answer func(s *Supervisor, ctx context.Context, q *query, at spot) (*tools.Result, error)

// navigation is the handler of a position action: it resolves file, line
// and symbol (LSP-2), readies the file's server and, when the server offers
// method, answers with ans.
func navigation(method string, ans answer) handler {
	return func(s *Supervisor, ctx context.Context, in Input) (*tools.Result, error) {
		t, q, err := s.aim(ctx, in)
		if err != nil {
			return nil, err
		}
		defer q.release()
		if in.Start < 0 {
			return nil, tools.Fail("start must be 0 or more: how many items of the list to skip")
		}
		res, err := s.navigate(ctx, q, spot{action: in.Action, method: method, t: t, start: in.Start}, ans)
		return res, q.died(err)
	}
}

// navigate answers a position action with a ready server.
func (s *Supervisor) navigate(ctx context.Context, q *query, at spot, ans answer) (*tools.Result, error) {
	if !q.c.Supports(at.method) {
		return nil, tools.Fail("%s does not offer %s (%s); try another action, such as references or hover", q.in.spec.ID, at.action, at.method)
	}
	pos, err := q.position(ctx, at.t)
	if err != nil {
		return nil, err
	}
	at.uri, at.pos = s.uriOf(at.t.name), pos
	res, err := ans(s, ctx, q, at)
	if err != nil {
		return nil, q.explain(at.action, err)
	}
	if at.t.note != "" {
		res.Content = append([]tools.Content{{Type: "text", Text: at.t.note}}, res.Content...)
	}
	if sc, ok := res.StructuredContent.(map[string]any); ok {
		sc["resolved"] = at.t.resolved()
	} else if res.StructuredContent == nil {
		res.StructuredContent = map[string]any{"resolved": at.t.resolved()}
	}
	return res, nil
}

// locationsAt answers definition, type_definition and implementation.
func (s *Supervisor) locationsAt(ctx context.Context, q *query, at spot) (*tools.Result, error) {
	if at.action == "definition" {
		// A server that knows only its open files answers a declaration
		// (a C prototype in a header) for a body it has not seen.
		if err := q.openOccurrences(ctx, at.t.ident); err != nil {
			return nil, err
		}
	}
	locs, err := q.c.Locations(ctx, at.method, at.uri, at.pos)
	if err != nil {
		return nil, err
	}
	return s.locations(ctx, q, at, sites(locs), "location", MaxLocations)
}

// references answers references: every use, the declaration included.
func (s *Supervisor) references(ctx context.Context, q *query, at spot) (*tools.Result, error) {
	if err := q.openOccurrences(ctx, at.t.ident); err != nil {
		return nil, err
	}
	if err := q.crossFile(ctx); err != nil {
		return nil, err
	}
	locs, err := q.c.References(ctx, at.uri, at.pos, true)
	if err != nil {
		return nil, err
	}
	return s.locations(ctx, q, at, sites(locs), "location", MaxReferences)
}

// calls answers incoming_calls (who calls the function at the spot: each
// call site, in its caller) and outgoing_calls (what it calls: each call
// site in it, with the callee), through the server's call hierarchy.
func calls(incoming bool) answer {
	return func(s *Supervisor, ctx context.Context, q *query, at spot) (*tools.Result, error) {
		if incoming {
			if err := q.openOccurrences(ctx, at.t.ident); err != nil {
				return nil, err
			}
		}
		if err := q.crossFile(ctx); err != nil {
			return nil, err
		}
		items, err := q.c.PrepareCallHierarchy(ctx, at.uri, at.pos)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			res := tools.Textf("%s: %s resolves no function or method here: the spot is not a function's name, or the server could not make sense of its declaration (a macro it does not know, a header it cannot find); point at a name in its declaration or at a call", at.t.head(strings.ReplaceAll(at.action, "_", " ")), q.in.spec.ID)
			if incoming {
				// Nothing linked is not "no callers": the text says where
				// the name occurs (calls of a function whose declaration
				// clangd cannot parse were left out whole).
				s.addVerdict(ctx, q, at, res, nil)
			}
			return res, nil
		}
		var all []site
		for i := range items {
			at.also = append(at.also, items[i].URI)
			if incoming {
				cs, err := q.c.IncomingCalls(ctx, items[i])
				if err != nil {
					return nil, err
				}
				for _, c := range cs {
					for _, r := range c.FromRanges {
						all = append(all, site{Location: lspc.Location{URI: c.Item.URI, Range: r}})
					}
				}
				continue
			}
			cs, err := q.c.OutgoingCalls(ctx, items[i])
			if err != nil {
				return nil, err
			}
			for j := range cs {
				for _, r := range cs[j].FromRanges {
					all = append(all, site{Location: lspc.Location{URI: items[i].URI, Range: r}, callee: &cs[j].Item})
				}
			}
		}
		return s.locations(ctx, q, at, all, "call", MaxCalls)
	}
}

// site is a location to list, and for an outgoing call what it calls.
type site struct {
	lspc.Location
	callee *lspc.CallHierarchyItem
}

func sites(locs []lspc.Location) []site {
	out := make([]site, len(locs))
	for i, l := range locs {
		out[i] = site{Location: l}
	}
	return out
}

// locations renders a list of sites grouped by file, with source lines
// and the symbol each is in (or, for outgoing calls, what it calls): the
// page from at.start of at most limit, counted as noun.
func (s *Supervisor) locations(ctx context.Context, q *query, at spot, all []site, noun string, limit int) (*tools.Result, error) {
	head := at.t.head(strings.ReplaceAll(at.action, "_", " "))
	if len(all) == 0 {
		res := tools.Textf("%s: none found", head)
		s.addVerdict(ctx, q, at, res, nil)
		return res, nil
	}
	enc := q.c.PositionEncoding()
	sl := &sourceLines{s: s}
	type row struct {
		lo   Loc
		text string
		src  site
	}
	rows := make([]row, 0, len(all))
	for _, x := range all {
		lo, text := s.loc(ctx, sl, x.URI, x.Range, enc)
		rows = append(rows, row{lo, text, x})
	}
	// Sort by file (workspace files first), then position; drop duplicates.
	slices.SortStableFunc(rows, func(a, b row) int {
		la, lb := a.lo, b.lo
		if wa, wb := strings.HasPrefix(la.File, "/"), strings.HasPrefix(lb.File, "/"); wa != wb {
			return boolInt(wa) - boolInt(wb)
		}
		if c := strings.Compare(la.File, lb.File); c != 0 {
			return c
		}
		if la.Line != lb.Line {
			return la.Line - lb.Line
		}
		return la.Column - lb.Column
	})
	rows = slices.CompactFunc(rows, func(a, b row) bool { return a.lo == b.lo && a.src.callee == b.src.callee })
	total := len(rows)
	from, to := window(total, at.start, limit)
	page := rows[from:to]
	en := newEncloser(q)
	shown := make([]Loc, len(page))
	texts := make([]string, len(page))
	for i, r := range page {
		lo := r.lo
		if c := r.src.callee; c != nil {
			where, _ := s.loc(ctx, sl, c.URI, c.SelectionRange, enc)
			name := c.Name
			if parent := en.in(ctx, c.URI, c.SelectionRange.Start); parent != "" {
				name = parent + "." + name
			}
			lo.Calls = fmt.Sprintf("%s %s:%d", name, where.File, where.Line)
		} else {
			lo.In = en.in(ctx, r.src.URI, r.src.Range.Start)
		}
		shown[i], texts[i] = lo, r.text
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", head, plural(total, noun))
	writeWindow(&b, total, from, to)
	b.WriteString(" in " + plural(countFiles(shown), "file") + "\n")
	writeGrouped(&b, shown, texts)
	writeMore(&b, total, to)
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = paged(map[string]any{"locations": nonNil(shown)}, total, from, to)
	files := make([]string, len(rows))
	for i, r := range rows {
		files[i] = r.lo.File
	}
	s.addVerdict(ctx, q, at, res, files)
	return res, nil
}

// addVerdict checks res, the answer at a spot naming files (workspace
// names, or absolute paths outside it), against the text (see verdict) and
// adds its note and its structuredContent ("verdict").
func (s *Supervisor) addVerdict(ctx context.Context, q *query, at spot, res *tools.Result, files []string) {
	covered := map[string]bool{}
	inWorkspace := false
	for _, f := range files {
		if !strings.HasPrefix(f, "/") {
			covered[f], inWorkspace = true, true
		}
	}
	// Where the question stands, one occurrence is the question itself.
	self := map[string]bool{at.t.name: true}
	for _, u := range at.also {
		if name, ok := s.nameOfURI(u); ok {
			self[name] = true
		}
	}
	note, v := s.verdict(ctx, q, at, covered, self, inWorkspace)
	if v == nil {
		return
	}
	if note != "" {
		res.Content = append(res.Content, tools.Content{Type: "text", Text: note})
	}
	if sc, ok := res.StructuredContent.(map[string]any); ok {
		sc["verdict"] = v
	} else if res.StructuredContent == nil {
		res.StructuredContent = map[string]any{"verdict": v}
	}
}

// window returns the part [from, to) of a list of total items that a page
// from start of at most limit shows.
func window(total, start, limit int) (from, to int) {
	from = min(start, total)
	return from, min(from+limit, total)
}

// writeWindow says which part of a list is shown, when not all of it is.
func writeWindow(b *strings.Builder, total, from, to int) {
	switch {
	case from == 0 && to < total:
		fmt.Fprintf(b, ", the first %d shown", to)
	case from > 0 && from == to:
		fmt.Fprintf(b, ", none from start %d", from)
	case from > 0:
		fmt.Fprintf(b, ", %d-%d shown", from+1, to)
	}
}

// writeMore says how many items follow a page, and how to see them.
func writeMore(b *strings.Builder, total, to int) {
	if to < total {
		fmt.Fprintf(b, "… and %d more not shown: call again with start %d", total-to, to)
	}
}

// paged adds to a list's structuredContent how long the list is, where
// the page starts and how many items follow it: the same counts as the
// text, and never the items past the page.
func paged(sc map[string]any, total, from, to int) map[string]any {
	sc["total"] = total
	if from > 0 {
		sc["start"] = from
	}
	if to < total {
		sc["more"] = total - to
	}
	return sc
}

func countFiles(ls []Loc) int {
	n := 0
	for i, l := range ls {
		if i == 0 || ls[i-1].File != l.File {
			n++
		}
	}
	return n
}

// writeGrouped writes locations under one header line per file.
func writeGrouped(b *strings.Builder, ls []Loc, texts []string) {
	for i, l := range ls {
		if i == 0 || ls[i-1].File != l.File {
			b.WriteString(l.File + "\n")
		}
		fmt.Fprintf(b, "  %d:%d", l.Line, l.Column)
		switch {
		case l.Calls != "":
			b.WriteString(" calls " + l.Calls)
		case l.In != "":
			b.WriteString(" in " + l.In)
		}
		if texts[i] != "" {
			b.WriteString("  " + clipLine(texts[i]))
		}
		b.WriteString("\n")
	}
}

// sourceLines reads files for showing locations, once per call.
type sourceLines struct {
	s     *Supervisor
	files map[string][]string
}

func (sl *sourceLines) line(ctx context.Context, abs string, line int) (string, bool) {
	if sl.files == nil {
		sl.files = map[string][]string{}
	}
	lines, ok := sl.files[abs]
	if !ok {
		data, err := sl.s.readAny(ctx, abs)
		if err == nil {
			lines = strings.Split(string(data), "\n")
		}
		sl.files[abs] = lines
	}
	if line < 0 || line >= len(lines) {
		return "", false
	}
	return strings.TrimSuffix(lines[line], "\r"), true
}

// loc converts an LSP range in uri into a 1-based line and byte column
// location with a workspace-relative (or, outside it, absolute) file.
func (s *Supervisor) loc(ctx context.Context, sl *sourceLines, uri string, r lspc.Range, enc string) (Loc, string) {
	p, err := lspc.URIPath(uri)
	if err != nil {
		return Loc{File: uri, Line: int(r.Start.Line) + 1, Column: int(r.Start.Character) + 1, EndLine: int(r.End.Line) + 1, EndColumn: int(r.End.Character) + 1}, ""
	}
	name, _ := s.rel(p)
	l := Loc{File: name, Line: int(r.Start.Line) + 1, EndLine: int(r.End.Line) + 1}
	text, ok := sl.line(ctx, p, int(r.Start.Line))
	l.Column = int(r.Start.Character) + 1
	if ok {
		l.Column = lspc.ByteOffset(text, r.Start.Character, enc) + 1
	}
	l.EndColumn = int(r.End.Character) + 1
	if et, ok := sl.line(ctx, p, int(r.End.Line)); ok {
		l.EndColumn = lspc.ByteOffset(et, r.End.Character, enc) + 1
	}
	return l, text
}

// nameOfURI returns the workspace name (or absolute path) of a URI.
func (s *Supervisor) nameOfURI(uri string) (string, bool) {
	p, err := lspc.URIPath(uri)
	if err != nil {
		return uri, false
	}
	return s.rel(p)
}

func clipLine(l string) string {
	l = strings.TrimSpace(l)
	if len(l) > MaxLineChars {
		return cutAt(l, MaxLineChars) + "…"
	}
	return l
}

// hover answers hover: the signature and doc at the spot.
func (s *Supervisor) hover(ctx context.Context, q *query, at spot) (*tools.Result, error) {
	t := at.t
	h, err := q.c.Hover(ctx, at.uri, at.pos)
	if err != nil {
		return nil, err
	}
	head := t.head("hover")
	if h == nil {
		return tools.Textf("%s: the server has nothing to show here", head), nil
	}
	text, err := h.Text()
	if err != nil {
		return nil, fmt.Errorf("reading %s's hover: %w", q.in.spec.ID, err)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return tools.Textf("%s: the server has nothing to show here", head), nil
	}
	if brief := briefHover(text); len(brief) < len(text) && s.foreignHover(ctx, q, at, brief) {
		// The docs of a builtin or a library, or of a local's type: the
		// signature and first paragraph say what the agent needs.
		text = brief + fmt.Sprintf("\n… (%d more characters of the docs of a symbol from outside the workspace)", len(text)-len(brief))
	} else if len(text) > MaxHoverChars {
		cut := cutAt(text, MaxHoverChars)
		text = cut + fmt.Sprintf("\n… (%d more characters)", len(text)-len(cut))
	}
	res := tools.Text(head + ":\n" + text)
	res.StructuredContent = map[string]any{"hover": text}
	return res, nil
}

// briefHover returns the signature and first paragraph of a hover: its
// leading code blocks and rules, then one paragraph of prose, at most
// MaxLibraryHoverChars of it.
func briefHover(text string) string {
	lines := strings.Split(text, "\n")
	n, fence, prose := 0, false, false
	for ; n < len(lines); n++ {
		l := strings.TrimSpace(lines[n])
		switch {
		case strings.HasPrefix(l, "```"):
			if prose && !fence {
				return cutAt(strings.Join(lines[:n], "\n"), MaxLibraryHoverChars)
			}
			fence = !fence
		case fence || l == "---":
		case l == "":
			if prose {
				return cutAt(strings.Join(lines[:n], "\n"), MaxLibraryHoverChars)
			}
		default:
			prose = true
		}
	}
	return cutAt(text, MaxLibraryHoverChars)
}

// foreignHover reports whether a hover shows the docs of something from
// outside the workspace: the identifier is not in its signature (a
// local's hover showing its type's docs), or its definition lies outside.
func (s *Supervisor) foreignHover(ctx context.Context, q *query, at spot, brief string) bool {
	if !strings.Contains(brief, at.t.ident) {
		return true
	}
	if !q.c.Supports("textDocument/definition") {
		return false
	}
	locs, err := q.c.Locations(ctx, "textDocument/definition", at.uri, at.pos)
	if err != nil || len(locs) == 0 {
		return false
	}
	for _, l := range locs {
		if name, ok := s.nameOfURI(l.URI); ok && name != "" {
			return false
		}
	}
	return true
}

// cutAt returns s cut to at most n bytes, at a rune boundary.
func cutAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.TrimRight(s[:n], " \n")
}

// codeActions answers code_actions: the server's fixes at the spot,
// listed and not applied.
func (s *Supervisor) codeActions(ctx context.Context, q *query, at spot) (*tools.Result, error) {
	t, uri, pos := at.t, at.uri, at.pos
	// Code actions are offered for the diagnostics at the position: make
	// sure those of the current text are in.
	if v, ok := q.c.Document(uri); ok {
		wctx, cancel := context.WithTimeout(ctx, s.opts.DiagnosticsWait)
		q.c.WaitDiagnostics(wctx, uri, v.Version)
		cancel()
	}
	end := pos
	end.Character = lspc.Character(t.lineText, t.byteCol+len(t.ident), q.c.PositionEncoding())
	rng := lspc.Range{Start: pos, End: end}
	var diags []lspc.Diagnostic
	if set, ok := q.c.Diagnostics(uri); ok {
		for _, d := range set.Diagnostics {
			if d.Range.Start.Line <= pos.Line && pos.Line <= d.Range.End.Line {
				diags = append(diags, d)
			}
		}
	}
	acts, err := q.c.CodeActions(ctx, uri, rng, diags)
	if err != nil {
		return nil, err
	}
	head := t.head("code actions")
	// Actions that only run an editor command (open documentation, toggle
	// a view) are of no use here; fixes with edits come first.
	hidden := 0
	acts = slices.DeleteFunc(acts, func(a lspc.CodeAction) bool {
		if a.Edit == nil && a.Command != nil {
			hidden++
			return true
		}
		return false
	})
	rank := func(a lspc.CodeAction) int {
		r := 0
		if !strings.HasPrefix(a.Kind, "quickfix") {
			r += 2
		}
		if !a.IsPreferred {
			r++
		}
		return r
	}
	slices.SortStableFunc(acts, func(a, b lspc.CodeAction) int { return rank(a) - rank(b) })
	if len(acts) == 0 {
		if hidden > 0 {
			return tools.Textf("%s: none with an edit (%d that only run editor commands not listed)", head, hidden), nil
		}
		return tools.Textf("%s: none offered", head), nil
	}
	type act struct {
		Title     string   `json:"title"`
		Kind      string   `json:"kind,omitempty"`
		Preferred bool     `json:"preferred,omitempty"`
		Disabled  string   `json:"disabled,omitempty"`
		Files     []string `json:"files,omitempty"`
		Command   string   `json:"command,omitempty"`
	}
	var out []act
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d offered", head, len(acts))
	if len(acts) > MaxCodeActions {
		fmt.Fprintf(&b, ", the first %d shown", MaxCodeActions)
	}
	if hidden > 0 {
		fmt.Fprintf(&b, " (and %d that only run editor commands, not listed)", hidden)
	}
	b.WriteString("; they are listed, not applied: make the change with edit or apply_patch\n")
	for i, a := range acts[:min(len(acts), MaxCodeActions)] {
		x := act{Title: a.Title, Kind: a.Kind, Preferred: a.IsPreferred}
		if a.Disabled != nil {
			x.Disabled = a.Disabled.Reason
		}
		if a.Edit != nil {
			if ops, err := a.Edit.Operations(); err == nil {
				for _, op := range ops {
					for _, u := range op.URIs() {
						n, _ := s.nameOfURI(u)
						if !slices.Contains(x.Files, n) {
							x.Files = append(x.Files, n)
						}
					}
				}
			}
		}
		if a.Command != nil {
			x.Command = a.Command.Command
		}
		out = append(out, x)
		fmt.Fprintf(&b, "%d. %s", i+1, a.Title)
		var tags []string
		if x.Kind != "" {
			tags = append(tags, x.Kind)
		}
		if x.Preferred {
			tags = append(tags, "preferred")
		}
		if x.Disabled != "" {
			tags = append(tags, "disabled: "+x.Disabled)
		}
		if len(x.Files) > 0 {
			tags = append(tags, "edits "+strings.Join(x.Files, ", "))
		} else if x.Command != "" {
			tags = append(tags, "runs server command "+x.Command)
		}
		if len(tags) > 0 {
			b.WriteString(" (" + strings.Join(tags, "; ") + ")")
		}
		b.WriteString("\n")
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = paged(map[string]any{"actions": out}, len(acts), 0, len(out))
	return res, nil
}
