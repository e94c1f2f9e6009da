package agent

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"
)

// Operations of the "fs" protocol, in Request.Op.
const (
	OpRealpath  = "realpath"
	OpReadFile  = "readfile"
	OpStat      = "stat"
	OpLstat     = "lstat"
	OpReadDir   = "readdir"
	OpWalk      = "walk"
	OpWriteFile = "writefile"
	OpMkdirAll  = "mkdirall"
	OpRemove    = "remove"
	OpRename    = "rename"
)

// Error kinds on the wire; the client maps them back to error classes.
const (
	KindNotExist   = "notexist"
	KindPermission = "permission"
	KindExist      = "exist"
	KindEscape     = "escape"
	KindTooLarge   = "toolarge"
	KindOther      = "other"
)

// Request is one "fs" request. A writefile request is followed by TypeData
// frames and one TypeDataEnd frame.
type Request struct {
	Op      string   `json:"op"`
	Name    string   `json:"name,omitempty"`
	NewName string   `json:"newname,omitempty"` // rename target
	Perm    uint32   `json:"perm,omitempty"`    // writefile, mkdirall
	Max     int64    `json:"max,omitempty"`     // readfile: the size cap
	Skip    []string `json:"skip,omitempty"`    // walk: directory base names not entered
}

// Response ends one "fs" request. ReadFile contents come before it in
// TypeData frames; ReadDir and Walk entries in TypeInfos frames.
type Response struct {
	Err  *Error `json:"err,omitempty"`
	Info *Info  `json:"info,omitempty"` // stat, lstat
	Path string `json:"path,omitempty"` // realpath
	// Pid is the file server's process id in the sandbox, in every
	// response, so that berth can end a server that later stops answering
	// (see "berth-shim kill-fs").
	Pid int `json:"pid,omitempty"`
}

// Error is a failed operation on the wire.
type Error struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Kind string `json:"kind"`
	Msg  string `json:"msg"`
}

// Info describes one file on the wire. Name is the base name for stat,
// lstat and readdir, and the path relative to the root for walk.
type Info struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // fs.FileMode bits
	ModTime int64  `json:"mtime"`
	UID     uint32 `json:"uid"`
	GID     uint32 `json:"gid"`
	// Nlink is the file's hard-link count: the tools refuse a file with
	// more than one, whose other names may lie outside the workspace.
	Nlink uint64 `json:"nlink,omitempty"`
}

// InfoOf converts a FileInfo for the wire under the given name.
func InfoOf(name string, fi fs.FileInfo) Info {
	in := Info{Name: name, Size: fi.Size(), Mode: uint32(fi.Mode()), ModTime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		in.UID, in.GID, in.Nlink = st.Uid, st.Gid, uint64(st.Nlink)
	}
	return in
}

// FileInfo returns an fs.FileInfo for in. Sys returns a *syscall.Stat_t
// with only Uid, Gid and Nlink set, as the local file systems' do, so
// callers read owners and link counts the same way for every backend.
func (in Info) FileInfo() fs.FileInfo { return fileInfo{in} }

type fileInfo struct{ in Info }

func (f fileInfo) Name() string       { return f.in.Name }
func (f fileInfo) Size() int64        { return f.in.Size }
func (f fileInfo) Mode() fs.FileMode  { return fs.FileMode(f.in.Mode) }
func (f fileInfo) ModTime() time.Time { return time.Unix(0, f.in.ModTime) }
func (f fileInfo) IsDir() bool        { return f.Mode().IsDir() }
func (f fileInfo) Sys() any {
	st := &syscall.Stat_t{Uid: f.in.UID, Gid: f.in.GID}
	setNlink(&st.Nlink, f.in.Nlink)
	return st
}

// setNlink sets a Stat_t's Nlink, whose width differs by architecture.
func setNlink[T ~uint32 | ~uint64](p *T, n uint64) { *p = T(n) }

// errEscapeText is the message os.Root uses when a name leaves the root.
const errEscapeText = "path escapes from parent"

// errTooLarge marks a file above the requested cap.
var errTooLarge = errors.New("file too large")

// errEscape marks a name that is not a valid relative path.
var errEscape = errors.New("path escapes the root")

// WireError converts err from an operation on name into its wire form.
func WireError(op, name string, err error) *Error {
	e := &Error{Op: op, Path: name, Kind: KindOther, Msg: err.Error()}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		e.Msg = pe.Err.Error()
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		e.Msg = le.Err.Error()
	}
	switch {
	case errors.Is(err, errEscape), strings.Contains(err.Error(), errEscapeText):
		e.Kind = KindEscape
	case errors.Is(err, errTooLarge):
		e.Kind = KindTooLarge
	case errors.Is(err, fs.ErrNotExist):
		e.Kind = KindNotExist
	case errors.Is(err, fs.ErrPermission):
		e.Kind = KindPermission
	case errors.Is(err, fs.ErrExist):
		e.Kind = KindExist
	}
	return e
}
