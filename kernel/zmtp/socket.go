package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// HandshakeTimeout bounds one connection's greeting and READY exchange: a
// stream that opens but never speaks ZMTP is dropped and redialed.
const HandshakeTimeout = 10 * time.Second

// ErrClosed is returned by a closed Socket.
var ErrClosed = errors.New("zmtp: socket closed")

// DialFunc opens one byte stream to the socket's peer.
type DialFunc func(ctx context.Context) (net.Conn, error)

// Socket is one client socket of a fixed type and peer that keeps one
// connection: [Socket.Conn] dials (again every Retry until it succeeds)
// when there is none, and [Socket.Drop] forgets a connection that failed
// so the next Conn redials — ZeroMQ's reconnect, made explicit.
type Socket struct {
	typ   SocketType
	opts  Options
	dial  DialFunc
	retry time.Duration

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	lock   chan struct{} // held while dialing: one dial at a time

	mu    sync.Mutex
	conn  *Conn
	drops uint64 // connections forgotten by Drop (or a failed send)
}

// NewSocket returns a socket that dials with dial, pausing retry between
// failed attempts. Nothing is dialed until Conn or Send.
func NewSocket(typ SocketType, opts Options, dial DialFunc, retry time.Duration) *Socket {
	ctx, cancel := context.WithCancel(context.Background())
	return &Socket{typ: typ, opts: opts, dial: dial, retry: retry, ctx: ctx, cancel: cancel, lock: make(chan struct{}, 1)}
}

// Conn returns the socket's connection, dialing and handshaking until one
// is up, ctx ends or the socket is closed.
func (s *Socket) Conn(ctx context.Context) (*Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	for {
		select {
		case s.lock <- struct{}{}:
		case <-ctx.Done():
			return nil, s.ctxErr(ctx)
		}
		s.mu.Lock()
		c := s.conn
		s.mu.Unlock()
		if c != nil {
			<-s.lock
			return c, nil
		}
		c, err := s.dialOnce(ctx)
		if err == nil {
			s.mu.Lock()
			if s.ctx.Err() != nil {
				s.mu.Unlock()
				<-s.lock
				c.Close()
				return nil, ErrClosed
			}
			s.conn = c
			s.mu.Unlock()
			<-s.lock
			return c, nil
		}
		<-s.lock
		t := time.NewTimer(s.retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last attempt: %v)", s.ctxErr(ctx), err)
		}
	}
}

func (s *Socket) ctxErr(ctx context.Context) error {
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	return ctx.Err()
}

// dialOnce dials and handshakes one connection.
func (s *Socket) dialOnce(ctx context.Context) (*Conn, error) {
	nc, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	c, err := Handshake(hctx, nc, s.typ, s.opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Drop closes c and, when it is still the socket's connection, forgets
// it, so the next Conn dials anew.
func (s *Socket) Drop(c *Conn) {
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
		s.drops++
	}
	s.mu.Unlock()
	c.Close()
}

// Drops counts the connections the socket has dropped so far: a caller
// that needs to know whether the connection it relied on is still the
// same one compares two counts.
func (s *Socket) Drops() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.drops
}

// SendOnce sends one message on the socket's connection, dialing first
// when there is none, and does not send it again: a connection the send
// fails on is dropped and the error returned, so the caller decides what
// must hold before the message goes out again.
func (s *Socket) SendOnce(ctx context.Context, frames [][]byte) error {
	c, err := s.Conn(ctx)
	if err != nil {
		return fmt.Errorf("zmtp: send: no connection: %w", err)
	}
	if err := c.Send(ctx, frames); err != nil {
		s.Drop(c)
		return err
	}
	return nil
}

// Send sends one message on the socket's connection, dialing first when
// there is none. A connection the send fails on is dropped and the
// message sent again on a new one (a peer discards a message cut short
// with its connection), until ctx ends.
func (s *Socket) Send(ctx context.Context, frames [][]byte) error {
	for {
		// Conn fails only when ctx has ended or the socket is closed.
		err := s.SendOnce(ctx, frames)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || s.ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(s.retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// Close closes the connection and stops any dial in progress; Conn and
// Send then fail with ErrClosed.
func (s *Socket) Close() error {
	s.cancel()
	s.mu.Lock()
	c := s.conn
	s.conn = nil
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
	return nil
}
