// Package watch follows a run's workspace for its tools: one sandbox
// watch (sandbox.Watcher, berth's agent's inotify) shared by every
// subscriber — a language server's generation, the structural search's
// cache — each of which drains the paths changed since it last looked.
// Where the workspace cannot be watched (the FS is no Watcher, inotify is
// missing or its limit reached, the queue overflowed, the watch ended) a
// drain says so, and the subscriber rescans as it did before watching
// existed: costs then follow the tree, and the result says why.
package watch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"berth.dev/berth/sandbox"
)

const (
	// MaxPending bounds the paths one subscriber keeps between drains;
	// past it the subscriber is told to rescan: looking at that many
	// paths one by one costs about what a walk does.
	MaxPending = 5_000
	// retryAfter is how long a hub whose watch could not start or ended
	// waits before it tries again.
	retryAfter = 30 * time.Second
	// startTimeout bounds starting a watch (the agent watches every
	// directory of the workspace before it is ready).
	startTimeout = 2 * time.Minute
	// syncTimeout bounds waiting for the watch to catch up with the
	// changes made before a Drain; past it the drain says to rescan.
	syncTimeout = 5 * time.Second
)

// Hub is the watch of one workspace. Create it with New; Close it with the
// run.
type Hub struct {
	fs   sandbox.FS
	skip []string

	mu      sync.Mutex
	w       sandbox.Watch // nil when not watching
	why     string        // why not watching, when w is nil
	retry   time.Time     // when to try starting again
	subs    map[*Sub]struct{}
	closed  bool
	pumping sync.WaitGroup
	// synced is the highest Sync mark the pump has handed out, and
	// syncedCh is closed (and replaced) whenever it grows or the watch
	// ends.
	synced   uint64
	syncedCh chan struct{}
}

// New returns the hub of fs, watching everything but directories named
// in skip.
func New(fs sandbox.FS, skip []string) *Hub {
	return &Hub{fs: fs, skip: skip, subs: map[*Sub]struct{}{}, syncedCh: make(chan struct{})}
}

// Sub is one subscriber's view of the changes.
type Sub struct {
	h      *Hub
	paths  map[string]struct{}
	rescan string // why the subscriber must rescan; "" when the paths are whole
}

// Subscribe returns a subscription that collects the changes from now on,
// starting the watch on first use. When the workspace cannot be watched,
// the subscription's first Drain says to rescan, and why.
func (h *Hub) Subscribe(ctx context.Context) *Sub {
	s := &Sub{h: h, paths: map[string]struct{}{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.rescan = "the run is closing"
		return s
	}
	h.ensureLocked(ctx)
	if h.w == nil {
		s.rescan = h.why
	}
	h.subs[s] = struct{}{}
	return s
}

// ensureLocked starts the watch when there is none and it is time to try.
func (h *Hub) ensureLocked(ctx context.Context) {
	if h.w != nil || time.Now().Before(h.retry) {
		return
	}
	wr, ok := h.fs.(sandbox.Watcher)
	if !ok {
		h.why = "this sandbox's file system cannot be watched"
		h.retry = time.Now().Add(100 * 365 * 24 * time.Hour)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	w, err := wr.Watch(sctx, ".", sandbox.WatchOptions{SkipDirs: h.skip})
	if err != nil {
		h.why = "the workspace cannot be watched: " + err.Error()
		h.retry = time.Now().Add(retryAfter)
		return
	}
	h.w, h.why, h.synced = w, "", 0
	h.pumping.Add(1)
	go h.pump(w) // ends when the watch ends (Close closes it)
}

// pump hands the watch's batches to every subscriber until it ends.
func (h *Hub) pump(w sandbox.Watch) {
	defer h.pumping.Done()
	for ev := range w.Events() {
		h.mu.Lock()
		for s := range h.subs {
			s.add(ev)
		}
		if ev.Synced > h.synced && h.w == w {
			h.synced = ev.Synced
			h.wakeLocked()
		}
		h.mu.Unlock()
	}
	err := w.Err()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeLocked()
	if h.w != w {
		return
	}
	h.w = nil
	h.retry = time.Now().Add(retryAfter)
	h.why = "the workspace watch ended"
	if err != nil {
		h.why += ": " + err.Error()
	}
	for s := range h.subs {
		s.lost(h.why)
	}
}

// wakeLocked wakes the drains waiting for a Sync mark.
func (h *Hub) wakeLocked() {
	close(h.syncedCh)
	h.syncedCh = make(chan struct{})
}

// syncLocked waits until the watch has handed out every change made
// before the call (sandbox.Watch.Sync), and says why not when it cannot.
// It releases the hub's lock while it waits.
func (h *Hub) syncLocked(ctx context.Context) string {
	w := h.w
	mark, err := w.Sync(ctx)
	if err != nil {
		return "the workspace watch cannot catch up: " + err.Error()
	}
	timeout := time.NewTimer(syncTimeout)
	defer timeout.Stop()
	for h.synced < mark {
		if h.w != w {
			return "the workspace watch ended while catching up"
		}
		wake := h.syncedCh
		h.mu.Unlock()
		timedOut := false
		select {
		case <-wake:
		case <-ctx.Done():
		case <-timeout.C:
			timedOut = true
		}
		h.mu.Lock()
		switch {
		case ctx.Err() != nil:
			return "the query ended while the workspace watch caught up"
		case timedOut && h.synced < mark:
			return fmt.Sprintf("the workspace watch did not catch up within %v", syncTimeout)
		}
	}
	return ""
}

// add takes one batch; the caller holds the hub's lock.
func (s *Sub) add(ev sandbox.WatchEvent) {
	if ev.Overflow {
		s.lost("changes came faster than the workspace watch could report them")
		return
	}
	if s.rescan != "" {
		return
	}
	for _, p := range ev.Paths {
		s.paths[p] = struct{}{}
	}
	if len(s.paths) > MaxPending {
		s.lost(fmt.Sprintf("more than %d files changed since the last look", MaxPending))
	}
}

// lost marks that changes were lost; the caller holds the hub's lock.
func (s *Sub) lost(why string) {
	if s.rescan == "" {
		s.rescan = why
	}
	clear(s.paths)
}

// Drain returns the paths changed since the last Drain (sorted, relative
// to the workspace), or, when changes may have been lost or the workspace
// is not watched, rescan: why the caller must look at everything itself.
// After a rescan the next Drain reports changes again (restarting the
// watch when it is time to try).
func (s *Sub) Drain(ctx context.Context) (paths []string, rescan string) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; !ok {
		return nil, "the subscription is closed"
	}
	if h.w != nil && s.rescan == "" {
		// Every change made before this Drain is in s.paths once the
		// watch caught up.
		if why := h.syncLocked(ctx); why != "" {
			s.lost(why)
		}
	}
	paths = make([]string, 0, len(s.paths))
	for p := range s.paths {
		paths = append(paths, p)
	}
	clear(s.paths)
	slices.Sort(paths)
	rescan = s.rescan
	s.rescan = ""
	if h.w == nil && !h.closed {
		h.ensureLocked(ctx)
		if h.w == nil {
			// Still not watched: the next Drain must rescan as well.
			s.rescan = h.why
			if rescan == "" {
				rescan = h.why
			}
		}
	}
	if rescan != "" {
		return nil, rescan
	}
	return paths, ""
}

// Close ends the subscription.
func (s *Sub) Close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
}

// Close ends the watch and waits for its pump.
func (h *Hub) Close() error {
	h.mu.Lock()
	h.closed = true
	w := h.w
	h.w = nil
	h.mu.Unlock()
	var err error
	if w != nil {
		err = w.Close()
	}
	h.pumping.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
