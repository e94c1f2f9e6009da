package kube

import (
	"io"
	"sync"
)

// outPipe carries one output of an exec session from the executor's copy
// to the stream's reader. Until the reader first reads, writes are kept
// without blocking: a pod exec multiplexes stdout and stderr over one
// connection, read in order, so stdout nobody reads yet would hold back
// the agent's greeting on stderr (the shim.Stream contract: stderr is
// readable before anything reads stdout). From the first read on, a write
// returns once the reader took it, as with io.Pipe, so a slow reader slows
// the program down instead of filling memory.
type outPipe struct {
	mu      sync.Mutex
	cond    *sync.Cond // broadcast when buf, reading, eof or closed change
	buf     []byte     // written, not yet read
	reading bool       // a Read has begun: writes wait for the reader
	eof     bool       // the writer ended: Reads return io.EOF after buf
	closed  bool       // the reader closed: writes and Reads fail
}

func newOutPipe() *outPipe {
	p := &outPipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *outPipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.eof {
		return 0, io.ErrClosedPipe
	}
	p.buf = append(p.buf, b...)
	p.cond.Broadcast()
	for p.reading && len(p.buf) > 0 && !p.closed {
		p.cond.Wait()
	}
	if p.closed {
		return len(b), io.ErrClosedPipe
	}
	return len(b), nil
}

func (p *outPipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reading {
		p.reading = true
		p.cond.Broadcast()
	}
	for len(p.buf) == 0 && !p.eof && !p.closed {
		p.cond.Wait()
	}
	switch {
	case p.closed:
		return 0, io.ErrClosedPipe
	case len(p.buf) > 0:
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		if len(p.buf) == 0 {
			p.buf = nil
			p.cond.Broadcast()
		}
		return n, nil
	}
	return 0, io.EOF
}

// closeWrite ends the output: Reads return io.EOF once buf is read.
func (p *outPipe) closeWrite() {
	p.mu.Lock()
	p.eof = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// closeRead drops the output: writes and Reads fail with io.ErrClosedPipe.
func (p *outPipe) closeRead() {
	p.mu.Lock()
	p.closed = true
	p.buf = nil
	p.cond.Broadcast()
	p.mu.Unlock()
}
