package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"berth.dev/berth/sandbox"
)

// localFS is the FS of a host sandbox without a host user: dirfs, served
// by berth itself, which watches through the agent (berth-shim watch,
// running as berth's user), as in a container.
type localFS struct {
	sandbox.FS // dirfs
	s          *Sandbox

	mu      sync.Mutex
	closed  bool
	watches map[*ownedWatch]struct{} // open watches, closed by Close
}

func (f *localFS) ReadFileBuffer(ctx context.Context, name string, buf []byte) ([]byte, error) {
	if br, ok := f.FS.(sandbox.BufferReader); ok {
		return br.ReadFileBuffer(ctx, name, buf)
	}
	return f.FS.ReadFile(ctx, name)
}

// Close closes the FS's watches and releases dirfs's directory handle.
func (f *localFS) Close() error {
	f.mu.Lock()
	f.closed = true
	ws := make([]*ownedWatch, 0, len(f.watches))
	for w := range f.watches {
		ws = append(ws, w)
	}
	f.mu.Unlock()
	for _, w := range ws {
		w.Close()
	}
	if c, ok := f.FS.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Watch watches dir through the agent's FS for the same root, which the
// returned Watch closes with itself (and the sandbox's Close with the
// sandbox).
func (f *localFS) Watch(ctx context.Context, dir string, opts sandbox.WatchOptions) (sandbox.Watch, error) {
	agentFS, err := f.s.Sandbox.FS(ctx, f.Root())
	if err != nil {
		return nil, fmt.Errorf("host: watch %s: %w", dir, err)
	}
	closer, _ := agentFS.(io.Closer)
	wf, ok := agentFS.(sandbox.Watcher)
	if !ok || closer == nil {
		if closer != nil {
			closer.Close()
		}
		return nil, fmt.Errorf("host: watch %s: the agent's file system cannot watch; walk instead: %w", dir, sandbox.ErrUnsupported)
	}
	w, err := wf.Watch(ctx, dir, opts)
	if err != nil {
		closer.Close()
		return nil, err
	}
	ow := &ownedWatch{Watch: w, fs: closer, owner: f}
	f.mu.Lock()
	closed := f.closed
	if !closed {
		if f.watches == nil {
			f.watches = make(map[*ownedWatch]struct{})
		}
		f.watches[ow] = struct{}{}
	}
	f.mu.Unlock()
	if closed {
		ow.Close()
		return nil, errors.New("host: watch: the file system was closed; open it again")
	}
	return ow, nil
}

// ownedWatch is a Watch that closes the FS it runs on with itself.
type ownedWatch struct {
	sandbox.Watch
	fs    io.Closer
	owner *localFS
}

func (w *ownedWatch) Close() error {
	err := w.Watch.Close()
	w.fs.Close()
	w.owner.mu.Lock()
	delete(w.owner.watches, w)
	w.owner.mu.Unlock()
	return err
}

var (
	_ sandbox.Watcher      = (*localFS)(nil)
	_ sandbox.BufferReader = (*localFS)(nil)
	_ io.Closer            = (*localFS)(nil)
)
