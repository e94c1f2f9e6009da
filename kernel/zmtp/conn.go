// Package zmtp is the client side of ZMTP 3.0 (rfc.zeromq.org/spec/23)
// with the NULL security mechanism: as much of ZeroMQ as a Jupyter client
// needs, and no more. A [Conn] is one handshaken connection over a
// caller's byte stream; a [Socket] redials its stream when it drops.
//
// Frames are read, never allocated whole: [Conn.Next] reads a frame's
// header and [Conn.Read] its body in pieces the caller sizes, so a peer
// that announces (or sends) a gigabyte frame costs the reader only what it
// chooses to keep. Commands between messages are read into buffers of at
// most [MaxCommand] bytes.
//
// Socket kinds: DEALER (sends and receives whole messages), SUB (sends the
// ZMTP 3.0 subscription message for its topics after the handshake), REQ
// (prepends the empty delimiter frame; [Conn.Next] leaves stripping the
// reply's delimiter to the caller, see [ReadMessage]).
package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// Frame flags (ZMTP 3.0 §"Framing").
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// Caps.
const (
	// MaxCommand bounds one command body (READY and its metadata, PING);
	// a larger one ends the connection.
	MaxCommand = 64 << 10
	// MaxCommandWrite bounds writing a command the reader answers (PONG).
	MaxCommandWrite = 10 * time.Second
	// greetingSize is the fixed ZMTP 3.0 greeting.
	greetingSize = 64
	// readBuffer is the size of a connection's read buffer.
	readBuffer = 32 << 10
)

// SocketType is a ZeroMQ socket type as named in the READY command.
type SocketType string

// The socket types this package speaks.
const (
	Dealer SocketType = "DEALER"
	Sub    SocketType = "SUB"
	Req    SocketType = "REQ"
)

// peerTypes lists the peers each socket type may talk to (ZMTP 3.0
// §"The Socket-Type Property"; XPUB as libzmq allows).
var peerTypes = map[SocketType][]string{
	Dealer: {"ROUTER", "DEALER", "REP"},
	Sub:    {"PUB", "XPUB"},
	Req:    {"REP", "ROUTER"},
}

// ErrProtocol marks a peer that broke ZMTP: a bad greeting, an ERROR
// command, an incompatible socket type, a malformed frame. The connection
// is useless afterwards.
var ErrProtocol = errors.New("zmtp: protocol error")

// Conn is one ZMTP 3.0 connection after its handshake. Reading (Next,
// Read) belongs to one goroutine; Send may be called concurrently with
// reading and with other Sends.
type Conn struct {
	nc   net.Conn
	r    *bufio.Reader
	typ  SocketType
	peer string // the peer's Socket-Type

	wmu sync.Mutex
	w   *bufio.Writer

	// Reading state, owned by the reader.
	left  uint64 // unread bytes of the current frame's body
	more  bool   // the current frame has MORE set
	inMsg bool   // a frame with MORE was read: the next frame continues the message
	rerr  error  // sticky read error
}

// Options are a connection's handshake settings.
type Options struct {
	// Identity is sent as the Identity property of READY (a ROUTER peer
	// routes replies by it). Empty lets the peer choose.
	Identity []byte
	// Subscribe lists the topics a SUB subscribes to ("" is everything).
	Subscribe []string
}

// Handshake exchanges greetings and READY commands over nc as a socket of
// type typ. ctx bounds the handshake (by the connection's deadline); on
// error nc is left to the caller to close.
func Handshake(ctx context.Context, nc net.Conn, typ SocketType, opts Options) (*Conn, error) {
	if _, ok := peerTypes[typ]; !ok {
		return nil, fmt.Errorf("zmtp: socket type %q is not supported (DEALER, SUB, REQ are)", typ)
	}
	// ctx's end (deadline or cancel) sets a past deadline on nc, which
	// unblocks the handshake's reads and writes.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	c := &Conn{nc: nc, r: bufio.NewReaderSize(nc, readBuffer), w: bufio.NewWriterSize(nc, readBuffer), typ: typ}
	err := c.handshake(opts)
	if !stop() || ctx.Err() != nil {
		// ctx ended: the deadline is in the past, whatever the outcome.
		return nil, fmt.Errorf("zmtp: handshake: %w", ctx.Err())
	}
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *Conn) handshake(opts Options) error {
	if _, err := c.w.Write(greeting()); err != nil {
		return fmt.Errorf("zmtp: send greeting: %w", err)
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("zmtp: send greeting: %w", err)
	}
	var g [greetingSize]byte
	if _, err := io.ReadFull(c.r, g[:]); err != nil {
		return fmt.Errorf("zmtp: read greeting: %w", err)
	}
	if err := checkGreeting(g[:]); err != nil {
		return err
	}
	props := [][2]string{{"Socket-Type", string(c.typ)}}
	if c.typ != Sub {
		props = append(props, [2]string{"Identity", string(opts.Identity)})
	}
	if err := c.writeCommand("READY", encodeProperties(props)); err != nil {
		return fmt.Errorf("zmtp: send READY: %w", err)
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("zmtp: send READY: %w", err)
	}
	name, body, err := c.readCommand()
	if err != nil {
		return err
	}
	switch name {
	case "READY":
	case "ERROR":
		return fmt.Errorf("%w: the peer refused the handshake: %q", ErrProtocol, errorReason(body))
	default:
		return fmt.Errorf("%w: the peer sent %q before READY", ErrProtocol, name)
	}
	peerProps, err := parseProperties(body)
	if err != nil {
		return err
	}
	c.peer = strings.ToUpper(peerProps["socket-type"])
	ok := false
	for _, p := range peerTypes[c.typ] {
		ok = ok || p == c.peer
	}
	if !ok {
		return fmt.Errorf("%w: a %s socket cannot talk to a %q peer", ErrProtocol, c.typ, c.peer)
	}
	if c.typ == Sub {
		// ZMTP 3.0 subscriptions are messages: 0x01 then the topic.
		for _, topic := range opts.Subscribe {
			if err := c.writeFrame(append([]byte{1}, topic...), false, false); err != nil {
				return fmt.Errorf("zmtp: subscribe: %w", err)
			}
		}
		if err := c.w.Flush(); err != nil {
			return fmt.Errorf("zmtp: subscribe: %w", err)
		}
	}
	return nil
}

// greeting is this side's ZMTP 3.0 greeting: signature, version 3.0, the
// NULL mechanism, as-server 0, filler.
func greeting() []byte {
	g := make([]byte, greetingSize)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	return g
}

// checkGreeting accepts a ZMTP 3.x greeting with the NULL mechanism.
func checkGreeting(g []byte) error {
	if g[0] != 0xff || g[9]&1 != 1 {
		return fmt.Errorf("%w: the peer's greeting has no ZMTP signature (is this port a ZeroMQ socket?)", ErrProtocol)
	}
	if g[10] < 3 {
		return fmt.Errorf("%w: the peer speaks ZMTP %d.%d, want 3.x", ErrProtocol, g[10], g[11])
	}
	if mech := string(bytes.TrimRight(g[12:32], "\x00")); mech != "NULL" {
		return fmt.Errorf("%w: the peer wants the %q security mechanism; only NULL is supported", ErrProtocol, mech)
	}
	return nil
}

// encodeProperties encodes READY metadata: name-size, name, 4-byte
// value-size, value.
func encodeProperties(props [][2]string) []byte {
	var b []byte
	for _, p := range props {
		b = append(b, byte(len(p[0])))
		b = append(b, p[0]...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p[1])))
		b = append(b, p[1]...)
	}
	return b
}

// parseProperties decodes READY metadata; names are lower-cased (they are
// case-insensitive).
func parseProperties(b []byte) (map[string]string, error) {
	props := map[string]string{}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+4 {
			return nil, fmt.Errorf("%w: truncated READY property", ErrProtocol)
		}
		name := strings.ToLower(string(b[1 : 1+n]))
		vlen := binary.BigEndian.Uint32(b[1+n:])
		b = b[1+n+4:]
		if uint64(vlen) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: READY property %q is longer than the command", ErrProtocol, name)
		}
		props[name] = string(b[:vlen])
		b = b[vlen:]
	}
	return props, nil
}

func errorReason(body []byte) string {
	if len(body) == 0 || int(body[0]) > len(body)-1 {
		return ""
	}
	return string(body[1 : 1+body[0]])
}

// PeerType is the peer's Socket-Type from its READY command.
func (c *Conn) PeerType() string { return c.peer }

// Close closes the underlying stream.
func (c *Conn) Close() error { return c.nc.Close() }

// readHeader reads one frame header.
func (c *Conn) readHeader() (flags byte, size uint64, err error) {
	flags, err = c.r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return 0, 0, fmt.Errorf("%w: frame flags %#x have reserved bits set", ErrProtocol, flags)
	}
	if flags&flagLong == 0 {
		b, err := c.r.ReadByte()
		return flags, uint64(b), noEOF(err)
	}
	var b [8]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil {
		return 0, 0, noEOF(err)
	}
	size = binary.BigEndian.Uint64(b[:])
	if size > 1<<62 {
		return 0, 0, fmt.Errorf("%w: frame size %d is not a size", ErrProtocol, size)
	}
	return flags, size, nil
}

// noEOF turns an EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readCommand reads one command frame whole (at most MaxCommand bytes)
// and splits it into name and body.
func (c *Conn) readCommand() (string, []byte, error) {
	flags, size, err := c.readHeader()
	if err != nil {
		return "", nil, fmt.Errorf("zmtp: read command: %w", err)
	}
	if flags&flagCommand == 0 || flags&flagMore != 0 {
		return "", nil, fmt.Errorf("%w: expected a command, got a message frame", ErrProtocol)
	}
	return c.commandBody(size)
}

func (c *Conn) commandBody(size uint64) (string, []byte, error) {
	if size > MaxCommand {
		return "", nil, fmt.Errorf("%w: a %d-byte command is over the %d-byte cap", ErrProtocol, size, MaxCommand)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return "", nil, fmt.Errorf("zmtp: read command: %w", noEOF(err))
	}
	if len(body) == 0 || int(body[0]) > len(body)-1 {
		return "", nil, fmt.Errorf("%w: malformed command", ErrProtocol)
	}
	return string(body[1 : 1+body[0]]), body[1+body[0]:], nil
}

// Next discards what is left of the current frame and reads the next
// frame's header: its size and whether more frames of the same message
// follow. Commands between messages are consumed (a PING is answered with
// PONG). The body is then read with Read. io.EOF means the stream ended
// cleanly between messages; any other error ends the connection.
func (c *Conn) Next() (size uint64, more bool, err error) {
	if c.rerr != nil {
		return 0, false, c.rerr
	}
	defer func() {
		if err != nil {
			c.rerr = err
		}
	}()
	for c.left > 0 {
		n, err := c.r.Discard(int(min(c.left, 1<<30)))
		c.left -= uint64(n)
		if err != nil {
			return 0, false, noEOF(err)
		}
	}
	for {
		flags, size, err := c.readHeader()
		if err != nil {
			if c.inMsg {
				err = noEOF(err)
			}
			return 0, false, err
		}
		if flags&flagCommand != 0 {
			if c.inMsg || flags&flagMore != 0 {
				return 0, false, fmt.Errorf("%w: a command inside a message", ErrProtocol)
			}
			name, body, err := c.commandBody(size)
			if err != nil {
				return 0, false, err
			}
			if name == "PING" && len(body) >= 2 {
				// ZMTP 3.1 heartbeat: answer with the context.
				pong := append([]byte{4, 'P', 'O', 'N', 'G'}, body[2:min(len(body), 2+16)]...)
				if err := c.sendCommandRaw(pong); err != nil {
					return 0, false, err
				}
			}
			continue
		}
		c.left, c.more = size, flags&flagMore != 0
		c.inMsg = c.more
		return size, c.more, nil
	}
}

// Read reads the current frame's body; it returns io.EOF at the frame's
// end.
func (c *Conn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= uint64(n)
	if err != nil {
		err = noEOF(err)
		c.rerr = err
		return n, err
	}
	return n, nil
}

// ReadFrame reads the rest of the current frame when it is at most max
// bytes; a longer frame is discarded and ok is false.
func (c *Conn) ReadFrame(max int) (b []byte, ok bool, err error) {
	if c.left > uint64(max) {
		return nil, false, nil
	}
	b = make([]byte, c.left)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, false, noEOF(err)
	}
	return b, true, nil
}

// ReadMessage reads a whole message of frames of at most max bytes each;
// a message with a longer frame is read to its end and refused.
func (c *Conn) ReadMessage(max int) ([][]byte, error) {
	var frames [][]byte
	tooLong := false
	for {
		_, more, err := c.Next()
		if err != nil {
			return nil, err
		}
		b, ok, err := c.ReadFrame(max)
		if err != nil {
			return nil, err
		}
		tooLong = tooLong || !ok
		frames = append(frames, b)
		if !more {
			break
		}
	}
	if tooLong {
		return nil, fmt.Errorf("zmtp: a frame is over %d bytes; message dropped", max)
	}
	return frames, nil
}

// Send writes one message. ctx bounds the write (through the stream's
// write deadline); a failed or cut-short write leaves the connection
// unusable.
func (c *Conn) Send(ctx context.Context, frames [][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Time{}) // a past Send's ctx may have set one
	stop := context.AfterFunc(ctx, func() { c.nc.SetWriteDeadline(time.Unix(1, 0)) })
	defer func() {
		if stop() {
			c.nc.SetWriteDeadline(time.Time{})
		}
	}()
	if c.typ == Req {
		frames = append([][]byte{{}}, frames...)
	}
	if len(frames) == 0 {
		frames = [][]byte{{}}
	}
	for i, f := range frames {
		if err := c.writeFrame(f, i < len(frames)-1, false); err != nil {
			return c.sendErr(ctx, err)
		}
	}
	if err := c.w.Flush(); err != nil {
		return c.sendErr(ctx, err)
	}
	return nil
}

func (c *Conn) sendErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("zmtp: send: %w", ctx.Err())
	}
	return fmt.Errorf("zmtp: send: %w", err)
}

// sendCommandRaw writes a command body (name-size, name, data) and
// flushes.
func (c *Conn) sendCommandRaw(body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(MaxCommandWrite))
	defer c.nc.SetWriteDeadline(time.Time{})
	if err := c.writeFrame(body, false, true); err != nil {
		return err
	}
	return c.w.Flush()
}

func (c *Conn) writeCommand(name string, data []byte) error {
	body := make([]byte, 0, 1+len(name)+len(data))
	body = append(body, byte(len(name)))
	body = append(body, name...)
	body = append(body, data...)
	return c.writeFrame(body, false, true)
}

// writeFrame writes one frame into the buffer; the caller holds wmu or
// owns the connection and flushes.
func (c *Conn) writeFrame(body []byte, more, command bool) error {
	var hdr [9]byte
	flags := byte(0)
	if more {
		flags |= flagMore
	}
	if command {
		flags |= flagCommand
	}
	n := 2
	if len(body) > 255 {
		flags |= flagLong
		binary.BigEndian.PutUint64(hdr[1:], uint64(len(body)))
		n = 9
	} else {
		hdr[1] = byte(len(body))
	}
	hdr[0] = flags
	if _, err := c.w.Write(hdr[:n]); err != nil {
		return err
	}
	_, err := c.w.Write(body)
	return err
}

// Frames returns a Conn that reads the frames of a stream already past its
// handshake, such as a recorded capture; sending on it fails.
func Frames(r io.Reader) *Conn {
	nc := readOnlyConn{r}
	return &Conn{nc: nc, r: bufio.NewReaderSize(r, readBuffer), w: bufio.NewWriter(nc), typ: Dealer}
}

type readOnlyConn struct{ io.Reader }

func (readOnlyConn) Write([]byte) (int, error) {
	return 0, errors.New("zmtp: this connection only reads")
}
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return nil }
func (readOnlyConn) RemoteAddr() net.Addr             { return nil }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
