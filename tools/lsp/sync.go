package lsp

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	lspc "berth.dev/berth/lsp"
)

// File change types of workspace/didChangeWatchedFiles.
const (
	fileCreated = 1
	fileChanged = 2
	fileDeleted = 3
)

type fileEvent struct {
	URI  string `json:"uri"`
	Type int    `json:"type"`
}

// refresh makes the server's view current before it answers: open
// documents whose file changed on disk are sent again (closed when the file
// is gone), and files under the root created, changed or deleted behind the
// server's back (a shell command, another tool) are reported with
// workspace/didChangeWatchedFiles. What changed comes from the workspace
// watch (only those paths are looked at); where the watch cannot say
// (none, overflowed, ended) every open document is re-read and the root is
// walked, and the next result says why.
func (in *instance) refresh(ctx context.Context, c *lspc.Client, g *generation) error {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	var changed []string
	rescan := "the server has no workspace watch"
	if sub := g.sub.Load(); sub != nil {
		changed, rescan = sub.Drain(ctx)
	}
	if rescan != "" {
		in.s.walked(rescan)
		return in.rescan(ctx, c, g)
	}
	if len(changed) == 0 {
		return nil
	}
	s := in.s
	set := make(map[string]bool, len(changed))
	for _, p := range changed {
		set[p] = true
	}
	if err := in.resync(ctx, c, func(name string) bool { return set[name] }); err != nil {
		return err
	}
	var events []fileEvent
	prefix := ""
	if in.key.root != "." && in.key.root != "" {
		prefix = in.key.root + "/"
	}
	gone := map[string]bool{} // changed paths that no longer exist
	var dirs map[string]bool  // the directories of known files, made on first need
	for _, name := range changed {
		if prefix != "" && !strings.HasPrefix(name, prefix) {
			continue
		}
		if !in.wants(name) {
			// Only a directory holding known files matters (moved or
			// removed whole, it is reported alone).
			if dirs == nil {
				dirs = map[string]bool{}
				for known := range g.stamps {
					for d := path.Dir(known); d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
						dirs[d] = true
					}
				}
			}
			if !dirs[name] {
				continue
			}
		}
		fi, err := s.ws.Lstat(ctx, name)
		switch {
		case err == nil && fi.IsDir():
			continue // its files are reported one by one
		case err == nil && fi.Mode().IsRegular() && in.wants(name):
			st := stamp{fi.Size(), fi.ModTime()}
			old, ok := g.stamps[name]
			switch {
			case !ok && len(g.stamps) < MaxWatchedFiles:
				events = append(events, fileEvent{s.uriOf(name), fileCreated})
				g.stamps[name] = st
				g.stampsVer++
			case ok && old != st:
				events = append(events, fileEvent{s.uriOf(name), fileChanged})
				g.stamps[name] = st
				g.stampsVer++
			}
		case err == nil:
		case isNotExist(err):
			gone[name] = true
		default:
			return fmt.Errorf("lsp: looking at %s, changed under %s: %w", name, showRoot(in.key.root), err)
		}
	}
	// A file gone, or a directory moved or removed whole (reported alone):
	// every known file at or under such a path is gone.
	if len(gone) > 0 {
		for known := range g.stamps {
			for p := known; p != "." && p != "/" && p != ""; p = path.Dir(p) {
				if gone[p] {
					events = append(events, fileEvent{s.uriOf(known), fileDeleted})
					delete(g.stamps, known)
					g.stampsVer++
					break
				}
			}
		}
	}
	return in.report(ctx, c, events)
}

// rescan is refresh without a watch: every open document is read again
// and the root walked.
func (in *instance) rescan(ctx context.Context, c *lspc.Client, g *generation) error {
	if err := in.resync(ctx, c, func(string) bool { return true }); err != nil {
		return err
	}
	s := in.s
	now, err := in.walk(ctx)
	if err != nil {
		return fmt.Errorf("lsp: looking for files changed under %s: %w", showRoot(in.key.root), err)
	}
	var events []fileEvent
	for name, st := range now {
		old, ok := g.stamps[name]
		switch {
		case !ok:
			events = append(events, fileEvent{s.uriOf(name), fileCreated})
		case old != st:
			events = append(events, fileEvent{s.uriOf(name), fileChanged})
		}
	}
	for name := range g.stamps {
		if _, ok := now[name]; !ok {
			events = append(events, fileEvent{s.uriOf(name), fileDeleted})
		}
	}
	g.stamps = now
	g.stampsVer++
	return in.report(ctx, c, events)
}

// resync sends again the open documents (of those changed reports) whose
// file differs from what the server has, and closes those whose file is
// gone.
func (in *instance) resync(ctx context.Context, c *lspc.Client, changed func(name string) bool) error {
	s := in.s
	for _, d := range c.Documents() {
		p, err := lspc.URIPath(d.URI)
		if err != nil {
			continue
		}
		name, ok := s.rel(p)
		if !ok || !changed(name) {
			continue
		}
		data, err := s.ws.ReadFile(ctx, name)
		switch {
		case isNotExist(err):
			if err := c.DidClose(ctx, d.URI); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("lsp: re-reading %s for %s: %w", name, in.key, err)
		case string(data) != d.Text:
			if _, err := c.DidChange(ctx, d.URI, string(data)); err != nil {
				return err
			}
		}
	}
	return nil
}

// report tells the server about files changed behind its back.
func (in *instance) report(ctx context.Context, c *lspc.Client, events []fileEvent) error {
	if len(events) == 0 {
		return nil
	}
	slices.SortFunc(events, func(a, b fileEvent) int { return strings.Compare(a.URI, b.URI) })
	return c.Notify(ctx, "workspace/didChangeWatchedFiles", map[string]any{"changes": events})
}

// wants reports whether name is a file of the server's languages or one
// of its markers, as the walk looks for.
func (in *instance) wants(name string) bool {
	_, ok := in.spec.Languages[path.Ext(name)]
	return ok || isMarker(in.spec, name)
}

// walked notes, for the next result, that a query walked the workspace
// because it could not be watched (once per reason).
func (s *Supervisor) walked(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if why == s.walkWhy {
		return
	}
	s.walkWhy = why
	s.walkNote = "note: berth walked the workspace to find files changed behind the language server's back (" + why + "); queries cost more on a large workspace until it can watch again"
}

// open syncs a workspace file into the server (didOpen, or didChange when
// its text differs from what was sent) and returns its text and version.
func (in *instance) open(ctx context.Context, c *lspc.Client, name string) (string, int32, error) {
	data, err := in.s.ws.ReadFile(ctx, name)
	if err != nil {
		return "", 0, err
	}
	text := string(data)
	uri := in.s.uriOf(name)
	v, sent, err := c.Sync(ctx, uri, languageID(in.spec, name), text)
	if err == nil && sent && in.spec.AnalyzeOnOpen {
		// Its answers are about the text it has analyzed, which it says
		// by publishing that text's diagnostics: wait for them (bounded;
		// a late analysis answers from what it had).
		wctx, cancel := context.WithTimeout(ctx, in.s.opts.DiagnosticsWait)
		c.WaitDiagnostics(wctx, uri, v)
		cancel()
	}
	return text, v, err
}
