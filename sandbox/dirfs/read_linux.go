package dirfs

import (
	"io"
	"io/fs"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"berth.dev/berth/sandbox"
)

// noOpenat2 is set once openat2 turned out to be unavailable (an old
// kernel, or a seccomp filter refusing it): reads go through os.Root.
var noOpenat2 atomic.Bool

// readBeneath reads the file name with bare system calls: one openat2 that
// the kernel resolves beneath the root as os.Root does (RESOLVE_BENEATH:
// no "..", absolute or escaping symbolic link leaves it; no magic links),
// then fstat, read and close on the descriptor. It skips what os.Root's
// OpenFile costs a search reading thousands of small files: an openat and
// a close per directory on the path, and an os.File with its poller
// registration. ok is false when openat2 is unavailable; the caller then
// reads through os.Root.
func (d *dirFS) readBeneath(op, name string, buf []byte) (data []byte, ok bool, err error) {
	if noOpenat2.Load() {
		return nil, false, nil
	}
	fd := -1
	cerr := d.rc.Control(func(dir uintptr) {
		for {
			// O_NONBLOCK keeps a FIFO from blocking the open; readOpened
			// refuses anything but a regular file.
			fd, err = unix.Openat2(int(dir), name, &unix.OpenHow{
				Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err != unix.EINTR && err != unix.EAGAIN {
				return
			}
		}
	})
	switch {
	case cerr != nil: // the directory handle is closed: so is the FS
		return nil, true, &fs.PathError{Op: op, Path: name, Err: fs.ErrClosed}
	case err == unix.ENOSYS || err == unix.EPERM:
		noOpenat2.Store(true)
		return nil, false, nil
	case err == unix.EXDEV:
		return nil, true, &fs.PathError{Op: op, Path: name, Err: sandbox.ErrEscape}
	case err != nil:
		return nil, true, &fs.PathError{Op: op, Path: name, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, true, &fs.PathError{Op: op, Path: name, Err: err}
	}
	data, err = readOpened(op, name, fdReader(fd), &statInfo{name: name, st: st}, buf)
	return data, true, err
}

// fdReader reads a descriptor with read(2).
type fdReader int

func (r fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}
