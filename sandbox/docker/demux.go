package docker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// demuxHeader is the engine's frame header: the stream, three zero bytes
// and the big-endian payload length.
const demuxHeader = 8

// maxStderrBacklog is how much stderr the stdout reader passes on before it
// waits for the stderr reader to take some.
const maxStderrBacklog = 1 << 20

// maxStdoutBacklog is how much stdout Wait reads ahead for a caller who
// waits without reading stdout to its end.
const maxStdoutBacklog = 1 << 20

// maxSystemErr is how much of an engine error message the demux reads.
const maxSystemErr = 4 << 10

// demuxChunk is the most the demux reads at once for a reader other than
// the stdout caller (stderr, Wait's read-ahead).
const demuxChunk = 32 << 10

// errStreamClosed is the end of a demux that Close cut off.
var errStreamClosed = errors.New("docker: the exec stream was closed")

// demux splits an exec's multiplexed output (what stdcopy.StdCopy reads)
// in the goroutine that reads stdout: each stdout Read reads the
// connection itself and passes stderr payloads on to the stderr reader.
// Handing every chunk of stdout from a goroutine of its own to the reader
// would cost a thread wake-up per message. The stdout reader drives the
// connection: as with stdcopy over pipes, stderr moves only while stdout
// is read, and the stream ends (done) when stdout reached the end, read by
// a caller or read ahead by drain. Only until the first stdout Read does
// the stderr reader read the connection itself (keeping stdout for later),
// so that a caller can read a greeting on stderr before it reads stdout.
type demux struct {
	src io.Reader // the hijacked connection, buffered

	// rmu serialises stdout Reads and Wait's drain; the fields below it
	// belong to its holder.
	rmu     sync.Mutex
	cur     stdcopy.StdType // stream of the current frame
	left    int             // payload bytes of the current frame not yet read
	tmp     []byte          // buffer for stderr payloads
	leadBuf []byte          // buffer for stdout read ahead for the stderr reader

	mu         sync.Mutex
	cond       *sync.Cond // broadcast when errBuf, end or closed change
	errBuf     []byte     // stderr read from the connection, not yet read
	outStarted bool       // a stdout Read (or drain) has begun
	outBuf     []byte     // stdout read ahead (drain, the stderr reader), for the next stdout Reads
	end        error      // io.EOF or why the stream broke; set once
	closed     bool       // Close was called
	done       chan struct{}
	copyErr    error // like stdcopy's result: nil for a clean end; set before done closes
}

func newDemux(src io.Reader) *demux {
	d := &demux{src: src, done: make(chan struct{})}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// finish records the end of the stream, once.
func (d *demux) finish(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.finishLocked(err)
}

func (d *demux) finishLocked(err error) {
	if d.end != nil {
		return
	}
	d.end = err
	if err != io.EOF {
		d.copyErr = err
	}
	close(d.done)
	d.cond.Broadcast()
}

// close makes both readers fail with io.ErrClosedPipe and ends the stream
// unless it ended already. The caller closes the connection, which
// unblocks a stdout Read inside it.
func (d *demux) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.finishLocked(errStreamClosed)
	d.cond.Broadcast()
}

// stateLocked returns the error a reader gets when there is nothing more
// for it.
func (d *demux) stateLocked() error {
	if d.closed {
		return io.ErrClosedPipe
	}
	return d.end
}

// readStdout reads stdout, demultiplexing the connection on the way.
func (d *demux) readStdout(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	d.mu.Lock()
	d.outStarted = true
	n, ok, err := d.takeOutLocked(p)
	d.mu.Unlock()
	if ok {
		return n, err
	}
	d.rmu.Lock()
	defer d.rmu.Unlock()
	// Whoever held rmu may have read stdout ahead meanwhile.
	d.mu.Lock()
	n, ok, err = d.takeOutLocked(p)
	d.mu.Unlock()
	if ok {
		return n, err
	}
	return d.readConnLocked(p)
}

// takeOutLocked answers a stdout Read from what was read ahead, or with
// io.ErrClosedPipe after close; ok is false when the Read must go to the
// connection.
func (d *demux) takeOutLocked(p []byte) (n int, ok bool, err error) {
	if d.closed {
		return 0, true, io.ErrClosedPipe
	}
	if len(d.outBuf) > 0 {
		n = copy(p, d.outBuf)
		d.outBuf = d.outBuf[n:]
		return n, true, nil
	}
	return 0, false, nil
}

// drain reads stdout into a backlog, up to maxStdoutBacklog, while nobody
// else reads it, until the stream ends; Wait calls it so that a caller who
// waits without reading stdout to its end still sees the program end, as
// long as it leaves little output unread.
func (d *demux) drain() {
	d.mu.Lock()
	d.outStarted = true
	d.mu.Unlock()
	var buf []byte
	for {
		select {
		case <-d.done:
			return
		default:
		}
		d.rmu.Lock()
		d.mu.Lock()
		full := len(d.outBuf) >= maxStdoutBacklog
		d.mu.Unlock()
		if full {
			d.rmu.Unlock()
			<-d.done
			return
		}
		if buf == nil {
			buf = make([]byte, demuxChunk)
		}
		n, err := d.readConnLocked(buf)
		d.mu.Lock()
		d.outBuf = append(d.outBuf, buf[:n]...)
		d.mu.Unlock()
		d.rmu.Unlock()
		if err != nil {
			return
		}
	}
}

// readConnLocked reads stdout from the connection, passing stderr on; the
// caller holds rmu.
func (d *demux) readConnLocked(p []byte) (int, error) {
	for {
		n, err := d.stepLocked(p)
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// stepLocked reads one header or one piece of payload from the connection:
// stdout into p (it returns how much), stderr to the stderr reader. It
// returns the stream's end once there is one. The caller holds rmu.
func (d *demux) stepLocked(p []byte) (int, error) {
	d.mu.Lock()
	err := d.stateLocked()
	d.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if d.left == 0 {
		var h [demuxHeader]byte
		if _, err := io.ReadFull(d.src, h[:]); err != nil {
			d.fail(err)
			return 0, nil
		}
		d.cur = stdcopy.StdType(h[0])
		d.left = int(binary.BigEndian.Uint32(h[4:]))
		switch d.cur {
		case stdcopy.Stdin, stdcopy.Stdout, stdcopy.Stderr, stdcopy.Systemerr:
		default:
			d.finish(fmt.Errorf("docker: exec output: unrecognized stream %d", d.cur))
		}
		return 0, nil
	}
	switch d.cur {
	case stdcopy.Stdin, stdcopy.Stdout:
		n, err := d.src.Read(p[:min(len(p), d.left)])
		d.left -= n
		if err != nil {
			d.fail(err)
		}
		return n, nil
	case stdcopy.Stderr:
		d.passStderr()
	case stdcopy.Systemerr:
		// The engine's error ends the stream; its first bytes say why.
		msg := make([]byte, min(d.left, maxSystemErr))
		if _, err := io.ReadFull(d.src, msg); err != nil {
			d.fail(err)
			return 0, nil
		}
		d.finish(fmt.Errorf("error from daemon in stream: %s", msg))
	}
	return 0, nil
}

// leadForStderrLocked reads one piece of the connection for the stderr
// reader while nobody reads stdout yet, keeping stdout for the first
// stdout Reads. It reports false when the kept stdout is full. The caller
// holds rmu, not mu.
func (d *demux) leadForStderrLocked() bool {
	d.mu.Lock()
	full := len(d.outBuf) >= maxStdoutBacklog
	d.mu.Unlock()
	if full {
		return false
	}
	if d.leadBuf == nil {
		d.leadBuf = make([]byte, demuxChunk)
	}
	n, _ := d.stepLocked(d.leadBuf)
	d.mu.Lock()
	d.outBuf = append(d.outBuf, d.leadBuf[:n]...)
	d.mu.Unlock()
	return true
}

// fail ends the stream after a failed read. The end of the connection is
// a clean end, also inside a frame, as for stdcopy.
func (d *demux) fail(err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	d.finish(err)
}

// passStderr moves the current frame's stderr payload, or as much of it as
// is there, to the stderr reader, waiting while its backlog is full.
func (d *demux) passStderr() {
	d.mu.Lock()
	for len(d.errBuf) >= maxStderrBacklog && d.stateLocked() == nil {
		d.cond.Wait()
	}
	stop := d.stateLocked() != nil
	d.mu.Unlock()
	if stop {
		return
	}
	if d.tmp == nil {
		d.tmp = make([]byte, demuxChunk)
	}
	n, err := d.src.Read(d.tmp[:min(len(d.tmp), d.left)])
	d.left -= n
	d.mu.Lock()
	d.errBuf = append(d.errBuf, d.tmp[:n]...)
	d.cond.Broadcast()
	d.mu.Unlock()
	if err != nil {
		d.fail(err)
	}
}

// readStderr returns stderr that the stdout reader passed on, or, before
// the first stdout Read, reads the connection itself.
func (d *demux) readStderr(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.errBuf) == 0 && d.stateLocked() == nil {
		if !d.outStarted && d.rmu.TryLock() {
			d.mu.Unlock()
			led := d.leadForStderrLocked()
			d.rmu.Unlock()
			d.mu.Lock()
			if led {
				continue
			}
		}
		d.cond.Wait()
	}
	if d.closed {
		return 0, io.ErrClosedPipe
	}
	if len(d.errBuf) == 0 {
		return 0, d.end
	}
	n := copy(p, d.errBuf)
	d.errBuf = d.errBuf[n:]
	if len(d.errBuf) == 0 {
		d.errBuf = nil
	}
	d.cond.Broadcast()
	return n, nil
}

// demuxReader is one side of a demux.
type demuxReader struct {
	d      *demux
	stderr bool
}

func (r demuxReader) Read(p []byte) (int, error) {
	if r.stderr {
		return r.d.readStderr(p)
	}
	return r.d.readStdout(p)
}
