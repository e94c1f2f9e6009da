package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
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
	// DefaultFirstByteTimeout closes a new connection that sent nothing
	// this long after berth accepted it.
	DefaultFirstByteTimeout = 3 * time.Second
	// DefaultMaxUnauthPerAddr bounds the connections of one remote
	// address that have not authenticated yet (a request with a valid
	// token authenticates its connection). One more closes the oldest of
	// them that has sent nothing for a second (SilentGrace).
	DefaultMaxUnauthPerAddr = 16
	// DefaultMaxStreamsPerTenant bounds one tenant's long-lived streams
	// open at once: event streams (GET /v1/runs/{id}/events) and MCP
	// streams (a GET on an MCP endpoint). One more is 429 too_many.
	DefaultMaxStreamsPerTenant = 64
)

// Spare connections: when MaxConns connections are open, [Listen]
// accepts SpareConns more, which answer /healthz and /readyz at once and
// then close; another request on one waits for one of the MaxConns slots,
// at most SpareWaiters of them at a time (the next is 503 busy), so that
// a probe always finds a spare connection.
const (
	SpareConns   = 32
	SpareWaiters = SpareConns / 2
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
	// MaxConns is the most connections [Listen] serves at once, besides
	// SpareConns for health probes.
	MaxConns int
	// FirstByteTimeout bounds a new connection's wait for its first byte.
	FirstByteTimeout time.Duration
	// MaxUnauthPerAddr bounds one remote address's connections that have
	// not authenticated yet.
	MaxUnauthPerAddr int
	// MaxStreamsPerTenant bounds one tenant's event and MCP streams
	// (negative: unlimited).
	MaxStreamsPerTenant int
	// MaxMCPSessionsPerTenant bounds one tenant's MCP sessions
	// (mcpserver.DefaultMaxSessionsPerTenant; negative: unlimited).
	MaxMCPSessionsPerTenant int
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
	def(&l.FirstByteTimeout, DefaultFirstByteTimeout)
	if l.MaxUnauthPerAddr <= 0 {
		l.MaxUnauthPerAddr = DefaultMaxUnauthPerAddr
	}
	if l.MaxStreamsPerTenant == 0 {
		l.MaxStreamsPerTenant = DefaultMaxStreamsPerTenant
	}
	return l
}

// NewServer returns an http.Server serving [New](c, opts) with the read,
// header and idle deadlines of opts.Limits; the write deadlines are set
// per route by the handler. base is every request's base context. Serve
// it on [Listen]'s listener so that connections are capped too.
func NewServer(c *controller.Controller, opts Options, base context.Context) *http.Server {
	l := opts.Limits.withDefaults()
	h, shutdown := build(c, opts)
	srv := &http.Server{
		Handler:           gate(h),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*tls.Conn); ok { // --tls-cert-file: TLS over the capped listener
				c = tc.NetConn()
			}
			if lc, ok := c.(*limitConn); ok {
				return context.WithValue(ctx, connKey{}, lc)
			}
			return ctx
		},
	}
	srv.RegisterOnShutdown(shutdown)
	return srv
}

// Listen caps ln at max connections at once (max <= 0: DefaultMaxConns),
// with the other connection limits at their defaults; see [ListenLimits].
func Listen(ln net.Listener, max int) net.Listener {
	return ListenLimits(ln, Limits{MaxConns: max})
}

// ListenLimits caps ln at l.MaxConns connections at once, plus
// SpareConns for health probes. Accept waits while all are open: the next
// client waits in the kernel's accept queue instead of costing berth a
// descriptor. A new connection that sends nothing for l.FirstByteTimeout
// is closed, and so is the oldest silent unauthenticated connection of a
// remote address that opens more than l.MaxUnauthPerAddr.
func ListenLimits(ln net.Listener, l Limits) net.Listener {
	l = l.withDefaults()
	return &limitListener{
		Listener:  ln,
		main:      make(chan struct{}, l.MaxConns),
		spare:     make(chan struct{}, SpareConns),
		firstByte: l.FirstByteTimeout,
		perAddr:   l.MaxUnauthPerAddr,
		unauth:    map[string][]*limitConn{},
		done:      make(chan struct{}),
	}
}

type limitListener struct {
	net.Listener
	main      chan struct{} // a slot of MaxConns
	spare     chan struct{} // a slot of SpareConns
	firstByte time.Duration
	perAddr   int
	waiters   atomic.Int32 // spare connections waiting for a main slot
	closeOnce sync.Once
	done      chan struct{} // closed by Close: a waiting Accept returns

	mu sync.Mutex
	// unauth are the connections not authenticated yet, by remote host,
	// oldest first.
	unauth map[string][]*limitConn
}

func (l *limitListener) Accept() (net.Conn, error) {
	spare := false
	select {
	case l.main <- struct{}{}:
	default:
		select {
		case l.main <- struct{}{}:
		case l.spare <- struct{}{}:
			spare = true
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		if spare {
			<-l.spare
		} else {
			<-l.main
		}
		return nil, err
	}
	lc := &limitConn{Conn: c, l: l, spare: spare, host: remoteHost(c), firstBy: time.Now().Add(l.firstByte)}
	c.SetReadDeadline(lc.firstBy)
	l.track(lc)
	return lc, nil
}

// SilentGrace is how long a connection may have sent nothing before it
// counts as silent for the per-address cap: a client's request is read
// only after its connection is accepted, so a burst of connections from
// one address (a harness making calls at once) looks silent at accept,
// and only a connection that stayed quiet is an idle socket.
const SilentGrace = time.Second

// track counts c as unauthenticated for its remote host. When the host
// has perAddr such connections already, the oldest that stayed silent
// (SilentGrace) is closed; when none did, c is taken without closing one:
// they are clients whose requests berth has not read yet.
func (l *limitListener) track(c *limitConn) {
	l.mu.Lock()
	list := l.unauth[c.host]
	var evict *limitConn
	if len(list) >= l.perAddr {
		if i := slices.IndexFunc(list, (*limitConn).silent); i >= 0 {
			evict = list[i]
			list = slices.Delete(list, i, i+1)
		}
	}
	l.unauth[c.host] = append(list, c)
	l.mu.Unlock()
	if evict != nil {
		evict.Close()
	}
}

// forget stops counting c as unauthenticated.
func (l *limitListener) forget(c *limitConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	list := l.unauth[c.host]
	if i := slices.Index(list, c); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(l.unauth, c.host)
	} else {
		l.unauth[c.host] = list
	}
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

func remoteHost(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// limitConn is an accepted connection holding a main or a spare slot.
type limitConn struct {
	net.Conn
	l    *limitListener
	host string

	mu      sync.Mutex
	spare   bool      // holds a spare slot, not a main one
	gotByte bool      // the client sent its first byte
	firstBy time.Time // its deadline
	readDL  time.Time // the read deadline net/http last set
	authed  bool
	busy    int // requests being answered
	closed  bool
}

type connKey struct{}

func connOf(r *http.Request) *limitConn {
	c, _ := r.Context().Value(connKey{}).(*limitConn)
	return c
}

// Read ends the first-byte deadline at the first byte.
func (c *limitConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		if !c.gotByte {
			c.gotByte = true
			c.Conn.SetReadDeadline(c.readDL)
		}
		c.mu.Unlock()
	}
	return n, err
}

// SetReadDeadline keeps the first-byte deadline until the first byte.
func (c *limitConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDL = t
	if !c.gotByte && (t.IsZero() || t.After(c.firstBy)) {
		t = c.firstBy
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *limitConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// silent reports whether c has sent nothing since it was accepted at
// least SilentGrace ago, and no request of it is being answered.
func (c *limitConn) silent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.gotByte && c.busy == 0 && time.Until(c.firstBy) <= c.l.firstByte-SilentGrace
}

// authenticated stops counting c against its host's unauthenticated cap.
func (c *limitConn) authenticated() {
	c.mu.Lock()
	was := c.authed
	c.authed = true
	c.mu.Unlock()
	if !was {
		c.l.forget(c)
	}
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	was, spare := c.closed, c.spare
	c.closed = true
	c.mu.Unlock()
	if !was {
		if spare {
			<-c.l.spare
		} else {
			<-c.l.main
		}
		c.l.forget(c)
	}
	return err
}

// promote moves a spare connection to a main slot, waiting for one
// until ctx ends; false when SpareWaiters wait already or ctx ended.
func (c *limitConn) promote(ctx context.Context) bool {
	if c.l.waiters.Add(1) > SpareWaiters {
		c.l.waiters.Add(-1)
		return false
	}
	defer c.l.waiters.Add(-1)
	select {
	case c.l.main <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.spare = false
	}
	c.mu.Unlock()
	if closed {
		<-c.l.main
		return false
	}
	<-c.l.spare
	return true
}

// CloseWrite half-closes a TCP connection, so that net/http's lingering
// close after a refused request lets the client see the end at once.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// probe reports whether r is a health or readiness probe.
func probe(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/livez" || r.URL.Path == "/healthz" || r.URL.Path == "/readyz")
}

// gate counts the requests of a [limitConn] being answered, and serves a
// spare connection's probe at once and closes it, or moves it to a main
// slot for any other request.
func gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := connOf(r)
		if c == nil {
			next.ServeHTTP(w, r)
			return
		}
		c.mu.Lock()
		c.busy++
		spare := c.spare
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.busy--
			c.mu.Unlock()
		}()
		if spare {
			if probe(r) {
				w.Header().Set("Connection", "close")
			} else if !c.promote(r.Context()) {
				w.Header().Set("Retry-After", "1")
				refuse(w, http.StatusServiceUnavailable, "busy", fmt.Sprintf("httpapi: berth serves its most connections at once (--max-conns) and %d more wait for one: retry in a moment", SpareWaiters))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
