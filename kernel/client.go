package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/berth/kernel/zmtp"
)

// Defaults and caps of a [Client].
const (
	// DefaultHeartbeatInterval is how often the heartbeat pings; each ping
	// waits at most this long for its echo.
	DefaultHeartbeatInterval = time.Second
	// DefaultTimeToDead is how long the heartbeat may go unanswered before
	// the kernel is reported dead (jupyter_client's time_to_dead).
	DefaultTimeToDead = 3 * time.Second
	// DialRetry is the pause between dial attempts, while the kernel
	// has not bound its ports yet and when a connection is re-established.
	DialRetry = 100 * time.Millisecond
	// SendTimeout bounds one send, including the wait for a connection.
	SendTimeout = 30 * time.Second
	// ReadyResend is how often Connect repeats kernel_info_request until
	// the reply and the matching IOPub status arrive (slow joiner).
	ReadyResend = 500 * time.Millisecond
	// SuspendedTimeout bounds the wait for Config.Suspended's answer once
	// the heartbeat has been silent for time-to-dead. The place a kernel
	// runs in may be slow to say it is out of reach (a hung engine answers
	// no state check for seconds); a Suspended that has not answered
	// within it counts as "not suspended", and the kernel as dead.
	SuspendedTimeout = 10 * time.Second
	// ReplayWindow is how many recent signatures are remembered to drop
	// replayed messages (jupyter_client keeps a digest history too).
	ReplayWindow = 4096
)

// Client errors, tested with errors.Is.
var (
	// ErrDead: the kernel stopped answering its heartbeat or was shut
	// down. State in it is lost; start a new kernel and connect again.
	ErrDead = errors.New("kernel: the kernel is dead")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("kernel: the client is closed")
	// ErrNotTaken: the request could not be sent, or the kernel died
	// without answering it in any way (no busy status, no output, no
	// reply): it never ran. The error also wraps why (usually [ErrDead]),
	// so a caller may run it again on a new kernel.
	ErrNotTaken = errors.New("kernel: the kernel never took the request")
)

// Config configures [Connect].
type Config struct {
	// Conn is the kernel's connection file content.
	Conn ConnectionInfo
	// Dial opens byte streams to the kernel's ports (for a sandbox, its
	// Dial, which tunnels a stream over an exec). nil dials locally with
	// a net.Dialer. It may be called again at any time to reconnect, and
	// for each heartbeat socket.
	Dial DialFunc
	// HeartbeatInterval defaults to [DefaultHeartbeatInterval].
	HeartbeatInterval time.Duration
	// TimeToDead defaults to [DefaultTimeToDead].
	TimeToDead time.Duration
	// Suspended, when set, is asked before a silent heartbeat declares the
	// kernel dead, and given up to [SuspendedTimeout] to answer: true means the place the kernel runs in is paused or
	// does not answer for now (a sandbox's sandbox.ErrUnavailable), so the
	// silence is not the kernel's. Time-to-dead then counts again from
	// zero: it runs only while that place answers.
	Suspended func(ctx context.Context) bool
	// Busy, for a kernel that already runs (adopted after its client's
	// restart), waits for its readiness as long as its heartbeat answers:
	// a kernel running a long cell answers kernel_info only once the cell
	// ends, while its heartbeat answers throughout. The heartbeat starts
	// before the wait, so the kernel's death (time-to-dead of silence,
	// not counting a suspended sandbox) ends Connect; ctx bounds it too.
	// Not for a kernel just started, which may bind its heartbeat after
	// time-to-dead.
	Busy bool
	// Username goes into message headers; default "berth".
	Username string
	// Logger receives debug records (dropped messages, lost connections).
	// The key is never logged. nil discards.
	Logger *slog.Logger
}

// Stats counts incoming messages that were dropped and never delivered.
type Stats struct {
	BadSignature int64 // HMAC mismatch
	Replayed     int64 // a signature seen within ReplayWindow
	Malformed    int64 // not a Jupyter message
}

// Client talks to one Jupyter kernel over the five channels: shell and
// stdin DEALERs sharing one identity, an IOPub SUB subscribed to all, a
// control DEALER and a heartbeat REQ. Every incoming message is verified
// with the connection key; bad ones are dropped and counted in [Stats].
//
// Connect starts a reader per channel and a heartbeat goroutine; Close
// stops them all and closes the sockets. Methods are safe for concurrent
// use; replies are matched to requests by parent msg_id.
type Client struct {
	conn     ConnectionInfo
	codec    *Codec
	session  string
	username string
	log      *slog.Logger
	interval time.Duration
	toDead   time.Duration
	// suspended is Config.Suspended, or nil.
	suspended func(context.Context) bool
	dial      DialFunc

	ctx    context.Context // client lifetime: canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sockCtx    context.Context // sockets' lifetime: canceled on death or Close
	sockCancel context.CancelFunc
	scope      *dialScope
	socks      map[Channel]*zmtp.Socket
	sockOnce   sync.Once

	dead     chan struct{}
	deadOnce sync.Once
	deadErr  error // set before dead is closed

	info KernelInfo // from Connect's kernel_info_reply

	// iopubSeen is the IOPub connection a message last arrived on: that
	// connection's subscription has been taken by the kernel. provenDrops
	// is the count of shell and IOPub connections dropped (drops) when
	// IOPub was last proven subscribed; see [Client.proveIOPub].
	iopubSeen   atomic.Pointer[zmtp.Conn]
	provenDrops atomic.Uint64

	badSig, replayed, malformed atomic.Int64

	// mu guards the fields below.
	mu      sync.Mutex
	pending map[string]*waiter // parent msg_id → waiter
	seen    map[string]struct{}
	ring    []string
	next    int
}

// Connect dials the kernel described by cfg.Conn and waits until it is
// ready: kernel_info_request is repeated until its reply and an IOPub
// status with that parent have both arrived, so IOPub is known to be
// subscribed. ctx bounds dialing and readiness only; the client lives until
// Close.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Conn.validate(); err != nil {
		return nil, err
	}
	codec, err := NewCodec(cfg.Conn.Key)
	if err != nil {
		return nil, err
	}
	c := &Client{
		conn:      cfg.Conn,
		codec:     codec,
		session:   newID(),
		username:  cfg.Username,
		log:       cfg.Logger,
		interval:  cfg.HeartbeatInterval,
		toDead:    cfg.TimeToDead,
		suspended: cfg.Suspended,
		dial:      cfg.Dial,
		dead:      make(chan struct{}),
		pending:   map[string]*waiter{},
		seen:      map[string]struct{}{},
		ring:      make([]string, ReplayWindow),
	}
	if c.username == "" {
		c.username = "berth"
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.interval <= 0 {
		c.interval = DefaultHeartbeatInterval
	}
	if c.toDead <= 0 {
		c.toDead = DefaultTimeToDead
	}
	if c.dial == nil {
		var d net.Dialer
		c.dial = d.DialContext
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.sockCtx, c.sockCancel = context.WithCancel(context.Background())
	c.scope = newDialScope(c.dial)

	if err := c.dialAll(ctx); err != nil {
		c.Close()
		return nil, err
	}
	for ch, s := range c.socks {
		c.wg.Add(1)
		go c.read(ch, s)
	}
	if cfg.Busy {
		c.wg.Add(1)
		go c.heartbeat() // its death ends waitReady
	}
	if err := c.waitReady(ctx, &c.info); err != nil {
		c.Close()
		return nil, err
	}
	if !cfg.Busy {
		c.wg.Add(1)
		go c.heartbeat()
	}
	return c, nil
}

// dialAll creates shell, stdin, iopub and control and connects them one
// after the other, IOPub first (so it is subscribed before anything is
// asked). Each socket redials every DialRetry until the kernel has bound;
// ctx bounds the wait.
func (c *Client) dialAll(ctx context.Context) error {
	id := zmtp.Options{Identity: []byte(c.session)} // shell and stdin must share it
	c.socks = map[Channel]*zmtp.Socket{}
	for _, ch := range []Channel{IOPub, Shell, Stdin, Control} {
		network, address, err := c.conn.Endpoint(ch)
		if err != nil {
			return fmt.Errorf("kernel: %s channel: %w", ch, err)
		}
		typ, opts := zmtp.Dealer, zmtp.Options{}
		switch ch {
		case IOPub:
			typ, opts = zmtp.Sub, zmtp.Options{Subscribe: []string{""}}
		case Shell, Stdin:
			opts = id
		}
		c.socks[ch] = zmtp.NewSocket(typ, opts, c.scope.dialer(network, address), DialRetry)
	}
	for _, ch := range []Channel{IOPub, Shell, Stdin, Control} {
		if _, err := c.socks[ch].Conn(ctx); err != nil {
			network, address, _ := c.conn.Endpoint(ch)
			return fmt.Errorf("kernel: connect the %s channel at %s %s: %w; is the kernel running and listening there?", ch, network, address, err)
		}
	}
	return nil
}

// closeSockets closes every socket and every connection the client dialed.
func (c *Client) closeSockets() {
	c.sockOnce.Do(func() {
		c.sockCancel()
		c.scope.close()
		for _, s := range c.socks {
			s.Close()
		}
	})
}

// Close stops the heartbeat and the readers, closes the sockets and waits
// for every goroutine the client started. Pending calls fail with
// [ErrClosed]. It does not stop the kernel; see [Client.Shutdown].
func (c *Client) Close() error {
	c.markDead(ErrClosed)
	c.cancel()
	c.wg.Wait()
	return nil
}

// Dead is closed when the kernel is found dead, has been shut down, or the
// client is closed; [Client.Err] says which.
func (c *Client) Dead() <-chan struct{} { return c.dead }

// Err returns nil while the kernel is alive, then why it is not: an error
// wrapping [ErrDead] or [ErrClosed].
func (c *Client) Err() error {
	select {
	case <-c.dead:
		return c.deadErr
	default:
		return nil
	}
}

// Info returns the kernel_info_reply received while connecting.
func (c *Client) Info() KernelInfo { return c.info }

// Stats returns the counts of dropped incoming messages.
func (c *Client) Stats() Stats {
	return Stats{BadSignature: c.badSig.Load(), Replayed: c.replayed.Load(), Malformed: c.malformed.Load()}
}

// markDead records err (the first one wins), fails pending calls and closes
// the sockets, which also stops them redialing a dead kernel.
func (c *Client) markDead(err error) {
	c.deadOnce.Do(func() {
		c.deadErr = err
		close(c.dead)
		c.closeSockets()
	})
}

// read receives from one socket until the sockets are closed, verifying
// and routing each message. A connection that fails is dropped and
// redialed; the heartbeat decides about death.
func (c *Client) read(ch Channel, s *zmtp.Socket) {
	defer c.wg.Done()
	for {
		zc, err := s.Conn(c.sockCtx)
		if err != nil {
			return // closed
		}
		for {
			r, err := c.codec.receive(zc)
			if err != nil {
				if c.sockCtx.Err() == nil && !errors.Is(err, io.EOF) {
					c.log.Debug("kernel: receive failed; reconnecting", "channel", ch, "err", err)
				}
				s.Drop(zc)
				break
			}
			if ch == IOPub && r.err == nil {
				c.iopubSeen.Store(zc)
			}
			c.deliver(ch, r)
		}
	}
}

// drops counts the shell and IOPub connections dropped so far.
func (c *Client) drops() uint64 {
	return c.socks[Shell].Drops() + c.socks[IOPub].Drops()
}

// proveIOPub returns once IOPub is known subscribed on its current
// connection. A SUB connection that is up may not be subscribed yet (the
// kernel takes the subscription when it reads it), and one that failed is
// only noticed when its reader sees the failure, so after a shell or IOPub
// connection was dropped, or before anything has arrived on the current
// IOPub connection, it probes as Connect does: kernel_info_request until
// a reply and an IOPub status for it arrive. Output the kernel publishes
// before that goes to nobody.
func (c *Client) proveIOPub(ctx context.Context) error {
	zc, err := c.socks[IOPub].Conn(ctx)
	if err != nil {
		return err
	}
	if c.iopubSeen.Load() == zc && c.provenDrops.Load() == c.drops() {
		return nil
	}
	return c.waitReady(ctx, nil)
}

// sendSubscribed sends m on shell once IOPub is proven subscribed
// ([Client.proveIOPub]), so that nothing m makes the kernel publish is
// lost. A send that fails drops its connection and is repeated only after
// IOPub has been proven again: the failure may be the first sign that
// every stream went down.
func (c *Client) sendSubscribed(ctx context.Context, m *Message) error {
	frames, err := c.codec.Encode(m)
	if err != nil {
		return err
	}
	for {
		if err := c.proveIOPub(ctx); err != nil {
			if e := c.Err(); e != nil {
				return e
			}
			return fmt.Errorf("kernel: send %s: prove the iopub channel subscribed: %w", m.Header.MsgType, err)
		}
		sctx, cancel := context.WithTimeout(ctx, SendTimeout)
		err := c.socks[Shell].SendOnce(sctx, frames)
		cancel()
		if err == nil {
			return nil
		}
		if e := c.Err(); e != nil {
			return e
		}
		if ctx.Err() != nil {
			return fmt.Errorf("kernel: send %s on shell channel: %w", m.Header.MsgType, err)
		}
		t := time.NewTimer(DialRetry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("kernel: send %s on shell channel: %w", m.Header.MsgType, err)
		}
	}
}

// deliver counts a dropped message or routes a verified one.
func (c *Client) deliver(ch Channel, r received) {
	switch {
	case errors.Is(r.err, ErrBadSignature):
		c.badSig.Add(1)
		c.log.Debug("kernel: dropped message with a bad signature", "channel", ch)
	case r.err != nil:
		c.malformed.Add(1)
		c.log.Debug("kernel: dropped malformed message", "channel", ch, "err", r.err)
	case c.replay(r.sig):
		c.replayed.Add(1)
		c.log.Debug("kernel: dropped replayed message", "channel", ch, "msg_type", r.msg.Header.MsgType)
	default:
		c.route(ch, r.msg)
	}
}

// replay reports whether the message's signature was seen recently, and
// remembers it otherwise.
func (c *Client) replay(sig string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[sig]; ok {
		return true
	}
	if old := c.ring[c.next]; old != "" {
		delete(c.seen, old)
	}
	c.ring[c.next] = sig
	c.next = (c.next + 1) % len(c.ring)
	c.seen[sig] = struct{}{}
	return false
}

func (c *Client) route(ch Channel, m *Message) {
	c.mu.Lock()
	w := c.pending[m.ParentHeader.MsgID]
	c.mu.Unlock()
	if w == nil {
		return // not a reply to us: startup status, another client's output
	}
	w.push(incoming{ch: ch, msg: m})
}

// incoming is one verified message and the channel it came on.
type incoming struct {
	ch  Channel
	msg *Message
}

// waiter queues the messages of one request without ever blocking a reader.
type waiter struct {
	notify chan struct{} // capacity 1: something was pushed

	mu sync.Mutex
	q  []incoming
}

func newWaiter() *waiter { return &waiter{notify: make(chan struct{}, 1)} }

func (w *waiter) push(in incoming) {
	w.mu.Lock()
	w.q = append(w.q, in)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *waiter) drain() []incoming {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q
	w.q = nil
	return q
}

func (c *Client) register(w *waiter, ids ...string) {
	c.mu.Lock()
	for _, id := range ids {
		c.pending[id] = w
	}
	c.mu.Unlock()
}

func (c *Client) unregister(ids ...string) {
	c.mu.Lock()
	for _, id := range ids {
		delete(c.pending, id)
	}
	c.mu.Unlock()
}

// newMessage builds a request from this client's session.
func (c *Client) newMessage(msgType string, content any) (*Message, error) {
	b, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("kernel: encode %s: %w", msgType, err)
	}
	return &Message{
		Header: Header{
			MsgID:    newID(),
			Session:  c.session,
			Username: c.username,
			Date:     timestamp(),
			MsgType:  msgType,
			Version:  ProtocolVersion,
		},
		Content: b,
	}, nil
}

// send signs m and sends it on ch. ctx and [SendTimeout] bound it.
func (c *Client) send(ctx context.Context, ch Channel, m *Message) error {
	if err := c.Err(); err != nil {
		return err
	}
	frames, err := c.codec.Encode(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, SendTimeout)
	defer cancel()
	if err := c.socks[ch].Send(ctx, frames); err != nil {
		if e := c.Err(); e != nil {
			return e
		}
		return fmt.Errorf("kernel: send %s on %s channel: %w", m.Header.MsgType, ch, err)
	}
	return nil
}

// request sends msgType on ch and returns the matching *_reply.
func (c *Client) request(ctx context.Context, ch Channel, msgType string, content any) (*Message, error) {
	m, err := c.newMessage(msgType, content)
	if err != nil {
		return nil, err
	}
	w := newWaiter()
	c.register(w, m.Header.MsgID)
	defer c.unregister(m.Header.MsgID)
	if err := c.send(ctx, ch, m); err != nil {
		return nil, err
	}
	want := strings.TrimSuffix(msgType, "_request") + "_reply"
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kernel: waiting for %s: %w", want, ctx.Err())
		case <-c.dead:
			return nil, fmt.Errorf("kernel: waiting for %s: %w", want, c.deadErr)
		case <-w.notify:
			for _, in := range w.drain() {
				if in.ch == ch && in.msg.Header.MsgType == want {
					return in.msg, nil
				}
			}
		}
	}
}

// waitReady repeats kernel_info_request until a reply and an IOPub status
// for one of them have arrived, decoding the first reply into info unless
// it is nil. Then IOPub is subscribed on the connection the status came
// on, and proveIOPub trusts it until a connection is dropped.
func (c *Client) waitReady(ctx context.Context, info *KernelInfo) error {
	drops := c.drops()
	w := newWaiter()
	var ids []string
	defer func() { c.unregister(ids...) }()
	var gotReply, gotStatus bool
	resend := time.NewTimer(0)
	defer resend.Stop()
	for !gotReply || !gotStatus {
		select {
		case <-ctx.Done():
			return fmt.Errorf("kernel: kernel at %s did not become ready (reply=%t, iopub=%t): %w; check that it started and that the key matches", c.conn.IP, gotReply, gotStatus, ctx.Err())
		case <-c.dead:
			return c.deadErr
		case <-resend.C:
			m, err := c.newMessage("kernel_info_request", struct{}{})
			if err != nil {
				return err
			}
			ids = append(ids, m.Header.MsgID)
			c.register(w, m.Header.MsgID)
			if err := c.send(ctx, Shell, m); err != nil {
				return err
			}
			resend.Reset(ReadyResend)
		case <-w.notify:
			for _, in := range w.drain() {
				switch {
				case in.ch == Shell && in.msg.Header.MsgType == "kernel_info_reply":
					if !gotReply && info != nil {
						if err := json.Unmarshal(in.msg.Content, info); err != nil {
							return fmt.Errorf("kernel: decode kernel_info_reply: %w", err)
						}
					}
					gotReply = true
				case in.ch == IOPub && in.msg.Header.MsgType == "status":
					gotStatus = true
				}
			}
		}
	}
	c.provenDrops.Store(drops)
	return nil
}
