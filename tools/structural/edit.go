package structural

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
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

// Stage computes the rewrite of every match of req.Pattern under req.Path
// and stages it in the Engine under a new id (edit_1, edit_2, …), with every
// file's content as it was read. Nothing is written. When nothing matches,
// it returns a Proposal with no files and no id, and stages nothing.
func (e *Engine) Stage(ctx context.Context, fsys sandbox.FS, req EditRequest) (*Proposal, error) {
	t, err := e.prepare(ctx, fsys, req.Pattern, req.Language, req.Path)
	if err != nil {
		return nil, err
	}
	t.fresh = true
	var (
		mu       sync.Mutex
		edits    []FileEdit
		firstErr error
		links    int
	)
	st, err := e.scan(ctx, fsys, t, true, func(f *fileResult) {
		if len(f.matches) == 0 {
			return
		}
		if workspace.HardLinks(f.info) > 1 {
			mu.Lock()
			links++
			mu.Unlock()
			return
		}
		ed, err := syntax.Rewrite(f.data, f.matches, req.Rewrite)
		var out []byte
		if err == nil {
			out = syntax.Apply(f.data, ed)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if firstErr == nil {
				firstErr = tools.Fail("rewriting %s failed: %s; fix the rewrite template", f.name, strings.TrimPrefix(err.Error(), "syntax: "))
			}
			return
		}
		if bytes.Equal(out, f.data) {
			return
		}
		edits = append(edits, FileEdit{
			Path: f.name, Old: f.data, New: out, OldHash: sha256.Sum256(f.data),
			Mode: f.info.Mode().Perm(), Replacements: len(ed),
		})
	})
	if err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if links > 0 {
		st.skipped[SkipHardLinks] += links
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].Path < edits[j].Path })
	p := &Proposal{Language: t.lang.ID, Pattern: req.Pattern, Rewrite: req.Rewrite, Files: edits, Skipped: st.skipped}
	var diff strings.Builder
	for _, f := range edits {
		p.Replacements += f.Replacements
		diff.WriteString(UnifiedDiff(f.Path, f.Old, f.New, diffContext))
	}
	p.Diff = diff.String()
	if len(edits) == 0 {
		return p, nil
	}
	e.mu.Lock()
	e.nextID++
	p.ID = "edit_" + strconv.Itoa(e.nextID)
	e.pending[p.ID] = p
	e.mu.Unlock()
	return p, nil
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
		return nil, tools.Fail("unknown edit_id %q; %s", id, e.pendingHint())
	}
	delete(e.pending, id)
	e.done[id] = "being resolved"
	return p, nil
}

func (e *Engine) finish(id, state string) {
	e.mu.Lock()
	e.done[id] = state
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

// apply checks and writes a proposal.
func (e *Engine) apply(ctx context.Context, fsys sandbox.FS, p *Proposal) (*Applied, error) {
	// Check every file before writing any.
	var changed []string
	for _, f := range p.Files {
		if err := e.unchanged(ctx, fsys, f); err != nil {
			var se *tools.Error
			if !errors.As(err, &se) {
				return nil, err
			}
			changed = append(changed, se.Msg)
		}
	}
	if len(changed) > 0 {
		return nil, tools.Fail("%s was refused and dropped, nothing was written: %s. Search again and stage a new edit with ast_edit.",
			p.ID, strings.Join(changed, "; "))
	}
	changes := make([]workspace.Change, len(p.Files))
	for i, f := range p.Files {
		// Old nil would create the file and New nil delete it: an empty
		// file is neither.
		changes[i] = workspace.Change{Path: f.Path, Old: nonNil(f.Old), New: nonNil(f.New), Perm: f.Mode}
	}
	err := workspace.Write(ctx, fsys, changes, workspace.WriteOptions{
		// Check again right before each write, to keep the window in
		// which another writer's change could be lost as short as
		// possible.
		Check: func(ctx context.Context, i int) error { return e.unchanged(ctx, fsys, p.Files[i]) },
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
	for _, f := range p.Files {
		a.Files = append(a.Files, AppliedFile{Path: f.Path, Replacements: f.Replacements})
		if now, err := fsys.ReadFile(rctx, f.Path); err != nil || !bytes.Equal(now, f.New) {
			a.Warnings = append(a.Warnings, fmt.Sprintf("%s was changed again by another writer right after it was written; its content is that writer's, read it", f.Path))
		}
	}
	return a, nil
}

// unchanged checks that f on disk is still the regular file with the content
// captured at staging.
func (e *Engine) unchanged(ctx context.Context, fsys sandbox.FS, f FileEdit) error {
	fi, err := fsys.Lstat(ctx, f.Path)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, fs.ErrNotExist) {
			return tools.Fail("%s was removed after staging", f.Path)
		}
		return fsError(fsys, f.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return tools.Fail("%s is no longer a regular file", f.Path)
	}
	if workspace.HardLinks(fi) > 1 {
		return tools.Fail("%s has %d hard links now, which may reach outside the workspace", f.Path, workspace.HardLinks(fi))
	}
	now, err := fsys.ReadFile(ctx, f.Path)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fsError(fsys, f.Path, err)
	}
	if sha256.Sum256(now) != f.OldHash {
		return tools.Fail("%s changed after staging", f.Path)
	}
	return nil
}
