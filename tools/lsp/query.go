package lsp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

// query is a server ready to answer for a file, with its view refreshed.
type query struct {
	in      *instance
	c       *lspc.Client
	g       *generation
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

// opened resolves a workspace file, readies its server and syncs the file
// into it, for an action about the whole file. It returns the file's
// workspace name, the query (the caller calls its release) and the version
// of the text the server has.
func (s *Supervisor) opened(ctx context.Context, file string) (string, *query, int32, error) {
	name, err := wspath.Name(s.root, file)
	if err != nil {
		return "", nil, 0, err
	}
	if _, err := s.ws.Stat(ctx, name); err != nil {
		return "", nil, 0, wspath.Explain(s.root, name, err)
	}
	q, err := s.query(ctx, name)
	if err != nil {
		return "", nil, 0, err
	}
	_, v, err := q.in.open(ctx, q.c, name)
	if err != nil {
		q.release()
		return "", nil, 0, q.died(wspath.Explain(s.root, name, err))
	}
	return name, q, v, nil
}

// ready takes a use of in and makes its server's view of the files
// current; the caller calls the query's release.
func (s *Supervisor) ready(ctx context.Context, in *instance) (*query, error) {
	release := in.acquire()
	c, g, err := in.client()
	if err != nil {
		release()
		return nil, err
	}
	q := &query{in: in, c: c, g: g, release: release}
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
	case errors.Is(err, lspc.ErrNoAnswer):
		return tools.Fail("%s did not answer %s within %v: it may be stuck; call lsp with action reload to restart it, then call again", q.in.spec.ID, action, q.in.s.opts.RequestTimeout)
	case errors.As(err, &re):
		return tools.Fail("%s could not answer %s: %s", q.in.spec.ID, action, re.Message)
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

// indexStartWait bounds how long the first cross-file answer of a server
// that indexes in the background (Server.BackgroundIndex) waits for the
// indexing to begin; one that begins nothing by then (clangd on a file
// with no compile_commands.json) is taken as having nothing to index.
const indexStartWait = 3 * time.Second

// crossFile readies q's server for an answer about the whole project
// (references, calls, workspace symbols): a server that indexes in the
// background is waited for (bounded by QueryWait) until its index is
// complete; one that finds the workspace's files late
// (Server.FindsFilesLate) is waited for until it has begun.
func (q *query) crossFile(ctx context.Context) error {
	if !q.in.spec.BackgroundIndex {
		if q.in.spec.FindsFilesLate {
			q.g.indexBegun(ctx, q.c)
		}
		return nil
	}
	if !q.g.indexBegun(ctx, q.c) {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, q.in.s.opts.QueryWait)
	defer cancel()
	if err := q.c.WaitIdle(wctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return tools.Fail("%s is still indexing after %v, and an answer now would miss what it has not indexed; call again later (lsp status shows its progress)", q.in.key, q.in.s.opts.QueryWait)
	}
	return nil
}

// stillIndexing returns, for a server that indexes in the background,
// what it reports while its index is not complete ("" once it is): the
// first call waits up to indexStartWait for the indexing to begin.
func (q *query) stillIndexing(ctx context.Context) string {
	if !q.in.spec.BackgroundIndex || !q.g.indexBegun(ctx, q.c) || !q.c.Indexing() {
		return ""
	}
	var ps []string
	for _, p := range q.c.Progress() {
		x := p.Title
		if p.Message != "" && x != "" {
			x += ": " + p.Message
		} else if p.Message != "" {
			x = p.Message
		}
		ps = append(ps, x)
	}
	return strings.Join(ps, "; ")
}

// indexBegun reports whether g's server has begun indexing; the first
// call of a generation waits up to indexStartWait for it to begin.
func (g *generation) indexBegun(ctx context.Context, c *lspc.Client) bool {
	g.indexMu.Lock()
	defer g.indexMu.Unlock()
	if !g.indexChecked {
		wctx, cancel := context.WithTimeout(ctx, indexStartWait)
		err := c.WaitBusy(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return false // the caller left: decide on a later call
		}
		g.indexChecked, g.indexing = true, err == nil
	}
	return g.indexing
}
