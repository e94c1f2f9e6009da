package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// "watch" mode: berth-shim watch [--user=...] [--skip=NAME]... [--max-pending=N]
// [--max-watches=N] [--ping-timeout=D] ROOT DIR
//
// The agent watches ROOT/DIR and every directory below it with inotify,
// except directories whose base name is given with --skip, and reports on
// stdout, as frames, the paths (relative to ROOT) that changed: first
// TypeWatchReady once every directory is watched, then TypeWatchChanges
// batches and TypeWatchOverflow when changes were lost. On berth's
// TypeWatchSync it reads what the kernel queued so far, sends what is
// pending at once and then TypeWatchSynced with the mark: a barrier, as
// the kernel queues an event when the change's system call is made, so
// every change made before berth asked is then sent. When watching is
// not possible (no inotify, the watch limit reached, also later for a new
// directory) it sends TypeWatchUnsupported and exits 0: berth then walks.
// It exits when its input (berth's pings) ends, or, with --ping-timeout,
// when berth sent nothing for that long.

// Batching of the watch protocol.
const (
	// WatchQuiet is how long the agent waits for more changes before it
	// sends what is pending.
	WatchQuiet = 20 * time.Millisecond
	// WatchMaxDelay bounds how long a change waits while more keep coming.
	WatchMaxDelay = 200 * time.Millisecond
	// WatchBatch is how many pending paths are sent at once without
	// waiting for quiet.
	WatchBatch = 1000
	// DefaultWatchMaxPending is --max-pending's default: more distinct
	// paths than this waiting to be sent (berth does not read) are dropped
	// for a TypeWatchOverflow, so that memory stays bounded.
	DefaultWatchMaxPending = 10000
)

// watchReadBuffer is how many bytes of events one read takes at most.
const watchReadBuffer = 256 << 10

// ioctlFIONREAD is Linux's FIONREAD on amd64 and arm64 (the package
// syscall lacks it): how many bytes of events inotify has queued. Where the
// number differs the ioctl fails, and a sync reads until the queue is empty.
const ioctlFIONREAD = 0x541B

// watchMask is what the agent asks inotify for on every directory. Symbolic
// links are never followed (IN_DONT_FOLLOW on a path, and directories are
// opened through os.Root); IN_EXCL_UNLINK drops events of files unlinked
// but still open.
const watchMask = syscall.IN_CREATE | syscall.IN_MODIFY | syscall.IN_CLOSE_WRITE |
	syscall.IN_DELETE | syscall.IN_MOVED_FROM | syscall.IN_MOVED_TO | syscall.IN_ATTRIB |
	syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_ONLYDIR | syscall.IN_EXCL_UNLINK

// watchOptions are the flags of "watch".
type watchOptions struct {
	cred        *syscall.Credential
	skip        []string
	maxPending  int
	maxWatches  int // positive: act as if the kernel's limit were this many watches
	pingTimeout time.Duration
}

// parseWatch reads the flags of "watch" and returns ROOT and DIR.
func parseWatch(args []string) (o watchOptions, root, dir string, err error) {
	o.maxPending = DefaultWatchMaxPending
	rest := args
	for ; len(rest) > 0 && strings.HasPrefix(rest[0], "--"); rest = rest[1:] {
		flag, val, _ := strings.Cut(rest[0], "=")
		switch flag {
		case "--user":
			c, err := parseCredential(val)
			if err != nil {
				return o, "", "", fmt.Errorf("bad --user %q: %v; want UID:GID or UID:GID:G1,G2,...", val, err)
			}
			o.cred = c
		case "--skip":
			if val == "" || strings.Contains(val, "/") {
				return o, "", "", fmt.Errorf("bad --skip %q: want a directory base name", val)
			}
			o.skip = append(o.skip, val)
		case "--max-pending", "--max-watches":
			n, err := strconv.Atoi(val)
			if err != nil || n <= 0 {
				return o, "", "", fmt.Errorf("bad %s %q: want a positive number", flag, val)
			}
			if flag == "--max-pending" {
				o.maxPending = n
			} else {
				o.maxWatches = n
			}
		case "--ping-timeout":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return o, "", "", fmt.Errorf("bad --ping-timeout %q", val)
			}
			o.pingTimeout = d
		default:
			return o, "", "", fmt.Errorf("unknown flag %q", rest[0])
		}
	}
	if len(rest) != 2 {
		return o, "", "", errors.New("want [--user=UID:GID[:GROUPS]] [--skip=NAME]... [--max-pending=N] [--max-watches=N] [--ping-timeout=D] ROOT DIR")
	}
	if !fs.ValidPath(rest[1]) {
		return o, "", "", fmt.Errorf("bad DIR %q: want a slash-separated path relative to ROOT", rest[1])
	}
	return o, rest[0], rest[1], nil
}

// errWatchLimit marks a watch that could not be added for a limit: the
// kernel's (ENOSPC, inotify's max_user_watches), the process's open files
// (EMFILE) or --max-watches.
var errWatchLimit = errors.New("watch limit reached")

// watcher is the state of "watch" mode.
type watcher struct {
	o       watchOptions
	rootDir string
	root    *os.Root
	top     string   // DIR
	fd      int      // the inotify instance
	file    *os.File // fd, read through the runtime's poller
	procFD  bool     // add watches through /proc/self/fd of a directory opened in root

	// wds and dirs map watch descriptors to directories (relative to
	// ROOT) and back; only the goroutine handling events changes them
	// once the initial directories are watched.
	wds  map[int32]string
	dirs map[string]int32
	seen map[int32]bool // during resync: the watches found again

	mu       sync.Mutex
	pending  map[string]struct{}
	first    time.Time // when the oldest pending path came
	overflow bool      // changes were lost since the last send
	kick     chan struct{}

	// smu guards syncWant, the highest mark berth asked to sync and the
	// event reader has not yet answered (0: none).
	smu      sync.Mutex
	syncWant uint64

	fmu sync.Mutex // serialises flushes, so that a synced frame follows every path taken before it
	wmu sync.Mutex // serialises frames on out
	out io.Writer
}

// watchEnd is why watch mode ends: its exit code, and whether to send
// what is pending first.
type watchEnd struct {
	code  int
	flush bool
}

// serveWatch runs watch mode, reading berth's frames from in and writing
// its own to out, and returns the exit code.
func serveWatch(o watchOptions, rootDir, dir string, in io.Reader, out io.Writer) int {
	w := &watcher{
		o: o, rootDir: rootDir, top: dir, out: out,
		wds: make(map[int32]string), dirs: make(map[string]int32),
		pending: make(map[string]struct{}), kick: make(chan struct{}, 1),
	}
	var err error
	if w.root, err = os.OpenRoot(rootDir); err != nil {
		fmt.Fprintf(os.Stderr, "berth-shim watch: %v\n", err)
		return 1
	}
	defer w.root.Close()
	if fi, err := w.root.Lstat(dir); err != nil {
		fmt.Fprintf(os.Stderr, "berth-shim watch: %v\n", err)
		return 1
	} else if !fi.IsDir() {
		fmt.Fprintf(os.Stderr, "berth-shim watch: %s in %s is not a directory\n", dir, rootDir)
		return 1
	}
	w.fd, err = syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return w.unsupported(fmt.Sprintf("inotify_init1: %v", err))
	}
	w.file = os.NewFile(uintptr(w.fd), "inotify")
	defer w.file.Close()
	_, err = os.Stat("/proc/self/fd")
	w.procFD = err == nil
	if err := w.addTree(dir, false); err != nil {
		if errors.Is(err, errWatchLimit) {
			return w.unsupported(err.Error())
		}
		fmt.Fprintf(os.Stderr, "berth-shim watch: %v\n", err)
		return 1
	}
	if err := w.send(TypeWatchReady, PutUint32s(uint32(len(w.wds)))); err != nil {
		return 1
	}
	quit := make(chan watchEnd, 4)                        // senders never block: main takes the first
	go watchInput(in, o.pingTimeout, quit, w.requestSync) // ends with the process
	go w.readEvents(quit)                                 // ends with the process
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.kick:
			w.mu.Lock()
			n, first := len(w.pending), w.first
			w.mu.Unlock()
			if n >= WatchBatch {
				timer.Stop()
				if w.flush() != nil {
					return 1
				}
				continue
			}
			wait := min(WatchQuiet, time.Until(first.Add(WatchMaxDelay)))
			timer.Reset(max(wait, 0))
		case <-timer.C:
			if w.flush() != nil {
				return 1
			}
		case end := <-quit:
			if end.flush {
				w.flush()
			}
			return end.code
		}
	}
}

// unsupported tells berth that watching is not possible, and why.
func (w *watcher) unsupported(why string) int {
	if w.send(TypeWatchUnsupported, []byte(why)) != nil {
		return 1
	}
	return 0
}

func (w *watcher) send(typ byte, payload []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return WriteFrame(w.out, typ, payload)
}

// flush sends what is pending: the overflow, then the paths, sorted. A
// returned error means berth is gone.
func (w *watcher) flush() error {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	return w.flushLocked()
}

// flushSynced sends what is pending and then TypeWatchSynced with mark,
// with no other flush in between (one may have taken paths that it has not
// sent yet).
func (w *watcher) flushSynced(mark uint64) error {
	w.fmu.Lock()
	defer w.fmu.Unlock()
	if err := w.flushLocked(); err != nil {
		return err
	}
	return w.send(TypeWatchSynced, binary.BigEndian.AppendUint64(nil, mark))
}

// flushLocked is flush; the caller holds fmu.
func (w *watcher) flushLocked() error {
	w.mu.Lock()
	paths := make([]string, 0, len(w.pending))
	for p := range w.pending {
		paths = append(paths, p)
	}
	clear(w.pending)
	overflow := w.overflow
	w.overflow = false
	w.mu.Unlock()
	if overflow {
		if err := w.send(TypeWatchOverflow, nil); err != nil {
			return err
		}
	}
	slices.Sort(paths)
	return w.sendPaths(paths)
}

func (w *watcher) sendPaths(paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	j, err := json.Marshal(paths)
	if err != nil {
		return err
	}
	if len(j) > MaxPayload {
		h := len(paths) / 2
		if h == 0 {
			return nil // a single path never comes near MaxPayload
		}
		if err := w.sendPaths(paths[:h]); err != nil {
			return err
		}
		return w.sendPaths(paths[h:])
	}
	return w.send(TypeWatchChanges, j)
}

// changed adds p to what is pending; past --max-pending paths, everything
// pending is dropped for an overflow.
func (w *watcher) changed(p string) {
	w.mu.Lock()
	if _, ok := w.pending[p]; !ok {
		if len(w.pending) >= w.o.maxPending {
			clear(w.pending)
			w.overflow = true
		} else {
			if len(w.pending) == 0 {
				w.first = time.Now()
			}
			w.pending[p] = struct{}{}
		}
	}
	w.mu.Unlock()
	w.wake()
}

// lost records that changes were lost: what is pending is dropped, as
// berth rescans everything anyway.
func (w *watcher) lost() {
	w.mu.Lock()
	clear(w.pending)
	w.overflow = true
	w.first = time.Now()
	w.mu.Unlock()
	w.wake()
}

func (w *watcher) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// watchInput reads berth's frames until they end, or until berth sent
// nothing for timeout (when positive), and then ends watch mode. It passes
// the mark of each TypeWatchSync to sync.
func watchInput(in io.Reader, timeout time.Duration, quit chan<- watchEnd, sync func(mark uint64)) {
	end := func(code int) {
		select {
		case quit <- watchEnd{code: code}:
		default:
		}
	}
	if timeout > 0 {
		silent := time.AfterFunc(timeout, func() {
			fmt.Fprintf(os.Stderr, "berth-shim watch: berth sent nothing for %v; it is gone\n", timeout)
			end(0)
		})
		defer silent.Stop()
		in = readNotify{in, func() { silent.Reset(timeout) }}
	}
	fr := NewReader(in)
	for {
		typ, payload, err := fr.Next()
		if err == io.EOF {
			end(0)
			return
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim watch: read input: %v\n", err)
			end(1)
			return
		}
		switch {
		case typ == TypePing:
		case typ == TypeWatchSync && len(payload) == 8 && binary.BigEndian.Uint64(payload) != 0:
			sync(binary.BigEndian.Uint64(payload))
		default:
			fmt.Fprintf(os.Stderr, "berth-shim watch: unexpected frame %q of %d bytes\n", typ, len(payload))
			end(1)
			return
		}
	}
}

// requestSync records that berth asked to sync mark, and wakes the event
// reader: its read of inotify's events ends at once (a deadline in the
// past), and it answers before it reads again.
func (w *watcher) requestSync(mark uint64) {
	w.smu.Lock()
	w.syncWant = max(w.syncWant, mark)
	w.smu.Unlock()
	if err := w.file.SetReadDeadline(time.Now()); err != nil {
		// Not pollable: the reader answers after its next read.
		fmt.Fprintf(os.Stderr, "berth-shim watch: wake the event reader for a sync: %v\n", err)
	}
}

// takeSync returns the mark berth asked to sync, or 0, and forgets it.
func (w *watcher) takeSync() uint64 {
	w.smu.Lock()
	defer w.smu.Unlock()
	m := w.syncWant
	w.syncWant = 0
	return m
}

// readNotify calls fn after every read that returned data.
type readNotify struct {
	r  io.Reader
	fn func()
}

func (r readNotify) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.fn()
	}
	return n, err
}

// readEvents reads inotify's events and handles them until the watch can
// go on no longer. It also answers berth's syncs (requestSync), so that
// reading the queue, handling its events and the synced frame are in order.
func (w *watcher) readEvents(quit chan<- watchEnd) {
	buf := make([]byte, watchReadBuffer)
	for {
		// After a read that ended for a sync's deadline, whose reset
		// comes before this: a sync asked later sets it again.
		if mark := w.takeSync(); mark != 0 {
			if err := w.sync(buf, mark); err != nil {
				w.stop(err, quit)
				return
			}
		}
		n, err := w.file.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.file.SetReadDeadline(time.Time{})
			continue
		}
		if err != nil {
			w.stop(fmt.Errorf("read inotify events: %w", err), quit)
			return
		}
		if err := w.handleEvents(buf[:n]); err != nil {
			w.stop(err, quit)
			return
		}
	}
}

// stop ends watch mode for err, which readEvents could not go on after.
func (w *watcher) stop(err error, quit chan<- watchEnd) {
	if errors.Is(err, errWatchLimit) {
		w.flush()
		quit <- watchEnd{code: w.unsupported(err.Error())}
		return
	}
	if !errors.Is(err, errBerthGone) {
		fmt.Fprintf(os.Stderr, "berth-shim watch: %v\n", err)
	}
	quit <- watchEnd{code: 1, flush: true}
}

// errBerthGone is a frame that could not be written: berth is gone.
var errBerthGone = errors.New("berth is gone")

// sync answers berth's sync of mark: it reads, without waiting, every
// event the kernel queued so far (each was queued at its change's system
// call, so that is every change made before berth asked), sends what is
// pending, and then TypeWatchSynced.
func (w *watcher) sync(buf []byte, mark uint64) error {
	// Read as many bytes as were queued now, not what a busy writer
	// keeps adding meanwhile; without FIONREAD, until the queue is empty.
	var queued int32
	left := -1
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(w.fd), ioctlFIONREAD, uintptr(unsafe.Pointer(&queued))); errno == 0 {
		left = int(queued)
	}
	for left != 0 {
		n, err := syscall.Read(w.fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN || n == 0 {
			break
		}
		if err != nil {
			return fmt.Errorf("read inotify events: %w", err)
		}
		if err := w.handleEvents(buf[:n]); err != nil {
			return err
		}
		if left > 0 {
			left = max(left-n, 0)
		}
	}
	if err := w.flushSynced(mark); err != nil {
		return fmt.Errorf("%w: %v", errBerthGone, err)
	}
	return nil
}

// handleEvents handles the events read into b.
func (w *watcher) handleEvents(b []byte) error {
	for off := 0; off+syscall.SizeofInotifyEvent <= len(b); {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&b[off]))
		nameAt := off + syscall.SizeofInotifyEvent
		off = nameAt + int(ev.Len)
		if off > len(b) {
			break
		}
		name := strings.TrimRight(string(b[nameAt:off]), "\x00")
		if err := w.handle(ev.Wd, ev.Mask, name); err != nil {
			return err
		}
	}
	return nil
}

// handle handles one event on directory wd about its entry name (empty
// for the directory itself).
func (w *watcher) handle(wd int32, mask uint32, name string) error {
	if mask&syscall.IN_Q_OVERFLOW != 0 {
		w.lost()
		return w.resync()
	}
	dir, ok := w.wds[wd]
	if !ok {
		return nil // a watch removed meanwhile
	}
	if mask&syscall.IN_IGNORED != 0 {
		delete(w.wds, wd)
		if w.dirs[dir] == wd {
			delete(w.dirs, dir)
		}
		return nil
	}
	if name == "" {
		// The parent's watch reports a directory's own changes, except
		// for the top one's: when that goes, so does the watch.
		if dir == w.top && mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF|syscall.IN_UNMOUNT) != 0 {
			w.changed(dir)
			return fmt.Errorf("the watched directory %s was removed or moved away; watch it again once it exists", path.Join(w.rootDir, dir))
		}
		return nil
	}
	p := path.Join(dir, name)
	if mask&syscall.IN_ISDIR != 0 {
		if slices.Contains(w.o.skip, name) {
			return nil
		}
		switch {
		case mask&(syscall.IN_CREATE|syscall.IN_MOVED_TO) != 0:
			return w.addTree(p, true)
		case mask&(syscall.IN_MOVED_FROM|syscall.IN_DELETE) != 0:
			w.forget(p)
		}
	}
	w.changed(p)
	return nil
}

// resync watches again what the kernel's queue overflow may have hidden
// from the watch: directories made or moved in meanwhile get watched, and
// watches of directories no longer found below DIR (moved away) end.
func (w *watcher) resync() error {
	w.seen = make(map[int32]bool)
	defer func() { w.seen = nil }()
	if err := w.addTree(w.top, false); err != nil {
		if errors.Is(err, errWatchLimit) {
			return err
		}
		return fmt.Errorf("the watched directory %s is gone: %v; watch it again once it exists", path.Join(w.rootDir, w.top), err)
	}
	for wd, d := range w.wds {
		if !w.seen[wd] {
			delete(w.wds, wd)
			if w.dirs[d] == wd {
				delete(w.dirs, d)
			}
			syscall.InotifyRmWatch(w.fd, uint32(wd))
		}
	}
	return nil
}

// addTree watches directory p and every directory below it, except
// skipped ones. With report, p and everything below it are reported as
// changed: a directory created or moved in. Each directory is watched
// before it is listed, so that an entry made meanwhile is either listed
// or reported by the watch. A directory that vanished or cannot be read
// is not watched; only a limit is an error.
func (w *watcher) addTree(p string, report bool) error {
	if report {
		w.changed(p)
	}
	f, err := w.root.Open(p)
	if err != nil {
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return fmt.Errorf("open %s: %v: %w", p, err, errWatchLimit)
		}
		if p == w.top && !report {
			return err
		}
		return nil
	}
	err = w.addWatch(p, f)
	var ents []fs.DirEntry
	if err == nil {
		ents, _ = f.ReadDir(-1)
	}
	f.Close()
	if err != nil {
		if errors.Is(err, errWatchLimit) || (p == w.top && !report) {
			return err
		}
		return nil
	}
	for _, e := range ents {
		c := path.Join(p, e.Name())
		if e.IsDir() {
			if slices.Contains(w.o.skip, e.Name()) {
				continue
			}
			if err := w.addTree(c, report); err != nil {
				return err
			}
		} else if report {
			w.changed(c)
		}
	}
	return nil
}

// addWatch watches directory p, open as f.
func (w *watcher) addWatch(p string, f *os.File) error {
	if w.o.maxWatches > 0 && len(w.wds) >= w.o.maxWatches {
		return fmt.Errorf("watch %s: the limit of %d watches (--max-watches) is reached: %w", p, w.o.maxWatches, errWatchLimit)
	}
	var wd int
	var err error = syscall.ENOENT
	if w.procFD {
		// Through the directory opened in root, so that no symbolic link
		// swapped in meanwhile leads the watch out of root.
		wd, err = syscall.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), watchMask)
	}
	if err != nil && err != syscall.ENOSPC {
		wd, err = syscall.InotifyAddWatch(w.fd, filepath.Join(w.rootDir, filepath.FromSlash(p)), watchMask|syscall.IN_DONT_FOLLOW)
	}
	switch {
	case err == nil:
	case err == syscall.ENOSPC || err == syscall.EMFILE:
		limit := ""
		if b, rerr := os.ReadFile("/proc/sys/fs/inotify/max_user_watches"); rerr == nil {
			limit = " of " + strings.TrimSpace(string(b))
		}
		return fmt.Errorf("inotify_add_watch %s: %v: the limit%s watches (fs.inotify.max_user_watches) is reached: %w", p, err, limit, errWatchLimit)
	default:
		return &fs.PathError{Op: "inotify_add_watch", Path: p, Err: err}
	}
	id := int32(wd)
	// The kernel returns the same descriptor for a directory watched
	// already (moved without its MOVED_FROM seen): it now has this path.
	if old, ok := w.wds[id]; ok && old != p && w.dirs[old] == id {
		delete(w.dirs, old)
	}
	if old, ok := w.dirs[p]; ok && old != id {
		delete(w.wds, old)
		syscall.InotifyRmWatch(w.fd, uint32(old))
	}
	w.wds[id] = p
	w.dirs[p] = id
	if w.seen != nil {
		w.seen[id] = true
	}
	return nil
}

// forget stops watching directory p and everything below it: it was moved
// away (maybe out of ROOT, where nothing may be reported) or removed. A
// directory moved elsewhere below DIR is watched again at its new path.
func (w *watcher) forget(p string) {
	for d, wd := range w.dirs {
		if d == p || strings.HasPrefix(d, p+"/") {
			delete(w.dirs, d)
			delete(w.wds, wd)
			syscall.InotifyRmWatch(w.fd, uint32(wd))
		}
	}
}
