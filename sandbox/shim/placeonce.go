package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
)

// PlaceDirs are the directories, in order of preference, where the
// backends put the agent inside a sandbox. The root comes first because a
// tmpfs mounted over /tmp or /dev/shm is invisible to an engine's copy API.
var PlaceDirs = []string{"/.berth", "/tmp/.berth", "/dev/shm/.berth"}

// PlaceName is where the agent goes below a directory of [PlaceDirs]: one
// directory per binary hash, so that berths of different versions share a
// sandbox.
func (b *Binary) PlaceName() string {
	return path.Join("shim-"+strings.ToLower(b.Hash[:12]), "berth-shim")
}

// runOutputCap bounds the stdout and stderr RunExec keeps.
const runOutputCap = 4 << 10

// RunExec runs spec through t with stdin as its input, for a transport's
// own chores (placing the agent): it returns the program's stdout and
// stderr (the first 4 KiB of each) and exit code. ctx ends the program;
// its error is then ctx.Err().
func RunExec(ctx context.Context, t Transport, spec ExecSpec, stdin []byte) (stdout, stderr string, code int, err error) {
	st, err := t.Exec(ctx, spec)
	if err != nil {
		return "", "", -1, err
	}
	defer st.Close()
	var wg sync.WaitGroup
	var out, errOut bytes.Buffer
	wg.Go(func() {
		// The program may exit without reading (a copy reused, a failed
		// mkdir); the write then fails, which is fine.
		st.Stdin().Write(stdin)
		st.Stdin().Close()
	})
	keep := func(b *bytes.Buffer, r io.Reader) {
		io.Copy(b, io.LimitReader(r, runOutputCap))
		io.Copy(io.Discard, r)
	}
	wg.Go(func() { keep(&out, st.Stdout()) })
	wg.Go(func() { keep(&errOut, st.Stderr()) })
	stop := context.AfterFunc(ctx, func() { st.Close() })
	code, err = st.Wait()
	stop()
	wg.Wait()
	if ctx.Err() != nil {
		return "", "", -1, ctx.Err()
	}
	if err != nil {
		return out.String(), errOut.String(), -1, err
	}
	return out.String(), errOut.String(), code, nil
}

// PlaceOnce is the part of a [Transport]'s Place that every backend
// shares: one placement at a time (later callers wait, honouring their
// context) and each agent binary placed at most once per transport, its
// path remembered by the binary's hash. The zero value is ready to use.
type PlaceOnce struct {
	initOnce sync.Once
	sem      chan struct{} // a buffered channel, so that waiting honours ctx

	mu     sync.Mutex
	placed map[string]string // agent hash → path inside the sandbox
}

// Place returns where bin was placed before, or calls place and remembers
// its answer. what names the backend and the sandbox in errors, e.g.
// "docker: place agent in container 1a2b3c".
func (o *PlaceOnce) Place(ctx context.Context, bin *Binary, what string, place func(context.Context, *Binary) (string, error)) (string, error) {
	if bin == nil || bin.Path == "" || len(bin.Hash) < 12 {
		return "", errors.New(what + ": the agent binary has no path or hash; get it from shim.Locate")
	}
	o.initOnce.Do(func() {
		o.sem = make(chan struct{}, 1)
		o.placed = make(map[string]string)
	})
	select {
	case o.sem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("%s: %w", what, ctx.Err())
	}
	defer func() { <-o.sem }()

	o.mu.Lock()
	p, ok := o.placed[bin.Hash]
	o.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := place(ctx, bin)
	if err != nil {
		return "", err
	}
	o.mu.Lock()
	o.placed[bin.Hash] = p
	o.mu.Unlock()
	return p, nil
}
