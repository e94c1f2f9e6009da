package shim

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// maxWatchPending bounds the distinct paths a Watch keeps for a consumer
// that does not take its events: beyond it they are dropped for an
// Overflow event, so a stalled consumer costs bounded memory.
const maxWatchPending = agent.DefaultWatchMaxPending

// watch is a running "berth-shim watch ROOT DIR": a sandbox.Watch.
type watch struct {
	f      *fsys
	dir    string
	stream Stream
	in     io.WriteCloser
	frames *agent.Reader
	stderr tailBuffer
	errEOF chan struct{} // closed when the agent's stderr ended
	events chan sandbox.WatchEvent

	wmu   sync.Mutex // serialises frames to the agent: pings and syncs
	marks uint64     // the last mark Sync handed out; under wmu

	mu       sync.Mutex
	pending  map[string]struct{} // paths not yet delivered
	overflow bool                // an overflow not yet delivered
	synced   uint64              // the highest synced mark not yet delivered (0: none); it goes with or after pending and overflow
	err      error               // why the watch ended by itself
	closing  bool                // Close began: the end is not an error

	kick       chan struct{} // something is pending (capacity 1)
	stop       chan struct{} // closed by Close
	readerDone chan struct{} // closed when the agent's output ended (read, or torn down)
	pingDone   chan struct{}
	deliverEnd chan struct{}
	closeOnce  sync.Once
	done       chan struct{} // closed when Close finished ending everything
}

// Watch watches dir (a name of the FS) and every directory below it,
// except those whose base name is in opts.SkipDirs, with inotify through
// the agent's watch mode, running as Options.FSUser. It returns once every
// directory is watched; an error wrapping sandbox.ErrUnsupported when the
// sandbox's kernel cannot watch (no inotify, the watch limit reached). ctx
// bounds only the start. The returned Watch runs until Close, the
// sandbox's or the FS's Close, or the agent's end; a consumer that does
// not keep up gets changes merged into fewer events, and past
// maxWatchPending paths an Overflow event instead. Sync is a barrier: its
// mark is delivered with or after every change made before it.
func (f *fsys) Watch(ctx context.Context, dir string, opts sandbox.WatchOptions) (sandbox.Watch, error) {
	if err := checkName("watch", dir); err != nil {
		return nil, err
	}
	if f.isClosed() {
		return nil, f.closedError()
	}
	args := append([]string{"watch"}, f.s.opts.FSFlags...)
	args = append(args, "--ping-timeout="+agent.ProcessPingTimeout.String())
	args = append(args, f.watchFlags...)
	for _, d := range opts.SkipDirs {
		if d != "" && !strings.Contains(d, "/") { // no base name has a slash
			args = append(args, "--skip="+d)
		}
	}
	args = append(args, f.root, dir)
	st, err := f.s.exec(ctx, ExecSpec{User: f.s.opts.FSUser}, args...)
	if err != nil {
		return nil, fmt.Errorf("shim: watch %s in %s: %w", path.Join(f.root, dir), f.s.opts.Name, err)
	}
	w := &watch{
		f: f, dir: dir, stream: st, in: st.Stdin(), frames: agent.NewReader(st.Stdout()),
		errEOF: make(chan struct{}), events: make(chan sandbox.WatchEvent, 1),
		pending: make(map[string]struct{}), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), readerDone: make(chan struct{}),
		pingDone: make(chan struct{}), deliverEnd: make(chan struct{}), done: make(chan struct{}),
	}
	go drain(st.Stderr(), &w.stderr, w.errEOF) // ends with the stream, which Close ends
	go w.ping()                                // ends on Close or the output's end
	if err := w.ready(ctx); err != nil {
		close(w.deliverEnd) // no deliverer was started
		w.Close()
		return nil, err
	}
	go w.read()    // ends with the agent's output
	go w.deliver() // ends on Close, or after the output's end once all is delivered
	if err := f.trackWatch(w); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// ready waits for the agent to watch every directory.
func (w *watch) ready(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { w.stream.Close() })
	typ, payload, err := w.frames.Next()
	stopped := stop()
	where := fmt.Sprintf("shim: watch %s in %s", path.Join(w.f.root, w.dir), w.f.s.opts.Name)
	switch {
	case !stopped:
		close(w.readerDone)
		return fmt.Errorf("%s: %w", where, ctx.Err())
	case err != nil:
		close(w.readerDone)
		return fmt.Errorf("%s: the agent ended before it watched everything: %w", where, w.agentError(err))
	case typ == agent.TypeWatchReady:
		return nil
	case typ == agent.TypeWatchUnsupported:
		close(w.readerDone)
		return fmt.Errorf("%s: watching is not possible there (%s); walk the directory instead: %w", where, payload, sandbox.ErrUnsupported)
	default:
		close(w.readerDone)
		return fmt.Errorf("%s: the agent sent frame %q before it was ready", where, typ)
	}
}

// agentError adds what the agent wrote on stderr to a stream error.
func (w *watch) agentError(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	// The agent wrote its last words before its output ended; give its
	// stderr a moment to arrive.
	t := time.NewTimer(fsCloseGrace)
	select {
	case <-w.errEOF:
	case <-t.C:
	}
	t.Stop()
	if msg := strings.TrimSpace(w.stderr.String()); msg != "" {
		return fmt.Errorf("%w: %s", err, msg)
	}
	return err
}

// ping tells the agent every agent.ProcessPing that berth is still there:
// it counts a berth silent for agent.ProcessPingTimeout as gone, as an
// engine may keep a dead berth's stream open.
func (w *watch) ping() {
	defer close(w.pingDone)
	t := time.NewTicker(agent.ProcessPing)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.readerDone:
			return
		case <-t.C:
		}
		w.wmu.Lock()
		err := agent.WriteFrame(w.in, agent.TypePing, nil)
		w.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// read takes the agent's frames into the pending set until its output
// ends, and records why it ended.
func (w *watch) read() {
	defer close(w.readerDone)
	where := fmt.Sprintf("watching %s in %s", path.Join(w.f.root, w.dir), w.f.s.opts.Name)
	var end error
	for end == nil {
		typ, payload, err := w.frames.Next()
		if err != nil {
			w.mu.Lock()
			closing := w.closing
			w.mu.Unlock()
			if closing {
				break
			}
			end = fmt.Errorf("%s ended: the agent's stream broke: %w; watch again, or walk", where, w.agentError(err))
			break
		}
		switch typ {
		case agent.TypeWatchChanges:
			var paths []string
			if err := json.Unmarshal(payload, &paths); err != nil {
				end = fmt.Errorf("%s ended: bad changes from the agent: %w", where, err)
				break
			}
			w.add(paths, false)
		case agent.TypeWatchOverflow:
			w.add(nil, true)
		case agent.TypeWatchSynced:
			if len(payload) != 8 {
				end = fmt.Errorf("%s ended: a synced frame of %d bytes from the agent, want 8", where, len(payload))
				break
			}
			w.addSynced(binary.BigEndian.Uint64(payload))
		case agent.TypeWatchUnsupported:
			end = fmt.Errorf("%s ended: the sandbox cannot watch more (%s); walk instead: %w", where, payload, sandbox.ErrUnsupported)
		default:
			end = fmt.Errorf("%s ended: unexpected frame %q from the agent", where, typ)
		}
	}
	w.mu.Lock()
	if !w.closing {
		w.err = end
	}
	w.mu.Unlock()
}

// add merges paths, or an overflow, into what is pending.
func (w *watch) add(paths []string, overflow bool) {
	w.mu.Lock()
	if overflow {
		clear(w.pending)
		w.overflow = true
	}
	for _, p := range paths {
		if len(w.pending) >= maxWatchPending {
			clear(w.pending)
			w.overflow = true
			break
		}
		w.pending[p] = struct{}{}
	}
	w.mu.Unlock()
	w.wake()
}

// addSynced records the agent's answer to the sync of mark: everything
// before it was added. Marks increase, so the highest pending one stands
// for all.
func (w *watch) addSynced(mark uint64) {
	w.mu.Lock()
	w.synced = max(w.synced, mark)
	w.mu.Unlock()
	w.wake()
}

func (w *watch) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// take returns what is pending as one event, and empties it. A synced mark
// goes in the same event as the paths and overflow added before it (and
// maybe some added after it), so it is never delivered ahead of them.
func (w *watch) take() (sandbox.WatchEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 && !w.overflow && w.synced == 0 {
		return sandbox.WatchEvent{}, false
	}
	ev := sandbox.WatchEvent{Overflow: w.overflow, Synced: w.synced, Paths: make([]string, 0, len(w.pending))}
	for p := range w.pending {
		ev.Paths = append(ev.Paths, p)
	}
	slices.Sort(ev.Paths)
	clear(w.pending)
	w.overflow = false
	w.synced = 0
	return ev, true
}

// deliver hands what is pending to the consumer, one event at a time:
// what comes while it waits for the consumer is merged into the next.
// Once the agent's output ended and everything was delivered, or on
// Close, it closes Events.
func (w *watch) deliver() {
	defer close(w.deliverEnd)
	defer close(w.events)
	finished := false
	for {
		if !finished {
			select {
			case <-w.kick:
			case <-w.readerDone:
				finished = true
			case <-w.stop:
				return
			}
		}
		ev, ok := w.take()
		if !ok {
			if finished {
				return
			}
			continue
		}
		select {
		case w.events <- ev:
		case <-w.stop:
			return
		}
	}
}

func (w *watch) Events() <-chan sandbox.WatchEvent { return w.events }

// Sync asks the agent for every change made before the call: the agent
// reads what the kernel queued, sends what it holds, then the mark, which
// comes in an event after (or with) those changes' paths. It returns the
// mark once the request is written; ctx bounds that write, and a write
// that ctx cuts off ends the watch (the stream is closed: a frame half
// written cannot be taken back). It fails once the watch ended.
func (w *watch) Sync(ctx context.Context) (uint64, error) {
	where := fmt.Sprintf("shim: sync the watch of %s in %s", path.Join(w.f.root, w.dir), w.f.s.opts.Name)
	select {
	case <-w.stop:
		return 0, fmt.Errorf("%s: the watch was closed; watch again", where)
	case <-w.readerDone:
		if err := w.Err(); err != nil {
			return 0, fmt.Errorf("%s: the watch ended: %w", where, err)
		}
		return 0, fmt.Errorf("%s: the watch ended; watch again", where)
	default:
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%s: %w", where, err)
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.marks++
	mark := w.marks
	stop := context.AfterFunc(ctx, func() { w.stream.Close() })
	err := agent.WriteFrame(w.in, agent.TypeWatchSync, binary.BigEndian.AppendUint64(nil, mark))
	if !stop() {
		return 0, fmt.Errorf("%s: the agent did not take the request before %w; the watch ended, watch again or walk", where, ctx.Err())
	}
	if err != nil {
		return 0, fmt.Errorf("%s: send the request: %w; the watch ended, watch again or walk", where, err)
	}
	return mark, nil
}

// Err says why Events was closed: nil after Close, an error wrapping
// sandbox.ErrUnsupported when the sandbox could not watch a new directory
// (the watch limit), another error when the agent's stream broke. It is
// nil while the watch runs.
func (w *watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the watch: the agent's input ends, and it exits; its stream
// is torn down when it does not within fsCloseGrace. Events is closed. It
// returns once everything the watch started ended, each wait bounded.
func (w *watch) Close() error {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closing = true
		w.mu.Unlock()
		close(w.stop)
		w.end()
		w.f.untrackWatch(w)
		close(w.done)
	})
	<-w.done
	return nil
}

// end ends the agent and waits, bounded, for every goroutine of the watch.
func (w *watch) end() {
	wait := func(ch <-chan struct{}, d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ch:
			return true
		case <-t.C:
			return false
		}
	}
	// A ping blocked on a stream that takes nothing is cut off.
	if !wait(w.pingDone, fsCloseGrace) {
		w.stream.Close()
		<-w.pingDone
	}
	w.in.Close()
	// The agent exits on its input's end; read what it still sends.
	go func() { // ends when the output ends, or with the stream torn down below
		<-w.deliverEnd
		<-w.readerDone
		io.Copy(io.Discard, w.stream.Stdout())
	}()
	if !wait(w.readerDone, fsCloseGrace) || !wait(w.errEOF, fsCloseGrace) {
		if k, ok := w.stream.(Killer); ok {
			k.Kill()
		}
		w.stream.Close()
	}
	<-w.deliverEnd
	waited := make(chan struct{})
	go func() { // ends with the program; abandoned only when even a torn-down stream does not end
		<-w.errEOF
		<-w.readerDone
		w.stream.Wait()
		close(waited)
	}()
	if !wait(waited, fsEndGrace) {
		w.stream.Close()
		wait(waited, fsEndGrace)
	}
}

// trackWatch registers w for the FS's Close; it fails once the FS closed.
func (f *fsys) trackWatch(w *watch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return f.closedError()
	}
	if f.watches == nil {
		f.watches = make(map[*watch]struct{})
	}
	f.watches[w] = struct{}{}
	return nil
}

func (f *fsys) untrackWatch(w *watch) {
	f.mu.Lock()
	delete(f.watches, w)
	f.mu.Unlock()
}

// closeWatches closes every watch of the FS; run by closeAll once the FS
// counts as closed, so no new watch is tracked.
func (f *fsys) closeWatches() {
	f.mu.Lock()
	ws := keys(f.watches)
	f.mu.Unlock()
	for _, w := range ws {
		w.Close()
	}
}

var (
	_ sandbox.Watcher = (*fsys)(nil)
	_ sandbox.Watch   = (*watch)(nil)
)
