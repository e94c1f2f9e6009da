package lsp

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/sandbox"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/internal/proc"
	"berth.dev/berth/tools/lsp/projectcheck"
	wspath "berth.dev/berth/tools/workspace"
)

// Caps of the lsp tool (docs/tools.md §2).
const (
	MaxReferences       = 50
	MaxWorkspaceSymbols = 100
	MaxDocumentSymbols  = 200
	MaxLocations        = 50
	MaxDiagnostics      = 200
	MaxCodeActions      = 50
	MaxHoverChars       = 4000
	// MaxLineChars caps a source line shown next to a location.
	MaxLineChars = 200
	// nearbyLines is how far around the given line a missing symbol is
	// looked for, to suggest the right line.
	nearbyLines = 10
)

// Input is the lsp tool's arguments.
type Input struct {
	Action string `json:"action" jsonschema:"diagnostics, definition, type_definition, implementation, references, hover, symbols, code_actions, status or reload"`
	File   string `json:"file,omitempty" jsonschema:"the file, relative to the workspace; \"*\" with diagnostics runs the project check"`
	Line   int    `json:"line,omitempty" jsonschema:"1-based line of the symbol"`
	Symbol string `json:"symbol,omitempty" jsonschema:"text of the symbol on that line (a substring); \"name#2\" picks its second occurrence on the line"`
	Query  string `json:"query,omitempty" jsonschema:"symbols: search the whole workspace for this name"`
}

// RenameInput is the lsp_rename tool's arguments.
type RenameInput struct {
	File    string `json:"file" jsonschema:"the file where the symbol is, relative to the workspace"`
	Line    int    `json:"line" jsonschema:"1-based line of the symbol"`
	Symbol  string `json:"symbol" jsonschema:"text of the symbol on that line; \"name#2\" picks its second occurrence"`
	NewName string `json:"new_name" jsonschema:"the new name"`
}

const description = `Ask the project's language server (gopls, pylsp, pyright, typescript-language-server, clangd, rust-analyzer, dart) running in the sandbox.
Positions are a 1-based line plus the symbol's text on that line — never a column.
- diagnostics file: errors and warnings of the file; file "*" runs the project check (go vet, cargo check, tsc, pyright/mypy).
- definition / type_definition / implementation / references / hover / code_actions: file, line, symbol.
- symbols: query searches the workspace (first 100); file lists the file's symbols (first 200).
- status: every server of the table here — root, marker, binary, running or why not.
- reload [file]: restart the server of this root (all running servers without file).`

const renameDescription = `Rename a symbol across the project with the language server: every reference in every file changes, all or nothing. Give file, line (1-based), the symbol's text on that line, and new_name. The result lists the files changed and any new diagnostics.`

// Register adds lsp (read) and lsp_rename (write) to r, bound to a new
// supervisor, and wraps the write tools with diagnostics on write. The
// caller closes the supervisor when the run closes.
func Register(r *tools.Registry, sb sandbox.Sandbox, ws sandbox.FS, runCtx context.Context, opts Options) *Supervisor {
	s := New(sb, ws, runCtx, opts)
	tools.Register(r, tools.Tool{Name: "lsp", Level: tools.LevelRead, Description: description}, retried(s.do))
	tools.Register(r, tools.Tool{Name: "lsp_rename", Level: tools.LevelWrite, Description: renameDescription}, retried(s.rename))
	r.Use(s.Middleware())
	return s
}

// Diag is a diagnostic as the tools report it in structuredContent.
type Diag struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	EndLine   int    `json:"end_line"`
	EndColumn int    `json:"end_column"`
	Severity  string `json:"severity"`
	Code      string `json:"code,omitempty"`
	Source    string `json:"source,omitempty"`
	Message   string `json:"message"`
}

// Loc is a location as the tools report it in structuredContent.
type Loc struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	EndLine   int    `json:"end_line"`
	EndColumn int    `json:"end_column"`
}

// retried is the handler of a tool of the supervisor's over h. When the
// server died under the call (killed, crashed) and nothing was changed, h
// runs once more, with a restarted server. Its error goes to the registry,
// which makes it the tool's error result, through forModel.
func retried[In any](h func(context.Context, In) (*tools.Result, error)) func(context.Context, In) (*tools.Result, error) {
	return func(ctx context.Context, in In) (*tools.Result, error) {
		res, err := h(ctx, in)
		if errors.Is(err, errDied) && ctx.Err() == nil {
			res, err = h(ctx, in)
		}
		return res, forModel(ctx, err)
	}
}

// forModel drops the "lsp: " that the errors of the protocol engine
// (package berth.dev/berth/lsp) and of the supervisor start with: the
// model called lsp, so the prefix tells it nothing. It is the one change
// made to an error on its way out; the call's end stays a call error.
func forModel(ctx context.Context, err error) error {
	if err == nil || tools.IsCallError(ctx, err) {
		return err
	}
	if msg, ok := strings.CutPrefix(err.Error(), "lsp: "); ok {
		return tools.Fail("%s", msg)
	}
	return err
}

// errDied marks a failure caused by the server's connection ending during
// the call; the call is retried once with a restarted server.
var errDied = errors.New("the language server died during the call")

// died wraps err with errDied when q's server connection has ended.
func (q *query) died(err error) error {
	if err == nil {
		return nil
	}
	select {
	case <-q.c.Done():
		return fmt.Errorf("%w: %w", errDied, err)
	default:
		return err
	}
}

// navigation maps the position actions to their LSP methods.
var navigation = map[string]string{
	"definition":      "textDocument/definition",
	"type_definition": "textDocument/typeDefinition",
	"implementation":  "textDocument/implementation",
	"references":      "textDocument/references",
	"hover":           "textDocument/hover",
	"code_actions":    "textDocument/codeAction",
}

func (s *Supervisor) do(ctx context.Context, in Input) (*tools.Result, error) {
	if s.isClosed() {
		return nil, tools.Fail("the run is closed; open a new run")
	}
	switch in.Action {
	case "status":
		return s.status(ctx, in)
	case "reload":
		return s.reloadAction(ctx, in)
	case "diagnostics":
		if in.File == "*" {
			return s.projectCheck(ctx)
		}
		return s.diagnostics(ctx, in)
	case "symbols":
		return s.symbols(ctx, in)
	case "":
		return nil, tools.Fail("action is required: one of diagnostics, definition, type_definition, implementation, references, hover, symbols, code_actions, status, reload")
	}
	method, ok := navigation[in.Action]
	if !ok {
		return nil, tools.Fail("unknown action %q: use one of diagnostics, definition, type_definition, implementation, references, hover, symbols, code_actions, status, reload", in.Action)
	}
	t, err := s.target(ctx, in)
	if err != nil {
		return nil, err
	}
	q, err := s.query(ctx, t.name)
	if err != nil {
		return nil, err
	}
	defer q.release()
	res, err := s.navigate(ctx, q, in, t, method)
	return res, q.died(err)
}

// navigate answers a position action with a ready server.
func (s *Supervisor) navigate(ctx context.Context, q *query, in Input, t target, method string) (*tools.Result, error) {
	if !q.c.Supports(method) {
		return nil, tools.Fail("%s does not offer %s (%s); try another action, such as references or hover", q.in.spec.ID, in.Action, method)
	}
	pos, err := q.position(ctx, t)
	if err != nil {
		return nil, err
	}
	uri := s.uriOf(t.name)
	var res *tools.Result
	switch in.Action {
	case "hover":
		res, err = s.hover(ctx, q, t, uri, pos)
	case "code_actions":
		res, err = s.codeActions(ctx, q, t, uri, pos)
	case "references":
		var locs []lspc.Location
		locs, err = q.c.References(ctx, uri, pos, true)
		if err == nil {
			res, err = s.locations(ctx, t, in.Action, locs, MaxReferences, q.c.PositionEncoding())
		}
	default:
		var locs []lspc.Location
		locs, err = q.c.Locations(ctx, method, uri, pos)
		if err == nil {
			res, err = s.locations(ctx, t, in.Action, locs, MaxLocations, q.c.PositionEncoding())
		}
	}
	if err != nil {
		return nil, q.explain(in.Action, err)
	}
	if t.note != "" {
		res.Content = append([]tools.Content{{Type: "text", Text: t.note}}, res.Content...)
	}
	return res, nil
}

// query is a server ready to answer for a file, with its view refreshed.
type query struct {
	in      *instance
	c       *lspc.Client
	release func()
}

// query finds, starts if needed, and refreshes the server of a workspace
// file.
func (s *Supervisor) query(ctx context.Context, name string) (*query, error) {
	in, err := s.serverFor(ctx, name, s.opts.QueryWait)
	if err != nil {
		if errors.Is(err, errStarting) {
			return nil, tools.Fail("%v; it is still indexing — call again in a moment (lsp status shows its progress)", err)
		}
		return nil, err
	}
	return s.ready(ctx, in)
}

func (s *Supervisor) ready(ctx context.Context, in *instance) (*query, error) {
	release := in.acquire()
	c, g, err := in.client()
	if err != nil {
		release()
		return nil, err
	}
	q := &query{in: in, c: c, release: release}
	if err := in.refresh(ctx, c, g); err != nil {
		release()
		return nil, q.died(err)
	}
	return q, nil
}

// explain turns a failed request into an instruction.
func (q *query) explain(action string, err error) error {
	var re *lspc.ResponseError
	switch {
	case errors.Is(err, lspc.ErrServerExited):
		return tools.Fail("%s exited while answering %s; call again and it is restarted (lsp status shows its last error)", q.in.key, action)
	case errors.As(err, &re):
		return tools.Fail("%s could not answer %s: %s", q.in.spec.ID, action, re.Message)
	}
	return err
}

// target is a resolved line+symbol position in a workspace file.
type target struct {
	name     string // workspace name
	line     int    // 1-based
	lineText string
	byteCol  int // 0-based byte offset of the symbol in lineText
	symbol   string
	note     string // what the model should know (first of several occurrences)
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
	sym, nth := in.Symbol, 1
	idxs := allIndex(lineText, sym)
	if m := occurrence.FindStringSubmatch(in.Symbol); m != nil && len(idxs) == 0 {
		sym = m[1]
		nth, _ = strconv.Atoi(m[2])
		idxs = allIndex(lineText, sym)
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
	if nth > len(idxs) {
		return target{}, tools.Fail("symbol %q occurs %d times on line %d of %s, not %d: %s", sym, len(idxs), in.Line, name, nth, quoteLine(lineText))
	}
	t.byteCol = idxs[nth-1]
	if len(idxs) > 1 {
		which := "the first"
		if nth > 1 {
			which = "occurrence " + strconv.Itoa(nth)
		}
		t.note = fmt.Sprintf("note: %q occurs %d times on line %d; used %s (column %d). Pass \"%s#2\" … \"%s#%d\" to pick another.",
			sym, len(idxs), in.Line, which, t.byteCol+1, sym, sym, len(idxs))
	}
	return t, nil
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

func quoteLine(l string) string {
	l = strings.TrimSpace(l)
	if len(l) > MaxLineChars {
		l = l[:MaxLineChars] + "…"
	}
	return "`" + l + "`"
}

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

// locations renders a location list grouped by file, with source lines.
func (s *Supervisor) locations(ctx context.Context, t target, action string, locs []lspc.Location, limit int, enc string) (*tools.Result, error) {
	what := strings.ReplaceAll(action, "_", " ")
	head := fmt.Sprintf("%s of %q (%s:%d)", what, t.symbol, t.name, t.line)
	if len(locs) == 0 {
		return tools.Textf("%s: none found", head), nil
	}
	sl := &sourceLines{s: s}
	var out []Loc
	var texts []string
	for _, l := range locs {
		lo, text := s.loc(ctx, sl, l.URI, l.Range, enc)
		out = append(out, lo)
		texts = append(texts, text)
	}
	// Sort by file (workspace files first), then position; drop duplicates.
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		la, lb := out[a], out[b]
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
	var sorted []Loc
	var stexts []string
	for _, i := range idx {
		if n := len(sorted); n > 0 && sorted[n-1] == out[i] {
			continue
		}
		sorted = append(sorted, out[i])
		stexts = append(stexts, texts[i])
	}
	total := len(sorted)
	shown := sorted[:min(total, limit)]
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", head, plural(total, "location"))
	if total > limit {
		fmt.Fprintf(&b, ", the first %d shown", limit)
	}
	b.WriteString(" in " + plural(countFiles(shown), "file") + "\n")
	writeGrouped(&b, shown, stexts)
	if total > limit {
		fmt.Fprintf(&b, "… and %d more not shown", total-limit)
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = map[string]any{"locations": nonNil(shown), "total": total}
	return res, nil
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
		if texts[i] != "" {
			b.WriteString("  " + clipLine(texts[i]))
		}
		b.WriteString("\n")
	}
}

func clipLine(l string) string {
	l = strings.TrimSpace(l)
	if len(l) > MaxLineChars {
		return l[:MaxLineChars] + "…"
	}
	return l
}

func (s *Supervisor) hover(ctx context.Context, q *query, t target, uri string, pos lspc.Position) (*tools.Result, error) {
	h, err := q.c.Hover(ctx, uri, pos)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("hover of %q (%s:%d)", t.symbol, t.name, t.line)
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
	if len(text) > MaxHoverChars {
		text = text[:MaxHoverChars] + fmt.Sprintf("\n… (%d more characters)", len(text)-MaxHoverChars)
	}
	res := tools.Text(head + ":\n" + text)
	res.StructuredContent = map[string]any{"hover": text}
	return res, nil
}

func (s *Supervisor) codeActions(ctx context.Context, q *query, t target, uri string, pos lspc.Position) (*tools.Result, error) {
	// Code actions are offered for the diagnostics at the position: make
	// sure those of the current text are in.
	if v, ok := q.c.Document(uri); ok {
		wctx, cancel := context.WithTimeout(ctx, s.opts.DiagnosticsWait)
		q.c.WaitDiagnostics(wctx, uri, v.Version)
		cancel()
	}
	end := pos
	end.Character = lspc.Character(t.lineText, t.byteCol+len(t.symbol), q.c.PositionEncoding())
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
	head := fmt.Sprintf("code actions at %q (%s:%d)", t.symbol, t.name, t.line)
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
	res.StructuredContent = map[string]any{"actions": out}
	return res, nil
}

// diagnostics lists a file's diagnostics, computed for its current text.
func (s *Supervisor) diagnostics(ctx context.Context, in Input) (_ *tools.Result, err error) {
	if in.File == "" {
		return nil, tools.Fail("file is required for diagnostics: a file relative to the workspace, or \"*\" for the project check")
	}
	name, err := wspath.Name(s.root, in.File)
	if err != nil {
		return nil, err
	}
	if _, err := s.ws.Stat(ctx, name); err != nil {
		return nil, wspath.Explain(s.root, name, err)
	}
	q, err := s.query(ctx, name)
	if err != nil {
		return nil, err
	}
	defer q.release()
	defer func() { err = q.died(err) }()
	_, v, err := q.in.open(ctx, q.c, name)
	if err != nil {
		return nil, wspath.Explain(s.root, name, err)
	}
	uri := s.uriOf(name)
	if late := s.settle(ctx, q.c, map[string]int32{uri: v}); len(late) > 0 {
		return nil, tools.Fail("%s sent no diagnostics for %s within %v; call again (lsp status shows whether it is still indexing)", q.in.spec.ID, name, s.opts.DiagnosticsWait)
	}
	set, _ := q.c.Diagnostics(uri)
	var found []located
	for _, d := range set.Diagnostics {
		found = append(found, locatedDiag(uri, d))
	}
	if len(found) == 0 {
		res := tools.Textf("diagnostics of %s (%s): none", name, q.in.spec.ID)
		res.StructuredContent = map[string]any{"diagnostics": []Diag{}}
		return res, nil
	}
	slices.SortStableFunc(found, func(a, b located) int {
		if a.d.Range.Start.Line != b.d.Range.Start.Line {
			return int(a.d.Range.Start.Line) - int(b.d.Range.Start.Line)
		}
		return int(a.d.Range.Start.Character) - int(b.d.Range.Start.Character)
	})
	text, ds := s.render(ctx, found, MaxDiagnostics, q.c.PositionEncoding())
	res := tools.Textf("diagnostics of %s (%s): %s\n%s", name, q.in.spec.ID, countSeverities(found), text)
	res.StructuredContent = map[string]any{"diagnostics": ds, "total": len(found)}
	return res, nil
}

func locatedDiag(uri string, d lspc.Diagnostic) located { return located{uri: uri, d: d} }

func countSeverities(ls []located) string {
	counts := map[string]int{}
	for _, l := range ls {
		counts[l.d.Severity.String()]++
	}
	var parts []string
	for _, sev := range []string{"error", "warning", "info", "hint", "unknown"} {
		if n := counts[sev]; n > 0 {
			parts = append(parts, plural(n, sev))
		}
	}
	return strings.Join(parts, ", ")
}

// diag converts a located diagnostic for structuredContent, with 1-based
// lines and byte columns.
func (s *Supervisor) diag(ctx context.Context, sl *sourceLines, l located, enc string) Diag {
	lo, _ := s.loc(ctx, sl, l.uri, l.d.Range, enc)
	return Diag{
		File: lo.File, Line: lo.Line, Column: lo.Column, EndLine: lo.EndLine, EndColumn: lo.EndColumn,
		Severity: l.d.Severity.String(), Code: l.d.CodeString(), Source: l.d.Source, Message: strings.TrimSpace(l.d.Message),
	}
}

// render writes diagnostics as "file:line:col: severity: message (source
// code)" with the source line, at most limit of them, and returns them for
// structuredContent too.
func (s *Supervisor) render(ctx context.Context, ls []located, limit int, enc string) (string, []Diag) {
	var b strings.Builder
	var out []Diag
	sl := &sourceLines{s: s}
	for _, l := range ls[:min(len(ls), limit)] {
		d := s.diag(ctx, sl, l, enc)
		out = append(out, d)
		msg := d.Message
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i] + " …"
		}
		fmt.Fprintf(&b, "%s:%d:%d: %s: %s", d.File, d.Line, d.Column, d.Severity, msg)
		var tag []string
		if d.Source != "" {
			tag = append(tag, d.Source)
		}
		if d.Code != "" {
			tag = append(tag, d.Code)
		}
		if len(tag) > 0 {
			b.WriteString(" (" + strings.Join(tag, " ") + ")")
		}
		b.WriteString("\n")
		if p, err := lspc.URIPath(l.uri); err == nil {
			if text, ok := sl.line(ctx, p, int(l.d.Range.Start.Line)); ok && strings.TrimSpace(text) != "" {
				b.WriteString("    " + clipLine(text) + "\n")
			}
		}
	}
	if len(ls) > limit {
		fmt.Fprintf(&b, "… and %d more\n", len(ls)-limit)
	}
	return strings.TrimRight(b.String(), "\n"), out
}

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
		if !c.Usable() || seen[lang] {
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
	name, err := wspath.Name(s.root, in.File)
	if err != nil {
		return nil, err
	}
	if _, err := s.ws.Stat(ctx, name); err != nil {
		return nil, wspath.Explain(s.root, name, err)
	}
	q, err := s.query(ctx, name)
	if err != nil {
		return nil, err
	}
	defer q.release()
	defer func() { err = q.died(err) }()
	if _, _, err := q.in.open(ctx, q.c, name); err != nil {
		return nil, wspath.Explain(s.root, name, err)
	}
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

// status lists every server of the table for the workspace (or for file's
// directory), and every running server.
func (s *Supervisor) status(ctx context.Context, in Input) (*tools.Result, error) {
	dir := "."
	if in.File != "" && in.File != "*" {
		name, err := wspath.Name(s.root, in.File)
		if err != nil {
			return nil, err
		}
		dir = name
		if fi, err := s.ws.Stat(ctx, name); err == nil && !fi.IsDir() {
			dir = path.Dir(name)
		}
	}
	choices, err := s.discover(ctx, dir, "", true)
	if err != nil {
		return nil, err
	}
	type row struct {
		Server   string `json:"server"`
		Root     string `json:"root,omitempty"`
		Marker   string `json:"marker,omitempty"`
		Binary   string `json:"binary,omitempty"`
		Missing  string `json:"missing,omitempty"`
		State    string `json:"state"`
		Pid      int    `json:"pid,omitempty"`
		Uptime   string `json:"uptime,omitempty"`
		Restarts int    `json:"restarts"`
		LastErr  string `json:"last_error,omitempty"`
		Indexing string `json:"indexing,omitempty"`
	}
	var rows []row
	covered := map[key]bool{}
	insts := map[key]*instance{}
	for _, in := range s.instances() {
		insts[in.key] = in
	}
	fill := func(r *row, in *instance) {
		st := in.state()
		r.Restarts, r.LastErr = st.restarts, st.lastErr
		switch {
		case st.gaveUp:
			r.State = fmt.Sprintf("given up after %d crashes in %v; reload to try again", MaxCrashes, CrashWindow)
		case !st.started:
			r.State = "not running"
		case st.stopped != "":
			r.State = "stopped: " + st.stopped
		case !st.ready:
			r.State = "starting"
			r.Pid = st.pid
		case st.startErr != nil:
			r.State = "failed to start"
			r.LastErr = st.startErr.Error()
		case !st.alive:
			r.State = "exited; restarted on the next call"
		default:
			r.State = "running"
			r.Pid = st.pid
			r.Uptime = time.Since(st.up).Round(time.Second).String()
			r.Binary = st.binary
			var ps []string
			for _, p := range st.progress {
				x := p.Title
				if p.Message != "" {
					x += ": " + p.Message
				}
				if p.Percentage != nil {
					x += fmt.Sprintf(" (%d%%)", *p.Percentage)
				}
				ps = append(ps, x)
			}
			r.Indexing = strings.Join(ps, "; ")
		}
	}
	for _, c := range choices {
		r := row{Server: c.Server.ID, Root: c.Root, Marker: c.Marker, Binary: c.Binary, Missing: c.Missing, State: "not running"}
		if c.Root != "" {
			if in := insts[c.key()]; in != nil {
				covered[c.key()] = true
				fill(&r, in)
			}
		}
		if c.Missing != "" && r.State == "not running" {
			r.State = "unavailable"
		}
		rows = append(rows, r)
	}
	for k, in := range insts {
		if !covered[k] {
			r := row{Server: k.id, Root: k.root, Marker: "", State: "not running"}
			fill(&r, in)
			rows = append(rows, r)
		}
	}
	var b strings.Builder
	where := "the workspace root"
	if dir != "." {
		where = dir + "/"
	}
	fmt.Fprintf(&b, "language servers for %s:\n", where)
	var absent []string
	for _, r := range rows {
		if r.State == "unavailable" && r.Marker == "" && r.Binary == "" {
			absent = append(absent, r.Server)
			continue
		}
		fmt.Fprintf(&b, "%s: %s", r.Server, r.State)
		if r.Root != "" {
			fmt.Fprintf(&b, "; root %s", showRoot(r.Root))
			if r.Marker != "" {
				fmt.Fprintf(&b, " (%s)", r.Marker)
			}
		}
		if r.Binary != "" {
			fmt.Fprintf(&b, "; binary %s", r.Binary)
		}
		if r.Pid != 0 {
			fmt.Fprintf(&b, "; pid %d", r.Pid)
		}
		if r.Uptime != "" {
			fmt.Fprintf(&b, "; up %s", r.Uptime)
		}
		if r.Restarts > 0 {
			fmt.Fprintf(&b, "; restarts %d", r.Restarts)
		}
		if r.Indexing != "" {
			fmt.Fprintf(&b, "; indexing: %s", r.Indexing)
		}
		if r.Missing != "" {
			fmt.Fprintf(&b, "; %s", r.Missing)
		}
		if r.LastErr != "" {
			fmt.Fprintf(&b, "; last error: %s", proc.Clip(r.LastErr, 400))
		}
		b.WriteString("\n")
	}
	if len(absent) > 0 {
		fmt.Fprintf(&b, "neither marker nor binary here: %s\n", strings.Join(absent, ", "))
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = map[string]any{"servers": rows}
	return res, nil
}

// reloadAction restarts the server of file's root, or every running one.
func (s *Supervisor) reloadAction(ctx context.Context, in Input) (*tools.Result, error) {
	var targets []*instance
	if in.File != "" {
		name, err := wspath.Name(s.root, in.File)
		if err != nil {
			return nil, err
		}
		inst, err := s.serverFor(ctx, name, 0)
		if err != nil && !errors.Is(err, errStarting) {
			return nil, err
		}
		targets = append(targets, inst)
	} else {
		targets = s.instances()
		if len(targets) == 0 {
			return nil, tools.Fail("no language server has been started in this run; pass file to reload (and start) the server of that file's project")
		}
	}
	var b strings.Builder
	for _, t := range targets {
		oldPid := t.state().pid
		if err := t.reload(ctx); err != nil {
			return nil, err
		}
		if err := t.waitReady(ctx, s.opts.QueryWait); err != nil {
			fmt.Fprintf(&b, "%s: restarting, not ready yet: %v\n", t.key, err)
			continue
		}
		fmt.Fprintf(&b, "%s: restarted (pid %d, was %d)\n", t.key, t.state().pid, oldPid)
	}
	return tools.Text(strings.TrimRight(b.String(), "\n")), nil
}

// projectCheck runs the project's own checks (diagnostics "*"): one
// checker per language whose marker is at the workspace root and whose
// program resolves in the sandbox. On the host no program of the workspace
// is chosen, and a check that executes project code runs only as an
// approved exec-level step (projectcheck.Run asks); a refused one is
// reported and the others still run.
func (s *Supervisor) projectCheck(ctx context.Context) (*tools.Result, error) {
	apps, missing, err := projectcheck.Find(ctx, s.sb, s.root, s.root, projectcheck.Options{Host: s.opts.Host})
	if err != nil {
		return nil, err
	}
	if len(apps) == 0 {
		var why []string
		for _, m := range missing {
			why = append(why, m.Language+": "+m.Reason)
		}
		return nil, tools.Fail("no project check applies at the workspace root: %s. Ask for one file's diagnostics instead (lsp diagnostics with file)", strings.Join(why, "; "))
	}
	var b strings.Builder
	var all []Diag
	var results []*projectcheck.Result
	var refused []string
	sl := &sourceLines{s: s}
	for _, m := range missing {
		if len(m.Skipped) > 0 {
			fmt.Fprintf(&b, "%s: not checked: %s\n", m.Language, strings.TrimPrefix(m.Reason, "binary missing: "))
		}
	}
	for _, a := range apps {
		r, err := projectcheck.Run(ctx, s.sb, a)
		if errors.Is(err, tools.ErrStepRefused) {
			refused = append(refused, err.Error())
			fmt.Fprintf(&b, "%s: not run: %v\n", a.Checker, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		results = append(results, r)
		for _, why := range r.Skipped {
			fmt.Fprintf(&b, "%s: skipped %s\n", a.Checker, why)
		}
		if r.Interpreter != "" {
			fmt.Fprintf(&b, "%s: interpreter %s\n", a.Checker, r.Interpreter)
		}
		fmt.Fprintf(&b, "%s (%s, %s): ", a.Checker, a.Command, r.Status)
		switch {
		case r.Total == 0 && r.Status.Success():
			b.WriteString("no problems\n")
		case r.Total == 0:
			b.WriteString("failed without reporting a problem it could place; its output:\n" + r.Unparsed + "\n")
		default:
			fmt.Fprintf(&b, "%s", plural(r.Total, "problem"))
			if r.Total > len(r.Diagnostics) {
				fmt.Fprintf(&b, ", the first %d shown", len(r.Diagnostics))
			}
			b.WriteString("\n")
		}
		if r.TimedOut {
			fmt.Fprintf(&b, "(stopped after %v; what it printed until then is shown)\n", projectcheck.CheckTimeout)
		}
		for _, d := range r.Diagnostics {
			name := d.File
			if n, ok := s.rel(d.File); ok {
				name = n
			}
			x := Diag{File: name, Line: d.Line, Column: d.Column, EndLine: d.EndLine, EndColumn: d.EndColumn, Severity: d.Severity, Code: d.Code, Source: d.Source, Message: d.Message}
			all = append(all, x)
			msg := x.Message
			if i := strings.IndexByte(msg, '\n'); i >= 0 {
				msg = msg[:i] + " …"
			}
			switch {
			case x.File == "":
				fmt.Fprintf(&b, "%s: %s", x.Severity, msg)
			case x.Column > 0:
				fmt.Fprintf(&b, "%s:%d:%d: %s: %s", x.File, x.Line, x.Column, x.Severity, msg)
			default:
				fmt.Fprintf(&b, "%s:%d: %s: %s", x.File, x.Line, x.Severity, msg)
			}
			if x.Code != "" {
				b.WriteString(" (" + x.Code + ")")
			}
			b.WriteString("\n")
			if x.File != "" && x.Line > 0 {
				if text, ok := sl.line(ctx, d.File, x.Line-1); ok && strings.TrimSpace(text) != "" {
					b.WriteString("    " + clipLine(text) + "\n")
				}
			}
		}
	}
	if len(results) == 0 {
		return nil, tools.Fail("no project check ran at the workspace root: %s. Ask for one file's diagnostics instead (lsp diagnostics with file)", strings.TrimRight(b.String(), "\n"))
	}
	res := tools.Text(strings.TrimRight(b.String(), "\n"))
	res.StructuredContent = map[string]any{"diagnostics": nonNil(all), "checks": results, "refused": refused}
	return res, nil
}
