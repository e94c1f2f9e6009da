package agent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// infoBatch is how many entries one TypeInfos frame carries at most.
const infoBatch = 256

// fileServer is the state of "fs" mode: one request at a time.
type fileServer struct {
	root    *os.Root
	rootErr error // why the root could not be opened
	rootDir string
	in      *Reader
	out     io.Writer
}

// serveFS serves requests from in until it ends, or, with idle > 0, until
// no request came for idle: berth keeps idle servers for its next calls
// and starts a new one when it finds one ended, and a berth that died may
// leave the server's input open forever (containerd's shim holds a FIFO
// open), so an idle server is not worth keeping.
func serveFS(rootDir string, in io.Reader, out io.Writer, idle time.Duration) int {
	s := &fileServer{rootDir: rootDir, in: NewReader(in), out: out}
	s.root, s.rootErr = os.OpenRoot(rootDir)
	if s.root != nil {
		defer s.root.Close()
	}
	var idleExit *time.Timer
	if idle > 0 {
		idleExit = time.AfterFunc(idle, func() { os.Exit(0) })
	}
	for {
		if idleExit != nil {
			idleExit.Reset(idle)
		}
		typ, payload, err := s.in.Next()
		if idleExit != nil {
			idleExit.Stop()
		}
		if err == io.EOF {
			return 0
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim fs: read request: %v\n", err)
			return 1
		}
		if typ != TypeRequest {
			fmt.Fprintf(os.Stderr, "berth-shim fs: unexpected frame %q\n", typ)
			return 1
		}
		var req Request
		if err := json.Unmarshal(payload, &req); err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim fs: bad request: %v\n", err)
			return 1
		}
		if err := s.handle(req); err != nil {
			fmt.Fprintf(os.Stderr, "berth-shim fs: %v\n", err)
			return 1
		}
	}
}

// handle answers one request. A returned error means the stream broke.
func (s *fileServer) handle(req Request) error {
	var resp Response
	var body []byte
	if req.Op == OpWriteFile {
		var err error
		if body, err = s.readBody(); err != nil {
			return err
		}
	}
	err := s.check(req)
	if err == nil {
		err = s.do(req, body, &resp)
	}
	if errors.Is(err, errBroken) {
		return err
	}
	if err != nil {
		resp = Response{Err: WireError(req.Op, req.Name, err)}
	}
	return s.reply(resp)
}

var errBroken = errors.New("write to berth failed")

func (s *fileServer) reply(resp Response) error {
	resp.Pid = os.Getpid()
	j, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	if err := WriteFrame(s.out, TypeResponse, j); err != nil {
		return errBroken
	}
	return nil
}

// readBody collects the data frames of a writefile request.
func (s *fileServer) readBody() ([]byte, error) {
	var body []byte
	for {
		typ, payload, err := s.in.Next()
		if err != nil {
			return nil, err
		}
		switch typ {
		case TypeData:
			body = append(body, payload...)
		case TypeDataEnd:
			if body == nil {
				body = []byte{}
			}
			return body, nil
		default:
			return nil, fmt.Errorf("unexpected frame %q in file data", typ)
		}
	}
}

// check refuses names outside the root before touching the disk.
func (s *fileServer) check(req Request) error {
	if s.rootErr != nil {
		return s.rootErr
	}
	if !fs.ValidPath(req.Name) {
		return &fs.PathError{Op: req.Op, Path: req.Name, Err: errEscape}
	}
	if req.Op == OpRename && !fs.ValidPath(req.NewName) {
		return &fs.PathError{Op: req.Op, Path: req.NewName, Err: errEscape}
	}
	return nil
}

func (s *fileServer) do(req Request, body []byte, resp *Response) error {
	r := s.root
	switch req.Op {
	case OpRealpath:
		p, err := filepath.EvalSymlinks(s.rootDir)
		if err != nil {
			return err
		}
		fi, err := r.Stat(".")
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return &fs.PathError{Op: "open", Path: s.rootDir, Err: syscall.ENOTDIR}
		}
		resp.Path = p
		return nil
	case OpStat, OpLstat:
		stat := r.Stat
		if req.Op == OpLstat {
			stat = r.Lstat
		}
		fi, err := stat(req.Name)
		if err != nil {
			return err
		}
		in := InfoOf(fi.Name(), fi)
		if req.Name == "." {
			in.Name = "."
		}
		resp.Info = &in
		return nil
	case OpReadFile:
		return s.readFile(req)
	case OpReadDir:
		f, err := r.Open(req.Name)
		if err != nil {
			return err
		}
		defer f.Close()
		ents, err := f.ReadDir(-1)
		if err != nil {
			return err
		}
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return cmpString(a.Name(), b.Name()) })
		var batch []Info
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			batch = append(batch, InfoOf(e.Name(), fi))
			if len(batch) == infoBatch {
				if err := s.sendInfos(batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		return s.sendInfos(batch)
	case OpWalk:
		return s.walk(req)
	case OpWriteFile:
		return s.writeFile(req.Name, body, fs.FileMode(req.Perm).Perm())
	case OpMkdirAll:
		return r.MkdirAll(req.Name, fs.FileMode(req.Perm).Perm())
	case OpRemove:
		return r.Remove(req.Name)
	case OpRename:
		return r.Rename(req.Name, req.NewName)
	default:
		return fmt.Errorf("unknown operation %q", req.Op)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *fileServer) sendInfos(batch []Info) error {
	if len(batch) == 0 {
		return nil
	}
	j, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	if len(j) > MaxPayload {
		// Very long names: split the batch.
		h := len(batch) / 2
		if h == 0 {
			return fmt.Errorf("entry too large to send")
		}
		if err := s.sendInfos(batch[:h]); err != nil {
			return err
		}
		return s.sendInfos(batch[h:])
	}
	if err := WriteFrame(s.out, TypeInfos, j); err != nil {
		return errBroken
	}
	return nil
}

func (s *fileServer) readFile(req Request) error {
	f, err := s.root.Open(req.Name)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return &fs.PathError{Op: "read", Path: req.Name, Err: syscall.EISDIR}
	}
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "read", Path: req.Name, Err: errors.New("not a regular file")}
	}
	max := req.Max
	if max <= 0 {
		max = 64 << 20
	}
	if fi.Size() > max {
		return &fs.PathError{Op: "read", Path: req.Name, Err: errTooLarge}
	}
	// Read everything first, so an error mid-file is one response and not
	// a partial delivery.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return err
	}
	if int64(len(data)) > max {
		return &fs.PathError{Op: "read", Path: req.Name, Err: errTooLarge}
	}
	for len(data) > 0 {
		n := min(len(data), MaxPayload)
		if err := WriteFrame(s.out, TypeData, data[:n]); err != nil {
			return errBroken
		}
		data = data[n:]
	}
	return nil
}

// walk streams dir and everything below it in lexical order, without
// following symbolic links and without entering directories named in
// req.Skip. Unreadable subdirectories are reported but not entered.
func (s *fileServer) walk(req Request) error {
	fi, err := s.root.Lstat(req.Name)
	if err != nil {
		return err
	}
	w := &walker{s: s, skip: req.Skip}
	if err := w.add(req.Name, fi); err != nil {
		return err
	}
	if fi.IsDir() {
		if err := w.dir(req.Name, true); err != nil {
			return err
		}
	}
	return w.flush()
}

type walker struct {
	s     *fileServer
	skip  []string
	batch []Info
}

func (w *walker) add(name string, fi fs.FileInfo) error {
	w.batch = append(w.batch, InfoOf(name, fi))
	if len(w.batch) >= infoBatch {
		return w.flush()
	}
	return nil
}

func (w *walker) flush() error {
	err := w.s.sendInfos(w.batch)
	w.batch = w.batch[:0]
	return err
}

func (w *walker) dir(name string, top bool) error {
	f, err := w.s.root.Open(name)
	if err != nil {
		if top {
			return err
		}
		return nil
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil && top {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return cmpString(a.Name(), b.Name()) })
	for _, e := range ents {
		child := path.Join(name, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if err := w.add(child, fi); err != nil {
			return err
		}
		if fi.IsDir() && !slices.Contains(w.skip, e.Name()) {
			if err := w.dir(child, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeFile replaces name atomically with data. An existing regular file
// keeps its mode and owner; a final symbolic link is replaced, not followed.
func (s *fileServer) writeFile(name string, data []byte, perm fs.FileMode) error {
	if name == "." {
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	}
	mode := perm
	uid, gid := -1, -1
	if fi, err := s.root.Lstat(name); err == nil {
		switch {
		case fi.IsDir():
			return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
		case fi.Mode().IsRegular():
			mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				uid, gid = int(st.Uid), int(st.Gid)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".berth-"+hex.EncodeToString(rnd[:]))
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			s.root.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if uid >= 0 {
		// Keep the owner when allowed; an unprivileged writer of someone
		// else's file cannot, and the file then becomes the writer's.
		f.Chown(uid, gid)
		if err := f.Chmod(mode); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	ok = true
	if err := s.root.Rename(tmp, name); err != nil {
		s.root.Remove(tmp)
		return err
	}
	return nil
}
