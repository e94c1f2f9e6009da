package agent

import (
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// RawFile reads and writes a non-blocking pipe or socket with raw system
// calls, waiting in the runtime's poller whenever the descriptor is not
// ready. The ordinary system-call path tells the scheduler about every
// call, and that wakes the runtime's monitor thread whenever the process
// was idle: one more thread wake-up, on another CPU, for every message of
// an interactive stream. A call on a non-blocking descriptor never sleeps
// in the kernel, so it needs none of that. Both ends of the agent's
// streams use it: the agent, and the transports berth runs it through.
type RawFile struct {
	rc   syscall.RawConn
	name string
}

// NewRawFile returns a RawFile over c's descriptor (an *os.File from
// os.Pipe, a *net.UnixConn, …), or nil when c has none or the descriptor is
// in blocking mode, where a raw call could sleep unseen by the runtime.
// name labels errors. The caller keeps c for Close, which unblocks a
// waiting Read or Write.
func NewRawFile(c any, name string) *RawFile {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	nonblocking := false
	err = rc.Control(func(fd uintptr) {
		flags, _, errno := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = errno == 0 && flags&syscall.O_NONBLOCK != 0
	})
	if err != nil || !nonblocking {
		return nil
	}
	return &RawFile{rc: rc, name: name}
}

func rawRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(n), e
}

func rawWrite(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(n), e
}

// Read reads what is there, waiting until something is. It returns io.EOF
// at the end.
func (f *RawFile) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := f.rc.Read(func(fd uintptr) bool {
		for {
			n, errno = rawRead(fd, b)
			if errno != syscall.EINTR {
				return errno != syscall.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: f.name, Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of b, waiting while the descriptor is full.
func (f *RawFile) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		var n int
		var errno syscall.Errno
		err := f.rc.Write(func(fd uintptr) bool {
			for {
				n, errno = rawWrite(fd, b[done:])
				if errno != syscall.EINTR {
					return errno != syscall.EAGAIN
				}
			}
		})
		if err != nil {
			return done, err
		}
		if errno != 0 {
			return done, &os.PathError{Op: "write", Path: f.name, Err: errno}
		}
		done += n
	}
	return done, nil
}

// ErrWouldBlock is TryWrite's answer when nothing fits.
var ErrWouldBlock = errors.New("agent: write would block")

// TryWrite writes what fits into the descriptor now, without waiting. It
// returns ErrWouldBlock when nothing fits.
func (f *RawFile) TryWrite(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := f.rc.Write(func(fd uintptr) bool {
		for {
			n, errno = rawWrite(fd, b)
			if errno != syscall.EINTR {
				return true // never wait here
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, ErrWouldBlock
	case errno != 0:
		return 0, &os.PathError{Op: "write", Path: f.name, Err: errno}
	}
	return n, nil
}

// pollFile is a RawFile with its *os.File, for Close.
type pollFile struct {
	*RawFile
	f *os.File
}

// newPollFile wraps f, one of os.Pipe's ends, which are non-blocking and
// in the poller.
func newPollFile(f *os.File) (*pollFile, error) {
	rf := NewRawFile(f, f.Name())
	if rf == nil {
		return nil, errors.New(f.Name() + " is not a non-blocking descriptor")
	}
	return &pollFile{RawFile: rf, f: f}, nil
}

// Close closes the descriptor; a Read or Write waiting in the poller
// returns.
func (p *pollFile) Close() error { return p.f.Close() }

// pollable switches f, a pipe or socket inherited from berth, to
// non-blocking mode and wraps it, so that its calls wait in the poller:
// the run mode has one P, which a call blocked in the kernel would hold.
// Anything else (a terminal shared with a shell, a file) and failures
// leave f as it is.
func pollable(f *os.File) io.ReadWriter {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return f
	}
	if typ := st.Mode & syscall.S_IFMT; typ != syscall.S_IFIFO && typ != syscall.S_IFSOCK {
		return f
	}
	if err := syscall.SetNonblock(int(f.Fd()), true); err != nil {
		return f
	}
	nf := os.NewFile(f.Fd(), f.Name())
	if rf := NewRawFile(nf, f.Name()); rf != nil {
		return &pollFile{RawFile: rf, f: nf}
	}
	// Keep using nf: dropping it would let its finalizer close the
	// descriptor.
	return nf
}
