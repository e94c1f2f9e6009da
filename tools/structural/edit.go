package structural

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/syntax"
	"berth.dev/berth/tools"
	"berth.dev/berth/tools/workspace"
)

// diffContext is how many unchanged lines surround a change in Diff.
const diffContext = 3

// rule is a compiled Rule.
type rule struct {
	Rule
	n    int // 1-based, for messages
	pat  *syntax.Pattern
	tmpl *syntax.Template
	lits [][]byte
}

// rules returns the request's rules: Rules, or the one rule of Pattern,
// Rewrite and Transform.
func (req EditRequest) rules() ([]Rule, error) {
	if len(req.Rules) == 0 {
		return []Rule{{Pattern: req.Pattern, Rewrite: req.Rewrite, Transform: req.Transform}}, nil
	}
	if req.Pattern != "" || req.Rewrite != "" || len(req.Transform) > 0 {
		return nil, tools.Fail("give either pattern and rewrite (with transform) or rules, not both: put the first rewrite into rules as well")
	}
	return req.Rules, nil
}

// compileRules compiles every rule for t's language; the first rule's
// pattern is t's.
func compileRules(t *target, rs []Rule) ([]*rule, error) {
	out := make([]*rule, len(rs))
	for i, r := range rs {
		prefix := ""
		if len(rs) > 1 {
			prefix = fmt.Sprintf("rule %d: ", i+1)
		}
		pat := t.pat
		if i > 0 {
			if strings.TrimSpace(r.Pattern) == "" {
				return nil, tools.Fail("%sthe pattern is empty: give a code fragment such as foo($A)", prefix)
			}
			var err error
			if pat, err = syntax.Compile(t.lang, r.Pattern); err != nil {
				return nil, tools.Fail("%s%s", prefix, strings.TrimPrefix(err.Error(), "syntax: "))
			}
		}
		tr := make(map[string]syntax.Replace, len(r.Transform))
		for name, x := range r.Transform {
			tr[name] = syntax.Replace{Source: x.Source, Replace: x.Replace, By: x.By}
		}
		tmpl, err := syntax.NewTemplate(pat, r.Rewrite, tr)
		if err != nil {
			return nil, tools.Fail("%s%s", prefix, strings.TrimPrefix(err.Error(), "syntax: "))
		}
		cr := &rule{Rule: r, n: i + 1, pat: pat, tmpl: tmpl}
		for _, l := range pat.Literals() {
			cr.lits = append(cr.lits, []byte(l))
		}
		out[i] = cr
	}
	return out, nil
}

// Stage computes the rewrite of every match of req's rules under req.Path
// and stages it in the Engine under a new id (edit_1, edit_2, …), with every
// file's content as it was read. Nothing is written. Rules apply in order,
// each to the text the one before left, so a later rule sees (and may
// rewrite) what an earlier one wrote; the result is one proposal.
// A match whose rewrite is the text it has already is no replacement: it
// is counted in Proposal.Unchanged, and a file where nothing changes is not
// staged. Each rewritten file is parsed again, and syntax errors the
// rewrite brings in are reported in FileEdit.SyntaxWarnings; with
// req.RefuseSyntaxErrors they refuse the edit instead, naming the files and
// lines. A rewrite that uses a variable its pattern does not bind, or a
// transform that cannot work, is an error before anything is searched.
// When nothing matches, it returns a Proposal with no files and no id, and
// stages nothing.
func (e *Engine) Stage(ctx context.Context, fsys sandbox.FS, req EditRequest) (*Proposal, error) {
	rs, err := req.rules()
	if err != nil {
		return nil, err
	}
	t, err := e.prepare(ctx, fsys, rs[0].Pattern, req.Language, req.Path)
	if err != nil {
		return nil, err
	}
	rules, err := compileRules(t, rs)
	if err != nil {
		return nil, err
	}
	t.fresh = true
	if len(rules) > 1 {
		for _, r := range rules {
			t.prefilter = append(t.prefilter, r.lits)
		}
	}
	var (
		mu        sync.Mutex
		edits     []FileEdit
		unchanged int
		firstErr  error
	)
	st, err := e.scan(ctx, fsys, t, true, false, func(f *fileResult) {
		if len(rules) == 1 && len(f.matches) == 0 {
			return
		}
		fe, same, err := e.rewriteFile(ctx, t.lang, rules, f.data, f.tree, f.matches)
		if err == nil && fe != nil {
			fe.SyntaxWarnings, err = e.syntaxWarnings(ctx, t.lang, f.tree, fe)
		}
		mu.Lock()
		defer mu.Unlock()
		unchanged += same
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = tools.Fail("rewriting %s failed: %s; fix the rewrite", f.name, strings.TrimPrefix(err.Error(), "syntax: "))
			}
		case fe == nil:
		default:
			fe.Path, fe.Mode = f.name, f.info.Mode().Perm()
			edits = append(edits, *fe)
		}
	})
	if err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].Path < edits[j].Path })
	if req.RefuseSyntaxErrors {
		if err := refuseSyntaxErrors(edits); err != nil {
			return nil, err
		}
	}
	p := &Proposal{Language: t.lang.ID, Pattern: rs[0].Pattern, Rewrite: rs[0].Rewrite, Rules: rs, Files: edits, Unchanged: unchanged, Skipped: st.skipped, lang: t.lang, rules: rules}
	var diff strings.Builder
	for _, f := range edits {
		p.Replacements += f.Replacements
		diff.WriteString(UnifiedDiff(f.Path, f.Old, f.New, diffContext))
	}
	p.Diff = diff.String()
	if len(edits) == 0 {
		for _, r := range rules {
			if p.Hint = inertHint(r.pat); p.Hint != "" {
				break
			}
		}
		return p, nil
	}
	e.mu.Lock()
	e.nextID++
	p.ID = "edit_" + strconv.Itoa(e.nextID)
	e.pending[p.ID] = p
	e.gen++
	e.mu.Unlock()
	return p, nil
}

// rewriteFile applies rules in order to data, each to the text the one
// before left; tree and ms are data's parse and the first rule's matches
// when the scan has them (nil to parse here). A match whose rewrite is the
// text it has is no replacement: those are counted in unchanged. It returns
// a nil FileEdit when nothing changes; otherwise the FileEdit's Old,
// OldHash, New, Edits (composed into replacements of data) and
// Replacements.
func (e *Engine) rewriteFile(ctx context.Context, lang *syntax.Language, rules []*rule, data []byte, tree *syntax.Tree, ms []syntax.Match) (fe *FileEdit, unchanged int, err error) {
	cur := data
	var all []syntax.Edit
	n := 0
	for i, r := range rules {
		if i > 0 || tree == nil {
			if !containsAll(cur, r.lits) {
				continue
			}
			if tree == nil {
				var err error
				if tree, err = e.parse(ctx, lang, cur); err != nil {
					return nil, unchanged, err
				}
			}
			var err error
			if ms, err = r.pat.Match(ctx, tree); err != nil {
				return nil, unchanged, err
			}
		}
		if len(ms) == 0 {
			continue
		}
		ed, err := r.tmpl.Rewrite(cur, ms)
		if err != nil {
			return nil, unchanged, err
		}
		changed := ed[:0]
		for _, x := range ed {
			if x.Text == string(cur[x.StartByte:x.EndByte]) {
				unchanged++
				continue
			}
			changed = append(changed, x)
		}
		if len(changed) == 0 {
			continue
		}
		all = syntax.Compose(data, all, changed)
		n += len(changed)
		cur, tree = syntax.Apply(cur, changed), nil
	}
	if n == 0 || bytes.Equal(cur, data) {
		// Rules that undo each other leave the file as it was.
		return nil, unchanged + n, nil
	}
	return &FileEdit{Old: data, New: cur, OldHash: sha256.Sum256(data), Edits: all, Replacements: n}, unchanged, nil
}

// refuseSyntaxErrors is the error that refuses edits whose rewrite brings
// in syntax errors (FileEdit.SyntaxWarnings): it names the first places,
// with the rewritten line, and how many files have them; nil when none has.
func refuseSyntaxErrors(edits []FileEdit) error {
	var where []string
	files := 0
	for _, f := range edits {
		if len(f.SyntaxWarnings) == 0 {
			continue
		}
		files++
		for _, w := range f.SyntaxWarnings {
			if len(where) == maxSyntaxWarnings {
				break
			}
			line := strings.TrimSpace(lineText(f.New, w.Line))
			where = append(where, fmt.Sprintf("%s:%d: %s in `%s`", f.Path, w.Line, w.What, cut(line, MaxLineChars)))
		}
	}
	if files == 0 {
		return nil
	}
	return tools.Fail("the rewrite breaks the syntax of %s, so no edit was staged: %s. Fix the rewrite and run ast_edit again (narrow path or the pattern to leave out the matches it does not fit); if the code is valid and the grammar is wrong, make this change with edit",
		plural(files, "file"), strings.Join(where, "; "))
}

// lineText returns the 1-based line n of b, without its newline.
func lineText(b []byte, n int) string {
	for i := 1; i < n; i++ {
		k := bytes.IndexByte(b, '\n')
		if k < 0 {
			return ""
		}
		b = b[k+1:]
	}
	if k := bytes.IndexByte(b, '\n'); k >= 0 {
		b = b[:k]
	}
	return string(b)
}

// parse parses src within the per-file parse budget.
func (e *Engine) parse(ctx context.Context, lang *syntax.Language, src []byte) (*syntax.Tree, error) {
	pctx, cancel := context.WithTimeout(ctx, e.opts.ParseBudget)
	defer cancel()
	tree, err := syntax.Parse(pctx, lang, src)
	if err != nil && ctx.Err() == nil {
		return nil, fmt.Errorf("the rewritten text does not parse in time: %w", err)
	}
	return tree, err
}

// maxSyntaxWarnings bounds the warnings of one file.
const maxSyntaxWarnings = 3

// syntaxWarnings parses f.New and reports the syntax errors the rewrite
// brought in: errors on the lines an edit wrote, where the old content
// (old, f.Old's parse; nil to parse it here) had none on the lines it
// replaced; and when there are none such but the new content has more
// errors than the old, the first of them.
func (e *Engine) syntaxWarnings(ctx context.Context, lang *syntax.Language, old *syntax.Tree, f *FileEdit) ([]SyntaxWarning, error) {
	nt, err := e.parse(ctx, lang, f.New)
	if err != nil {
		return nil, err
	}
	nerrs := nt.SyntaxErrors()
	if len(nerrs) == 0 {
		return nil, nil
	}
	if old == nil {
		if old, err = e.parse(ctx, lang, f.Old); err != nil {
			return nil, err
		}
	}
	oerrs := old.SyntaxErrors()
	type region struct{ os, oe, ns, ne int } // line-aligned, in Old and in New
	var regs []region
	delta := 0
	for _, ed := range f.Edits {
		ns := ed.StartByte + delta
		regs = append(regs, region{
			lineStart(f.Old, ed.StartByte), lineEnd(f.Old, ed.EndByte),
			lineStart(f.New, ns), lineEnd(f.New, ns+len(ed.Text)),
		})
		delta += len(ed.Text) - (ed.EndByte - ed.StartByte)
	}
	hits := func(errs []syntax.SyntaxError, s, e int) bool {
		for _, x := range errs {
			if x.StartByte <= e && s <= x.EndByte {
				return true
			}
		}
		return false
	}
	var out []SyntaxWarning
	for _, x := range nerrs {
		for _, r := range regs {
			if x.StartByte <= r.ne && r.ns <= x.EndByte && !hits(oerrs, r.os, r.oe) {
				out = append(out, SyntaxWarning{Line: x.Start.Line + 1, What: describeSyntaxError(f.New, x)})
				break
			}
		}
		if len(out) == maxSyntaxWarnings {
			break
		}
	}
	if len(out) == 0 && len(nerrs) > len(oerrs) {
		x := nerrs[0]
		out = append(out, SyntaxWarning{Line: x.Start.Line + 1, What: fmt.Sprintf("%s (the rewritten file has %d syntax errors, the original %d)", describeSyntaxError(f.New, x), len(nerrs), len(oerrs))})
	}
	return out, nil
}

// describeSyntaxError says what a syntax error is, briefly.
func describeSyntaxError(src []byte, x syntax.SyntaxError) string {
	if x.Missing != "" {
		return fmt.Sprintf("missing %q", x.Missing)
	}
	text, _, _ := strings.Cut(string(src[x.StartByte:x.EndByte]), "\n")
	return fmt.Sprintf("cannot parse `%s`", cut(strings.TrimSpace(text), 60))
}

// lineStart and lineEnd widen a byte offset to the start of its line and
// the end of its line (before the newline).
func lineStart(b []byte, off int) int { return bytes.LastIndexByte(b[:off], '\n') + 1 }

func lineEnd(b []byte, off int) int {
	if i := bytes.IndexByte(b[off:], '\n'); i >= 0 {
		return off + i
	}
	return len(b)
}

// nonNil returns b, or an empty slice for nil.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Pending returns the ids of the staged edits not yet resolved, in order.
func (e *Engine) Pending() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pendingLocked()
}

func (e *Engine) pendingLocked() []string {
	ids := make([]string, 0, len(e.pending))
	for id := range e.pending {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(ids[i], "edit_"))
		b, _ := strconv.Atoi(strings.TrimPrefix(ids[j], "edit_"))
		return a < b
	})
	return ids
}

func (e *Engine) pendingHint() string {
	ids := e.pendingLocked()
	if len(ids) == 0 {
		return "no edit is pending; stage one with ast_edit"
	}
	return "pending edits: " + strings.Join(ids, ", ")
}

// take removes id from the pending edits for resolving it.
func (e *Engine) take(id string) (*Proposal, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.pending[id]
	if !ok {
		if state, ok := e.done[id]; ok {
			return nil, tools.Fail("edit_id %q was already %s; %s", id, state, e.pendingHint())
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(id, "edit_")); err == nil && e.lostFrom <= n && n <= e.lostTo {
			return nil, tools.Fail("unknown edit_id %q: berth restarted, and an edit staged just before the restart was not saved; stage it again with ast_edit; %s", id, e.pendingHint())
		}
		return nil, tools.Fail("unknown edit_id %q; %s", id, e.pendingHint())
	}
	delete(e.pending, id)
	e.resolving[id] = p
	e.done[id] = "being resolved"
	return p, nil
}

func (e *Engine) finish(id, state string) {
	e.mu.Lock()
	delete(e.resolving, id)
	e.done[id] = state
	e.gen++
	e.mu.Unlock()
}

// Resolve accepts or discards the staged edit id. accept re-reads every
// file and compares it with the content captured at staging: any difference
// refuses the whole edit, writes nothing and drops the edit. Otherwise every
// file is written (temporary file and rename, by the FS); when one write
// fails, the files already written get their old content back. discard
// drops the edit. Either way the id is resolved: a second Resolve of it is
// an error.
func (e *Engine) Resolve(ctx context.Context, fsys sandbox.FS, id, action string) (*Applied, error) {
	if action != ActionAccept && action != ActionDiscard {
		return nil, tools.Fail("unknown action %q: use %q to write the staged edit or %q to drop it", action, ActionAccept, ActionDiscard)
	}
	p, err := e.take(id)
	if err != nil {
		return nil, err
	}
	if action == ActionDiscard {
		e.finish(id, "discarded")
		return &Applied{ID: id, Action: ActionDiscard}, nil
	}
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	a, err := e.apply(ctx, fsys, p)
	if err != nil {
		if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			// Nothing refused the edit: the caller gave up. Keep it pending.
			e.mu.Lock()
			delete(e.done, id)
			delete(e.resolving, id)
			e.pending[id] = p
			e.mu.Unlock()
			return nil, err
		}
		e.finish(id, "refused (nothing was written)")
		return nil, err
	}
	e.finish(id, "accepted")
	return a, nil
}

// writeStep is one file's change by an accept: content with hash from
// became content with hash to by edits (byte ranges of the from content).
// Engine.written keeps them per file, so that an edit staged before another
// was accepted can be carried over what that accept wrote.
type writeStep struct {
	id       string
	from, to [sha256.Size]byte
	edits    []syntax.Edit
}

// maxWriteSteps bounds the steps kept per file.
const maxWriteSteps = 32

// maxConflictDiffLines bounds the diff a refusal shows per file.
const maxConflictDiffLines = 40

// apply checks and writes a proposal. A file whose content is no longer
// what it was at staging is refused, unless the change is berth's own: the
// content accepts of this Engine wrote since (e.written). Then the edit's
// replacements are carried over theirs (syntax.Rebase), or, where they
// overlap, the edit is refused with the diff it would stage now.
func (e *Engine) apply(ctx context.Context, fsys sandbox.FS, p *Proposal) (*Applied, error) {
	// Check every file before writing any.
	files := append([]FileEdit(nil), p.Files...)
	merged := make([][]string, len(files))
	var changed, redo []string
	for i, f := range files {
		now, err := e.current(ctx, fsys, f)
		if err != nil {
			var se *tools.Error
			if !errors.As(err, &se) {
				return nil, err
			}
			changed = append(changed, se.Msg)
			continue
		}
		if sha256.Sum256(now) == f.OldHash {
			continue
		}
		rf, ids, err := e.rebaseLocked(f, now)
		var ce *syntax.ConflictError
		switch {
		case err == nil:
			files[i], merged[i] = rf, ids
		case errors.As(err, &ce):
			changed = append(changed, fmt.Sprintf("%s was changed by %s, accepted since this edit was staged, at line %d, where this edit changes line %d",
				f.Path, strings.Join(ids, " and "), lineOf(f.Old, ce.Over.StartByte), lineOf(f.Old, ce.Edit.StartByte)))
			redo = append(redo, e.restageDiff(ctx, p, f.Path, now))
		case bytes.Equal(now, f.New):
			changed = append(changed, fmt.Sprintf("%s changed after staging: it already holds what this edit writes (was the edit accepted just before berth restarted?)", f.Path))
		default:
			changed = append(changed, fmt.Sprintf("%s changed after staging", f.Path))
		}
	}
	if len(redo) > 0 {
		return nil, tools.Fail("%s was refused and dropped, nothing was written: %s. Run ast_edit again with the same input to stage it over the current content; it would now stage:\n%s",
			p.ID, strings.Join(changed, "; "), strings.Join(redo, ""))
	}
	if len(changed) > 0 {
		return nil, tools.Fail("%s was refused and dropped, nothing was written: %s. Search again and stage a new edit with ast_edit.",
			p.ID, strings.Join(changed, "; "))
	}
	changes := make([]workspace.Change, len(files))
	for i, f := range files {
		// Old nil would create the file and New nil delete it: an empty
		// file is neither.
		changes[i] = workspace.Change{Path: f.Path, Old: nonNil(f.Old), New: nonNil(f.New), Perm: f.Mode}
	}
	err := workspace.Write(ctx, fsys, changes, workspace.WriteOptions{
		// Check again right before each write, to keep the window in
		// which another writer's change could be lost as short as
		// possible.
		Check: func(ctx context.Context, i int) error { return e.unchanged(ctx, fsys, files[i]) },
		// Restore only what still holds this edit's content: a file
		// another writer changed since is theirs now.
		KeepOthers: true,
	})
	var ce *workspace.CommitError
	if errors.As(err, &ce) {
		var bad []string
		for _, u := range ce.Undo {
			if errors.Is(u.Err, workspace.ErrChangedSince) {
				bad = append(bad, fmt.Sprintf("%s was changed by another writer after resolve wrote it and is left as that writer left it", u.Path))
			} else {
				bad = append(bad, fmt.Sprintf("%s could not be restored: %v", u.Path, u.Err))
			}
		}
		msg := ce.Err.Error()
		if len(bad) > 0 {
			return nil, tools.Fail("%s: writing %s failed: %s. Restoring the files already written failed too, so the workspace is partly rewritten: %s. Read those files and repair them.",
				p.ID, ce.Path, msg, strings.Join(bad, "; "))
		}
		return nil, tools.Fail("%s: writing %s failed: %s. Every file already written was restored; nothing changed. The edit is dropped; stage it again with ast_edit.",
			p.ID, ce.Path, msg)
	}
	if err != nil {
		return nil, err
	}
	a := &Applied{ID: p.ID, Action: ActionAccept, Replacements: p.Replacements}
	rctx := context.WithoutCancel(ctx)
	for i, f := range files {
		a.Files = append(a.Files, AppliedFile{Path: f.Path, Replacements: f.Replacements, MergedOver: merged[i]})
		if now, err := fsys.ReadFile(rctx, f.Path); err != nil || !bytes.Equal(now, f.New) {
			a.Warnings = append(a.Warnings, fmt.Sprintf("%s was changed again by another writer right after it was written; its content is that writer's, read it", f.Path))
			continue
		}
		steps := append(e.written[f.Path], writeStep{id: p.ID, from: f.OldHash, to: sha256.Sum256(f.New), edits: f.Edits})
		e.mu.Lock()
		e.written[f.Path] = steps[max(0, len(steps)-maxWriteSteps):]
		e.gen++
		e.mu.Unlock()
	}
	return a, nil
}

// rebaseLocked carries f, staged against content f.Old, over what accepts
// of this Engine wrote to the file since, which left it as now: it follows
// the recorded steps from f.Old to now, composes their edits, and rebases
// f's edits over them. It returns the rebased FileEdit (against now) and
// the ids of the accepts it was carried over; a *syntax.ConflictError (with
// those ids) when the edits overlap; another error when now is not what
// berth wrote. e.applyMu must be held.
func (e *Engine) rebaseLocked(f FileEdit, now []byte) (FileEdit, []string, error) {
	errChanged := errors.New("changed by another writer")
	steps := e.written[f.Path]
	at, to := f.OldHash, sha256.Sum256(now)
	var over []syntax.Edit
	var ids []string
	for n := 0; at != to; n++ {
		k := -1
		for j := len(steps) - 1; j >= 0; j-- {
			if steps[j].from == at {
				k = j
				break
			}
		}
		if k < 0 || n >= len(steps) {
			return FileEdit{}, nil, errChanged
		}
		over = syntax.Compose(f.Old, over, steps[k].edits)
		at = steps[k].to
		if !slices.Contains(ids, steps[k].id) {
			ids = append(ids, steps[k].id)
		}
	}
	if !bytes.Equal(syntax.Apply(f.Old, over), now) {
		return FileEdit{}, nil, errChanged
	}
	edits, err := syntax.Rebase(f.Edits, over)
	if err != nil {
		return FileEdit{}, ids, err
	}
	rf := f
	rf.Old, rf.OldHash, rf.Edits = now, to, edits
	rf.New = syntax.Apply(now, edits)
	return rf, ids, nil
}

// restageDiff is the diff p's rules would stage for path over its content
// now, for a refusal: bounded, or a sentence when they would change nothing.
func (e *Engine) restageDiff(ctx context.Context, p *Proposal, path string, now []byte) string {
	if p.rulesErr != nil {
		return fmt.Sprintf("(%s: the diff cannot be shown: %v)\n", path, p.rulesErr)
	}
	fe, _, err := e.rewriteFile(ctx, p.lang, p.rules, now, nil, nil)
	switch {
	case err != nil:
		return fmt.Sprintf("(%s: the rewrite of its current content fails: %s)\n", path, strings.TrimPrefix(err.Error(), "syntax: "))
	case fe == nil:
		return fmt.Sprintf("(nothing in %s: the rules no longer match anything there)\n", path)
	}
	lines := strings.SplitAfter(UnifiedDiff(path, now, fe.New, diffContext), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > maxConflictDiffLines {
		lines = append(lines[:maxConflictDiffLines], fmt.Sprintf("… %d more diff lines\n", len(lines)-maxConflictDiffLines))
	}
	return strings.Join(lines, "")
}

// lineOf returns the 1-based line of byte offset off in b.
func lineOf(b []byte, off int) int { return bytes.Count(b[:min(off, len(b))], []byte{'\n'}) + 1 }

// current reads f's file as it is now, after checking that it is still a
// regular file with a single link.
func (e *Engine) current(ctx context.Context, fsys sandbox.FS, f FileEdit) ([]byte, error) {
	fi, err := fsys.Lstat(ctx, f.Path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, tools.Fail("%s was removed after staging", f.Path)
		}
		return nil, fsError(fsys, f.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, tools.Fail("%s is no longer a regular file", f.Path)
	}
	if workspace.HardLinks(fi) > 1 {
		return nil, tools.Fail("%s has %d hard links now, which may reach outside the workspace", f.Path, workspace.HardLinks(fi))
	}
	now, err := fsys.ReadFile(ctx, f.Path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fsError(fsys, f.Path, err)
	}
	return now, nil
}

// unchanged checks that f on disk is still the regular file with the content
// f was made against.
func (e *Engine) unchanged(ctx context.Context, fsys sandbox.FS, f FileEdit) error {
	now, err := e.current(ctx, fsys, f)
	if err != nil {
		return err
	}
	if sha256.Sum256(now) != f.OldHash {
		return tools.Fail("%s changed after staging", f.Path)
	}
	return nil
}
