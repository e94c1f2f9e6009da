package kernel

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"berth.dev/berth/kernel/zmtp"
)

// How the caller's Dial reaches the sockets. Each socket (package zmtp)
// dials through a dial scope — one per Client, one per heartbeat socket —
// which calls the caller's DialFunc, spaces out dials that keep failing,
// and tracks every net.Conn it opened, so that closing the scope closes
// connections stuck in a ZMTP handshake as well as live ones.

// DialFunc opens a byte stream to network ("tcp" or "unix") and address
// inside wherever the kernel runs. ctx bounds the dial only.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// dialScope is one owner's dialer and the connections it opened.
type dialScope struct {
	dial DialFunc

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
	// fails counts dials that failed in a row; past dialFastTries the
	// next dial waits until notBefore (see Dial).
	fails     int
	notBefore time.Time
}

// A dial that keeps failing — the kernel's sandbox stopped or was removed,
// and a socket redials every DialRetry without end — is spaced out: after
// dialFastTries failures in a row each next dial waits twice as long as
// the last, up to dialBackoffMax, so that a gone sandbox is not asked
// several times a second. A dial that succeeds resets it.
const (
	dialFastTries  = 20
	dialBackoffMax = 5 * time.Second
)

// wait blocks until the next dial may go, or ctx ends.
func (s *dialScope) wait(ctx context.Context) error {
	s.mu.Lock()
	d := time.Until(s.notBefore)
	s.mu.Unlock()
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// outcome records a dial's result for the backoff.
func (s *dialScope) outcome(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.fails, s.notBefore = 0, time.Time{}
		return
	}
	s.fails++
	if s.fails > dialFastTries {
		d := DialRetry << min(s.fails-dialFastTries, 6)
		s.notBefore = time.Now().Add(min(d, dialBackoffMax))
	}
}

func newDialScope(dial DialFunc) *dialScope {
	return &dialScope{dial: dial, conns: map[*trackedConn]struct{}{}}
}

// close closes every connection s opened; later dials fail.
func (s *dialScope) close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	scope *dialScope
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.scope.mu.Lock()
		delete(c.scope.conns, c)
		c.scope.mu.Unlock()
	})
	return c.Conn.Close()
}

// dialer returns a zmtp.DialFunc that dials network/address through s.
func (s *dialScope) dialer(network, address string) zmtp.DialFunc {
	return func(ctx context.Context) (net.Conn, error) {
		if err := s.wait(ctx); err != nil {
			return nil, err
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return nil, errDialClosed
		}
		conn, err := s.dial(ctx, network, address)
		s.outcome(err)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: conn, scope: s}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return nil, errDialClosed
		}
		s.conns[tc] = struct{}{}
		s.mu.Unlock()
		return tc, nil
	}
}

var errDialClosed = errors.New("kernel: dial after the client was closed")
