package lsp

import (
	"context"
	"errors"
	"fmt"

	lspc "berth.dev/berth/lsp"
	"berth.dev/berth/tools"
	wspath "berth.dev/berth/tools/workspace"
)

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
