package shim

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

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
