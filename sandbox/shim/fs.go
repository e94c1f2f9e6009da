package shim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// fsys is a sandbox.FS served by a pool of "berth-shim fs ROOT" sessions.
// Each session serves one request at a time.
type fsys struct {
	s     *Sandbox
	root  string
	sem   chan struct{} // one token per running session
	reply time.Duration // Options.FSReplyTimeout

	mu     sync.Mutex
	idle   []*fsSession
	busy   map[*fsSession]struct{} // sessions serving a call
	closed bool
	// live counts sessions from their start until their end was awaited
	// (see fsSession.end); closeAll waits for it. Add happens under mu
	// while the FS is open, so never after closeAll's Wait began.
	live sync.WaitGroup
}

// fsSession is one file-server process.
type fsSession struct {
	f      *fsys
	stream Stream
	in     io.WriteCloser
	frames *agent.Reader
	stderr tailBuffer
	errEOF chan struct{}
	// pid is the server's process id in the sandbox, from its responses;
	// zero until it answered once. Written by the call that holds the
	// session, read by the owner of its end after it was retired.
	pid int
	// silent is set when the server sent nothing within the reply
	// timeout; its stream was then torn down.
	silent atomic.Bool
}

// ErrNoReply is wrapped by the error of an FS call whose file server sent
// nothing within Options.FSReplyTimeout. The server was given up and is
// killed; the call may be retried, and gets a new server.
var ErrNoReply = errors.New("the file server sent nothing in time")

// FS returns the file system rooted at root, an absolute directory inside
// the sandbox, served by the agent's file server running as Options.FSUser.
// ctx bounds opening it.
func (s *Sandbox) FS(ctx context.Context, root string) (sandbox.FS, error) {
	if !path.IsAbs(root) {
		return nil, fmt.Errorf("shim: fs %q: the root must be an absolute path inside the sandbox", root)
	}
	f := &fsys{
		s: s, root: path.Clean(root), reply: s.opts.FSReplyTimeout,
		sem:  make(chan struct{}, s.opts.MaxFSSessions),
		busy: make(map[*fsSession]struct{}),
	}
	var resp agent.Response
	if err := f.call(ctx, agent.Request{Op: agent.OpRealpath, Name: "."}, nil, nil, nil, &resp); err != nil {
		f.closeAll()
		return nil, fmt.Errorf("shim: fs %q in %s: %w", root, s.opts.Name, err)
	}
	if err := track(s, s.fss, f); err != nil {
		f.closeAll()
		return nil, err
	}
	return f, nil
}

func (f *fsys) Root() string { return f.root }

// closedError is the error of a call on a closed FS: the sandbox's, when
// it was the sandbox that closed.
func (f *fsys) closedError() error {
	f.s.mu.Lock()
	sbClosed := f.s.closed
	f.s.mu.Unlock()
	if sbClosed {
		return errClosed
	}
	return errFSClosed
}

func (f *fsys) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// get returns an idle session, or starts one when there is none or when
// fresh is set; reused says the session served calls before. put hands it
// back. An idle session whose server ended meanwhile is retired, not
// returned.
func (f *fsys) get(ctx context.Context, fresh bool) (ss *fsSession, reused bool, err error) {
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		<-f.sem
		return nil, false, f.closedError()
	}
	for !fresh && len(f.idle) > 0 {
		ss := f.idle[len(f.idle)-1]
		f.idle = f.idle[:len(f.idle)-1]
		if ss.ended() {
			f.retire(ss)
			continue
		}
		f.busy[ss] = struct{}{}
		f.mu.Unlock()
		return ss, true, nil
	}
	f.live.Add(1)
	f.mu.Unlock()
	args := append(append([]string{"fs"}, f.s.opts.FSFlags...), "--idle-exit="+agent.FSIdleExit.String(), f.root)
	st, err := f.s.exec(ctx, ExecSpec{User: f.s.opts.FSUser}, args...)
	if err != nil {
		f.live.Done()
		<-f.sem
		return nil, false, err
	}
	ss = &fsSession{f: f, stream: st, in: st.Stdin(), frames: agent.NewReader(st.Stdout()), errEOF: make(chan struct{})}
	go drain(st.Stderr(), &ss.stderr, ss.errEOF) // ends with the stream, which end closes
	f.mu.Lock()
	closed := f.closed
	if !closed {
		f.busy[ss] = struct{}{}
	}
	f.mu.Unlock()
	if closed {
		f.retire(ss)
		<-f.sem
		return nil, false, f.closedError()
	}
	return ss, false, nil
}

// put hands ss back after a call: a healthy session goes to the idle
// pool, any other is retired.
func (f *fsys) put(ss *fsSession, healthy bool) {
	f.mu.Lock()
	delete(f.busy, ss)
	if healthy && !f.closed && !ss.ended() && !ss.silent.Load() {
		f.idle = append(f.idle, ss)
		f.mu.Unlock()
	} else {
		f.mu.Unlock()
		f.retire(ss)
	}
	<-f.sem
}

// retire ends ss in the background; closeAll waits for that end.
func (f *fsys) retire(ss *fsSession) {
	go func() {
		defer f.live.Done()
		ss.end()
	}()
}

// ended reports whether the server's stderr reached its end: it exited or
// was killed. (Some transports deliver stderr only while stdout is read;
// a session that ends unseen is caught by call's retry.)
func (ss *fsSession) ended() bool {
	select {
	case <-ss.errEOF:
		return true
	default:
		return false
	}
}

// fsCloseGrace bounds how long ending an FS session waits for its agent
// to exit on its own after its input ended.
const fsCloseGrace = time.Second

// fsEndGrace bounds each wait for a torn-down session's program to be
// reported ended: before it is killed, and after.
const fsEndGrace = 5 * time.Second

// fsKillTimeout bounds the exec that kills a file server.
const fsKillTimeout = 10 * time.Second

// end ends the session, run by the goroutine retire started. The agent
// exits on its input's end, and only one that does not within fsCloseGrace
// is torn down — an exit of its own lets Wait read a real status at once,
// where a torn-down stream makes the transport first rule out that the
// container stopped. A silent server is torn down and killed at once: its
// reply timeout was its grace. Every wait is bounded: when even the killed
// program is not reported ended, end gives up on it.
func (ss *fsSession) end() {
	ss.in.Close()
	// Read what is left of the output, so that a transport delivering it
	// in order reaches the end of the stream.
	outDone := make(chan struct{})
	go func() { // ends when the stream ends or is torn down below
		defer close(outDone)
		io.Copy(io.Discard, ss.stream.Stdout())
	}()
	silent := ss.silent.Load()
	if !silent {
		t := time.NewTimer(fsCloseGrace)
		select {
		case <-ss.errEOF:
		case <-t.C:
		}
		t.Stop()
	}
	ss.stream.Close()
	waited := make(chan struct{})
	go func() { // ends with the program; abandoned only when even kill-fs cannot end it
		<-ss.errEOF
		<-outDone
		ss.stream.Wait()
		close(waited)
	}()
	if silent {
		ss.kill()
	}
	t := time.NewTimer(fsEndGrace)
	defer t.Stop()
	select {
	case <-waited:
		return
	case <-t.C:
	}
	if !silent {
		ss.kill()
	}
	t.Reset(fsEndGrace)
	select {
	case <-waited:
	case <-t.C:
	}
}

// kill kills the server: through its stream when that is a [Killer], else
// with the agent's kill-fs mode, which checks that the pid still names a
// file server for this root. A server that never answered has no known
// pid; its transport's Close is then all there is.
func (ss *fsSession) kill() {
	if k, ok := ss.stream.(Killer); ok {
		k.Kill()
		return
	}
	if ss.pid <= 0 {
		return
	}
	f := ss.f
	f.s.placeMu.Lock()
	p := f.s.placed
	f.s.placeMu.Unlock()
	if p == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fsKillTimeout)
	defer cancel()
	RunExec(ctx, f.s.t, ExecSpec{Args: []string{p, "kill-fs", strconv.Itoa(ss.pid), f.root}, User: f.s.opts.FSUser}, nil)
}

// errFSClosed is the error of a call on an FS closed by its own Close.
var errFSClosed = errors.New("shim: this file system was closed; open it again with Sandbox.FS")

// Close ends the FS's file-server sessions; later calls fail. The
// sandbox's Close does it for every FS still open.
func (f *fsys) Close() error {
	f.closeAll()
	return nil
}

// closeAll closes the FS: idle sessions end, calls under way are cut off
// (their streams torn down), and it returns once every session's end was
// awaited, each bounded by its graces.
func (f *fsys) closeAll() {
	f.mu.Lock()
	f.closed = true
	idle := f.idle
	f.idle = nil
	for ss := range f.busy {
		ss.stream.Close()
	}
	f.mu.Unlock()
	for _, ss := range idle {
		f.retire(ss)
	}
	f.live.Wait()
	untrack(f.s, f.s.fss, f)
}

// abortError ends a request early on the caller's behalf (fs.SkipAll or a
// WalkFunc error); the session is then discarded.
type abortError struct{ err error }

func (e abortError) Error() string { return e.err.Error() }

// call runs one request. body, when not nil, is sent as file contents.
// onData and onInfos receive streamed results; resp gets the final
// response. The returned error is the wire error mapped to its class, a
// callback's error, or a transport failure. A request on a reused session
// whose server ended before it answered anything is sent once more, to a
// new server: it did nothing.
func (f *fsys) call(ctx context.Context, req agent.Request, body []byte, onData func([]byte) error, onInfos func([]agent.Info) error, resp *agent.Response) error {
	for attempt := 0; ; attempt++ {
		ss, reused, err := f.get(ctx, attempt > 0)
		if err != nil {
			return &fs.PathError{Op: req.Op, Path: req.Name, Err: err}
		}
		stop := context.AfterFunc(ctx, func() { ss.stream.Close() })
		answered, err := ss.roundTrip(req, body, onData, onInfos, resp)
		stopped := stop()
		var ab abortError
		switch {
		case err == nil:
			f.put(ss, stopped)
		case errors.As(err, &ab):
			f.put(ss, false)
			return ab.err
		default:
			f.put(ss, false)
			switch {
			case ctx.Err() != nil:
				err = ctx.Err()
			case ss.silent.Load():
				pid := ""
				if ss.pid > 0 {
					pid = fmt.Sprintf(", pid %d", ss.pid)
				}
				return &fs.PathError{Op: req.Op, Path: req.Name, Err: fmt.Errorf(
					"the file server in %s (berth-shim fs %s%s) sent nothing for %v: %w; berth stopped it, and the next call starts a new one: retry the call",
					f.s.opts.Name, f.root, pid, f.reply, ErrNoReply)}
			case f.isClosed():
				err = f.closedError()
			case reused && !answered && attempt == 0:
				continue
			case !errors.Is(err, sandbox.ErrGone):
				if msg := strings.TrimSpace(ss.stderr.String()); msg != "" {
					err = fmt.Errorf("%w: %s", err, msg)
				}
			}
			return &fs.PathError{Op: req.Op, Path: req.Name, Err: fmt.Errorf("file server in %s failed: %w", f.s.opts.Name, err)}
		}
		if resp.Err != nil {
			return wireToError(req, resp.Err)
		}
		return nil
	}
}

// roundTrip sends one request and reads its reply; answered says whether
// any frame of the reply came. A server that takes no request frame, or
// sends no reply frame, within the reply timeout is silent: its stream is
// torn down, which ends the call.
func (ss *fsSession) roundTrip(req agent.Request, body []byte, onData func([]byte) error, onInfos func([]agent.Info) error, resp *agent.Response) (answered bool, err error) {
	j, err := json.Marshal(req)
	if err != nil {
		return false, err
	}
	timeout := ss.f.reply
	watch := time.AfterFunc(timeout, func() {
		ss.silent.Store(true)
		ss.stream.Close()
	})
	defer watch.Stop()
	// Each wait on the server is timed from its start.
	write := func(typ byte, p []byte) error {
		watch.Reset(timeout)
		err := agent.WriteFrame(ss.in, typ, p)
		watch.Stop()
		return err
	}
	if err := write(agent.TypeRequest, j); err != nil {
		return false, err
	}
	if body != nil {
		for len(body) > 0 {
			n := min(len(body), agent.MaxPayload)
			if err := write(agent.TypeData, body[:n]); err != nil {
				return false, err
			}
			body = body[n:]
		}
		if err := write(agent.TypeDataEnd, nil); err != nil {
			return false, err
		}
	}
	for {
		watch.Reset(timeout)
		typ, payload, err := ss.frames.Next()
		watch.Stop()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return answered, err
		}
		answered = true
		switch typ {
		case agent.TypeData:
			if onData == nil {
				return true, fmt.Errorf("unexpected data frame")
			}
			if err := onData(payload); err != nil {
				return true, abortError{err}
			}
		case agent.TypeInfos:
			var infos []agent.Info
			if err := json.Unmarshal(payload, &infos); err != nil {
				return true, err
			}
			if onInfos == nil {
				return true, fmt.Errorf("unexpected entries frame")
			}
			if err := onInfos(infos); err != nil {
				return true, abortError{err}
			}
		case agent.TypeResponse:
			*resp = agent.Response{}
			if err := json.Unmarshal(payload, resp); err != nil {
				return true, err
			}
			if resp.Pid > 0 {
				ss.pid = resp.Pid
			}
			return true, nil
		default:
			return true, fmt.Errorf("unexpected frame %q from the file server", typ)
		}
	}
}

// wireToError maps a wire error to a *fs.PathError of the right class.
func wireToError(req agent.Request, e *agent.Error) error {
	var class error
	switch e.Kind {
	case agent.KindNotExist:
		class = fs.ErrNotExist
	case agent.KindPermission:
		class = fs.ErrPermission
	case agent.KindExist:
		class = fs.ErrExist
	case agent.KindEscape:
		class = sandbox.ErrEscape
	case agent.KindTooLarge:
		class = sandbox.ErrTooLarge
	default:
		return &fs.PathError{Op: e.Op, Path: e.Path, Err: errors.New(e.Msg)}
	}
	if e.Msg == class.Error() || e.Msg == "" {
		return &fs.PathError{Op: e.Op, Path: e.Path, Err: class}
	}
	return &fs.PathError{Op: e.Op, Path: e.Path, Err: classError{msg: e.Msg, class: class}}
}

// classError keeps the agent's message while matching its class.
type classError struct {
	msg   string
	class error
}

func (e classError) Error() string { return e.msg }
func (e classError) Unwrap() error { return e.class }

// checkName refuses names that are not valid relative paths.
func checkName(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: sandbox.ErrEscape}
	}
	return nil
}

func (f *fsys) ReadFile(ctx context.Context, name string) ([]byte, error) {
	if err := checkName("readfile", name); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	var resp agent.Response
	err := f.call(ctx, agent.Request{Op: agent.OpReadFile, Name: name, Max: sandbox.MaxFileSize}, nil,
		func(p []byte) error {
			if buf.Len()+len(p) > sandbox.MaxFileSize {
				return &fs.PathError{Op: "readfile", Path: name, Err: sandbox.ErrTooLarge}
			}
			buf.Write(p)
			return nil
		}, nil, &resp)
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (f *fsys) stat(ctx context.Context, op, name string) (fs.FileInfo, error) {
	if err := checkName(op, name); err != nil {
		return nil, err
	}
	var resp agent.Response
	if err := f.call(ctx, agent.Request{Op: op, Name: name}, nil, nil, nil, &resp); err != nil {
		return nil, err
	}
	if resp.Info == nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: errors.New("file server sent no file information")}
	}
	return resp.Info.FileInfo(), nil
}

func (f *fsys) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	return f.stat(ctx, agent.OpStat, name)
}

func (f *fsys) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	return f.stat(ctx, agent.OpLstat, name)
}

func (f *fsys) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	if err := checkName("readdir", name); err != nil {
		return nil, err
	}
	var out []fs.DirEntry
	var resp agent.Response
	err := f.call(ctx, agent.Request{Op: agent.OpReadDir, Name: name}, nil, nil, func(infos []agent.Info) error {
		for _, in := range infos {
			out = append(out, fs.FileInfoToDirEntry(in.FileInfo()))
		}
		return nil
	}, &resp)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (f *fsys) Walk(ctx context.Context, dir string, opts sandbox.WalkOptions, fn sandbox.WalkFunc) error {
	if err := checkName("walk", dir); err != nil {
		return err
	}
	var skipped []string // directories fn asked to skip; entries below them are dropped
	var resp agent.Response
	err := f.call(ctx, agent.Request{Op: agent.OpWalk, Name: dir, Skip: opts.SkipDirs}, nil, nil, func(infos []agent.Info) error {
		for _, in := range infos {
			if n := len(skipped); n > 0 && strings.HasPrefix(in.Name, skipped[n-1]+"/") {
				continue
			}
			fi := in.FileInfo()
			// FileInfo.Name is the base name, as fs.WalkDir gives it.
			fi = namedInfo{fi, path.Base(in.Name)}
			switch err := fn(in.Name, fi); {
			case err == nil:
			case errors.Is(err, fs.SkipDir):
				// As in fs.WalkDir, SkipDir on a file skips the rest of
				// its directory.
				skip := in.Name
				if !fi.IsDir() {
					skip = path.Dir(in.Name)
				}
				if skip == dir {
					return fs.SkipAll
				}
				skipped = append(skipped, skip)
			default:
				return err
			}
		}
		return nil
	}, &resp)
	if errors.Is(err, fs.SkipAll) || errors.Is(err, fs.SkipDir) {
		return nil
	}
	return err
}

// namedInfo overrides a FileInfo's name.
type namedInfo struct {
	fs.FileInfo
	name string
}

func (n namedInfo) Name() string { return n.name }

func (f *fsys) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	if err := checkName("writefile", name); err != nil {
		return err
	}
	if data == nil {
		data = []byte{}
	}
	var resp agent.Response
	return f.call(ctx, agent.Request{Op: agent.OpWriteFile, Name: name, Perm: uint32(perm.Perm())}, data, nil, nil, &resp)
}

func (f *fsys) MkdirAll(ctx context.Context, name string, perm fs.FileMode) error {
	if err := checkName("mkdirall", name); err != nil {
		return err
	}
	var resp agent.Response
	return f.call(ctx, agent.Request{Op: agent.OpMkdirAll, Name: name, Perm: uint32(perm.Perm())}, nil, nil, nil, &resp)
}

func (f *fsys) Remove(ctx context.Context, name string) error {
	if err := checkName("remove", name); err != nil {
		return err
	}
	var resp agent.Response
	return f.call(ctx, agent.Request{Op: agent.OpRemove, Name: name}, nil, nil, nil, &resp)
}

func (f *fsys) Rename(ctx context.Context, oldname, newname string) error {
	if err := checkName("rename", oldname); err != nil {
		return err
	}
	if err := checkName("rename", newname); err != nil {
		return err
	}
	var resp agent.Response
	return f.call(ctx, agent.Request{Op: agent.OpRename, Name: oldname, NewName: newname}, nil, nil, nil, &resp)
}

var _ sandbox.FS = (*fsys)(nil)
