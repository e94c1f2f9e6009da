package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"sync"
	"time"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/shim/agent"
)

// CheckDialAddress reports whether network and address name something
// Sandbox.Dial may reach: "tcp" with a loopback host and a port, or "unix"
// with an absolute socket path.
func CheckDialAddress(network, address string) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
		host, port, err := net.SplitHostPort(address)
		if err != nil || port == "" {
			return fmt.Errorf("shim: dial %s %q: want host:port with a loopback host such as 127.0.0.1:8888", network, address)
		}
		if host == "localhost" {
			return nil
		}
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("shim: dial %s %q: only loopback addresses (127.0.0.1, ::1, localhost) are reachable through Dial", network, address)
		}
		return nil
	case "unix":
		if !path.IsAbs(address) {
			return fmt.Errorf("shim: dial unix %q: the socket path must be absolute", address)
		}
		return nil
	default:
		return fmt.Errorf("shim: dial %s %q: network must be tcp or unix: %w", network, address, sandbox.ErrUnsupported)
	}
}

// dialOK is the byte the agent writes once its connection is up.
const dialOK = 0

// errNoListener marks a dial the agent made and found nothing listening
// at (no socket file, or the connection refused); any other failed dial
// (the engine's exec failed, ctx ended, the agent could not run) says
// nothing of what listens.
var errNoListener = errors.New("nothing listens there")

// Dial opens a byte stream to a loopback tcp address or a unix socket
// inside the sandbox, relayed by the agent. ctx bounds only the dial.
func (s *Sandbox) Dial(ctx context.Context, network, address string) (sandbox.Conn, error) {
	if err := CheckDialAddress(network, address); err != nil {
		return nil, err
	}
	st, err := s.exec(ctx, ExecSpec{}, "dial", network, address)
	if err != nil {
		return nil, err
	}
	c := &conn{s: s, stream: st, raddr: addr{network, address}, errEOF: make(chan struct{}), done: make(chan struct{})}
	go drain(st.Stderr(), &c.stderr, c.errEOF)
	stop := context.AfterFunc(ctx, func() { st.Close() })
	var b [1]byte
	_, rerr := io.ReadFull(st.Stdout(), b[:])
	stopped := stop()
	if rerr != nil || b[0] != dialOK || !stopped {
		st.Close()
		<-c.errEOF
		code, werr := st.Wait()
		msg := strings.TrimSpace(c.stderr.String())
		switch {
		case !stopped || ctx.Err() != nil:
			err = ctx.Err()
		case werr != nil && errors.Is(werr, sandbox.ErrGone):
			err = werr
		case werr == nil && code == agent.ExitNoListener:
			err = fmt.Errorf("%s: %w", msg, errNoListener)
		case msg != "":
			err = errors.New(msg)
		case rerr != nil:
			err = rerr
		default:
			err = errors.New("the agent answered with an unexpected byte")
		}
		return nil, fmt.Errorf("shim: dial %s %s in %s: %w", network, address, s.opts.Name, err)
	}
	c.local, c.remote = net.Pipe()
	if err := track(s, s.conns, c); err != nil {
		c.local.Close()
		c.remote.Close()
		st.Close()
		<-c.errEOF
		st.Wait()
		return nil, err
	}
	c.wg.Add(2)
	go c.pumpOut()
	go c.pumpIn()
	go func() {
		c.wg.Wait()
		st.Close()
		<-c.errEOF
		st.Wait()
		untrack(s, s.conns, c)
		close(c.done)
	}()
	return c, nil
}

// conn is a sandbox.Conn over the agent's dial relay. The caller's side is
// one end of a net.Pipe, which gives deadlines; two pumps move bytes
// between the other end and the agent's stdio.
type conn struct {
	s      *Sandbox
	stream Stream
	raddr  addr
	stderr tailBuffer
	errEOF chan struct{}

	local, remote net.Conn
	wg            sync.WaitGroup
	done          chan struct{}

	mu          sync.Mutex
	writeClosed bool
	closeOnce   sync.Once
}

// pumpOut moves what the caller writes to the agent. CloseWrite interrupts
// its read with a deadline and then closes the agent's stdin.
func (c *conn) pumpOut() {
	defer c.wg.Done()
	in := c.stream.Stdin()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.remote.Read(buf)
		if n > 0 {
			if _, werr := in.Write(buf[:n]); werr != nil {
				c.remote.Close()
				return
			}
		}
		if err != nil {
			c.mu.Lock()
			half := c.writeClosed
			c.mu.Unlock()
			in.Close()
			if !half {
				c.remote.Close()
			}
			return
		}
	}
}

// pumpIn moves the agent's output to the caller; the peer's EOF ends the
// stream.
func (c *conn) pumpIn() {
	defer c.wg.Done()
	io.Copy(c.remote, c.stream.Stdout())
	c.remote.Close()
	c.stream.Close()
}

func (c *conn) Read(p []byte) (int, error) { return c.local.Read(p) }
func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	half := c.writeClosed
	c.mu.Unlock()
	if half {
		return 0, &net.OpError{Op: "write", Net: c.raddr.network, Addr: c.raddr, Err: net.ErrClosed}
	}
	return c.local.Write(p)
}

// CloseWrite half-closes the stream: the peer reads EOF.
func (c *conn) CloseWrite() error {
	c.mu.Lock()
	if c.writeClosed {
		c.mu.Unlock()
		return nil
	}
	c.writeClosed = true
	c.mu.Unlock()
	// Unblock pumpOut's read; it sees writeClosed and closes stdin.
	return c.remote.SetReadDeadline(time.Unix(1, 0))
}

// Close ends the stream and waits for its pumps.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.local.Close()
		c.remote.Close()
		c.stream.Close()
	})
	<-c.done
	return nil
}

func (c *conn) LocalAddr() net.Addr                { return addr{"shim", "berth"} }
func (c *conn) RemoteAddr() net.Addr               { return c.raddr }
func (c *conn) SetDeadline(t time.Time) error      { return c.local.SetDeadline(t) }
func (c *conn) SetReadDeadline(t time.Time) error  { return c.local.SetReadDeadline(t) }
func (c *conn) SetWriteDeadline(t time.Time) error { return c.local.SetWriteDeadline(t) }

type addr struct{ network, address string }

func (a addr) Network() string { return a.network }
func (a addr) String() string  { return a.address }

var _ sandbox.Conn = (*conn)(nil)
