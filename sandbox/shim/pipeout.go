package shim

import (
	"io"
	"sync"
	"time"
)

// idleHandover is how long nobody may read a [pipeOut] before its helper
// goroutine reads the program's stdout instead of the caller.
const idleHandover = 20 * time.Millisecond

// pipeOut is the stdout of a process started through sandbox.Pipe, handed
// over as a [sandbox.DirectStdout]. A caller's Read reads the stream
// itself, so that no goroutine stands between the program's output and the
// caller: handing each message from one goroutine to another costs a
// thread wake-up, which is much of the stream's latency.
//
// Stdout must still be read when nobody reads it: the process ends only
// at the end of its stdout, and over a docker exec the agent's frames
// (the exit status, stderr, stdin acknowledgements) move only while
// stdout is read. So a helper goroutine reads it once no Read has begun
// for idleHandover, and leaves it to callers again as soon as one reads.
// As with a pipe, output that nobody reads holds back everything after it.
type pipeOut struct {
	p    *process
	wake chan struct{} // wakes the idle helper; capacity 1

	mu      sync.Mutex
	cond    *sync.Cond // broadcast when pumping, pending, eof or closed change
	pumping bool       // someone reads the stream
	reads   uint64     // Read calls so far: the helper's sign of a caller
	buf     []byte     // the helper's read buffer, backing pending
	pending []byte     // stdout the helper read and no caller yet
	eof     bool       // stdout ended
	closed  bool       // Close was called: Reads fail, output is dropped
	idle    bool       // the helper waits on wake
}

// newPipeOut returns the stdout reader of p and starts its helper, which
// ends with stdout.
func newPipeOut(p *process) *pipeOut {
	o := &pipeOut{p: p, wake: make(chan struct{}, 1)}
	o.cond = sync.NewCond(&o.mu)
	go o.helper()
	return o
}

// Read returns stdout as it arrives, reading the stream itself unless
// another reader does, and io.EOF after the last output once the process
// ended (its status is set by then).
func (o *pipeOut) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o.mu.Lock()
	o.reads++
	for {
		switch {
		case o.closed:
			o.mu.Unlock()
			return 0, io.ErrClosedPipe
		case len(o.pending) > 0:
			n := copy(b, o.pending)
			o.pending = o.pending[n:]
			if len(o.pending) == 0 {
				o.wakeHelperLocked()
			}
			o.mu.Unlock()
			return n, nil
		case o.eof:
			o.mu.Unlock()
			<-o.p.done
			return 0, io.EOF
		case !o.pumping:
			if n := o.pumpLocked(b); n > 0 {
				o.mu.Unlock()
				return n, nil
			}
		default:
			o.cond.Wait()
		}
	}
}

// Close makes Reads fail with io.ErrClosedPipe and drops the process's
// further output. When stdout has not ended, the stream is torn down as
// well, so that a Read stuck on a sandbox that stopped answering returns.
func (o *pipeOut) Close() error {
	o.mu.Lock()
	o.closed = true
	o.pending = nil
	eof := o.eof
	o.cond.Broadcast()
	o.wakeHelperLocked()
	o.mu.Unlock()
	if !eof {
		o.p.stream.Close()
	}
	return nil
}

// pumpLocked reads the stream once, releasing o.mu meanwhile: into b, or
// into pending when b is nil (which pending must be then). It returns how
// many bytes went to b.
func (o *pipeOut) pumpLocked(b []byte) int {
	o.pumping = true
	o.mu.Unlock()
	dst := b
	if dst == nil {
		if o.buf == nil {
			o.buf = make([]byte, outputChunk)
		}
		dst = o.buf
	}
	n, err := o.p.out.Read(dst)
	if err != nil {
		o.p.endOutput()
	}
	o.mu.Lock()
	o.pumping = false
	if b == nil && !o.closed {
		o.pending = o.buf[:n]
	}
	o.eof = o.eof || err != nil
	o.cond.Broadcast()
	o.wakeHelperLocked()
	if b == nil || o.closed {
		return 0
	}
	return n
}

// wakeHelperLocked wakes the helper when it waits.
func (o *pipeOut) wakeHelperLocked() {
	if o.idle {
		o.idle = false
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

// helper reads stdout while no caller does, until it ended.
func (o *pipeOut) helper() {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.reads
	rest := true // sleep one period before reading
	for !o.eof {
		switch {
		case o.closed && !o.pumping:
			// Nobody wants the output: read on so that the process ends.
			o.pumpLocked(nil)
		case !o.closed && (rest || o.reads != seen):
			// A caller read lately; leave stdout to it for a while.
			seen, rest = o.reads, false
			o.mu.Unlock()
			time.Sleep(idleHandover)
			o.mu.Lock()
		case o.pumping || len(o.pending) > 0:
			// A caller has waited for output for a whole period, or output
			// waits for a caller: sleep until that changes.
			o.idle = true
			o.mu.Unlock()
			<-o.wake
			o.mu.Lock()
			rest = true
		default:
			// Nobody read for a whole period: read here.
			o.pumpLocked(nil)
		}
	}
}
