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
	"strings"
	"sync"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// fsys is a sandbox.FS served by a pool of "berth-shim fs ROOT" sessions.
// Each session serves one request at a time.
type fsys struct {
	s    *Sandbox
	root string
	sem  chan struct{} // one token per running session

	mu     sync.Mutex
	idle   []*fsSession
	closed bool
}

// fsSession is one file-server process.
type fsSession struct {
	stream Stream
	in     io.WriteCloser
	frames *agent.Reader
	stderr tailBuffer
	errEOF chan struct{}
}

// FS returns the file system rooted at root, an absolute directory inside
// the sandbox, served by the agent's file server running as Options.FSUser.
// ctx bounds opening it.
func (s *Sandbox) FS(ctx context.Context, root string) (sandbox.FS, error) {
	if !path.IsAbs(root) {
		return nil, fmt.Errorf("shim: fs %q: the root must be an absolute path inside the sandbox", root)
	}
	f := &fsys{s: s, root: path.Clean(root), sem: make(chan struct{}, s.opts.MaxFSSessions)}
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

// get returns an idle session or starts one; put hands it back.
func (f *fsys) get(ctx context.Context) (*fsSession, error) {
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		<-f.sem
		f.s.mu.Lock()
		sbClosed := f.s.closed
		f.s.mu.Unlock()
		if sbClosed {
			return nil, errClosed
		}
		return nil, errFSClosed
	}
	if n := len(f.idle); n > 0 {
		ss := f.idle[n-1]
		f.idle = f.idle[:n-1]
		f.mu.Unlock()
		return ss, nil
	}
	f.mu.Unlock()
	args := append(append([]string{"fs"}, f.s.opts.FSFlags...), f.root)
	st, err := f.s.exec(ctx, ExecSpec{User: f.s.opts.FSUser}, args...)
	if err != nil {
		<-f.sem
		return nil, err
	}
	ss := &fsSession{stream: st, in: st.Stdin(), frames: agent.NewReader(st.Stdout()), errEOF: make(chan struct{})}
	go drain(st.Stderr(), &ss.stderr, ss.errEOF)
	return ss, nil
}

func (f *fsys) put(ss *fsSession, healthy bool) {
	f.mu.Lock()
	if healthy && !f.closed {
		f.idle = append(f.idle, ss)
		f.mu.Unlock()
	} else {
		f.mu.Unlock()
		ss.close()
	}
	<-f.sem
}

// fsCloseGrace bounds how long closing an FS session waits for its agent
// to exit on its own.
const fsCloseGrace = time.Second

// close ends the session: the agent exits on its input's end, and only one
// that does not within fsCloseGrace is torn down — an exit of its own lets
// Wait read a real status at once, where a torn-down stream makes the
// transport first rule out that the container stopped.
func (ss *fsSession) close() {
	ss.in.Close()
	// Read what is left of the output, so that a transport delivering it
	// in order reaches the end of the stream.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		io.Copy(io.Discard, ss.stream.Stdout())
	}()
	t := time.NewTimer(fsCloseGrace)
	select {
	case <-ss.errEOF:
	case <-t.C:
	}
	t.Stop()
	ss.stream.Close()
	<-ss.errEOF
	<-outDone
	ss.stream.Wait()
}

// errFSClosed is the error of a call on an FS closed by its own Close.
var errFSClosed = errors.New("shim: this file system was closed; open it again with Sandbox.FS")

// Close ends the FS's file-server sessions; later calls fail. The
// sandbox's Close does it for every FS still open.
func (f *fsys) Close() error {
	f.closeAll()
	return nil
}

func (f *fsys) closeAll() {
	f.mu.Lock()
	f.closed = true
	idle := f.idle
	f.idle = nil
	f.mu.Unlock()
	for _, ss := range idle {
		ss.close()
	}
	untrack(f.s, f.s.fss, f)
}

// abortError ends a request early on the caller's behalf (fs.SkipAll or a
// WalkFunc error); the session is then discarded.
type abortError struct{ err error }

func (e abortError) Error() string { return e.err.Error() }

// call runs one request. body, when not nil, is sent as file contents.
// onData and onInfos receive streamed results; resp gets the final
// response. The returned error is the wire error mapped to its class, a
// callback's error, or a transport failure.
func (f *fsys) call(ctx context.Context, req agent.Request, body []byte, onData func([]byte) error, onInfos func([]agent.Info) error, resp *agent.Response) error {
	ss, err := f.get(ctx)
	if err != nil {
		return &fs.PathError{Op: req.Op, Path: req.Name, Err: err}
	}
	stop := context.AfterFunc(ctx, func() { ss.stream.Close() })
	err = ss.roundTrip(req, body, onData, onInfos, resp)
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
		if ctx.Err() != nil {
			err = ctx.Err()
		} else if !errors.Is(err, sandbox.ErrGone) {
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

func (ss *fsSession) roundTrip(req agent.Request, body []byte, onData func([]byte) error, onInfos func([]agent.Info) error, resp *agent.Response) error {
	j, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := agent.WriteFrame(ss.in, agent.TypeRequest, j); err != nil {
		return err
	}
	if body != nil {
		for len(body) > 0 {
			n := min(len(body), agent.MaxPayload)
			if err := agent.WriteFrame(ss.in, agent.TypeData, body[:n]); err != nil {
				return err
			}
			body = body[n:]
		}
		if err := agent.WriteFrame(ss.in, agent.TypeDataEnd, nil); err != nil {
			return err
		}
	}
	for {
		typ, payload, err := ss.frames.Next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		switch typ {
		case agent.TypeData:
			if onData == nil {
				return fmt.Errorf("unexpected data frame")
			}
			if err := onData(payload); err != nil {
				return abortError{err}
			}
		case agent.TypeInfos:
			var infos []agent.Info
			if err := json.Unmarshal(payload, &infos); err != nil {
				return err
			}
			if onInfos == nil {
				return fmt.Errorf("unexpected entries frame")
			}
			if err := onInfos(infos); err != nil {
				return abortError{err}
			}
		case agent.TypeResponse:
			*resp = agent.Response{}
			return json.Unmarshal(payload, resp)
		default:
			return fmt.Errorf("unexpected frame %q from the file server", typ)
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
