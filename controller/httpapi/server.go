package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"berth.dev/berth/controller"
)

// Defaults of [Limits]: what one client can hold of the server.
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers, and a
	// new connection's wait for its first request.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, body included.
	DefaultReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection idle this long.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultWriteTimeout bounds writing the response of every route but
	// tool calls, opening and closing a run, and the event stream, from
	// the moment the request was read.
	DefaultWriteTimeout = time.Minute
	// DefaultCallWriteTimeout bounds a tool call's response, and opening
	// and closing a run's. A call may legitimately run long: a permission
	// card waits up to 10 minutes, vibe_wait up to 30, an eval cell as long
	// as its code runs; closing a run stops each of its resources in turn.
	DefaultCallWriteTimeout = time.Hour
	// DefaultMaxHeaderBytes bounds a request's headers.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConns bounds the connections served at once; more wait
	// in the kernel's accept queue, holding no descriptor of berth's.
	DefaultMaxConns = 512
)

// Limits bound the server for hostile clients. Zero fields take the
// defaults above.
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	// WriteTimeout is the write deadline of short routes; the event
	// stream renews it for every write, so a client that stops reading
	// is cut off.
	WriteTimeout time.Duration
	// CallWriteTimeout is the write deadline of a tool call, and of
	// opening and closing a run.
	CallWriteTimeout time.Duration
	MaxHeaderBytes   int
	// MaxConns is the most connections [Listen] serves at once.
	MaxConns int
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.CallWriteTimeout, DefaultCallWriteTimeout)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// NewServer returns an http.Server serving [New](c, opts) with the read,
// header and idle deadlines of opts.Limits; the write deadlines are set
// per route by the handler. base is every request's base context. Serve
// it on [Listen]'s listener so that connections are capped too.
func NewServer(c *controller.Controller, opts Options, base context.Context) *http.Server {
	l := opts.Limits.withDefaults()
	h, closeMCP := build(c, opts)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	srv.RegisterOnShutdown(closeMCP)
	return srv
}

// Listen caps ln at max connections at once (max <= 0: DefaultMaxConns).
// Accept waits while max connections are open: the next client waits in
// the kernel's accept queue instead of costing berth a descriptor.
func Listen(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		max = DefaultMaxConns
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, max), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{} // closed by Close: a waiting Accept returns
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP connection, so that net/http's lingering
// close after a refused request lets the client see the end at once.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
