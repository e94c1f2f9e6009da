package lsp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

// RenameInput is the lsp_rename tool's arguments.
type RenameInput struct {
	File    string `json:"file" jsonschema:"the file where the symbol is, relative to the workspace"`
	Line    int    `json:"line" jsonschema:"1-based line of the symbol"`
	Symbol  string `json:"symbol" jsonschema:"the identifier on that line, whole (a part of one is refused); \"name#2\" picks its second occurrence"`
	NewName string `json:"new_name" jsonschema:"the new name"`
	// AllowIncomplete renames what the server linked even where the text
	// holds the name in files its edit leaves out.
	AllowIncomplete bool `json:"allow_incomplete,omitempty" jsonschema:"rename what the server linked even though the name also occurs in files its edit leaves out (which a first call names); default false: such a rename is refused and nothing changes"`
}

const renameDescription = `Rename a symbol across the project with the language server: every reference in every file changes, all or nothing. Give file, line (1-based), the whole identifier on that line, and new_name. The result counts the occurrences changed in each file and lists any new diagnostics. Unless the server type-checks the whole project (gopls), a rename whose edit leaves out files where the name occurs is refused, naming them; check them and call again with allow_incomplete: true to rename only what the server linked.`

// rename asks the server for a rename's WorkspaceEdit and applies it all
// or nothing through the file tools' write path (LSP-5).
func (s *Supervisor) rename(ctx context.Context, in RenameInput) (_ *tools.Result, err error) {
	if s.isClosed() {
		return nil, errClosed
	}
	if strings.TrimSpace(in.NewName) == "" {
		return nil, tools.Fail("new_name is required: the symbol's new name")
	}
	t, err := s.target(ctx, Input{Action: "lsp_rename", File: in.File, Line: in.Line, Symbol: in.Symbol})
	if err != nil {
		return nil, err
	}
	if len(t.partial) > 0 {
		return nil, tools.Fail("%q is only part of an identifier on line %d of %s: it is in %s. lsp_rename renames whole identifiers: pass the one you mean as symbol (\"name#2\" for its second occurrence on the line); nothing was changed",
			t.symbol, t.line, t.name, listSpans(t.partial, -1))
	}
	if t.ident != t.symbol {
		return nil, tools.Fail("symbol %q is not one identifier; it resolved to %q at %s. lsp_rename renames one identifier: pass it alone as symbol; nothing was changed", t.symbol, t.ident, t.at())
	}
	q, err := s.query(ctx, t.name)
	if err != nil {
		return nil, err
	}
	defer q.release()
	committed := false
	defer func() {
		if !committed {
			err = q.died(err)
		}
	}()
	if !q.c.Supports("textDocument/rename") {
		return nil, tools.Fail("%s does not offer rename; change the name with ast_edit or edit instead", q.in.spec.ID)
	}
	pos, err := q.position(ctx, t)
	if err != nil {
		return nil, err
	}
	if busy := q.stillIndexing(ctx); busy != "" {
		return nil, tools.Fail("%s is still indexing (%s): a rename now would miss the uses in the files it has not indexed yet; nothing was changed. Call lsp_rename again when lsp status no longer says indexing", q.in.key, busy)
	}
	uri := s.uriOf(t.name)
	if q.c.Supports("textDocument/prepareRename") {
		pr, err := q.c.PrepareRename(ctx, uri, pos)
		var re *lspc.ResponseError
		switch {
		case errors.As(err, &re):
			return nil, tools.Fail("%s cannot rename %q at %s: %s. Point at the identifier itself (its declaration or a use)", q.in.spec.ID, t.ident, t.at(), re.Message)
		case err != nil:
			return nil, q.explain("rename", err)
		case !pr.OK:
			return nil, tools.Fail("%s says %q at %s cannot be renamed (not an identifier it knows, or a name from outside the project); point at the identifier of a project symbol", q.in.spec.ID, t.ident, t.at())
		}
	}
	if err := q.openOccurrences(ctx, t.ident); err != nil {
		return nil, err
	}
	we, err := q.c.Rename(ctx, uri, pos, in.NewName)
	if err != nil {
		var re *lspc.ResponseError
		if errors.As(err, &re) {
			return nil, tools.Fail("%s refused to rename %q to %q: %s. Nothing was changed", q.in.spec.ID, t.ident, in.NewName, re.Message)
		}
		return nil, q.explain("rename", err)
	}
	if we == nil {
		return nil, tools.Fail("%s returned no edit for renaming %q at %s; nothing was changed. Check the position with lsp hover", q.in.spec.ID, t.ident, t.at())
	}
	plan, err := s.planEdit(ctx, q.c, *we)
	if err != nil {
		return nil, err
	}
	if len(plan.changes) == 0 {
		return tools.Textf("renaming %q (resolved at %s) to %q changes nothing", t.ident, t.at(), in.NewName), nil
	}
	if !in.AllowIncomplete {
		if gaps := s.renameGaps(ctx, q, t, plan); gaps != "" {
			return nil, tools.Fail("renaming %q to %q (resolved at %s): %s's edit changes %s, but %s. Nothing was changed. Look at them (lsp references, ast_grep), then call lsp_rename again with allow_incomplete: true to rename only what the server linked, and change the rest with edit or ast_edit if they are the same symbol",
				t.ident, in.NewName, t.at(), q.in.spec.ID, plural(len(plan.changes), "file"), gaps)
		}
	}
	committed = true
	if err := wspath.Commit(ctx, s.ws, plan.changes); err != nil {
		return nil, tools.Fail("renaming %q to %q: %v", t.ident, in.NewName, err)
	}
	var b strings.Builder
	var counts []string
	var fileRows []map[string]any
	var touched []string
	occurrences := 0
	for _, c := range plan.changes {
		n := plan.perFile[c.Path]
		occurrences += n.occurrences
		counts = append(counts, fmt.Sprintf("%s (%d)", c.Path, n.occurrences))
		row := map[string]any{"file": c.Path, "occurrences": n.occurrences, "edits": n.edits}
		switch {
		case c.Old == nil:
			fmt.Fprintf(&b, "\nA %s (created)", c.Path)
			row["created"] = true
		case c.New == nil:
			fmt.Fprintf(&b, "\nD %s (deleted)", c.Path)
			row["deleted"] = true
		case c.MoveTo != "":
			fmt.Fprintf(&b, "\nR %s -> %s", c.Path, c.MoveTo)
			row["moved_to"] = c.MoveTo
		}
		fileRows = append(fileRows, row)
		touched = append(touched, c.Path)
		if c.MoveTo != "" {
			touched = append(touched, c.MoveTo)
		}
	}
	head := fmt.Sprintf("renamed %q to %q (resolved at %s): %s in %s: %s", t.ident, in.NewName, t.at(), plural(occurrences, "occurrence"), plural(len(plan.changes), "file"), strings.Join(counts, ", "))
	res := tools.Text(head + b.String())
	res.Touched = touched
	res.StructuredContent = map[string]any{"files": fileRows, "occurrences": occurrences, "edits": plan.edits, "resolved": t.resolved()}
	return res, nil
}

// renameGaps says, for a server whose answers are checked against the
// text (verdict.go), which files hold ident as a whole word that plan
// leaves out: "" when none do.
func (s *Supervisor) renameGaps(ctx context.Context, q *query, t target, plan *editPlan) string {
	if q.in.spec.Exact {
		return ""
	}
	occ := q.textOccurrences(ctx, t.ident)
	changed := map[string]bool{}
	for _, c := range plan.changes {
		changed[c.Path] = true
	}
	missing := map[string]int{}
	for name, n := range occ.files {
		if name == t.name {
			n-- // the occurrence asked about
		}
		if n > 0 && !changed[name] {
			missing[name] = n
		}
	}
	if len(missing) == 0 && occ.unread == 0 {
		return ""
	}
	var b strings.Builder
	if len(missing) > 0 {
		fmt.Fprintf(&b, "%q also occurs as a whole word in %s the edit leaves out: %s (they may hold other symbols of the same name%s)", t.ident, plural(len(missing), "file"), listCounts(missing), q.likelyCause(ctx, t.name, missing))
	}
	if occ.unread > 0 {
		if b.Len() > 0 {
			b.WriteString(", and ")
		}
		fmt.Fprintf(&b, "berth ran out of time before it checked %d of the files for it", occ.unread)
	}
	return b.String()
}

// editPlan is a WorkspaceEdit turned into file changes.
type editPlan struct {
	changes []wspath.Change
	edits   int
	perFile map[string]fileCount // by Change.Path
}

// fileCount is what a WorkspaceEdit does to one file: the server's text
// edits, and the places in the text they change (one edit may rewrite a
// whole file for three renamed places).
type fileCount struct{ edits, occurrences int }

// fileState follows one file through a WorkspaceEdit's steps.
type fileState struct {
	orig string // workspace name before the edit; "" for a created file
	old  []byte // content before; nil for a created file
	cur  []byte // content after; nil when deleted
	path string // workspace name after
	n    int    // text edits applied
}

// planEdit computes every file's new content from a WorkspaceEdit, in
// memory, refusing anything outside the workspace.
func (s *Supervisor) planEdit(ctx context.Context, c *lspc.Client, we lspc.WorkspaceEdit) (*editPlan, error) {
	ops, err := we.Operations()
	if err != nil {
		return nil, fmt.Errorf("lsp: the server's edit cannot be read: %w; nothing was changed", err)
	}
	states := map[string]*fileState{} // by current name
	var order []*fileState
	nameOf := func(uri string) (string, error) {
		p, err := lspc.URIPath(uri)
		if err != nil {
			return "", tools.Fail("the server's edit names %s, which is not a file; nothing was changed", uri)
		}
		name, ok := s.rel(p)
		if !ok || name == "." {
			return "", tools.Fail("the server's edit would change %s, outside the workspace; nothing was changed", p)
		}
		if _, err := wspath.Name(s.root, p); err != nil {
			return "", err
		}
		return name, nil
	}
	exists := func(name string) (bool, error) {
		if st, ok := states[name]; ok {
			return st.cur != nil, nil
		}
		_, err := s.ws.Lstat(ctx, name)
		if isNotExist(err) {
			return false, nil
		}
		return err == nil, wspath.Explain(s.root, name, err)
	}
	get := func(name string) (*fileState, error) {
		if st, ok := states[name]; ok {
			if st.cur == nil {
				return nil, tools.Fail("the server's edit changes %s after deleting it; nothing was changed", name)
			}
			return st, nil
		}
		data, err := s.ws.ReadFile(ctx, name)
		if err != nil {
			return nil, wspath.Explain(s.root, name, err)
		}
		st := &fileState{orig: name, old: data, cur: data, path: name}
		states[name] = st
		order = append(order, st)
		return st, nil
	}
	edits := 0
	for _, op := range ops {
		switch {
		case op.Edit != nil:
			name, err := nameOf(op.Edit.TextDocument.URI)
			if err != nil {
				return nil, err
			}
			st, err := get(name)
			if err != nil {
				return nil, err
			}
			if v := op.Edit.TextDocument.Version; v != nil {
				if d, ok := c.Document(op.Edit.TextDocument.URI); ok && d.Version != *v {
					return nil, tools.Fail("the server's edit of %s is for version %d, but version %d is current; call again. Nothing was changed", name, *v, d.Version)
				}
			}
			out, err := applyEdits(st.cur, op.Edit.Edits, c.PositionEncoding())
			if err != nil {
				return nil, tools.Fail("the server's edit of %s cannot be applied: %v; nothing was changed", name, err)
			}
			st.cur = out
			st.n += len(op.Edit.Edits)
			edits += len(op.Edit.Edits)
		case op.Create != nil:
			name, err := nameOf(op.Create.URI)
			if err != nil {
				return nil, err
			}
			ok, err := exists(name)
			if err != nil {
				return nil, err
			}
			if ok {
				if o := op.Create.Options; o != nil && o.IgnoreIfExists {
					continue
				}
				return nil, tools.Fail("the server's edit creates %s, which exists; nothing was changed", name)
			}
			st := &fileState{cur: []byte{}, path: name}
			states[name] = st
			order = append(order, st)
		case op.Rename != nil:
			from, err := nameOf(op.Rename.OldURI)
			if err != nil {
				return nil, err
			}
			to, err := nameOf(op.Rename.NewURI)
			if err != nil {
				return nil, err
			}
			st, err := get(from)
			if err != nil {
				return nil, err
			}
			ok, err := exists(to)
			if err != nil {
				return nil, err
			}
			if ok {
				return nil, tools.Fail("the server's edit renames %s to %s, which exists; nothing was changed", from, to)
			}
			delete(states, from)
			st.path = to
			states[to] = st
		case op.Delete != nil:
			name, err := nameOf(op.Delete.URI)
			if err != nil {
				return nil, err
			}
			st, err := get(name)
			if err != nil {
				return nil, err
			}
			st.cur = nil
		}
	}
	plan := &editPlan{edits: edits, perFile: map[string]fileCount{}}
	for _, st := range order {
		var ch wspath.Change
		switch {
		case st.orig == "" && st.cur == nil:
			continue // created and deleted again
		case st.orig == "":
			ch = wspath.Change{Path: st.path, New: st.cur}
		case st.cur == nil:
			ch = wspath.Change{Path: st.orig, Old: st.old}
		default:
			if st.path == st.orig && bytes.Equal(st.old, st.cur) {
				continue
			}
			ch = wspath.Change{Path: st.orig, Old: st.old, New: st.cur}
			if st.path != st.orig {
				ch.MoveTo = st.path
			}
		}
		plan.changes = append(plan.changes, ch)
		plan.perFile[ch.Path] = fileCount{edits: st.n, occurrences: changedIdents(st.old, st.cur, dollarIdents[path.Ext(st.path)])}
	}
	slices.SortFunc(plan.changes, func(a, b wspath.Change) int { return strings.Compare(a.Path, b.Path) })
	return plan, nil
}

// changedIdents counts the identifiers a change of a file's text replaced:
// a rename keeps the sequence of identifiers but for the renamed ones, so
// those are the places that differ. When the sequences differ in length
// (the edit also added or removed code), it counts the identifiers that
// the new text has and the old one does not.
func changedIdents(old, cur []byte, dollar bool) int {
	a, b := idents(string(old), dollar), idents(string(cur), dollar)
	n := 0
	if len(a) == len(b) {
		for i := range a {
			if a[i] != b[i] {
				n++
			}
		}
		return n
	}
	have := map[string]int{}
	for _, id := range a {
		have[id]++
	}
	for _, id := range b {
		if have[id] > 0 {
			have[id]--
		} else {
			n++
		}
	}
	return n
}

// idents returns the identifiers of a text, in order.
func idents(text string, dollar bool) []string {
	var out []string
	start := -1
	for i, r := range text {
		switch {
		case isIdent(r, dollar) && start < 0:
			start = i
		case !isIdent(r, dollar) && start >= 0:
			out = append(out, text[start:i])
			start = -1
		}
	}
	if start >= 0 {
		out = append(out, text[start:])
	}
	return out
}

// applyEdits applies LSP text edits to text. Edits must not overlap; they
// are applied from the end so earlier offsets stay valid.
func applyEdits(text []byte, edits []lspc.TextEdit, enc string) ([]byte, error) {
	starts := []int{0}
	for i, b := range text {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	offset := func(p lspc.Position) (int, error) {
		if int(p.Line) >= len(starts) {
			if int(p.Line) == len(starts) && p.Character == 0 {
				return len(text), nil
			}
			return 0, fmt.Errorf("line %d is past the end (%d lines)", p.Line+1, len(starts))
		}
		start := starts[p.Line]
		end := len(text)
		if int(p.Line)+1 < len(starts) {
			end = starts[p.Line+1] - 1
		}
		return start + lspc.ByteOffset(string(text[start:end]), p.Character, enc), nil
	}
	type span struct {
		from, to int
		text     string
	}
	var spans []span
	for _, e := range edits {
		from, err := offset(e.Range.Start)
		if err != nil {
			return nil, err
		}
		to, err := offset(e.Range.End)
		if err != nil {
			return nil, err
		}
		if to < from {
			return nil, fmt.Errorf("an edit ends before it starts (line %d)", e.Range.Start.Line+1)
		}
		spans = append(spans, span{from, to, e.NewText})
	}
	slices.SortStableFunc(spans, func(a, b span) int { return a.from - b.from })
	for i := 1; i < len(spans); i++ {
		if spans[i].from < spans[i-1].to {
			return nil, fmt.Errorf("two edits overlap at byte %d", spans[i].from)
		}
	}
	var out bytes.Buffer
	last := 0
	for _, sp := range spans {
		out.Write(text[last:sp.from])
		out.WriteString(sp.text)
		last = sp.to
	}
	out.Write(text[last:])
	return out.Bytes(), nil
}
