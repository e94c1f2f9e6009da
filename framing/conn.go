package framing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// outboxSize is how many frames may wait for the writer goroutine.
const outboxSize = 64

// ConnOptions say what a protocol does with a [Conn]'s frames and how it
// names the ways the connection ends.
type ConnOptions struct {
	// Handle receives the body of every incoming frame, in order, on the
	// reader goroutine: the next frame is not read until it returns. It may
	// call [Conn.Send] (which waits while the outbox is full),
	// [Conn.TrySend] and [Conn.Go].
	Handle func(body []byte)

	// Ended, when set, runs once when the connection ends, after Done is
	// closed and before the stream is closed: the protocol wakes there
	// whatever waits on its own state.
	Ended func()

	// Closed is [Conn.Err] after [Conn.Close].
	Closed error

	// Exited is what [Conn.Err] wraps when the peer's output ends, between
	// frames (io.EOF) or inside one (io.ErrUnexpectedEOF): "Exited: cause".
	Exited error

	// Broken returns [Conn.Err] when reading from or writing to the peer
	// fails otherwise; op is "reading from" or "writing to", and the result
	// must wrap err.
	Broken func(op string, err error) error
}

// Conn is a framed connection to one peer, the part the Language Server
// Protocol and the Debug Adapter Protocol share: one goroutine reads frames
// and hands them to [ConnOptions.Handle], one writes the frames queued by
// [Conn.Send], and a [Pending] table lets callers wait for answers. It owns
// the stream it was given: reader and writer stop and the stream is closed
// when the connection ends, whether by [Conn.Close], by the peer's output
// ending, or by a framing or write error. [Conn.Done] and [Conn.Err]
// report the end. A protocol knows its messages and ids; Conn knows neither.
//
// The protocol builds its own state around the Conn first and then calls
// [Conn.Start], so Handle never runs before the protocol can answer.
type Conn struct {
	rw   io.ReadWriteCloser
	r    *Reader
	w    *Writer
	opts ConnOptions

	out  chan outFrame
	wg   sync.WaitGroup // reader, writer, and the goroutines of Go
	ctx  context.Context
	stop context.CancelFunc

	endOnce  sync.Once
	done     chan struct{}
	err      error // set before done is closed
	closeErr error // from rw.Close; read only after endOnce has run
}

type outFrame struct {
	body    []byte
	written chan error // nil: nobody waits for the write
}

// NewConn returns a connection over rw and takes ownership of rw. Nothing
// is read or written until [Conn.Start].
func NewConn(rw io.ReadWriteCloser, opts ConnOptions) *Conn {
	ctx, stop := context.WithCancel(context.Background())
	return &Conn{
		rw:   rw,
		r:    NewReader(rw),
		w:    NewWriter(rw),
		opts: opts,
		out:  make(chan outFrame, outboxSize),
		ctx:  ctx,
		stop: stop,
		done: make(chan struct{}),
	}
}

// Start starts the reader and the writer. Call it once; [Conn.Close] stops
// both.
func (c *Conn) Start() {
	c.wg.Add(2)
	go c.readLoop()
	go c.writeLoop()
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended: [ConnOptions.Closed], an error
// wrapping [ConnOptions.Exited], or one from [ConnOptions.Broken]. It is
// nil while running.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Context returns a context that ends when the connection ends.
func (c *Conn) Context() context.Context { return c.ctx }

// Close ends the connection with [ConnOptions.Closed], closes the stream,
// and returns once the reader, the writer and every goroutine of [Conn.Go]
// have stopped. The stream's Close must unblock a pending Read, as os/exec
// pipes and net.Conn do. Close returns the stream's Close error.
func (c *Conn) Close() error {
	c.end(c.opts.Closed)
	c.wg.Wait()
	return c.closeErr
}

// end records why the connection ended, wakes every waiter, and closes the
// stream. Only the first call has an effect.
func (c *Conn) end(err error) {
	c.endOnce.Do(func() {
		c.err = err
		c.stop()
		close(c.done) // waiters fail now, not after a slow Close
		if c.opts.Ended != nil {
			c.opts.Ended()
		}
		c.closeErr = c.rw.Close()
	})
}

// Go runs f on a goroutine the connection owns, with a context that ends
// with the connection; [Conn.Close] waits for it. Call it from
// [ConnOptions.Handle], for work that must not hold up the reader.
func (c *Conn) Go(f func(ctx context.Context)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f(c.ctx)
	}()
}

func (c *Conn) readLoop() {
	defer c.wg.Done()
	for {
		body, err := c.r.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				c.end(fmt.Errorf("%w: %v", c.opts.Exited, err))
			} else {
				c.end(c.opts.Broken("reading from", err))
			}
			return
		}
		c.opts.Handle(body)
	}
}

func (c *Conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case f := <-c.out:
			err := c.w.WriteFrame(f.body)
			if f.written != nil {
				f.written <- err
			}
			if err != nil {
				c.end(c.opts.Broken("writing to", err))
				return
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// Send hands body to the writer and returns once it is queued (it will be
// written unless the connection ends first), or with ctx's error or
// [Conn.Err] when either ends first. Frames are written in the order they
// are queued.
func (c *Conn) Send(ctx context.Context, body []byte) error {
	return c.enqueue(ctx, outFrame{body: body})
}

// Queue is [Conn.Send] that also returns a [Queued] frame, whose Wait
// returns once the frame is written.
func (c *Conn) Queue(ctx context.Context, body []byte) (*Queued, error) {
	f := outFrame{body: body, written: make(chan error, 1)}
	if err := c.enqueue(ctx, f); err != nil {
		return nil, err
	}
	return &Queued{c: c, written: f.written}, nil
}

func (c *Conn) enqueue(ctx context.Context, f outFrame) error {
	select {
	case c.out <- f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.err
	}
}

// TrySend queues body without waiting and reports whether it did: a full
// outbox drops it. It is for advisory messages, such as a cancellation,
// that must not block their caller.
func (c *Conn) TrySend(body []byte) bool {
	select {
	case c.out <- outFrame{body: body}:
		return true
	default:
		return false
	}
}

// Queued is a frame queued by [Conn.Queue].
type Queued struct {
	c       *Conn
	written <-chan error
}

// Wait returns the write's error once the frame is written, or ctx's error
// or the connection's [Conn.Err] when either ends first.
func (q *Queued) Wait(ctx context.Context) error {
	select {
	case err := <-q.written:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-q.c.done:
		return q.c.err
	}
}

// Pending matches answers to the requests waiting for them, by the
// protocol's id. The zero value is ready to use; it is safe for concurrent
// use.
type Pending[ID comparable, M any] struct {
	mu      sync.Mutex
	waiting map[ID]chan M
}

// Add registers id, before its request is sent, and returns the channel
// its answer will come on.
func (p *Pending[ID, M]) Add(id ID) <-chan M {
	ch := make(chan M, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == nil {
		p.waiting = make(map[ID]chan M)
	}
	p.waiting[id] = ch
	return ch
}

// Take removes id and returns the channel to send its one answer on; it
// never blocks. ok is false when nobody waits for id: the answer is late,
// its caller gave up, or the id was never sent.
func (p *Pending[ID, M]) Take(id ID) (answer chan<- M, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.waiting[id]
	delete(p.waiting, id)
	return ch, ok
}

// Forget removes id; a later answer to it finds nobody waiting.
func (p *Pending[ID, M]) Forget(id ID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, id)
}

// Await waits for the answer to id on answer, from [Pending.Add]. When ctx
// ends first, it forgets id and returns gaveUp with ctx's error: the caller
// may then send its protocol's cancel message. When c ends first, it
// forgets id and returns [Conn.Err], unless the answer had already come.
func (p *Pending[ID, M]) Await(ctx context.Context, c *Conn, id ID, answer <-chan M) (m M, gaveUp bool, err error) {
	select {
	case m = <-answer:
		return m, false, nil
	case <-ctx.Done():
		p.Forget(id)
		return m, true, ctx.Err()
	case <-c.done:
		select {
		case m = <-answer:
			return m, false, nil
		default:
		}
		p.Forget(id)
		return m, false, c.err
	}
}
