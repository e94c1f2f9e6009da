package kernel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// How the caller's Dial reaches zmq4.
//
// zmq4 v0.17.0 has no per-socket dialer option: a socket dials through the
// transport registered for its endpoint's scheme (zmq4.RegisterTransport,
// a process-wide table keyed by name) and hands it its own net.Dialer,
// which a transport may ignore. So this package registers one transport,
// [transportName], once, and routes by endpoint: a socket dials
// "berth-kernel://<scope>/<network>/<address>", and the transport looks up
// the scope (one per Client, one per heartbeat socket) in a table, then
// calls that scope's Dial with the socket's context. Every net.Conn a scope
// dials is tracked, so closing the scope closes connections stuck in a
// ZMTP handshake that closing the zmq4 socket alone would not reach.
const transportName = "berth-kernel"

// DialFunc opens a byte stream to network ("tcp" or "unix") and address
// inside wherever the kernel runs. ctx bounds the dial only.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

func init() {
	if err := zmq4.RegisterTransport(transportName, dialTransport{}); err != nil {
		panic(fmt.Errorf("kernel: register zmq4 transport: %w", err))
	}
}

var scopes sync.Map // scope name → *dialScope

// dialScope is one owner's dialer and the connections it opened.
type dialScope struct {
	name string
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
// and zmq4 redials every DialRetry without end — is spaced out: after
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
	s := &dialScope{name: newID(), dial: dial, conns: map[*trackedConn]struct{}{}}
	scopes.Store(s.name, s)
	return s
}

// endpoint returns the zmq4 endpoint that dials network/address through s.
func (s *dialScope) endpoint(network, address string) string {
	return transportName + "://" + s.name + "/" + network + "/" + address
}

// close unregisters s and closes every connection it opened.
func (s *dialScope) close() {
	scopes.Delete(s.name)
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

type dialTransport struct{}

var _ transport.Transport = dialTransport{}

// Dial implements transport.Transport by calling the scope's DialFunc.
func (dialTransport) Dial(ctx context.Context, _ transport.Dialer, addr string) (net.Conn, error) {
	name, rest, ok1 := strings.Cut(addr, "/")
	network, address, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("kernel: bad internal endpoint %q", addr)
	}
	v, ok := scopes.Load(name)
	if !ok {
		return nil, errors.New("kernel: dial after the client was closed")
	}
	s := v.(*dialScope)
	if err := s.wait(ctx); err != nil {
		return nil, err
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
		return nil, errors.New("kernel: dial after the client was closed")
	}
	s.conns[tc] = struct{}{}
	s.mu.Unlock()
	return tc, nil
}

// Listen is not supported: the client only dials.
func (dialTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, errors.New("kernel: the berth-kernel transport only dials")
}

// Addr returns the endpoint unchanged.
func (dialTransport) Addr(ep string) (string, error) { return ep, nil }
