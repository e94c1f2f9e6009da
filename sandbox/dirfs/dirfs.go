// Package dirfs implements [sandbox.FS] over a directory of the local
// machine with [os.Root]: every name is resolved beneath the root with
// openat(2) and O_NOFOLLOW, so "..", absolute names and symbolic links whose
// target lies outside the root are refused, also when a path component is
// swapped for a link while the call runs.
//
// The host backend serves its files with it, and container backends use it
// to read a container's files directly when they can see its root file
// system from the host.
package dirfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"berth.dev/berth/sandbox"
)

// dirFS is the [sandbox.FS] returned by [New] and [NewAt].
type dirFS struct {
	root *os.Root
	name string // what Root reports
	// top is the root directory opened once more, for the kernel's own
	// confined lookups (openat2 RESOLVE_BENEATH) on the read path; rc
	// lends its descriptor out, kept open for the duration of a call even
	// when Close runs meanwhile (a bare number could be reused by the next
	// open and point elsewhere).
	top *os.File
	// closeOnce makes Close idempotent (the sandbox closes what is left).
	closeOnce sync.Once
	closeErr  error
	rc        syscall.RawConn
}

var (
	_ sandbox.FS = (*dirFS)(nil)
	_ io.Closer  = (*dirFS)(nil)
)

// New returns a [sandbox.FS] confined to the local directory root, which is
// made absolute. The returned FS also implements [io.Closer]; Close releases
// the directory handle it holds (the FS is unusable afterwards).
func New(root string) (sandbox.FS, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("dirfs: cannot make %q absolute: %w", root, err)
	}
	return NewAt(abs, abs)
}

// NewAt is like [New] for a local directory dir whose path inside the
// sandbox differs, such as a container's workspace seen from the host
// through /proc/PID/root: the FS serves dir's files and reports root, an
// absolute slash-separated path, as its Root.
func NewAt(dir, root string) (sandbox.FS, error) {
	if !path.IsAbs(root) {
		return nil, fmt.Errorf("dirfs: root %q is not an absolute path: pass the directory's absolute path inside the sandbox", root)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("dirfs: open directory %s: %w", dir, err)
	}
	top, err := r.Open(".")
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("dirfs: open directory %s: %w", dir, err)
	}
	rc, err := top.SyscallConn()
	if err != nil {
		top.Close()
		r.Close()
		return nil, fmt.Errorf("dirfs: open directory %s: %w", dir, err)
	}
	return &dirFS{root: r, name: path.Clean(root), top: top, rc: rc}, nil
}

// Root returns the absolute path of the directory inside the sandbox.
func (d *dirFS) Root() string { return d.name }

// Close releases the directory handle. Later calls return the first
// result.
func (d *dirFS) Close() error {
	d.closeOnce.Do(func() { d.closeErr = errors.Join(d.top.Close(), d.root.Close()) })
	return d.closeErr
}

// check validates name and ctx before any file system access.
func check(ctx context.Context, op, name string) error {
	if err := ctx.Err(); err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	if strings.IndexByte(name, 0) >= 0 {
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("name contains a NUL byte: %w", sandbox.ErrEscape)}
	}
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: sandbox.ErrEscape}
	}
	return nil
}

// escapeText is the text of os.Root's unexported error for names that leave
// the root.
const escapeText = "path escapes from parent"

// mapErr turns an error of os.Root into the FS's error classes: a
// *fs.PathError carrying the caller's op and name whose Err is the
// underlying cause, with os.Root's escape error replaced by ErrEscape.
func mapErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		cause = le.Err
	}
	if cause != nil && cause.Error() == escapeText {
		cause = sandbox.ErrEscape
	}
	return &fs.PathError{Op: op, Path: name, Err: cause}
}

// ReadFile returns the contents of a regular file of at most
// sandbox.MaxFileSize bytes. A symbolic link is followed only when its
// target stays inside the root.
func (d *dirFS) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return d.ReadFileBuffer(ctx, name, nil)
}

var _ sandbox.BufferReader = (*dirFS)(nil)

// ReadFileBuffer is ReadFile reading into buf's storage when the file fits
// in it (sandbox.BufferReader).
func (d *dirFS) ReadFileBuffer(ctx context.Context, name string, buf []byte) ([]byte, error) {
	const op = "read"
	if err := check(ctx, op, name); err != nil {
		return nil, err
	}
	if data, ok, err := d.readBeneath(op, name, buf); ok {
		return data, err
	}
	// O_NONBLOCK keeps a FIFO from blocking the open; it is refused below.
	f, err := d.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, mapErr(op, name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, mapErr(op, name, err)
	}
	return readOpened(op, name, f, fi, buf)
}

// readOpened reads the open file f, refusing what is not a regular file of
// at most sandbox.MaxFileSize bytes.
func readOpened(op, name string, f io.Reader, fi fs.FileInfo, buf []byte) ([]byte, error) {
	if fi.IsDir() {
		return nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("is a directory: list it with ReadDir: %w", fs.ErrInvalid)}
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("not a regular file (%s): %w", fi.Mode().Type(), fs.ErrInvalid)}
	}
	if fi.Size() > sandbox.MaxFileSize {
		return nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w: %d bytes, the limit is %d", sandbox.ErrTooLarge, fi.Size(), sandbox.MaxFileSize)}
	}
	// The file may grow after the Stat: read at most one byte past the cap.
	// The buffer is sized from the Stat (one byte more, to see the end in
	// one read) so a file is read without regrowing and copying.
	data, err := readAtMost(f, buf[:0], fi.Size()+1, sandbox.MaxFileSize+1)
	if err != nil {
		return nil, mapErr(op, name, err)
	}
	if len(data) > sandbox.MaxFileSize {
		return nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w: more than %d bytes", sandbox.ErrTooLarge, sandbox.MaxFileSize)}
	}
	return data, nil
}

// readAtMost reads r to its end or to limit bytes into buf's storage, or
// into a new buffer of hint bytes when buf has less room.
func readAtMost(r io.Reader, buf []byte, hint, limit int64) ([]byte, error) {
	data := buf[:0:min(int64(cap(buf)), limit)]
	if int64(cap(data)) < min(hint, limit) {
		data = make([]byte, 0, min(max(hint, 512), limit))
	}
	for {
		if len(data) == cap(data) {
			if int64(len(data)) >= limit {
				return data, nil
			}
			data = append(data, 0)[:len(data)]
			data = data[:len(data):min(int64(cap(data)), limit)]
		}
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return data, err
		}
	}
}

// Stat returns the file's information, following a final symbolic link
// only when its target stays inside the root.
func (d *dirFS) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	const op = "stat"
	if err := check(ctx, op, name); err != nil {
		return nil, err
	}
	fi, err := d.root.Stat(name)
	return fi, mapErr(op, name, err)
}

// Lstat returns the file's information without following a final symbolic
// link.
func (d *dirFS) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	const op = "lstat"
	if err := check(ctx, op, name); err != nil {
		return nil, err
	}
	fi, err := d.root.Lstat(name)
	return fi, mapErr(op, name, err)
}

// ReadDir lists a directory, sorted by name.
func (d *dirFS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	const op = "readdir"
	if err := check(ctx, op, name); err != nil {
		return nil, err
	}
	return d.readDir(op, name)
}

func (d *dirFS) readDir(op, name string) ([]fs.DirEntry, error) {
	f, err := d.root.Open(name)
	if err != nil {
		return nil, mapErr(op, name, err)
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, mapErr(op, name, err)
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for i, e := range ents {
		ents[i] = dirEntry{DirEntry: e, d: d, name: path.Join(name, e.Name())}
	}
	return ents, nil
}

// dirEntry makes Info look the entry up beneath the root: os's own entries
// stat a path built from the directory's name, which for [NewAt] may be a
// /proc/self/fd path that no longer means the same directory.
type dirEntry struct {
	fs.DirEntry
	d    *dirFS
	name string
}

func (e dirEntry) Info() (fs.FileInfo, error) {
	fi, err := e.d.root.Lstat(e.name)
	return fi, mapErr("lstat", e.name, err)
}

// Walk calls fn for dir and every file and directory below it, in lexical
// order, with names relative to the root; see [sandbox.FS]. dir itself is
// entered even when its base name is in opts.SkipDirs. Entries that vanish
// while the walk runs are left out, and a directory that cannot be listed
// for lack of permission is reported but not entered.
func (d *dirFS) Walk(ctx context.Context, dir string, opts sandbox.WalkOptions, fn sandbox.WalkFunc) error {
	const op = "walk"
	if err := check(ctx, op, dir); err != nil {
		return err
	}
	fi, err := d.root.Lstat(dir)
	if err != nil {
		return mapErr(op, dir, err)
	}
	err = d.walk(ctx, dir, fi, opts, fn, true)
	if err == fs.SkipDir || err == fs.SkipAll {
		return nil
	}
	return err
}

func (d *dirFS) walk(ctx context.Context, name string, fi fs.FileInfo, opts sandbox.WalkOptions, fn sandbox.WalkFunc, top bool) error {
	if err := ctx.Err(); err != nil {
		return &fs.PathError{Op: "walk", Path: name, Err: err}
	}
	if err := fn(name, fi); err != nil {
		return err // fs.SkipDir on a file means "skip the rest of its directory"
	}
	if !fi.IsDir() || (!top && slices.Contains(opts.SkipDirs, fi.Name())) {
		return nil
	}
	dirf, err := d.root.Open(name)
	if err != nil {
		err = mapErr("walk", name, err)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil
		}
		return err
	}
	defer dirf.Close()
	// Names only: each entry is stat'ed once below (ReadDir stats every
	// entry itself on file systems that do not report types, such as
	// ext2/ext3, which doubled the walk's syscalls there).
	names, err := dirf.Readdirnames(-1)
	if err != nil {
		err = mapErr("walk", name, err)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil
		}
		return err
	}
	slices.Sort(names)
	for _, base := range names {
		child := path.Join(name, base)
		// One component relative to the open directory, not following a
		// final link: it cannot leave the directory, and it costs one
		// syscall instead of resolving the whole path from the root again.
		cfi, err := lstatAt(dirf, base)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return mapErr("walk", child, err)
		}
		err = d.walk(ctx, child, cfi, opts, fn, false)
		if err == fs.SkipDir {
			if cfi.IsDir() {
				continue
			}
			return nil // skip the remaining entries of this directory
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tempPrefix starts the names of WriteFile's temporary files, followed by
// at most maxTempBase bytes of the target's name (so the temporary name stays
// within NAME_MAX) and a random suffix.
const (
	tempPrefix  = ".berth-tmp-"
	maxTempBase = 200
)

// WriteFile replaces or creates the regular file name atomically; see
// [sandbox.FS]. The data goes to a temporary file in the same directory,
// which is synced and renamed over name, so a symbolic link at name is
// replaced, never followed, and a hard link to name keeps the old content.
// An existing file keeps its permission bits and, where the process may
// change it (as root), its owner.
func (d *dirFS) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	const op = "write"
	if err := check(ctx, op, name); err != nil {
		return err
	}
	if name == "." {
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("is a directory: %w", fs.ErrInvalid)}
	}
	old, err := d.root.Lstat(name)
	switch {
	case err == nil && old.IsDir():
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("is a directory: %w", fs.ErrInvalid)}
	case err == nil && !old.Mode().IsRegular() && old.Mode()&fs.ModeSymlink == 0:
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("not a regular file (%s): %w", old.Mode().Type(), fs.ErrInvalid)}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return mapErr(op, name, err)
	case err != nil || old.Mode()&fs.ModeSymlink != 0:
		old = nil // a new file, or a link that is replaced by one
	}

	var rnd [8]byte
	rand.Read(rnd[:])
	base := path.Base(name)
	if len(base) > maxTempBase {
		base = base[:maxTempBase]
	}
	tmp := path.Join(path.Dir(name), tempPrefix+base+"-"+hex.EncodeToString(rnd[:]))
	createPerm := perm.Perm()
	if old != nil {
		createPerm = 0o600 // the old mode is set below, unaffected by the umask
	}
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, createPerm)
	if err != nil {
		return mapErr(op, name, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			d.root.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return mapErr(op, name, err)
	}
	if old != nil {
		if err := keepOwner(f, old); err != nil {
			return mapErr(op, name, err)
		}
		if err := f.Chmod(old.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)); err != nil {
			return mapErr(op, name, err)
		}
	}
	if err := f.Sync(); err != nil {
		return mapErr(op, name, err)
	}
	if err := f.Close(); err != nil {
		d.root.Remove(tmp)
		done = true
		return mapErr(op, name, err)
	}
	if err := ctx.Err(); err != nil {
		d.root.Remove(tmp)
		done = true
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	if err := d.root.Rename(tmp, name); err != nil {
		d.root.Remove(tmp)
		done = true
		return mapErr(op, name, err)
	}
	done = true
	d.syncDir(path.Dir(name))
	return nil
}

// keepOwner gives the temporary file f the owner of the file it replaces.
// Only root may give a file away; for any other user a failed chown is not
// an error, the new file then belongs to the writing user.
func keepOwner(f *os.File, old fs.FileInfo) error {
	st, ok := old.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	cur, err := f.Stat()
	if err != nil {
		return err
	}
	if cst, ok := cur.Sys().(*syscall.Stat_t); ok && cst.Uid == st.Uid && cst.Gid == st.Gid {
		return nil
	}
	err = f.Chown(int(st.Uid), int(st.Gid))
	if err != nil && os.Geteuid() != 0 {
		return nil
	}
	return err
}

// syncDir makes a rename in dir durable. It is best effort: the rename has
// happened, and a file system without directory fsync loses nothing else.
func (d *dirFS) syncDir(dir string) {
	f, err := d.root.Open(dir)
	if err != nil {
		return
	}
	f.Sync()
	f.Close()
}

// MkdirAll creates a directory and any missing parents.
func (d *dirFS) MkdirAll(ctx context.Context, name string, perm fs.FileMode) error {
	const op = "mkdir"
	if err := check(ctx, op, name); err != nil {
		return err
	}
	return mapErr(op, name, d.root.MkdirAll(name, perm))
}

// Remove removes a file or an empty directory; a symbolic link is removed
// itself, not its target.
func (d *dirFS) Remove(ctx context.Context, name string) error {
	const op = "remove"
	if err := check(ctx, op, name); err != nil {
		return err
	}
	if name == "." {
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("cannot remove the root itself: %w", fs.ErrInvalid)}
	}
	return mapErr(op, name, d.root.Remove(name))
}

// Rename moves oldname to newname, replacing newname if it is a file.
func (d *dirFS) Rename(ctx context.Context, oldname, newname string) error {
	const op = "rename"
	if err := check(ctx, op, oldname); err != nil {
		return err
	}
	if err := check(ctx, op, newname); err != nil {
		return err
	}
	if oldname == "." || newname == "." {
		return &fs.PathError{Op: op, Path: oldname, Err: fmt.Errorf("cannot rename the root itself: %w", fs.ErrInvalid)}
	}
	err := d.root.Rename(oldname, newname)
	if err != nil {
		return mapErr(op, oldname+" -> "+newname, err)
	}
	return nil
}
