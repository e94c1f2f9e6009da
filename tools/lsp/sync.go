package lsp

import (
	"context"
	"fmt"
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
// workspace/didChangeWatchedFiles.
func (in *instance) refresh(ctx context.Context, c *lspc.Client, g *generation) error {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	s := in.s
	for _, d := range c.Documents() {
		p, err := lspc.URIPath(d.URI)
		if err != nil {
			continue
		}
		name, ok := s.rel(p)
		if !ok {
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
	if len(events) == 0 {
		return nil
	}
	slices.SortFunc(events, func(a, b fileEvent) int { return strings.Compare(a.URI, b.URI) })
	return c.Notify(ctx, "workspace/didChangeWatchedFiles", map[string]any{"changes": events})
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
